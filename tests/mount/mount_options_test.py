#!/usr/bin/python3
"""The standard mount options: accepted, and honoured or passed to the kernel.

  - kernel flags: each option group shows in the mount's line of
    /proc/self/mountinfo (ro, noexec, noatime, nodiratime, strictatime,
    suid and dev as root, sync and dirsync among the superblock's options);
  - ro: writes, creations and attribute changes fail with EROFS, reads work;
  - the options of /etc/fstab and mount(8) (defaults, _netdev, nofail, user,
    users, noauto, auto, x-*, comment=...) are accepted and change nothing;
    an unknown option, and suid as a user other than root, fail with one line;
  - sync: every write(2) is followed by an fsync, and every change of names
    or attributes is synced before it returns; dirsync syncs the changes of
    directories only;
  - access times under relatime (the default), noatime, strictatime and
    nodiratime move as on a tmpfs mounted with the same option, for reads of
    files and listings of directories that reach ckptfs. Each step sets the
    times first (so that no step depends on the clock's granularity) and
    drops the file's cached pages (POSIX_FADV_DONTNEED; a no-op on tmpfs).
  - what ckptfs deliberately does differently: a read the kernel serves from
    its page cache (or a listing from its readdir cache) never reaches
    ckptfs and moves no access time, also under strictatime; FUSE leaves
    access times to the filesystem and the kernel tells it nothing of such
    reads.
Needs root (mount -t tmpfs, suid and dev, setuid to 65534) and CKPTFS_BIN.
"""

import errno
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402

NOBODY = 65534


