#!/usr/bin/python3
"""The object-storage bed (ceph_bed.py) itself: a one-node Ceph cluster
that the tests start and stop, serving RADOS, S3 (through radosgw) and
CephFS (two ceph-fuse clients, as two hosts) with every byte right, a
pool's quota that fills and is lifted, an OSD killed with -9 and started
again under a client, and nothing of it left running or mounted
afterwards.

Where the cluster cannot start (Ceph's packages missing), the test is
skipped, saying why; in CI (CI=true) it fails instead."""

import hashlib
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ceph_bed  # noqa: E402

MiB = 1 << 20


def blob(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


class CephBedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.bed = ceph_bed.start_for_test("ckptfs-ceph-bed.", s3=True, cephfs=True)

    @classmethod
    def tearDownClass(cls):
        pids = [p.pid for p in cls.bed._procs.values()]
        cls.bed.stop()
        for pid in pids:
            assert harness.process_gone(pid), "a daemon of the bed is still running: %d" % pid
        assert not harness.mounts_under(cls.bed.dir), harness.mounts_under(cls.bed.dir)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_rados_objects_are_written_appended_and_read_at_offsets(self):
        data = blob("object", 5 * MiB + 17)
        with open(self.path("in"), "wb") as f:
            f.write(data[:3 * MiB])
        with open(self.path("more"), "wb") as f:
            f.write(data[3 * MiB:])
        self.bed.rados("put", "seg", self.path("in"), pool=self.bed.pool)
        self.bed.rados("append", "seg", self.path("more"), pool=self.bed.pool)
        self.bed.rados("get", "seg", self.path("out"), pool=self.bed.pool)
        with open(self.path("out"), "rb") as f:
            self.assertEqual(f.read(), data)
        stat = self.bed.rados("stat", "seg", pool=self.bed.pool).stdout
        self.assertIn("size %d" % len(data), stat)

    def curl(self, *args, data_path=None, out_path=None):
        cmd = ["curl", "-sS", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3",
               "--user", "%s:%s" % (self.bed.access_key, self.bed.secret_key),
               "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        if data_path:
            cmd += ["-T", data_path]
        if out_path:
            cmd += ["-o", out_path]
        r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_s3_objects_through_radosgw(self):
        data = blob("s3 object", 2 * MiB + 5)
        with open(self.path("s3in"), "wb") as f:
            f.write(data)
        url = self.bed.s3_endpoint + "/ckptfs-bed"
        self.curl("-X", "PUT", url)
        self.curl(url + "/part/0001", data_path=self.path("s3in"))
        self.curl(url + "/part/0001", out_path=self.path("s3out"))
        with open(self.path("s3out"), "rb") as f:
            self.assertEqual(f.read(), data)
        self.curl("-r", "%d-%d" % (MiB, MiB + 99), url + "/part/0001", out_path=self.path("range"))
        with open(self.path("range"), "rb") as f:
            self.assertEqual(f.read(), data[MiB:MiB + 100])
        self.assertIn("part/0001", self.curl(url + "?list-type=2"))

    def test_cephfs_through_two_clients(self):
        a, b = self.bed.mount_cephfs("a"), self.bed.mount_cephfs("b")
        data = blob("cephfs file", 5 * MiB + 17)
        os.makedirs(os.path.join(a, "ckpt", "layer0"))
        with open(os.path.join(a, "ckpt", "layer0", "0.0"), "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        # The other client (another host) sees the file whole.
        with open(os.path.join(b, "ckpt", "layer0", "0.0"), "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertEqual(os.listdir(os.path.join(b, "ckpt")), ["layer0"])
        # With a manager, statfs reports the cluster's size.
        self.assertGreater(os.statvfs(b).f_blocks, 0)
        self.bed.unmount_cephfs(a)
        self.bed.unmount_cephfs(b)
        self.assertFalse(harness.is_mounted(a))
        # Mounted again, the bytes come from the cluster.
        c = self.bed.mount_cephfs("a")
        with open(os.path.join(c, "ckpt", "layer0", "0.0"), "rb") as f:
            self.assertEqual(f.read(), data)
        self.bed.unmount_cephfs(c)

    def test_a_pool_quota_fills_and_is_lifted(self):
        self.bed.make_pool("quota", quota_bytes=MiB)
        with open(self.path("q"), "wb") as f:
            f.write(blob("quota", 3 * MiB))
        self.assertFalse(self.bed.pool_full("quota"))
        self.bed.rados("put", "over", self.path("q"), pool="quota")
        self.bed.wait_pool_full("quota")
        # A write that may not wait for room fails at once.
        r = self.bed.rados("--rados-osd-op-timeout", "5", "put", "more", self.path("q"),
                           pool="quota", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.bed.set_pool_quota("quota", 0)
        self.bed.wait_pool_full("quota", full=False)
        self.bed.rados("put", "more", self.path("q"), pool="quota")

    def test_an_osd_killed_and_started_again(self):
        data = blob("before the kill", MiB)
        with open(self.path("k"), "wb") as f:
            f.write(data)
        self.bed.rados("put", "kept", self.path("k"), pool=self.bed.pool)
        self.bed.kill_osd()
        # With the OSD gone a read waits; one that gives up says so.
        r = self.bed.rados("--rados-osd-op-timeout", "2", "get", "kept", self.path("k2"),
                           pool=self.bed.pool, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.bed.start_osd()
        self.bed.rados("get", "kept", self.path("k3"), pool=self.bed.pool)
        with open(self.path("k3"), "rb") as f:
            self.assertEqual(f.read(), data)


if __name__ == "__main__":
    harness.set_deadline(280)
    unittest.main(verbosity=2)
