#!/usr/bin/python3
"""Random small overwrites with the default mount options, and with the
kernel's write-back cache: the store stays within a few times the file's
size, and the daemon's memory within the bound
docs/DESIGN.md ("Memory") states.

A 64 MiB file is overwritten 100,000 times at random offsets with pieces of
512 B to 8 KiB (about 400 MiB in all, at most 32 MiB/s), as h5py does when it
rewrites slices.
Every overwrite leaves dead bytes in the segment being written; background
compaction (on by default) must give them back while the writes go on. The
segment files are measured every 5,000 writes and at the end (after at most
60 s of idle), the file is compared byte for byte with a copy kept in memory,
the daemon's peak RSS (VmHWM) is read from /proc, and fsck finds the store
clean after the unmount. Needs CKPTFS_BIN.
"""

import hashlib
import os
import random
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

MiB = 1 << 20
FILE_BYTES = 64 * MiB
WRITES = 100_000
PIECE_MIN, PIECE_MAX = 512, 8 << 10
# The writes go at most this fast, as an application's rewrites between
# steps of its work do. Background compaction copies at compact_rate (64M/s
# by default) once a check finds the dead bytes: a writer in a tight loop
# on a fast machine outruns it, and the store grows with the writer's speed
# (5.4 times the file's size at 80 MiB/s of overwrites here).
PACE_BYTES_PER_S = 32 * MiB
# "Within a few times its size": the live file, as many dead bytes again
# (compact_min=64M is the file's size here), what is overwritten while a
# check waits (1 s) and a pass runs, and the copy the pass is making. About
# 4 times here when each write(2) reaches the store as it is made.
STORE_BOUND = 5 * FILE_BYTES
# With the kernel's write-back cache (writeback_cache) the kernel writes whole
# pages, several times each as they are dirtied again, in bursts at its own
# pace: more can be overwritten while a check waits. About 3 times here.
STORE_BOUND_WRITEBACK = 10 * FILE_BYTES
BIN = os.environ.get("CKPTFS_BIN")


def peak_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM for pid %d" % pid)


class OverwritesTest(unittest.TestCase):
    """Without the write-back cache: every write(2) a WRITE request, a record
    and an extent of its own."""
    options = ["no_writeback_cache"]
    store_bound = STORE_BOUND

    def setUp(self):
        self.tmp = harness.make_tmpdir()
        self.store = os.path.join(self.tmp, "store")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.m = harness.Mount(self.store, self.mnt, self.options)
        self.m.mount()

    def tearDown(self):
        if self.m.pid is not None:
            self.m.unmount()

    def test_random_small_overwrites_keep_the_store_small(self):
        rng = random.Random(20261123)
        data = bytearray(rng.randbytes(FILE_BYTES))
        path = os.path.join(self.mnt, "model.h5")
        lib.write_file(path, bytes(data))
        pid = harness.daemon_pid(self.mnt)
        self.assertIsNotNone(pid)

        largest = 0
        written = 0
        start = time.monotonic()
        fd = os.open(path, os.O_WRONLY)
        try:
            for i in range(WRITES):
                n = rng.randint(PIECE_MIN, PIECE_MAX)
                off = rng.randrange(0, FILE_BYTES - n)
                piece = rng.randbytes(n)
                self.assertEqual(os.pwrite(fd, piece, off), n)
                data[off:off + n] = piece
                written += n
                if i % 500 == 0:
                    ahead = written / PACE_BYTES_PER_S - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
                if i % 5000 == 0:
                    largest = max(largest, lib.segment_bytes(self.store))
        finally:
            os.close(fd)
        largest = max(largest, lib.segment_bytes(self.store))
        harness.log("overwrites: segment files peaked at %.1f MiB for a %d MiB file"
                    % (largest / MiB, FILE_BYTES // MiB))
        self.assertLessEqual(largest, self.store_bound,
                             "segment files reached %d bytes for a %d-byte file"
                             % (largest, FILE_BYTES))

        # Once the writes stop, the next passes bring the records' bytes
        # down to the live ones plus less than compact_min (within a minute
        # also on a busy 2-core machine: compaction copies at compact_rate
        # and shares the cores with whatever else runs). The segment files
        # hold a header of 48 bytes per record on top: a few percent with
        # writes this small.
        def payload():
            storage = self.m.stats()["storage"]
            return storage["live_bytes"] + storage["dead_bytes"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and payload() > 2 * FILE_BYTES:
            time.sleep(0.5)
        self.assertLessEqual(payload(), 2 * FILE_BYTES, self.m.stats()["storage"])
        self.assertLessEqual(lib.segment_bytes(self.store), 2 * FILE_BYTES * 1.05)
        stats = self.m.stats()
        self.assertIsNotNone(stats.get("last_compaction"), "no background compaction ran")
        self.assertFalse(stats["last_compaction"]["dry_run"])

        self.assertEqual(lib.file_sha256(path), hashlib.sha256(data).hexdigest(),
                         "the file differs from its copy in memory")
        # The bound the daemon states for its options (docs/DESIGN.md, "Memory").
        bound = stats["memory"]["bound_bytes"]
        rss = peak_rss(pid)
        harness.log("overwrites: daemon peak RSS %.1f MiB, bound %.1f MiB"
                    % (rss / MiB, bound / MiB))
        self.assertLessEqual(rss, bound, "daemon peak RSS %d bytes" % rss)

        self.m.unmount()
        r = subprocess.run([BIN, "fsck", self.store], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class WritebackOverwritesTest(OverwritesTest):
    """The kernel's write-back cache on (the default): whole pages, gathered."""
    options = ["writeback_cache"]
    store_bound = STORE_BOUND_WRITEBACK


if __name__ == "__main__":
    harness.require_fuse(root=False)
    harness.set_deadline(280)
    unittest.main()
