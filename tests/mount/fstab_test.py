#!/usr/bin/python3
"""Mounting through mount(8): `mount -t fuse.ckptfs`, an fstab line, umount.

mount(8) hands a fuse.ckptfs mount to libfuse's mount.fuse3, which runs
`ckptfs STORE MOUNTPOINT -o OPTIONS` from mount's standard PATH, so the test
links /usr/local/bin/ckptfs to $CKPTFS_BIN for its duration (skipped when
another ckptfs is installed there). The fstab case uses `mount -T FILE`
(util-linux's alternative fstab), which reads a line exactly as /etc/fstab's.
Needs root, /sbin/mount.fuse3 (package fuse3) and CKPTFS_BIN.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402

BIN = os.environ.get("CKPTFS_BIN", "")
LINK = "/usr/local/bin/ckptfs"
# A bound against hanging, not a measure.
WAIT_S = 30


def mount_entry(mnt):
    """The mountinfo fields (options, fstype, source) of MNT, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a, b = line.split(" - ")
            fields = a.split()
            if fields[4] == mnt:
                fstype, source, _ = b.split(" ", 2)
                return fields[5].split(","), fstype, source
    return None


def run(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True)


class MountHelperTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        if not os.path.exists("/sbin/mount.fuse3") or not os.path.exists("/dev/fuse"):
            raise unittest.SkipTest("needs /sbin/mount.fuse3 and /dev/fuse")
        cls.linked = False
        if os.path.lexists(LINK):
            if os.path.realpath(LINK) != os.path.realpath(BIN):
                raise unittest.SkipTest("%s is another ckptfs" % LINK)
        else:
            os.symlink(os.path.realpath(BIN), LINK)
            cls.linked = True

    @classmethod
    def tearDownClass(cls):
        if cls.linked:
            os.unlink(LINK)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="ckptfs-fstab-")
        self.store = os.path.join(self.work, "store")
        self.mnt = os.path.join(self.work, "mnt")
        os.mkdir(self.mnt)

    def tearDown(self):
        if mount_entry(self.mnt) is not None:
            subprocess.run(["fusermount3", "-u", "-z", self.mnt])
        subprocess.run(["rm", "-rf", self.work])

    def check_mounted_and_unmount(self, want_option):
        entry = mount_entry(self.mnt)
        self.assertIsNotNone(entry, "not mounted")
        options, fstype, source = entry
        self.assertEqual(fstype, "fuse.ckptfs")
        self.assertEqual(source, self.store)
        self.assertIn(want_option, options)
        data = os.urandom(100000)
        with open(os.path.join(self.mnt, "f"), "wb") as f:
            f.write(data)
        with open(os.path.join(self.mnt, "f"), "rb") as f:
            self.assertEqual(f.read(), data)
        with open(os.path.join(self.mnt, ".ckptfs", "stats")) as f:
            pid = json.load(f)["pid"]
        r = run("umount", self.mnt)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(mount_entry(self.mnt))
        deadline = time.monotonic() + WAIT_S
        while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(os.path.exists("/proc/%d" % pid), "the daemon did not exit")
        # Every byte is in the store: a plain `ckptfs mount` sees it.
        m = harness.Mount(self.store, self.mnt).mount()
        try:
            with open(m.path("f"), "rb") as f:
                self.assertEqual(f.read(), data)
        finally:
            m.unmount()

    def test_mount_t_fuse_ckptfs(self):
        r = run("mount", "-t", "fuse.ckptfs", self.store, self.mnt, "-o", "noatime,nofail")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_mounted_and_unmount("noatime")

    def test_fstab_line(self):
        fstab = os.path.join(self.work, "fstab")
        with open(fstab, "w") as f:
            f.write("# ckptfs test\n%s %s fuse.ckptfs noatime,_netdev,nofail,"
                    "x-systemd.automount,comment=x 0 0\n" % (self.store, self.mnt))
        r = run("mount", "-T", fstab, self.mnt)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_mounted_and_unmount("noatime")

    def test_remount_is_refused_with_a_reason(self):
        r = run("mount", "-t", "fuse.ckptfs", self.store, self.mnt)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("mount", "-o", "remount,ro", self.mnt)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("remount is not supported", r.stderr)
        self.check_mounted_and_unmount("rw")


if __name__ == "__main__":
    unittest.main()