def mountinfo(mnt):
    """(mount options, superblock options) of the mount on `mnt`, as sets."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mnt:
                sep = fields.index("-")
                return set(fields[5].split(",")), set(fields[sep + 3].split(","))
    raise AssertionError("nothing mounted on " + mnt)


def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return errno.errorcode[e.errno]
    return "ok"


def atime_ns(path):
    return os.stat(path).st_atime_ns


class Tmpfs:
    """A tmpfs mounted with `options`: the reference that follows the same
    access-time option."""

    def __init__(self, path, options):
        self.path = path
        os.makedirs(path, exist_ok=True)
        opts = ",".join(["size=16m"] + list(options))
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path], check=True)

    def unmount(self):
        subprocess.run(["umount", self.path], check=True)


class MountOptionsTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        harness.require_fuse(root=True)
        harness.set_deadline(280)
        cls.tmp = harness.make_tmpdir()
        cls.n = 0

    def mount(self, options):
        """A fresh store mounted with `options`; unmounted at the test's end."""
        MountOptionsTest.n += 1
        base = os.path.join(self.tmp, "m%d" % self.n)
        m = harness.Mount(os.path.join(base, "store"), os.path.join(base, "mnt"), options)
        m.mount()
        self.addCleanup(m.unmount)
        return m

    def run_mount(self, options, user=None):
        """`ckptfs mount -o OPTIONS` of a fresh store that must fail: its stderr."""
        MountOptionsTest.n += 1
        base = os.path.join(self.tmp, "f%d" % self.n)
        os.makedirs(os.path.join(base, "mnt"))
        os.chmod(base, 0o777)
        os.chmod(os.path.join(base, "mnt"), 0o777)
        r = subprocess.run([harness.ckptfs_bin(), "mount", "-o", options,
                            os.path.join(base, "store"), os.path.join(base, "mnt")],
                           capture_output=True, text=True, user=user, timeout=60)
        if r.returncode == 0:
            harness.fuse_unmount(os.path.join(base, "mnt"))
        self.assertNotEqual(r.returncode, 0, options)
        return r.stderr

    # -- kernel flags --

    def test_kernel_flags_in_mountinfo(self):
        cases = [
            ([], {"rw", "nosuid", "nodev", "relatime"}, {"noexec", "noatime", "ro"}, set()),
            (["noatime", "nodiratime", "noexec"], {"noatime", "nodiratime", "noexec"},
             {"relatime"}, set()),
            (["strictatime"], set(), {"relatime", "noatime"}, set()),
            (["relatime"], {"relatime"}, {"noatime"}, set()),
            (["suid", "dev"], {"rw"}, {"nosuid", "nodev"}, set()),
            (["sync", "dirsync"], {"rw"}, set(), {"sync", "dirsync"}),
        ]
        for options, present, absent, super_present in cases:
            with self.subTest(options=options):
                m = self.mount(options)
                mnt_opts, super_opts = mountinfo(m.mnt)
                self.assertLessEqual(present, mnt_opts)
                self.assertFalse(absent & mnt_opts, mnt_opts)
                self.assertLessEqual(super_present, super_opts)

    def test_readahead_window_is_set_through_sysfs(self):
        if os.geteuid() != 0:
            self.skipTest("the kernel's read-ahead knob needs root")
        for options, kb in (([], 1024), (["readahead=4M"], 4096)):
            with self.subTest(options=options):
                self.assertEqual(harness.read_ahead_kb(self.mount(options).mnt), kb)

    def test_fstab_options_accepted(self):
        m = self.mount(["defaults", "_netdev", "nofail", "user", "users", "noauto", "auto",
                        "x-systemd.automount", "comment=ckptfs", "rw", "atime", "exec",
                        "async", "nosuid", "nodev", "diratime"])
        mnt_opts, _ = mountinfo(m.mnt)
        self.assertLessEqual({"rw", "nosuid", "nodev", "relatime"}, mnt_opts)
        self.assertEqual(m.config()["relatime"], "1")
        with open(m.path("f"), "wb") as f:
            f.write(b"x")
        self.assertEqual(os.path.getsize(m.path("f")), 1)

    def test_bad_options_fail_with_one_line(self):
        err = self.run_mount("noatime,bogus")
        self.assertIn("unknown mount option 'bogus'", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_suid_and_dev_need_root(self):
        for option in ("suid", "dev"):
            err = self.run_mount(option, user=NOBODY)
            self.assertIn("option '%s' needs root" % option, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)

    # -- ro --

    def test_ro_refuses_changes_with_erofs(self):
        m = self.mount([])
        with open(m.path("f"), "wb") as f:
            f.write(b"data")
        os.mkdir(m.path("d"))
        m.remount(["ro"])
        mnt_opts, super_opts = mountinfo(m.mnt)
        self.assertIn("ro", mnt_opts)
        self.assertIn("ro", super_opts)
        p = m.path("f")
        got = {
            "read": open(p, "rb").read(),
            "open_write": errno_of(lambda: open(p, "r+b")),
            "create": errno_of(lambda: open(m.path("g"), "wb")),
            "mkdir": errno_of(lambda: os.mkdir(m.path("e"))),
            "unlink": errno_of(lambda: os.unlink(p)),
            "rename": errno_of(lambda: os.rename(p, m.path("h"))),
            "chmod": errno_of(lambda: os.chmod(p, 0o600)),
            "utime": errno_of(lambda: os.utime(p, (1, 1))),
            "setxattr": errno_of(lambda: os.setxattr(p, "user.a", b"1")),
            "rmdir": errno_of(lambda: os.rmdir(m.path("d"))),
        }
        want = {k: "EROFS" for k in got}
        want["read"] = b"data"
        self.assertEqual(got, want)

    # -- sync and dirsync --

    def fsyncs(self, m):
        s = m.stats()
        return s["engine"]["fsyncs"], s["fs"]["ops"]["fsyncs"]

    def test_sync_makes_every_change_durable_before_it_returns(self):
        m = self.mount(["sync"])
        fd = os.open(m.path("f"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            before = self.fsyncs(m)
            for _ in range(3):
                os.write(fd, b"x" * 100)
            after = self.fsyncs(m)
        finally:
            os.close(fd)
        self.assertGreaterEqual(after[1] - before[1], 3, "an FSYNC per write(2)")
        for step in (lambda: os.mkdir(m.path("d")), lambda: os.chmod(m.path("f"), 0o600),
                     lambda: os.setxattr(m.path("f"), "user.a", b"1"),
                     lambda: os.rename(m.path("d"), m.path("e"))):
            before = self.fsyncs(m)
            step()
            self.assertEqual(self.fsyncs(m)[0] - before[0], 1)

    def test_dirsync_syncs_changes_of_directories(self):
        for options in (["dirsync"], []):
            with self.subTest(options=options):
                m = self.mount(options)
                dir_syncs = 1 if options else 0
                before = self.fsyncs(m)
                os.mkdir(m.path("d"))
                open(m.path("d", "f"), "wb").close()
                os.rename(m.path("d", "f"), m.path("d", "g"))
                os.unlink(m.path("d", "g"))
                self.assertEqual(self.fsyncs(m)[0] - before[0], 4 * dir_syncs)
                before = self.fsyncs(m)
                os.chmod(m.path("d"), 0o700)
                with open(m.path("h"), "wb") as f:
                    f.write(b"x")
                after = self.fsyncs(m)
                # Only the creation of h; no chmod, no write.
                self.assertEqual(after[0] - before[0], dir_syncs)
                self.assertEqual(after[1], before[1], "no FSYNC after writes")

    # -- access times --

    def atime_steps(self, root):
        """What each step does to access times under `root`: True where it
        moved. Every step that reads reaches the filesystem (no cached page
        or listing serves it)."""
        out = {}
        f = os.path.join(root, "f")
        d = os.path.join(root, "d")
        with open(f, "wb") as fh:
            fh.write(b"a" * 10000)
        os.mkdir(d)

        def read(flags=0):
            fd = os.open(f, os.O_RDONLY | flags)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                while os.read(fd, 1 << 16):
                    pass
            finally:
                os.close(fd)

        def step(name, path, set_times, action):
            set_times()
            before = atime_ns(path)
            action()
            out[name] = atime_ns(path) != before

        now = time.time()
        past = lambda p: os.utime(p, (now - 1000, now - 500))      # atime before mtime
        future = lambda p: os.utime(p, (now + 10000, now - 1000))  # after mtime and ctime
        step("read_atime_before_mtime", f, lambda: past(f), read)
        step("read_atime_later", f, lambda: future(f), read)
        step("read_o_noatime", f, lambda: past(f), lambda: read(os.O_NOATIME))

        def append():
            future(f)
            with open(f, "ab") as fh:
                fh.write(b"b")
        step("read_after_write_atime_later", f, append, read)

        def write_after_old_atime():
            os.utime(f, (now - 1000, now - 1000))
            with open(f, "ab") as fh:
                fh.write(b"c")
        step("read_after_write", f, write_after_old_atime, read)

        n = [0]

        def change_dir(times):
            # A new entry drops the kernel's cached listing, so that the
            # listing reaches the filesystem.
            n[0] += 1
            open(os.path.join(d, "e%d" % n[0]), "wb").close()
            times(d)
        step("list_atime_before_mtime", d, lambda: change_dir(past), lambda: os.listdir(d))
        step("list_atime_later", d, lambda: change_dir(future), lambda: os.listdir(d))
        # Listed again: no update is due under relatime.
        step("list_again", d, lambda: None, lambda: os.listdir(d))
        return out

    def atime_case(self, options):
        MountOptionsTest.n += 1
        ref = Tmpfs(os.path.join(self.tmp, "tmpfs%d" % self.n), options)
        try:
            plain = self.atime_steps(ref.path)
        finally:
            ref.unmount()
        m = self.mount(options)
        got = self.atime_steps(m.mnt)
        return got, plain

    def test_atime_relatime_is_the_default(self):
        for options in ([], ["relatime"]):
            with self.subTest(options=options):
                got, plain = self.atime_case(options)
                self.assertEqual(got, plain)
                self.assertEqual(got, {
                    "read_atime_before_mtime": True, "read_atime_later": False,
                    "read_o_noatime": False,
                    "read_after_write_atime_later": False, "read_after_write": True,
                    "list_atime_before_mtime": True, "list_atime_later": False,
                    "list_again": False})

    def test_atime_noatime(self):
        got, plain = self.atime_case(["noatime"])
        self.assertEqual(got, plain)
        self.assertEqual(set(got.values()), {False})

    def test_atime_nodiratime(self):
        got, plain = self.atime_case(["nodiratime"])
        self.assertEqual(got, plain)
        self.assertTrue(got["read_atime_before_mtime"])
        self.assertFalse(got["list_atime_before_mtime"])

    def test_atime_strictatime(self):
        got, plain = self.atime_case(["strictatime"])
        # Listed again, the directory comes from the kernel's readdir cache
        # on ckptfs: see test_cached_reads_leave_atime.
        self.assertTrue(plain.pop("list_again"))
        got.pop("list_again")
        self.assertEqual(got, plain)
        self.assertFalse(got.pop("read_o_noatime"))
        self.assertEqual(set(got.values()), {True})

    def test_cached_reads_leave_atime(self):
        """ckptfs differs from ext4 here: a read the kernel serves from its
        page cache never reaches ckptfs (FUSE leaves access times to the
        filesystem and sends nothing for such a read), so even strictatime
        moves nothing; the next read that reaches ckptfs does."""
        m = self.mount(["strictatime"])
        mnt_opts, _ = mountinfo(m.mnt)
        p = m.path("f")
        with open(p, "wb") as f:
            f.write(b"a" * 10000)
        with open(p, "rb") as f:
            f.read()  # the pages are cached now
        os.utime(p, (1000, 1000))
        with open(p, "rb") as f:
            self.assertEqual(len(f.read()), 10000)
        self.assertEqual(atime_ns(p), 1000 * 10**9, "a cached read moves nothing")
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.read(fd, 100)
        finally:
            os.close(fd)
        self.assertGreater(atime_ns(p), 1000 * 10**9, "a read that reaches ckptfs moves it")


if __name__ == "__main__":
    unittest.main(verbosity=2)
