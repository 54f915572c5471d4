#!/usr/bin/python3
"""kill -9 of the ckptfs daemon while a writer is busy; closed files survive.

Three rounds on one store. In each, a writer process creates, overwrites,
renames and unlinks files on the mount without pause and logs, on the plain
filesystem, each step it begins and each step that returned (a file is
"done" once close() returned). Mid-write the daemon gets SIGKILL. The dead
mount is cleaned up (fusermount3 -u, -uz when busy), the same store is
mounted again, and then:
  - every file done before the kill (in this round and earlier ones) reads
    back with exactly its logged SHA-256, and every logged unlink stuck;
  - the one step in flight left either the old state or a prefix of the new
    bytes (never other bytes, never EIO);
  - a file whose close() returned only after the kill counts as in flight:
    when the daemon dies during a close, the kernel drops the write-back it
    can no longer send and close() still returns 0;
  - no other file exists, and every file in the tree reads without error.
This is the durability contract for a daemon killed without fsync. Needs
CKPTFS_BIN.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
ROUNDS = 3

WRITER = textwrap.dedent(r"""
    import hashlib, os, random, sys, time
    mnt, log_path, rnd, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    SIZES = [0, 10, 4000, 4096, 5000, 100000, (1 << 20) + 1, 3 << 20]

    def content(s, size):
        return random.Random(s).randbytes(size)

    done = []  # names with a finished version, from earlier rounds too
    with open(log_path) as f:
        for line in f:
            w = line.split()
            if w[0] == "done" and w[1] not in done:
                done.append(w[1])
            elif w[0] in ("unlinked", "gone") and w[1] in done:
                done.remove(w[1])
    log = open(log_path, "a", buffering=1)
    os.makedirs(os.path.join(mnt, "r%d" % rnd, "sub"), exist_ok=True)

    def write(path, data, flags):
        fd = os.open(path, flags, 0o644)
        try:
            for i in range(0, len(data), 256 << 10):
                os.write(fd, data[i:i + (256 << 10)])
        finally:
            os.close(fd)

    n = 0
    while True:
        n += 1
        kind = rng.random()
        s = seed * 1000003 + n
        size = rng.choice(SIZES)
        if kind < 0.15 and done:  # overwrite an existing file
            name = rng.choice(done)
            log.write("begin %s %d %d -\n" % (name, s, size))
            data = content(s, size)
            write(os.path.join(mnt, name), data, os.O_WRONLY | os.O_TRUNC)
            log.write("done %s %s - %.6f\n" % (name, hashlib.sha256(data).hexdigest(),
                                               time.monotonic()))
        elif kind < 0.25 and len(done) > 5:  # unlink
            name = done.pop(rng.randrange(len(done)))
            log.write("unlinking %s\n" % name)
            os.unlink(os.path.join(mnt, name))
            log.write("unlinked %s\n" % name)
        elif kind < 0.45:  # write a temporary name, then rename into place
            name = "r%d/sub/renamed_%05d" % (rnd, n)
            tmp = name + ".tmp"
            log.write("begin %s %d %d %s\n" % (tmp, s, size, name))
            data = content(s, size)
            write(os.path.join(mnt, tmp), data, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.rename(os.path.join(mnt, tmp), os.path.join(mnt, name))
            log.write("done %s %s %s %.6f\n" % (name, hashlib.sha256(data).hexdigest(), tmp,
                                               time.monotonic()))
            done.append(name)
        else:  # a new file
            name = "r%d/file_%05d" % (rnd, n)
            log.write("begin %s %d %d -\n" % (name, s, size))
            data = content(s, size)
            write(os.path.join(mnt, name), data, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            log.write("done %s %s - %.6f\n" % (name, hashlib.sha256(data).hexdigest(),
                                               time.monotonic()))
            done.append(name)
""")


def content(seed, size):
    return random.Random(seed).randbytes(size)


def some_pages_of(got, new):
    """Whether `got` is `new` with some of its 4 KiB pages still zeros, cut
    at a page boundary or at the end of `new`."""
    if len(got) > len(new) or (len(got) % 4096 and len(got) != len(new)):
        return False
    zeros = bytes(4096)
    for off in range(0, len(got), 4096):
        page = got[off:off + 4096]
        if page != new[off:off + 4096] and page != zeros[:len(page)]:
            return False
    return True


class Kill9Test(unittest.TestCase):
    """Without the kernel's write-back cache: every write(2) that returned
    survives."""
    options = ["no_writeback_cache"]
    # Whether the step in flight may have written any of its pages, not
    # only a prefix: the kernel's write-back cache writes pages back in no
    # promised order, so a file being written may hold holes (zeros) where
    # pages were not written yet.
    pages_in_any_order = False

    def setUp(self):
        self.tmp = harness.make_tmpdir()
        self.store = os.path.join(self.tmp, "store")
        self.log_path = os.path.join(self.tmp, "writer.log")
        open(self.log_path, "w").close()
        self.m = harness.Mount(self.store, os.path.join(self.tmp, "mnt"), self.options)

    def tearDown(self):
        self.m.unmount()

    def daemon_pid(self):
        pid = self.m.stats()["pid"]
        found = subprocess.run(["pgrep", "-f", "ckptfs mount.*%s" % self.store],
                               capture_output=True, text=True).stdout.split()
        self.assertEqual(found, [str(pid)], "pgrep and the stats file disagree on the daemon")
        return pid

    def done_lines(self, rnd):
        with open(self.log_path) as f:
            return sum(1 for line in f if line.startswith("done r%d/" % rnd))

    def replay_log(self):
        """Returns (expected sha by name, pending steps, names surely unlinked).
        Sets self.raced: for each file whose last close() returned after the
        kill of its round, (seed, size, sha before) of that version."""
        state, pending, unlinked = {}, {}, set()
        self.origin, self.raced = {}, {}
        with open(self.log_path) as f:
            lines = [line.split() for line in f]
        # "killed T" (CLOCK_MONOTONIC), written once the round's writer exited.
        kills = [(i, float(w[1])) for i, w in enumerate(lines) if w[0] == "killed"]
        for i, w in enumerate(lines):
            if w[0] == "begin":
                name, seed, size, final = w[1], int(w[2]), int(w[3]), w[4]
                pending[name] = (seed, size, None if final == "-" else final,
                                 state.get(name))
            elif w[0] == "done":
                name, sha = w[1], w[2]
                p = pending.pop(w[3] if len(w) > 3 and w[3] != "-" else name, None)
                old_sha = state.get(name)
                state[name] = sha
                self.raced.pop(name, None)
                if p is not None and p[0] != "unlink":
                    self.origin[name] = p[:2]  # (seed, size) of this version
                    # A rename after the close proves the daemon took the
                    # close's write-back.
                    kill = next((t for j, t in kills if j > i), None)
                    if len(w) > 4 and w[3] == "-" and kill is not None and float(w[4]) > kill:
                        self.raced[name] = p[:2] + (old_sha,)
                unlinked.discard(name)
            elif w[0] == "unlinking":
                pending[w[1]] = ("unlink", state[w[1]])
            elif w[0] == "unlinked":
                pending.pop(w[1], None)
                del state[w[1]]
                unlinked.add(w[1])
            elif w[0] == "gone":  # an in-flight step that left nothing
                pending.pop(w[1], None)
                state.pop(w[1], None)
                self.raced.pop(w[1], None)
        return state, pending, unlinked

    def left_by_step(self, got, new, old_sha):
        """Whether a step writing `new` over the version `old_sha` (None: a
        new file) may have left `got`."""
        return (new[:len(got)] == got or lib.sha256(got) == old_sha or
                (self.pages_in_any_order and some_pages_of(got, new)))

    def left_by_raced(self, name, got):
        """Whether `got` is what a close() that returned after the kill may
        have left of `name` (False for other files)."""
        if name not in self.raced:
            return False
        seed, size, old_sha = self.raced[name]
        return self.left_by_step(got, content(seed, size), old_sha)

    def verify(self, rnd):
        state, pending, unlinked = self.replay_log()
        self.assertLessEqual(len(pending), 1, "the writer runs one step at a time")
        mnt = self.m.mnt
        on_disk = {}
        for dirpath, _, files in os.walk(mnt):
            for n in files:
                p = os.path.join(dirpath, n)
                on_disk[os.path.relpath(p, mnt)] = lib.read_file(p)  # EIO would raise here
        problems = []
        for name, sha in sorted(state.items()):
            if name in pending:
                continue  # being overwritten or unlinked: checked below
            if name in self.raced and name in on_disk:
                harness.log("round %d: %s, closed only after the kill, has %s" % (
                    rnd, name, "its new bytes" if lib.sha256(on_disk[name]) == sha else
                    "%d bytes, not its new ones" % len(on_disk[name])))
                if not self.left_by_raced(name, on_disk[name]):
                    problems.append("file %s closed as the daemon died: %d bytes that are "
                                    "neither version" % (name, len(on_disk[name])))
                continue
            if name not in on_disk:
                problems.append("closed file %s is missing" % name)
            elif lib.sha256(on_disk[name]) != sha:
                got, msg = on_disk[name], ""
                if name in self.origin:
                    want = content(*self.origin[name])
                    first = next((i for i in range(min(len(got), len(want)))
                                  if got[i] != want[i]), min(len(got), len(want)))
                    msg = ", %d expected, first difference at %d" % (len(want), first)
                problems.append("closed file %s has other bytes (%d bytes read%s)" %
                                (name, len(got), msg))
        for name in sorted(unlinked):
            if name in on_disk:
                problems.append("unlinked file %s is back" % name)
        allowed = set(state)
        for name, p in pending.items():
            if p[0] == "unlink":
                allowed.add(name)
                if name in on_disk and lib.sha256(on_disk[name]) != p[1]:
                    problems.append("file %s being unlinked has other bytes" % name)
                continue
            seed, size, final, old_sha = p
            new = content(seed, size)
            allowed |= {name, final} - {None}
            if old_sha is not None and name not in on_disk:
                problems.append("file %s vanished while being overwritten" % name)
            if name in on_disk:
                got = on_disk[name]
                if not (self.left_by_step(got, new, old_sha) or self.left_by_raced(name, got)):
                    problems.append("in-flight file %s: %d bytes that are neither the old "
                                    "version nor a prefix of the new one" % (name, len(got)))
            if final is not None and final in on_disk and on_disk[final] != new:
                problems.append("renamed file %s is not the complete new version" % final)
        for name in sorted(set(on_disk) - allowed):
            problems.append("unexpected file %s (%d bytes)" % (name, len(on_disk[name])))
        if problems and os.environ.get("CKPTFS_KEEP_FAILED"):
            keep = "/tmp/ckptfs-kill9-failed-%d" % os.getpid()
            os.makedirs(keep)
            shutil.copy(self.log_path, keep)
            self.m.unmount()
            shutil.copytree(self.store, os.path.join(keep, "store"))
            harness.log("kept the log and the store in %s" % keep)
        self.assertEqual(problems, [], "round %d after kill -9 and remount" % rnd)
        # Record what the in-flight step left, so that later rounds expect it.
        with open(self.log_path, "a") as log:
            steps = list(pending.items()) + [(name, (None, None, None)) for name in self.raced]
            for name, p in steps:
                for n in {name, p[2] if p[0] != "unlink" else None} - {None}:
                    if n in on_disk:
                        log.write("done %s %s\n" % (n, lib.sha256(on_disk[n])))
                    else:
                        log.write("gone %s\n" % n)
        return len(state)

    def test_kill9_mid_write_three_times(self):
        rng = random.Random(99)
        self.m.mount()
        for rnd in range(1, ROUNDS + 1):
            pid = self.daemon_pid()
            err_path = os.path.join(self.tmp, "writer%d.err" % rnd)
            with open(err_path, "w") as err:
                writer = subprocess.Popen([PY, "-c", WRITER, self.m.mnt, self.log_path,
                                           str(rnd), str(rnd)], stdout=subprocess.DEVNULL,
                                          stderr=err, cwd="/")
            try:
                t0 = time.monotonic()
                while self.done_lines(rnd) < 15:
                    if writer.poll() is not None:
                        self.fail("writer died: %s" % lib.read_file(err_path)[-2000:])
                    self.assertLess(time.monotonic() - t0, 60, "writer makes no progress")
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.2, 1.5))
                if writer.poll() is not None:
                    self.fail("writer stopped before the kill: %s" %
                              lib.read_file(err_path)[-2000:])
                kill_time = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                killed_at = self.done_lines(rnd)
                self.assertTrue(harness.wait_pid_gone(pid, 30), "daemon survived SIGKILL")
                # The writer now fails (ENOTCONN) and exits.
                try:
                    writer.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    writer.kill()
                    writer.wait()
                self.assertNotEqual(writer.returncode, 0, "the writer did not notice the kill")
            finally:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait()
            with open(self.log_path, "a") as log:
                log.write("killed %.6f\n" % kill_time)
            harness.log("round %d: killed daemon %d after %d files; writer: %s" %
                        (rnd, pid, killed_at,
                         lib.read_file(err_path).decode().strip().splitlines()[-1:]))
            self.m.pid = None  # gone already
            self.assertTrue(harness.fuse_unmount(self.m.mnt), "the dead mount would not go away")
            self.m.mount()
            n = self.verify(rnd)
            harness.log("round %d: %d closed files intact after remount" % (rnd, n))
        # A clean unmount and remount after the crashes keeps everything too.
        self.m.remount()
        self.verify(ROUNDS)


class Kill9WritebackTest(Kill9Test):
    """The same under the kernel's write-back cache (the default): closed
    files survive."""
    options = ["writeback_cache"]
    pages_in_any_order = True


class Kill9DataFileTest(Kill9Test):
    """Files past 1 MiB in data files of their own, read-only opens passed
    through by the kernel where it can: closed files survive."""
    options = ["passthrough", "data_file_min=1M"]


class Kill9DirectWritesTest(Kill9Test):
    """Files the kernel writes into data files of their own
    (passthrough_writes), adopted at each close: closed files survive."""
    options = ["passthrough_writes", "data_file_min=1M"]

if __name__ == "__main__":
    harness.require_fuse()
    harness.set_deadline(200)
    unittest.main(verbosity=2)
