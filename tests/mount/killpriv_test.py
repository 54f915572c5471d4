#!/usr/bin/python3
"""Set-user-ID and set-group-ID bits on the mount go where Linux clears them.

The mount negotiates FUSE_HANDLE_KILLPRIV_V2 (when the kernel offers it):
the kernel stops asking for security.capability before every write and
leaves clearing the set-ID bits on write, truncate and chown to the daemon.
  - uid 65534 writes, truncates, opens with O_TRUNC and fallocates
    (allocate, keep size, punch a hole, zero a range) world-writable set-ID
    files, root writes and allocates some and changes owners: the modes after each step
    are the same as on a plain directory, and the expected ones (root keeps
    the bits; set-group-ID without group execute stays for a writer in the
    file's group);
  - root writes, truncates, fallocates and chowns files with a capability
    (security.capability), and it goes as on a plain directory, also when
    set again after a write;
  - 64 write(2) calls of 4 KiB to one file send at most one GETXATTR
    (MOUNT/.ckptfs/stats, ops.getxattrs);
  - right after uid 65534 allocates, punches or zeroes a range of a
    set-ID file (modes 6666, 6676, 6766, 6777), or writes or truncates
    it, `stat -c %a` (statx for
    the mode alone, which the kernel may answer from its cache) shows the
    bits cleared, and a set-user-ID program it so changed runs as uid
    65534, not as root, on a -o suid mount: as on a plain directory;
  - the set-ID and capability cases again on a passthrough_writes mount,
    where an open with O_TRUNC truncates in the OPEN (atomic_o_trunc), and
    on a -o suid mount.
Needs root (setuid to 65534, allow_other) and CKPTFS_BIN.
"""

import errno
import os
import stat
import struct
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
NOBODY = 65534
# A file capability (VFS_CAP_REVISION_2, permitted CAP_NET_BIND_SERVICE).
CAPABILITY = struct.pack("<IIIII", 0x02000000, 1 << 10, 0, 0, 0)

# (name, mode before, group of the file, what uid 65534 does, mode after)
CASES = [
    ("write_6777", 0o6777, 0, "write", 0o777),
    ("write_4777", 0o4777, 0, "write", 0o777),
    ("write_2777", 0o2777, 0, "write", 0o777),
    # Set-group-ID without group execute goes for a writer outside the
    # group, and stays for one in it.
    ("write_2767", 0o2767, 0, "write", 0o767),
    ("write_2767_in_group", 0o2767, NOBODY, "write", 0o2767),
    ("truncate_6777", 0o6777, 0, "truncate", 0o777),
    ("otrunc_6777", 0o6777, 0, "otrunc", 0o777),
    ("append_6777", 0o6777, 0, "append", 0o777),
    ("plain_0777", 0o777, 0, "write", 0o777),
    # fallocate(2) as write(2): allocate (also within the size and keeping
    # it), punch a hole, zero a range.
    ("fallocate_6777", 0o6777, 0, "fallocate", 0o777),
    ("fallocate_keep_size_6777", 0o6777, 0, "fallocate_keep_size", 0o777),
    ("punch_hole_6777", 0o6777, 0, "punch_hole", 0o777),
    ("zero_range_6777", 0o6777, 0, "zero_range", 0o777),
    ("fallocate_2767", 0o2767, 0, "fallocate", 0o767),
    ("fallocate_2767_in_group", 0o2767, NOBODY, "fallocate", 0o2767),
    # Empty: with passthrough_writes a new file's writes go to the kernel,
    # but not those of a set-ID file.
    ("empty_6777", 0o6777, 0, "write", 0o777),
]

# fallocate(2), write(2) and truncate(2) by uid 65534, then a stat that asks
# for the mode alone:
# (mode before, what uid 65534 does). The file's group is 0.
STATX_MODES = (0o6666, 0o6676, 0o6766, 0o6777)
STATX_ACTIONS = ("fallocate", "punch_hole", "zero_range", "write", "append", "truncate")

