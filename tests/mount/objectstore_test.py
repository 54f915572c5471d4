#!/usr/bin/python3
"""Stores whose data is in RADOS (docs/OBJECT_STORAGE.md), mounted beside a
one-node Ceph cluster of the test's own (ceph_bed.py):
  - a checkpoint saved through a mount made with -o data=rados://POOL/NS
    (torch.save, a zarr tree of one directory per parameter, tar) reads back
    byte for byte, after a remount without the option too; the store's
    directory holds no segment file, the pool holds its objects under the
    prefix STORAGE names, and the small files of a save cost at most one
    request to the cluster per 20 files;
  - fsck, compact (deleting the objects of emptied segments), verify,
    warmup, stat and the metrics work on it;
  - the OSD killed with -9 under the mount: a read waits for it to come
    back and returns the right bytes; one that waits longer than
    data_timeout fails with EIO, and the same read works once it is back;
    no fsynced byte is lost and fsck finds the store clean;
  - radosgw killed with -9 under a mount of a store in an S3 bucket: a read
    and an fsynced write wait for it to come back and are right; a read
    past data_timeout fails with EIO and works once it is back; fsck clean;
  - a pool or a bucket at its quota: the fsync that needed room and every
    later write fail with ENOSPC, the fsynced files read right; the next mount fails in
    one line saying what waits and what to do, and once the bucket has
    room it mounts with every fsynced file whole, fsck clean.
Where the cluster cannot start (Ceph's packages missing), the tests are
skipped, saying why; in CI (CI=true) they fail instead. Needs CKPTFS_BIN.
"""

import errno
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402
import ceph_bed  # noqa: E402

PY = "/usr/bin/python3"
DATA_TIMEOUT_S = 4

SAVE = r"""
import os, sys
import numpy as np
import torch
import zarr
root = sys.argv[1]
rng = np.random.default_rng(7)
state = {"layer%d.weight" % i: torch.from_numpy(rng.standard_normal((64, 48)).astype("float32"))
         for i in range(12)}
torch.save(state, os.path.join(root, "model.pt"))
g = zarr.open_group(os.path.join(root, "params"), mode="w")
for i in range(150):
    a = rng.standard_normal((32, 40)).astype("float32")
    g.create_dataset("p%03d" % i, data=a, chunks=(16, 40), compressor=None)
"""


def ckptfs(*args, check=True):
    r = subprocess.run([harness.ckptfs_bin(), *args], capture_output=True, text=True,
                       timeout=300)
    if check and r.returncode != 0:
        raise AssertionError("ckptfs %s: rc %d: %s" % (" ".join(args), r.returncode,
                                                       (r.stderr + r.stdout).strip()))
    return r


def engine_stats(m):
    return m.stats()["engine"]


def object_requests(m):
    e = engine_stats(m)
    return e["object_reads"], e["object_writes"] + e["object_other"]


def write_files(m, count, base, step, big):
    """`count` fsynced files f00.. of base + step * i random bytes and one
    of `big`; remounted, so that nothing is cached. Returns name -> bytes."""
    want = {}
    for i in range(count):
        want["f%02d" % i] = os.urandom(base + step * i)
    want["big"] = os.urandom(big)
    for name, data in want.items():
        lib.write_file(m.path(name), data, fsync=True)
    m.unmount()
    m.mount(options=[])
    return want


def eio_past_data_timeout(test, m, name, want, stop, start):
    """Remounts with data_timeout=DATA_TIMEOUT_S, stops the cluster's
    server with `stop`: a read of `name` fails with EIO after about
    data_timeout; once `start` has brought it back, the same read is
    right. Returns the seconds the failed read took."""
    m.unmount()
    m.mount(options=["data_timeout=%d" % DATA_TIMEOUT_S])
    stop()
    try:
        t0 = time.monotonic()
        with test.assertRaises(OSError) as e:
            lib.read_file(m.path(name))
        waited = time.monotonic() - t0
    finally:
        start()
    test.assertEqual(e.exception.errno, errno.EIO, e.exception)
    test.assertGreaterEqual(waited, DATA_TIMEOUT_S * 0.5)
    test.assertLess(waited, 60)
    harness.log("a read during a long outage failed with EIO after %.1f s" % waited)
    test.assertEqual(lib.read_file(m.path(name)), want[name])
    return waited


