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
    "engine/data": LOW,
    "engine/index": LOW | {"meta"},
    "engine/shared": LOW | {"meta"},
    "engine": LOW | {"engine/data", "engine/index", "engine/shared", "meta"},
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


class LayeringTest(unittest.TestCase):
    def test_includes_point_down(self):
        self.assertEqual(violations(), [])

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