NOBODY_CHILD = textwrap.dedent(r"""
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    FALLOCATE = {"fallocate": 0, "fallocate_keep_size": 1, "punch_hole": 3, "zero_range": 16}
    root = sys.argv[1]
    for arg in sys.argv[2:]:
        name, action = arg.split(":")
        p = os.path.join(root, name)
        if action == "truncate":
            os.truncate(p, 1)
            continue
        if action in FALLOCATE:
            fd = os.open(p, os.O_WRONLY)
            if libc.fallocate(fd, FALLOCATE[action], 0, 4096) != 0:
                raise OSError(ctypes.get_errno(), "fallocate " + action)
            os.close(fd)
            continue
        flags = {"write": os.O_WRONLY, "otrunc": os.O_WRONLY | os.O_TRUNC,
                 "append": os.O_WRONLY | os.O_APPEND}[action]
        fd = os.open(p, flags)
        os.write(fd, b"x" * 4096)
        os.close(fd)
""")


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class KillPrivTest(unittest.TestCase):
    maxDiff = None
    mount_options = ()

    @classmethod
    def setUpClass(cls):
        harness.require_fuse(root=True)
        harness.set_deadline(100)
        cls.tmp = harness.make_tmpdir()
        os.chmod(cls.tmp, 0o755)  # uid 65534 must reach both roots
        cls.plain = os.path.join(cls.tmp, "plain")
        os.mkdir(cls.plain)
        cls.m = harness.Mount(os.path.join(cls.tmp, "store"), os.path.join(cls.tmp, "mnt"),
                              ["allow_other"] + list(cls.mount_options))
        cls.m.mount()
        os.chmod(cls.m.mnt, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.m.unmount()

    def run_cases(self, root):
        for name, mode, gid, _, _ in CASES:
            p = os.path.join(root, name)
            with open(p, "wb") as f:
                f.write(b"" if name.startswith("empty_") else b"#!/bin/sh\n")
            os.chown(p, 0, gid)
            os.chmod(p, mode)
            self.assertEqual(mode_of(p), mode, p)
        args = ["%s:%s" % (name, action) for name, _, _, action, _ in CASES]
        proc = subprocess.run([PY, "-c", NOBODY_CHILD, root] + args, capture_output=True,
                              text=True, preexec_fn=as_nobody, cwd="/", timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        modes = {name: mode_of(os.path.join(root, name)) for name, _, _, _, _ in CASES}
        # Root (CAP_FSETID) keeps the bits when it writes or truncates.
        for name, action in (("root_write_6777", "write"), ("root_otrunc_6777", "otrunc")):
            p = os.path.join(root, name)
            with open(p, "wb") as f:
                f.write(b"#!/bin/sh\n")
            os.chmod(p, 0o6777)
            flags = os.O_WRONLY | (os.O_TRUNC if action == "otrunc" else 0)
            fd = os.open(p, flags)
            os.write(fd, b"y" * 4096)
            os.close(fd)
            modes[name] = mode_of(p)
        # Root (CAP_FSETID) keeps them when it allocates too.
        p = os.path.join(root, "root_fallocate_6777")
        with open(p, "wb") as f:
            f.write(b"#!/bin/sh\n")
        os.chmod(p, 0o6777)
        with open(p, "r+b") as f:
            os.posix_fallocate(f.fileno(), 0, 8192)
        modes["root_fallocate_6777"] = mode_of(p)
        # A change of owner clears both bits (set-group-ID with group
        # execute), whoever makes it; directories keep theirs. Without group
        # execute root keeps set-group-ID also when not in the file's group.
        for name, mode, gid in (("chown_6755", 0o6755, 0), ("chown_2745", 0o2745, 0),
                                ("chown_2745_other_group", 0o2745, 1000)):
            p = os.path.join(root, name)
            with open(p, "wb") as f:
                f.write(b"#!/bin/sh\n")
            os.chown(p, 0, gid)
            os.chmod(p, mode)
            os.chown(p, 1000, -1)
            modes[name] = mode_of(p)
        d = os.path.join(root, "sgid_dir")
        os.mkdir(d)
        os.chmod(d, 0o2775)
        os.chown(d, 1000, 1000)
        modes["sgid_dir"] = mode_of(d)
        return modes

    def test_setid_bits_as_on_plain_dir(self):
        plain = self.run_cases(self.plain)
        mnt = self.run_cases(self.m.mnt)
        self.assertEqual({k: oct(v) for k, v in mnt.items()},
                         {k: oct(v) for k, v in plain.items()})
        expected = {name: after for name, _, _, _, after in CASES}
        expected.update(chown_6755=0o755, chown_2745=0o2745, chown_2745_other_group=0o2745,
                        sgid_dir=0o2775, root_write_6777=0o6777, root_otrunc_6777=0o6777,
                        root_fallocate_6777=0o6777)
        self.assertEqual({k: oct(v) for k, v in mnt.items()},
                         {k: oct(v) for k, v in expected.items()})

    def create_setid_file(self, p, mode, content=b"#!/bin/sh\n"):
        with open(p, "wb") as f:
            f.write(content)
        os.chown(p, 0, 0)
        os.chmod(p, mode)

    def stat_modes(self, paths):
        """The modes stat(1) shows: a statx that asks for STATX_MODE alone,
        which the kernel answers from the attributes it caches."""
        proc = subprocess.run(["stat", "-c", "%n %a"] + paths, capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        modes = {}
        for line in proc.stdout.splitlines():
            path, mode = line.rsplit(" ", 1)
            modes[os.path.basename(path)] = int(mode, 8)
        return modes

    def modes_right_after_change(self, root):
        """`stat -c %a` of set-ID files right after uid 65534 allocated,
        punched or zeroed a range of each, wrote or truncated it."""
        cases = {}
        for mode in STATX_MODES:
            for action in STATX_ACTIONS:
                name = "statx_%s_%o" % (action, mode)
                self.create_setid_file(os.path.join(root, name), mode)
                cases[name] = action
        paths = [os.path.join(root, name) for name in cases]
        # The kernel caches the modes before the change.
        self.assertEqual(self.stat_modes(paths),
                         {name: int(name.rsplit("_", 1)[1], 8) for name in cases})
        args = ["%s:%s" % (name, action) for name, action in cases.items()]
        proc = subprocess.run([PY, "-c", NOBODY_CHILD, root] + args, capture_output=True,
                              text=True, preexec_fn=as_nobody, cwd="/", timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return self.stat_modes(paths)

    def test_set_id_bits_are_cleared_at_once(self):
        plain = self.modes_right_after_change(self.plain)
        mnt = self.modes_right_after_change(self.m.mnt)
        self.assertEqual({k: oct(v) for k, v in mnt.items()},
                         {k: oct(v) for k, v in plain.items()})
        # uid 65534 holds no CAP_FSETID and is not in group 0: both bits go.
        expected = {name: int(name.rsplit("_", 1)[1], 8) & 0o777 for name in mnt}
        self.assertEqual({k: oct(v) for k, v in mnt.items()},
                         {k: oct(v) for k, v in expected.items()})

    def effective_uid_after_fallocate(self, root):
        """What a set-user-ID root program (id -u) that uid 65534 may write
        says its effective uid is, when uid 65534 runs it after allocating
        a range of it."""
        p = os.path.join(root, "setuid_id")
        with open("/usr/bin/id", "rb") as f:
            self.create_setid_file(p, 0o6777, f.read())
        size = os.path.getsize(p)
        proc = subprocess.run([PY, "-c", NOBODY_CHILD, root, "setuid_id:fallocate_keep_size"],
                              capture_output=True, text=True, preexec_fn=as_nobody, cwd="/",
                              timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # Run before anything asks for all its attributes.
        proc = subprocess.run([p, "-u"], capture_output=True, text=True, preexec_fn=as_nobody,
                              cwd="/", timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(os.path.getsize(p), size)
        return int(proc.stdout)

    def capability_steps(self, root):
        def write(p):
            with open(p, "r+b") as f:
                f.write(b"z")

        def fallocate(p):
            with open(p, "r+b") as f:
                os.posix_fallocate(f.fileno(), 0, 8192)

        steps = {
            "write": write,
            "truncate": lambda p: os.truncate(p, 1),
            "fallocate": fallocate,
            "chown": lambda p: os.chown(p, 1000, 1000),
            "read": lambda p: open(p, "rb").close(),
            "none": lambda p: None,
        }
        out = {}
        for action, fn in steps.items():
            p = os.path.join(root, "cap_" + action)
            with open(p, "wb") as f:
                f.write(b"#!/bin/sh\n")
            os.chmod(p, 0o755)
            os.setxattr(p, "security.capability", CAPABILITY)
            fn(p)
            out[action] = self.capability_of(p)
        # Set again after a write: the next write removes it again.
        p = os.path.join(root, "cap_again")
        with open(p, "wb") as f:
            f.write(b"#!/bin/sh\n")
        write(p)
        os.setxattr(p, "security.capability", CAPABILITY)
        write(p)
        out["write_after_set_again"] = self.capability_of(p)
        # An empty file with a capability (with passthrough_writes the
        # kernel would write it directly).
        p = os.path.join(root, "cap_empty")
        open(p, "wb").close()
        os.setxattr(p, "security.capability", CAPABILITY)
        write(p)
        out["write_empty"] = self.capability_of(p)
        return out

    def capability_of(self, p):
        try:
            return os.getxattr(p, "security.capability") == CAPABILITY
        except OSError as e:
            return errno.errorcode[e.errno]

    def test_capabilities_as_on_plain_dir(self):
        plain = self.capability_steps(self.plain)
        mnt = self.capability_steps(self.m.mnt)
        self.assertEqual(mnt, plain)
        self.assertEqual(mnt, {"write": "ENODATA", "truncate": "ENODATA", "fallocate": "ENODATA",
                               "chown": "ENODATA",
                               "read": True, "none": True, "write_after_set_again": "ENODATA",
                               "write_empty": "ENODATA"})

    def count_write_requests(self, m, n):
        """The WRITE and GETXATTR requests of n 4 KiB write(2)s on mount m
        (after one write that may still ask), up to the file's fsync."""
        p = m.path("many_writes")
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"w" * 4096)  # the first write may still ask
            os.fsync(fd)
            before = m.stats()["fs"]["ops"]
            for _ in range(n):
                self.assertEqual(os.write(fd, b"w" * 4096), 4096)
            os.fsync(fd)
            after = m.stats()["fs"]["ops"]
        finally:
            os.close(fd)
        self.assertEqual(os.path.getsize(p), (n + 1) * 4096)
        return after["writes"] - before["writes"], after["getxattrs"] - before["getxattrs"]

    def count_on_fresh_mount(self, option, n):
        """count_write_requests on a mount of its own with -o `option`."""
        m = harness.Mount(os.path.join(self.tmp, "store-" + option),
                          os.path.join(self.tmp, "mnt-" + option), [option])
        m.mount()
        try:
            writes, getxattrs = self.count_write_requests(m, n)
        finally:
            m.unmount()
        print("%s: %d WRITEs, %d GETXATTRs for %d writes" % (option, writes, getxattrs, n))
        return writes, getxattrs

    def test_no_getxattr_per_write(self):
        n = 64
        # Without the write-back cache every write(2) is a WRITE request.
        writes, getxattrs = self.count_on_fresh_mount("no_writeback_cache", n)
        self.assertGreaterEqual(writes, n)
        self.assertEqual(getxattrs, 0)
        # With it they gather into fewer WRITEs. Once the kernel has written
        # them it refreshes the file's attributes, and the first write(2)
        # after that may ask again: at most one probe per WRITE, never one
        # per write(2).
        writes, getxattrs = self.count_on_fresh_mount("writeback_cache", n)
        self.assertGreaterEqual(writes, 1)
        self.assertLess(writes, n)
        self.assertLessEqual(getxattrs, writes)


class KillPrivSuidTest(KillPrivTest):
    """KillPrivTest's set-ID and capability cases on a -o suid mount, where
    the kernel honours the set-ID bits it caches when it executes a file."""
    mount_options = ("suid",)

    def test_no_getxattr_per_write(self):
        self.skipTest("KillPrivTest's: mounts of its own")

    def test_fallocated_setuid_program_runs_as_its_caller(self):
        plain = self.effective_uid_after_fallocate(self.plain)
        mnt = self.effective_uid_after_fallocate(self.m.mnt)
        self.assertEqual(mnt, plain)
        self.assertEqual(mnt, NOBODY)


class KillPrivPassthroughTest(KillPrivTest):
    """KillPrivTest's set-ID and capability cases on a passthrough_writes
    mount: O_TRUNC comes with the OPEN, and the file it empties is written
    by the kernel directly."""
    mount_options = ("passthrough_writes",)

    def setUp(self):
        if not self.m.stats()["fs"]["atomic_o_trunc"]:
            self.skipTest("no passthrough here: " + self.m.stats()["fs"]["passthrough"]["in_use"])

    def test_no_getxattr_per_write(self):
        self.skipTest("KillPrivTest's: mounts of its own")


if __name__ == "__main__":
    unittest.main(verbosity=2)