def full_storage_is_enospc_and_loses_nothing(test, m, full, give_room, files, is_full=None):
    """Writes fsynced files through `m` until storage is full (is_full(),
    where given, says so then); then checks that every later write is ENOSPC, that the fsynced files read right, that
    the next mount is refused in one line naming what waits and `full`, and
    that once give_room() has run it mounts with every file whole, fsck clean."""
    want = {}
    with test.assertRaises(OSError) as e:
        for i in range(files):
            data = os.urandom(200000)
            lib.write_file(m.path("f%04d" % i), data, fsync=True)
            want["f%04d" % i] = data
    # The fsync that needed room says so; so does every later write.
    test.assertEqual(e.exception.errno, errno.ENOSPC, e.exception)
    if is_full:
        test.assertTrue(is_full())
    test.assertGreater(len(want), 5)
    with test.assertRaises(OSError) as e:
        lib.write_file(m.path("later"), b"y" * 100000, fsync=True)
    test.assertEqual(e.exception.errno, errno.ENOSPC, e.exception)
    for name, data in want.items():
        test.assertEqual(lib.read_file(m.path(name)), data, name)
    m.unmount()
    # What waits for room keeps the store closed, saying what to do.
    r = subprocess.run([harness.ckptfs_bin(), "mount", m.store, m.mnt],
                       capture_output=True, text=True, timeout=120)
    test.assertNotEqual(r.returncode, 0)
    test.assertIn("wait in", r.stderr)
    test.assertIn(full, r.stderr)
    test.assertIn("give it room", r.stderr)
    test.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
    test.assertFalse(harness.is_mounted(m.mnt))
    # Given room, it opens with every fsynced file whole, and fsck is clean.
    give_room()
    m.mount(options=[])
    for name, data in want.items():
        test.assertEqual(lib.read_file(m.path(name)), data, name)
    lib.write_file(m.path("after"), b"z" * 100000, fsync=True)
    m.unmount()
    fsck = ckptfs("fsck", m.store, check=False)
    test.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)


class ObjectStoreTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        # A manager: without one no pool's usage is known, and no quota fills.
        cls.tmp, cls.bed = ceph_bed.start_for_test("ckptfs-objectstore.", mgr=True)
        # The daemon and the tools find the cluster as they find a real one.
        os.environ["CEPH_CONF"] = cls.bed.conf

    @classmethod
    def tearDownClass(cls):
        cls.bed.stop()

    def new_mount(self, name, options=(), pool=None):
        store = os.path.join(self.tmp, name, "store")
        m = harness.Mount(store, os.path.join(self.tmp, name, "mnt"),
                          ["data=rados://%s/%s" % (pool or self.bed.pool, name), *options])
        m.mount()
        self.addCleanup(lambda: m.unmount() if harness.is_mounted(m.mnt) else None)
        return m

    def objects(self, namespace):
        out = self.bed.rados("ls", "--namespace", namespace, pool=self.bed.pool).stdout
        return sorted(out.split())

    def test_a_checkpoint_saved_through_rados_reads_back_and_the_tools_work_on_it(self):
        # Small segments: the files deleted below empty some of them.
        m = self.new_mount("ckpt", ["segment_size=4M"])
        if os.geteuid() == 0:
            # Large files' reads ask for their bytes several at a time.
            self.assertEqual(harness.read_ahead_kb(m.mnt), 16 << 10)
        plain = os.path.join(self.tmp, "ckpt", "plain")
        os.makedirs(plain)
        for root in (m.mnt, plain):
            subprocess.run([PY, "-c", SAVE, root], check=True, timeout=300)
        # Small files, as a save without fsync writes them.
        files = 400
        reads0, writes0 = object_requests(m)
        os.mkdir(m.path("small"))
        os.mkdir(os.path.join(plain, "small"))
        for i in range(files):
            data = os.urandom(20000 + i)
            # One fsync at the end, which syncs every segment (a save's
            # last step: orbax's and torch.distributed's commit).
            lib.write_file(m.path("small", "f%04d" % i), data, fsync=i == files - 1)
            lib.write_file(os.path.join(plain, "small", "f%04d" % i), data)
        _, writes1 = object_requests(m)
        harness.log("%d small files saved in %d requests to the cluster"
                    % (files, writes1 - writes0))
        self.assertLessEqual(writes1 - writes0, files / 20)
        with tarfile.open(m.path("small.tar"), "w") as t:
            t.add(os.path.join(plain, "small"), arcname="small")
        with tarfile.open(os.path.join(plain, "small.tar"), "w") as t:
            t.add(os.path.join(plain, "small"), arcname="small")
        self.assertEqual(lib.tree_snapshot(m.mnt), lib.tree_snapshot(plain))

        # stat and the metrics name the object store and count its requests.
        stat = ckptfs("stat", m.mnt).stdout
        self.assertIn("rados://%s/ckpt" % self.bed.pool, stat)
        self.assertRegex(stat, r"data: +rados://\S+; \d+ requests")
        with open(m.path(".ckptfs", "metrics")) as f:
            metrics = f.read()
        self.assertRegex(metrics, r"ckptfs_object_writes_total [1-9]")

        # warmup and verify read the store's objects.
        ckptfs("warmup", m.path("params"))
        verify = json.loads(ckptfs("verify", "--json", m.mnt).stdout)
        self.assertEqual(verify["damage"], [])
        self.assertGreater(verify["records"], files)

        # Emptied segments go, their objects with them.
        subprocess.run(["rm", "-rf", m.path("small"), m.path("small.tar")], check=True)
        os.sync()
        subprocess.run(["rm", "-rf", os.path.join(plain, "small"), os.path.join(plain, "small.tar")],
                       check=True)
        m.unmount()
        before = self.objects("ckpt")
        with open(os.path.join(m.store, "STORAGE")) as f:
            storage = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        prefix = storage["prefix"]
        self.assertTrue(before and all(o.startswith(prefix) for o in before), before)
        self.assertEqual(sorted(os.listdir(os.path.join(m.store, "segments"))
                                if os.path.isdir(os.path.join(m.store, "segments")) else []), [])
        compact = ckptfs("compact", "--dead-ratio", "0", m.store).stdout
        after = self.objects("ckpt")
        harness.log("compact: %s; objects %d -> %d" % (compact.strip().splitlines()[-1:],
                                                      len(before), len(after)))
        self.assertLess(len(after), len(before))
        fsck = ckptfs("fsck", m.store, check=False)
        self.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)

        # Mounted again without data=: the store remembers where its data is.
        m.mount(options=[])
        self.assertEqual(lib.tree_snapshot(m.mnt), lib.tree_snapshot(plain))
        self.assertEqual(m.stats()["storage"]["data"], "rados://%s/ckpt" % self.bed.pool)

    def test_a_store_with_its_data_elsewhere_refuses_another_place(self):
        m = self.new_mount("elsewhere")
        lib.write_file(m.path("f"), b"x" * 10000, fsync=True)
        m.unmount()
        r = subprocess.run([harness.ckptfs_bin(), "mount", "-o",
                            "data=rados://%s/other" % self.bed.pool, m.store, m.mnt],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("keeps its data in rados://%s/elsewhere" % self.bed.pool, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertFalse(harness.is_mounted(m.mnt))
        m.mount(options=[])
        self.assertEqual(lib.read_file(m.path("f")), b"x" * 10000)

    def test_an_osd_killed_under_the_mount(self):
        m = self.new_mount("osd")
        # Nothing cached: every read below goes to the cluster.
        want = write_files(m, 30, 50000, 3000, 12 << 20)

        # Down for less than data_timeout (30 s): the read waits and is right.
        self.bed.kill_osd()
        result = {}

        def read():
            t0 = time.monotonic()
            try:
                result["data"] = lib.read_file(m.path("f03"))
            except OSError as e:
                result["error"] = e
            result["s"] = time.monotonic() - t0
        t = threading.Thread(target=read)
        t.start()
        time.sleep(1)
        self.bed.start_osd()
        t.join(120)
        self.assertNotIn("error", result)
        self.assertEqual(result["data"], want["f03"])
        harness.log("a read while the OSD was down returned after %.1f s" % result["s"])

        # Down for longer than data_timeout: EIO after about data_timeout;
        # the same read works once the OSD is back.
        eio_past_data_timeout(self, m, "f07", want, self.bed.kill_osd, self.bed.start_osd)
        bad = []
        for name, data in want.items():
            try:
                if lib.read_file(m.path(name)) != data:
                    bad.append(name + ": wrong bytes")
            except OSError as e:
                bad.append("%s: %s" % (name, e))
        self.assertEqual(bad, [])
        lib.write_file(m.path("after"), b"y" * 70000, fsync=True)
        want["after"] = b"y" * 70000
        m.unmount()
        fsck = ckptfs("fsck", m.store, check=False)
        self.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)
        m.mount(options=[])
        for name, data in want.items():
            self.assertEqual(lib.read_file(m.path(name)), data, name)

    def test_a_full_pool_is_enospc_and_loses_nothing(self):
        self.bed.make_pool("small", quota_bytes=4 << 20)
        m = self.new_mount("full", pool="small")

        def give_room():
            self.bed.set_pool_quota("small", 0)
            self.bed.wait_pool_full("small", full=False)

        # The pool is marked full seconds after a write passes its quota
        # (the manager's report): the writes go on until then.
        full_storage_is_enospc_and_loses_nothing(self, m, "the RADOS pool is full", give_room,
                                                 files=3000,
                                                 is_full=lambda: self.bed.pool_full("small"))


class S3ObjectStoreTest(unittest.TestCase):
    """A store whose data is in a bucket of the bed's radosgw."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.bed = ceph_bed.start_for_test("ckptfs-objectstore-s3.", s3=True)
        # The daemon and the tools find the keys as they find a real
        # service's: AWS's usual variables.
        saved = dict(os.environ)
        cls.addClassCleanup(lambda: (os.environ.clear(), os.environ.update(saved)))
        os.environ.update(cls.bed.s3_environ())
        cls.bed.make_bucket("ckpt")

    @classmethod
    def tearDownClass(cls):
        cls.bed.stop()

    def new_mount(self, name, bucket):
        store = os.path.join(self.tmp, name, "store")
        m = harness.Mount(store, os.path.join(self.tmp, name, "mnt"),
                          ["data=s3://%s/%s" % (bucket, name),
                           "s3_endpoint=" + self.bed.s3_endpoint])
        m.mount()
        self.addCleanup(lambda: m.unmount() if harness.is_mounted(m.mnt) else None)
        return m

    def test_radosgw_killed_under_the_mount(self):
        m = self.new_mount("rgw", "ckpt")
        # Nothing cached, and the later mounts need no option: every read
        # below goes to the gateway.
        want = write_files(m, 20, 40000, 5000, 6 << 20)

        # Down for less than data_timeout (30 s): a read and an fsynced
        # write wait for it and are right.
        self.bed.kill_rgw()
        result = {}
        during = os.urandom(300000)

        def read():
            try:
                result["data"] = lib.read_file(m.path("f03"))
            except OSError as e:
                result["read error"] = e

        def write():
            try:
                lib.write_file(m.path("during"), during, fsync=True)
            except OSError as e:
                result["write error"] = e
        threads = [threading.Thread(target=read), threading.Thread(target=write)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(1.5)
        self.bed.start_rgw()
        for t in threads:
            t.join(120)
        self.assertNotIn("read error", result)
        self.assertNotIn("write error", result)
        self.assertEqual(result["data"], want["f03"])
        want["during"] = during
        harness.log("a read and a write while radosgw was down returned after %.1f s"
                    % (time.monotonic() - t0))

        # Down for longer than data_timeout: EIO after about data_timeout;
        # the same read works once the gateway answers again.
        eio_past_data_timeout(self, m, "f07", want, self.bed.kill_rgw, self.bed.start_rgw)
        bad = [name for name, data in want.items() if lib.read_file(m.path(name)) != data]
        self.assertEqual(bad, [])
        lib.write_file(m.path("after"), b"z" * 90000, fsync=True)
        want["after"] = b"z" * 90000
        m.unmount()
        fsck = ckptfs("fsck", m.store, check=False)
        self.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)
        with open(os.path.join(m.store, "STORAGE")) as f:
            storage = f.read()
        self.assertIn("data=s3://ckpt/rgw\n", storage)
        self.assertIn("endpoint=%s\n" % self.bed.s3_endpoint, storage)
        self.assertFalse(os.path.isdir(os.path.join(m.store, "segments"))
                         and os.listdir(os.path.join(m.store, "segments")))
        m.mount(options=[])
        for name, data in want.items():
            self.assertEqual(lib.read_file(m.path(name)), data, name)

    def test_a_full_bucket_is_enospc_and_loses_nothing(self):
        self.bed.make_bucket("small", quota_bytes=4 << 20)
        m = self.new_mount("full", "small")
        full_storage_is_enospc_and_loses_nothing(
            self, m, "the bucket is full", lambda: self.bed.set_bucket_quota("small", 64 << 20),
            files=100)

if __name__ == "__main__":
    harness.require_fuse()
    harness.set_deadline(280)
    unittest.main(verbosity=2)
