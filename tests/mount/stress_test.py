#!/usr/bin/python3
"""16 threads of mixed file operations on one ckptfs mount.

Each thread works in its own directory (plus a shared one) and keeps a model
of its own files: every read is compared with the model, every operation must
succeed (or fail exactly as the model predicts). Runs for
$CKPTFS_STRESS_SECONDS (default 60). Afterwards the whole tree must be
consistent (every listed entry stat-able, every file's size and bytes equal to
its model), and again after unmount + remount. Needs CKPTFS_BIN.
"""

import collections
import errno
import json
import os
import random
import sys
import threading
import time
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

THREADS = 16
SECONDS = float(os.environ.get("CKPTFS_STRESS_SECONDS", "60"))
MiB = 1 << 20
SIZES = [0, 1, 100, 4095, 4096, 4097, 20000, 70000, 300000, MiB + 5]
MAX_MODEL_BYTES = 24 * MiB  # per thread


class Failure(Exception):
    pass


class Worker(threading.Thread):
    def __init__(self, idx, mnt, deadline):
        super().__init__(name="stress-%d" % idx)
        self.idx = idx
        self.mnt = mnt
        self.top = "t%02d" % idx
        self.deadline = deadline
        self.rng = random.Random(1000 + idx)
        self.files = {}  # relative path -> bytearray
        self.dirs = {self.top}  # own directories (relative)
        self.counts = collections.Counter()
        self.error = None
        self.serial = 0

    # -- helpers --

    def abs(self, rel):
        return os.path.join(self.mnt, rel)

    def new_name(self, prefix="f"):
        self.serial += 1
        d = self.rng.choice(sorted(self.dirs))
        return os.path.join(d, "%s%05d" % (prefix, self.serial))

    def data(self, n):
        return os.urandom(n) if self.rng.random() < 0.7 else bytes([self.serial % 251]) * n

    def pick_file(self):
        return self.rng.choice(sorted(self.files)) if self.files else None

    def model_bytes(self):
        return sum(len(v) for v in self.files.values())

    def check(self, cond, what):
        if not cond:
            raise Failure(what)

    def compare(self, rel, got, want, what):
        if got != want:
            first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                         min(len(got), len(want)))
            raise Failure("%s: %s: %d bytes read, %d expected, first difference at %d" %
                          (what, rel, len(got), len(want), first))

    # -- operations --

    def op_create(self):
        rel = self.new_name()
        size = self.rng.choice(SIZES)
        data = self.data(size)
        fd = os.open(self.abs(rel), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            pos = 0
            while pos < size:  # in a few pieces
                n = os.write(fd, data[pos:pos + self.rng.choice([4096, 65536, 131072, MiB])])
                pos += n
        finally:
            os.close(fd)
        self.files[rel] = bytearray(data)

    def op_overwrite(self):
        rel = self.pick_file()
        if rel is None:
            return
        m = self.files[rel]
        off = self.rng.randint(0, len(m) + 5000)
        data = self.data(self.rng.choice([1, 10, 4096, 10000, 200000]))
        fd = os.open(self.abs(rel), os.O_WRONLY)
        try:
            self.check(os.pwrite(fd, data, off) == len(data), "short pwrite")
        finally:
            os.close(fd)
        if off > len(m):
            m.extend(bytes(off - len(m)))
        m[off:off + len(data)] = data

    def op_append(self):
        rel = self.pick_file()
        if rel is None:
            return
        data = self.data(self.rng.choice([1, 333, 4096, 50000]))
        fd = os.open(self.abs(rel), os.O_WRONLY | os.O_APPEND)
        try:
            self.check(os.write(fd, data) == len(data), "short append")
        finally:
            os.close(fd)
        self.files[rel].extend(data)

    def op_truncate(self):
        rel = self.pick_file()
        if rel is None:
            return
        m = self.files[rel]
        size = self.rng.choice([0, len(m) // 2, len(m) + 1000, self.rng.randint(0, 2 * len(m) + 1)])
        os.truncate(self.abs(rel), size)
        if size < len(m):
            del m[size:]
        else:
            m.extend(bytes(size - len(m)))

    def op_read(self):
        rel = self.pick_file()
        if rel is None:
            return
        want = bytes(self.files[rel])
        with open(self.abs(rel), "rb") as f:
            got = f.read()
        self.compare(rel, got, want, "read")

    def op_pread(self):
        rel = self.pick_file()
        if rel is None:
            return
        m = self.files[rel]
        off = self.rng.randint(0, len(m) + 10)
        n = self.rng.choice([1, 100, 4096, 100000])
        fd = os.open(self.abs(rel), os.O_RDONLY)
        try:
            got = os.pread(fd, n, off)
        finally:
            os.close(fd)
        self.compare(rel, got, bytes(m[off:off + n]), "pread at %d" % off)

    def op_stat(self):
        rel = self.pick_file()
        if rel is None:
            return
        st = os.stat(self.abs(rel))
        self.check(st.st_size == len(self.files[rel]),
                   "stat %s: size %d, model %d" % (rel, st.st_size, len(self.files[rel])))

    def op_rename(self):
        rel = self.pick_file()
        if rel is None:
            return
        if self.rng.random() < 0.3 and len(self.files) > 1:
            dst = self.rng.choice([f for f in sorted(self.files) if f != rel])  # replace
        else:
            dst = self.new_name("r")
        os.rename(self.abs(rel), self.abs(dst))
        self.files[dst] = self.files.pop(rel)

    def op_unlink(self):
        rel = self.pick_file()
        if rel is None:
            return
        os.unlink(self.abs(rel))
        del self.files[rel]
        try:
            os.stat(self.abs(rel))
            raise Failure("stat after unlink of %s succeeded" % rel)
        except FileNotFoundError:
            pass

    def op_rename_open(self):
        """Rename a file while it is open, keep writing through the fd."""
        rel = self.pick_file()
        if rel is None:
            return
        fd = os.open(self.abs(rel), os.O_RDWR)
        try:
            dst = self.new_name("o")
            os.rename(self.abs(rel), self.abs(dst))
            m = self.files.pop(rel)
            self.files[dst] = m
            data = self.data(5000)
            off = len(m) // 2
            os.pwrite(fd, data, off)
            if off + len(data) > len(m):
                m.extend(bytes(off + len(data) - len(m)))
            m[off:off + len(data)] = data
            self.compare(dst, os.pread(fd, len(m) + 1, 0), bytes(m), "read via fd after rename")
        finally:
            os.close(fd)

    def op_unlink_open(self):
        """Unlink while open: the fd still reads the model."""
        rel = self.pick_file()
        if rel is None:
            return
        fd = os.open(self.abs(rel), os.O_RDONLY)
        try:
            m = bytes(self.files.pop(rel))
            os.unlink(self.abs(rel))
            self.compare(rel, os.pread(fd, len(m) + 1, 0), m, "read via fd after unlink")
        finally:
            os.close(fd)

    def op_mkdir(self):
        if len(self.dirs) > 12:
            return
        parent = self.rng.choice(sorted(self.dirs))
        self.serial += 1
        rel = os.path.join(parent, "d%05d" % self.serial)
        os.mkdir(self.abs(rel))
        self.dirs.add(rel)

    def op_rmdir(self):
        empty = [d for d in self.dirs if d != self.top
                 and not any(f.startswith(d + "/") for f in self.files)
                 and not any(x.startswith(d + "/") for x in self.dirs)]
        if not empty:
            return
        rel = self.rng.choice(sorted(empty))
        os.rmdir(self.abs(rel))
        self.dirs.remove(rel)

    def op_rename_dir(self):
        movable = sorted(d for d in self.dirs if d != self.top)
        if not movable:
            return
        src = self.rng.choice(movable)
        parents = [d for d in self.dirs if d != src and not d.startswith(src + "/")]
        self.serial += 1
        dst = os.path.join(self.rng.choice(sorted(parents)), "m%05d" % self.serial)
        os.rename(self.abs(src), self.abs(dst))

        def move(p):
            return dst + p[len(src):] if p == src or p.startswith(src + "/") else p

        self.dirs = {move(d) for d in self.dirs}
        self.files = {move(f): v for f, v in self.files.items()}

    def op_listdir(self):
        d = self.rng.choice(sorted(self.dirs))
        got = sorted(os.listdir(self.abs(d)))
        want = sorted({os.path.relpath(p, d).split("/")[0]
                       for p in list(self.files) + list(self.dirs)
                       if p.startswith(d + "/")})
        self.check(got == want, "listdir %s: %r, model %r" % (d, got[:10], want[:10]))

    def op_shared(self):
        """Create or remove a file in the directory all threads share."""
        mine = [f for f in self.files if f.startswith("shared/")]
        if mine and self.rng.random() < 0.5:
            rel = self.rng.choice(sorted(mine))
            os.unlink(self.abs(rel))
            del self.files[rel]
        else:
            self.serial += 1
            rel = "shared/t%02d_%05d" % (self.idx, self.serial)
            data = self.data(self.rng.choice([10, 5000]))
            lib.write_file(self.abs(rel), data)
            self.files[rel] = bytearray(data)
        names = set(os.listdir(self.abs("shared")))
        own = {os.path.basename(f) for f in self.files if f.startswith("shared/")}
        self.check(own <= names, "shared listing misses %r" % sorted(own - names)[:5])

    def op_fsync(self):
        rel = self.pick_file()
        if rel is None:
            return
        fd = os.open(self.abs(rel), os.O_RDWR)
        try:
            os.fsync(fd) if self.rng.random() < 0.5 else os.fdatasync(fd)
        finally:
            os.close(fd)

    OPS = [("create", 12), ("overwrite", 10), ("append", 6), ("truncate", 5), ("read", 14),
           ("pread", 10), ("stat", 6), ("rename", 7), ("unlink", 6), ("rename_open", 3),
           ("unlink_open", 2), ("mkdir", 2), ("rmdir", 1), ("rename_dir", 1), ("listdir", 4),
           ("shared", 4), ("fsync", 2)]

    def run(self):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        try:
            os.mkdir(self.abs(self.top))
            while time.monotonic() < self.deadline:
                name = self.rng.choices(names, weights)[0]
                if name == "create" and self.model_bytes() > MAX_MODEL_BYTES:
                    name = "unlink"
                getattr(self, "op_" + name)()
                self.counts[name] += 1
        except Exception:  # an unexpected error anywhere fails the test
            self.error = "thread %d, op %s:\n%s" % (self.idx, name, traceback.format_exc())


def verify_tree(testcase, mnt, workers):
    """Every listed entry is stat-able; the files are exactly the models'."""
    want = {}
    want_dirs = {"shared"}
    for w in workers:
        want.update(w.files)
        want_dirs |= w.dirs
    seen, seen_dirs, problems = {}, set(), []
    for dirpath, dirnames, filenames in os.walk(mnt, onerror=lambda e: problems.append(repr(e))):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, mnt)
            try:
                st = os.lstat(p)
            except OSError as e:
                problems.append("listed but not stat-able: %s (%s)" % (rel, e))
                continue
            if n in dirnames:
                seen_dirs.add(rel)
            else:
                seen[rel] = st.st_size
    testcase.assertEqual(problems, [])
    testcase.assertEqual(sorted(seen_dirs ^ want_dirs), [], "directories differ from the models")
    missing = sorted(set(want) - set(seen))
    extra = sorted(set(seen) - set(want))
    testcase.assertEqual((missing[:10], extra[:10]), ([], []), "files differ from the models")
    bad = []
    for rel, m in sorted(want.items()):
        if seen[rel] != len(m):
            bad.append("%s: size %d, model %d" % (rel, seen[rel], len(m)))
            continue
        if lib.read_file(os.path.join(mnt, rel)) != bytes(m):
            bad.append("%s: bytes differ" % rel)
    testcase.assertEqual(bad[:20], [], "%d files differ from their models" % len(bad))
    return len(want)


class StressTest(unittest.TestCase):
    def test_16_threads_mixed_operations(self):
        tmp = harness.make_tmpdir()
        # Compression on: a third of the data written is compressible.
        m = harness.Mount(os.path.join(tmp, "store"), os.path.join(tmp, "mnt"),
                          ["threads=16", "compression=3"])
        m.mount()
        try:
            os.mkdir(m.path("shared"))
            deadline = time.monotonic() + SECONDS
            workers = [Worker(i, m.mnt, deadline) for i in range(THREADS)]
            for w in workers:
                w.start()
            stats_reads = 0
            while any(w.is_alive() for w in workers):
                json.loads(lib.read_file(m.path(".ckptfs", "stats")))  # valid under load
                stats_reads += 1
                time.sleep(1)
            for w in workers:
                w.join()
            if m.pid is not None and harness.process_gone(m.pid):
                self.fail("the ckptfs daemon (pid %d) died during the run" % m.pid)
            errors = [w.error for w in workers if w.error]
            self.assertEqual(len(errors), 0, "%d threads failed; the first:\n%s" %
                             (len(errors), "\n".join(errors[:3])))
            total = collections.Counter()
            for w in workers:
                total.update(w.counts)
            harness.log("stress: %d operations in %.0f s: %s" % (
                sum(total.values()), SECONDS, dict(sorted(total.items()))))
            for w in workers:
                self.assertGreater(sum(w.counts.values()), 20, "thread %d barely ran" % w.idx)
            n = verify_tree(self, m.mnt, workers)
            harness.log("stress: %d files consistent before remount" % n)
            m.remount()
            verify_tree(self, m.mnt, workers)
            harness.log("stress: consistent after remount")
        finally:
            m.unmount()


if __name__ == "__main__":
    harness.require_fuse()
    harness.set_deadline(SECONDS + 200)
    unittest.main(verbosity=2)
