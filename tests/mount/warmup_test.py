#!/usr/bin/python3
"""`ckptfs warmup` on a real mount: a per-parameter checkpoint (a directory
per array, a small metadata file and a few chunks each) is written, the store
is remounted (the kernel's caches of the mount start empty), then warmup reads
the subtree. It must read each segment byte at most once, and the restore
that follows must return every byte written, with no READ request for any
file the page cache still holds whole."""

import json
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

ARRAYS = 120


def stats_in_one_read(mnt):
    """MNT/.ckptfs/stats read with a single read(2), so that reading it costs
    one READ request whatever its length (json.load reads until EOF, sized by
    an st_size that the counters' growing digits can outrun)."""
    fd = os.open(os.path.join(mnt, ".ckptfs", "stats"), os.O_RDONLY)
    try:
        return json.loads(os.read(fd, 1 << 20))
    finally:
        os.close(fd)


def write_checkpoint(root, rng):
    """A zarr-like layout; returns {relative path: bytes}."""
    expected = {}
    for a in range(ARRAYS):
        d = "param%03d" % a
        os.makedirs(os.path.join(root, d), exist_ok=True)
        files = {".zarray": json.dumps({"shape": [a + 1], "chunks": [64]}).encode()}
        for c in range(rng.randint(1, 4)):
            files[str(c)] = rng.randbytes(rng.choice([700, 5000, 40000, 200000]))
        for name, data in files.items():
            lib.write_file(os.path.join(root, d, name), data)
            expected[os.path.join(d, name)] = data
    return expected


class WarmupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        harness.require_fuse()
        cls.tmp = harness.make_tmpdir()
        cls.m = harness.Mount(os.path.join(cls.tmp, "store"), os.path.join(cls.tmp, "mnt"))
        cls.m.mount()

    @classmethod
    def tearDownClass(cls):
        cls.m.unmount()

    def warmup(self, *args):
        cmd = [harness.ckptfs_bin(), "warmup", "--json"] + list(args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return p.returncode, p.stdout, p.stderr

    def check_warmup(self, subtree, threads, seed):
        """Writes a checkpoint under `subtree`, remounts, warms it up with
        `threads` readers and restores it. Returns the backing bytes warmup
        read and the segment bytes of the store."""
        expected = write_checkpoint(self.m.path(subtree), random.Random(seed))
        self.m.remount()
        before = self.m.stats()
        rc, out, err = self.warmup("--threads", str(threads), self.m.path(subtree))
        self.assertEqual(rc, 0, err)
        summary = json.loads(out)
        self.assertEqual(summary["files"], len(expected))
        self.assertEqual(summary["bytes"], sum(len(v) for v in expected.values()))
        self.assertEqual(summary["errors"], 0)
        warmed = stats_in_one_read(self.m.mnt)
        # READ requests that reading the stats file costs by itself.
        stats_reads = (stats_in_one_read(self.m.mnt)["fs"]["ops"]["reads"] -
                       warmed["fs"]["ops"]["reads"])
        warmed = stats_in_one_read(self.m.mnt)
        backing = warmed["engine"]["backing_read_bytes"] - before["engine"]["backing_read_bytes"]
        self.assertGreater(backing, 0)

        # The restore: every file read back whole. A file whose pages the
        # page cache still holds entirely is served from it, with no READ
        # request. Pages can go before the restore reads them: the kernel (or
        # a machine's proactive reclaim, such as DAMON's pageout) may take
        # clean page-cache pages back at any time, so such a file may be read
        # again, and only such a file.
        served_from_cache = 0
        reread = 0
        prev = warmed
        for rel, data in sorted(expected.items()):
            path = self.m.path(subtree, rel)
            whole = lib.resident_pages(path, 0, len(data) + 4095) == -(-len(data) // 4096)
            self.assertEqual(lib.read_file(path), data, rel)
            cur = stats_in_one_read(self.m.mnt)
            reads = cur["fs"]["ops"]["reads"] - prev["fs"]["ops"]["reads"] - stats_reads
            prev = cur
            if whole:
                self.assertEqual(reads, 0, "%s: cached whole, yet read again" % rel)
                served_from_cache += 1
            else:
                reread += 1
        self.assertGreater(served_from_cache, 0, "no file was cached whole after warmup")
        if reread == 0:
            self.assertEqual(prev["engine"]["backing_read_bytes"],
                             warmed["engine"]["backing_read_bytes"])
        return backing, warmed["storage"]["segment_file_bytes"]

    def test_one_reader_reads_each_segment_byte_once(self):
        backing, segment_bytes = self.check_warmup("one", 1, 7)
        self.assertLessEqual(backing, segment_bytes,
                             "warmup read some segment bytes more than once")

    def test_readers_overlap_by_at_most_a_coalesced_read(self):
        # Each reader but the first starts where the one before it stops; the
        # stretched read at a run's end may fetch the next run's first bytes.
        threads = 3
        backing, segment_bytes = self.check_warmup("three", threads, 8)
        coalesce_max = int(self.m.stats()["options"]["coalesce_max"])
        self.assertLessEqual(backing, segment_bytes + (threads - 1) * coalesce_max)

    def test_errors_are_one_line(self):
        rc, out, err = self.warmup(os.path.join(self.tmp, "no-such-dir"))
        self.assertEqual(rc, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("not on a ckptfs mount", err)
        rc, out, err = self.warmup("/tmp")
        self.assertEqual(rc, 1)
        self.assertIn("not on a ckptfs mount", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
