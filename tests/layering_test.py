#!/usr/bin/python3
"""The source folders are rooms whose dependencies point down
(docs/DESIGN.md, "Layers"): every `#include "ROOM/..."` of a file in a room
names the room itself or one below it. A room is a top folder or, where
listed, a folder inside one (engine/data): a file or an include belongs to
the longest room its path starts with. Test files (*_test.cc and the test
helpers of a room) may also include tests/. Fails with one line per include
that points up or sideways."""

import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each room may include besides itself.
LOW = {"base", "io", "format"}
ENGINE = {"engine/data", "engine/index", "engine/shared", "engine", "meta"}
BELOW = {
    "base": set(),
    "io": {"base"},
    "format": {"base"},
    "meta": {"base", "format"},
    "peer": LOW,
    "engine/data": LOW,
    "engine/index": LOW | {"meta"},
    "engine/shared": LOW | {"meta", "peer"},
    "engine": LOW | {"engine/data", "engine/index", "engine/shared", "meta", "peer"},
    "engine/fsck": LOW | ENGINE,
    "stats": LOW | {"engine"},
    "options": LOW | {"engine"},
    "gpu": LOW,
    "fs": LOW | {"engine", "options", "stats"},
    "tools": LOW | ENGINE | {"engine/fsck", "options", "stats", "fs", "gpu"},
    "bench": LOW | ENGINE | {"engine/fsck", "options", "stats", "fs", "gpu"},
}
SOURCES = (".cc", ".h", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_/]+)/[^/"]+"')


def room_of(path):
    """The longest room that `path` (relative, with "/") lies in, or None."""
    rooms = [r for r in BELOW.keys() | {"tests"} if path == r or path.startswith(r + "/")]
    return max(rooms, key=len) if rooms else None


def is_test_file(name):
    return name.endswith("_test.cc") or name.startswith("test_")


def violations(root=ROOT):
    out = []
    for top in sorted({r.split("/")[0] for r in BELOW}):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                room = room_of(os.path.dirname(rel))
                allowed = BELOW[room] | {room} | ({"tests"} if is_test_file(name) else set())
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        target = room_of(m.group(1)) if m else None
                        if target is not None and target not in allowed:
                            out.append("%s:%d: %s/ includes %s/" % (rel, n, room, target))
    return sorted(out)


# Inside fs/: the session (mount.*) on the handler table (ops.*), the
# handlers on the mount's state (filesystem.*), the state on its parts
# (control files, open files, set-ID bits, requests, counters ...). Only
# these files include the state's header, and only the session the
# mount's.
FS_HEADER_USERS = {
    "fs/filesystem.h": {"filesystem.cc", "ops.cc", "entries.cc", "dirs.cc", "data.cc",
                        "xattrs.cc", "mount.cc"},
    "fs/mount.h": {"mount.cc"},
}


def fs_violations(root=ROOT):
    out = []
    d = os.path.join(root, "fs")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not name.endswith(SOURCES):
            continue
        with open(os.path.join(d, name), errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'^\s*#\s*include\s+"([^"]+)"', line)
                users = FS_HEADER_USERS.get(m.group(1)) if m else None
                if users is not None and name not in users:
                    out.append("fs/%s:%d: includes %s" % (name, n, m.group(1)))
    return out


# The store (engine/*.h, engine/*.cc) reaches its index only through
# engine/index/store_index.h and meta/kv.h: it includes no RocksDB header,
# nor one of ours that does.
ROCKSDB_INCLUDE = re.compile(
    r'^\s*#\s*include\s+(<rocksdb/|"meta/rocks_kv\.h"|"engine/index/index_db\.h")')


def store_rocksdb_includes(root=ROOT):
    out = []
    engine = os.path.join(root, "engine")
    for name in sorted(os.listdir(engine)):
        path = os.path.join(engine, name)
        if not name.endswith(SOURCES) or not os.path.isfile(path):
            continue
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                if ROCKSDB_INCLUDE.match(line):
                    out.append("engine/%s:%d: includes RocksDB" % (name, n))
    return out


class LayeringTest(unittest.TestCase):
    def test_the_store_includes_no_rocksdb(self):
        self.assertEqual(store_rocksdb_includes(), [])

    def test_a_rocksdb_include_of_the_store_is_found(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "engine", "index"))
            with open(os.path.join(d, "engine", "store_x.cc"), "w") as f:
                f.write('#include "engine/store_impl.h"\n#include <rocksdb/db.h>\n')
            with open(os.path.join(d, "engine", "index", "y.cc"), "w") as f:
                f.write('#include <rocksdb/db.h>\n')
            self.assertEqual(store_rocksdb_includes(d), ["engine/store_x.cc:2: includes RocksDB"])

    def test_includes_point_down(self):
        self.assertEqual(violations(), [])

    def test_fs_parts_do_not_reach_back_up(self):
        self.assertEqual(fs_violations(), [])

    def test_an_fs_part_that_includes_the_state_is_found(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "fs"))
            with open(os.path.join(d, "fs", "control.cc"), "w") as f:
                f.write('#include "fs/control.h"\n#include "fs/filesystem.h"\n')
            with open(os.path.join(d, "fs", "filesystem.h"), "w") as f:
                f.write('#include "fs/mount.h"\n')
            self.assertEqual(fs_violations(d), ["fs/control.cc:2: includes fs/filesystem.h",
                                                "fs/filesystem.h:1: includes fs/mount.h"])

    def test_a_higher_include_is_found(self):
        # The check itself: a format/ file that includes engine/ is reported.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "format"))
            with open(os.path.join(d, "format", "x.h"), "w") as f:
                f.write('#include "base/status.h"\n#include "engine/store.h"\n')
            self.assertEqual(violations(d), ["format/x.h:2: format/ includes engine/"])

    def test_a_room_inside_a_folder_is_its_own(self):
        # engine/data/ may not include the store above it, nor engine/fsck/;
        # the store may include engine/data/.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "engine", "data"))
            with open(os.path.join(d, "engine", "data", "x.h"), "w") as f:
                f.write('#include "format/format.h"\n#include "engine/store.h"\n'
                        '#include "engine/fsck/fsck.h"\n')
            with open(os.path.join(d, "engine", "y.h"), "w") as f:
                f.write('#include "engine/data/x.h"\n#include "engine/fsck/fsck.h"\n')
            self.assertEqual(violations(d), [
                "engine/data/x.h:2: engine/data/ includes engine/",
                "engine/data/x.h:3: engine/data/ includes engine/fsck/",
                "engine/y.h:2: engine/ includes engine/fsck/",
            ])


if __name__ == "__main__":
    unittest.main(verbosity=2 if "-v" in sys.argv else 1)
