#!/usr/bin/python3
"""A store whose index is in PostgreSQL, mounted while its server restarts
and while it is down.

Run beside a private cluster (scripts/with-postgres.sh --meta: CKPTFS_TEST_META
and CKPTFS_TEST_PG_SERVER). With the mount up:
  - files written before a restart of the server read back after it, and
    new files are created, written and synced after it, with no error;
  - while the server is down, a call that needs the index fails with EIO
    once meta_timeout (here 2 s) has passed, not sooner and not much later;
  - once the server is back, the same mount creates and reads files again;
  - after unmount, the store remounts with every file intact, and fsck
    finds it clean.
Needs CKPTFS_BIN.
"""

import errno
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

META_TIMEOUT_S = 2


def server(what):
    cmd = os.environ["CKPTFS_TEST_PG_SERVER"].split() + [what]
    subprocess.run(cmd, check=True)


class PgRestartTest(unittest.TestCase):
    def setUp(self):
        if not os.environ.get("CKPTFS_TEST_META") or not os.environ.get("CKPTFS_TEST_PG_SERVER"):
            self.fail("run through scripts/with-postgres.sh --meta")
        self.tmp = harness.make_tmpdir()
        self.store = os.path.join(self.tmp, "store")
        self.m = harness.Mount(self.store, os.path.join(self.tmp, "mnt"),
                               ["meta_timeout=%d" % META_TIMEOUT_S]).mount()
        self.files = {}

    def tearDown(self):
        self.m.unmount()

    def write(self, name, size):
        data = os.urandom(size)
        lib.write_file(self.m.path(name), data, fsync=True)
        self.files[name] = data

    def check_all(self):
        for name, data in self.files.items():
            self.assertEqual(lib.read_file(self.m.path(name)), data, name)

    def test_restart_and_outage(self):
        self.assertTrue(os.path.exists(os.path.join(self.store, "SHARED")))
        os.mkdir(self.m.path("step_1"))
        for i in range(20):
            self.write("step_1/param_%d" % i, 1000 * i)
        self.write("step_1/big", 3 << 20)

        server("restart")
        self.check_all()
        os.mkdir(self.m.path("step_2"))
        for i in range(20):
            self.write("step_2/param_%d" % i, 700 * i)

        server("stop")
        try:
            t0 = time.monotonic()
            with self.assertRaises(OSError) as e:
                lib.write_file(self.m.path("step_2/during_outage"), b"x")
            waited = time.monotonic() - t0
        finally:
            server("start")
        self.assertEqual(e.exception.errno, errno.EIO, e.exception)
        self.assertGreaterEqual(waited, META_TIMEOUT_S * 0.5)
        self.assertLess(waited, 60)
        harness.log("a create during the outage failed with EIO after %.1f s" % waited)

        self.write("step_2/after_outage", 12345)
        os.rename(self.m.path("step_2"), self.m.path("step_3"))
        self.files = {n.replace("step_2/", "step_3/"): d for n, d in self.files.items()}
        self.check_all()
        self.m.unmount()
        fsck = subprocess.run([harness.ckptfs_bin(), "fsck", self.store],
                              capture_output=True, text=True)
        self.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)
        self.m.mount()
        self.check_all()
        self.assertFalse(os.path.exists(self.m.path("step_3/during_outage")))


if __name__ == "__main__":
    harness.require_fuse()
    harness.set_deadline(200)
    unittest.main(verbosity=2)
