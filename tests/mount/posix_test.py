#!/usr/bin/python3
"""POSIX semantics on a real ckptfs mount, compared against a plain directory.

Every operation in the table below runs twice: once in a fresh directory on
the mount and once in a fresh directory on the ordinary filesystem under /tmp.
Each records a list of observations (return values, bytes read, stat fields,
errno names); the test asserts the two lists are equal, step by step. The
plain directory is the reference, so the table states no expected values of
its own and cannot drift from what Linux does.

Run as root (chown, setuid to 65534, allow_other). Needs CKPTFS_BIN.
"""

import ctypes
import errno
import fcntl
import hashlib
import json
import mmap
import os
import random
import stat
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
MiB = 1 << 20

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
SYS_renameat2 = {"x86_64": 316, "aarch64": 276}.get(os.uname().machine)


def renameat2(src, dst, flags):
    """renameat2(2) through libc (or the raw syscall on old libcs)."""
    if hasattr(libc, "renameat2"):
        rc = libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags)
    else:
        rc = libc.syscall(SYS_renameat2, AT_FDCWD, os.fsencode(src), AT_FDCWD,
                          os.fsencode(dst), flags)
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), src)


def raw_fallocate(fd, mode, offset, length):
    """fallocate(2) itself: glibc's posix_fallocate would emulate on EOPNOTSUPP."""
    if libc.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def rnd(n, seed):
    return random.Random(seed).randbytes(n)


def short(v):
    """Large byte strings are recorded as length + digest."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        v = bytes(v)
        if len(v) > 48:
            return ("bytes", len(v), hashlib.sha256(v).hexdigest()[:16])
    return v


class Rec:
    """Runs steps in one root directory and records what each returned."""

    def __init__(self, root):
        self.root = root
        self.obs = []

    def p(self, *parts):
        return os.path.join(self.root, *parts)

    def __call__(self, label, value):
        self.obs.append((label, short(value)))
        return value

    def call(self, label, fn, *args, **kw):
        """Records ("ok", result) or ("err", ERRNO); returns the result or None."""
        try:
            v = fn(*args, **kw)
        except OSError as e:
            self.obs.append((label, ("err", lib.errno_name(e.errno))))
            return None
        self.obs.append((label, ("ok", short(v))))
        return v

    def open(self, label, path, flags, mode=0o644):
        """os.open recorded as "ok"/errno (fd numbers are not compared)."""
        try:
            fd = os.open(path, flags, mode)
        except OSError as e:
            self.obs.append((label, ("err", lib.errno_name(e.errno))))
            return None
        self.obs.append((label, "ok"))
        return fd

    def stat(self, label, path, follow=True):
        self.obs.append((label, stat_summary(path, follow)))

    def content(self, label, path):
        try:
            with open(path, "rb") as f:
                v = f.read()
        except OSError as e:
            v = ("err", lib.errno_name(e.errno))
        self(label, v)
        return v


def stat_summary(path, follow=True):
    """The stat fields that must agree between filesystems (no inode, dev,
    blocks, times; directory size and link count are filesystem-specific)."""
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError as e:
        return ("err", lib.errno_name(e.errno))
    kind = {stat.S_IFREG: "reg", stat.S_IFDIR: "dir", stat.S_IFLNK: "lnk",
            stat.S_IFIFO: "fifo"}.get(stat.S_IFMT(st.st_mode), oct(stat.S_IFMT(st.st_mode)))
    s = {"kind": kind, "perm": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid,
         "gid": st.st_gid}
    if kind != "dir":
        s["size"] = st.st_size
        s["nlink"] = st.st_nlink
    return s


def write_all(path, data, mode=0o644):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


OPS = []


def op(fn):
    OPS.append(fn)
    return fn


# ---------------------------------------------------------------- open/create

@op
def open_create_excl_trunc(r):
    a = r.p("a")
    fd = r.open("create excl", a, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    r.call("write", os.write, fd, b"hello world")
    os.close(fd)
    r.stat("stat after create (umask 022)", a)
    r.open("create excl again", a, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    r.open("open missing", r.p("missing"), os.O_RDONLY)
    r.open("create in missing dir", r.p("nodir", "x"), os.O_CREAT | os.O_WRONLY)
    fd = r.open("open creat existing", a, os.O_CREAT | os.O_RDWR)
    r.call("read", os.read, fd, 100)
    os.close(fd)
    fd = r.open("open trunc", a, os.O_WRONLY | os.O_TRUNC)
    r.stat("stat after O_TRUNC", a)
    r.call("write", os.write, fd, b"xy")
    os.close(fd)
    fd = r.open("open append", a, os.O_WRONLY | os.O_APPEND)
    r.call("lseek 0", os.lseek, fd, 0, os.SEEK_SET)
    r.call("append write", os.write, fd, b"zz")
    r.call("pos after append", os.lseek, fd, 0, os.SEEK_CUR)
    os.close(fd)
    r.content("content", a)
    fd = r.open("O_RDONLY|O_TRUNC", a, os.O_RDONLY | os.O_TRUNC)
    if fd is not None:
        os.close(fd)
    r.content("content after O_RDONLY|O_TRUNC", a)
    os.mkdir(r.p("d"))
    r.open("open dir O_WRONLY", r.p("d"), os.O_WRONLY)
    r.open("open dir O_CREAT", r.p("d"), os.O_CREAT | os.O_RDONLY)
    r.open("open file as dir", r.p("a", "x"), os.O_RDONLY)
    r.open("O_DIRECTORY on file", a, os.O_RDONLY | os.O_DIRECTORY)
    fd = r.open("O_DIRECTORY on dir", r.p("d"), os.O_RDONLY | os.O_DIRECTORY)
    if fd is not None:
        os.close(fd)
    os.symlink("dangling-target", r.p("dangling"))
    r.open("O_CREAT|O_EXCL on dangling symlink", r.p("dangling"),
           os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    fd = r.open("O_CREAT through dangling symlink", r.p("dangling"), os.O_CREAT | os.O_WRONLY)
    if fd is not None:
        os.close(fd)
    r.stat("symlink target created", r.p("dangling-target"))
    r.open("O_NOFOLLOW on symlink", r.p("dangling"), os.O_RDONLY | os.O_NOFOLLOW)
    fd = r.open("create 0400 then write via same fd", r.p("ro"),
                os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o400)
    r.call("write to 0400 file through creating fd", os.write, fd, b"ok")
    os.close(fd)
    r.content("0400 content", r.p("ro"))
    r.call("name too long", os.open, r.p("n" * 256), os.O_CREAT | os.O_WRONLY)
    fd = r.open("name of 255 bytes", r.p("n" * 255), os.O_CREAT | os.O_WRONLY)
    if fd is not None:
        os.close(fd)
    r("listdir", sorted(os.listdir(r.root)))


# ----------------------------------------------------------- read and write

@op
def read_write_pread_pwrite(r):
    f = r.p("f")
    fd = r.open("create", f, os.O_CREAT | os.O_RDWR)
    for i, chunk in enumerate([b"abc", rnd(5000, 1), rnd(70000, 2)]):
        r.call("write %d" % i, os.write, fd, chunk)
    r.call("lseek set 0", os.lseek, fd, 0, os.SEEK_SET)
    r.call("read 10", os.read, fd, 10)
    r.call("read rest", os.read, fd, 1 << 20)
    r.call("read at EOF", os.read, fd, 10)
    r.call("lseek end", os.lseek, fd, 0, os.SEEK_END)
    r.call("lseek cur -10", os.lseek, fd, -10, os.SEEK_CUR)
    r.call("lseek negative", os.lseek, fd, -1, os.SEEK_SET)
    r.call("pread middle", os.pread, fd, 100, 4000)
    r.call("pread past EOF", os.pread, fd, 100, 10 ** 6)
    r.call("pread across EOF", os.pread, fd, 100, 75000 - 30)
    r.call("pwrite beyond EOF (hole)", os.pwrite, fd, b"tail", 200000)
    r.call("size", lambda: os.fstat(fd).st_size)
    r.call("pread hole", os.pread, fd, 1000, 100000)
    r.call("pread spanning data and hole", os.pread, fd, 200, 74990)
    big = rnd(3 * MiB + 5, 3)
    r.call("pwrite 3 MiB at 1 MiB - 7", os.pwrite, fd, big, MiB - 7)
    r.call("pwrite overwrite middle", os.pwrite, fd, rnd(300000, 4), 2 * MiB - 1000)
    r.call("pwrite 1 byte", os.pwrite, fd, b"Q", 3)
    r.call("pread 1 byte", os.pread, fd, 1, 3)
    r.call("pread big region", os.pread, fd, 2 * MiB, MiB + 12345)
    r.call("position unchanged by pread/pwrite", os.lseek, fd, 0, os.SEEK_CUR)
    r.call("readv", os.preadv, fd, [bytearray(7), bytearray(5000)], 10)
    r.call("writev", os.pwritev, fd, [b"one", b"two", rnd(9000, 5)], 500)
    os.close(fd)
    r.content("whole file", f)
    r.stat("stat", f)
    fd = os.open(f, os.O_RDONLY)
    r.call("write on O_RDONLY fd", os.write, fd, b"x")
    os.close(fd)
    fd = os.open(f, os.O_WRONLY)
    r.call("read on O_WRONLY fd", os.read, fd, 1)
    os.close(fd)
    r.call("read of a closed fd", os.read, fd, 1)
    d = os.open(r.root, os.O_RDONLY | os.O_DIRECTORY)
    r.call("read of a directory fd", os.read, d, 1)
    os.close(d)
    # Two fds on one file see each other's writes at once.
    fd1 = os.open(f, os.O_RDWR)
    fd2 = os.open(f, os.O_RDONLY)
    r.call("read via fd2 (warms the cache)", os.pread, fd2, 64, 0)
    os.pwrite(fd1, b"0123456789", 20)
    r.call("fd2 sees fd1's write", os.pread, fd2, 64, 0)
    os.close(fd1)
    os.close(fd2)


# ------------------------------------------------------------------ truncate

@op
def truncate_up_and_down(r):
    f = r.p("f")
    write_all(f, rnd(10000, 10))
    r.call("truncate down 5000", os.truncate, f, 5000)
    r.content("after down", f)
    r.call("truncate up 20000", os.truncate, f, 20000)
    r.content("after up: old bytes must not come back", f)
    fd = os.open(f, os.O_RDWR)
    r.call("ftruncate 100", os.ftruncate, fd, 100)
    r.call("pread after ftruncate", os.pread, fd, 200, 0)
    r.call("ftruncate up 1 MiB + 7", os.ftruncate, fd, MiB + 7)
    r.call("pread tail", os.pread, fd, 100, MiB - 50)
    r.call("ftruncate negative", os.ftruncate, fd, -1)
    r.call("ftruncate 0", os.ftruncate, fd, 0)
    r.call("fstat size", lambda: os.fstat(fd).st_size)
    os.close(fd)
    # Across record boundaries.
    g = r.p("g")
    write_all(g, rnd(3 * MiB, 11))
    r.call("truncate 1.5 MiB + 3", os.truncate, g, MiB + MiB // 2 + 3)
    r.call("truncate up 4 MiB", os.truncate, g, 4 * MiB)
    fd = os.open(g, os.O_RDWR)
    r.call("write in extended area", os.pwrite, fd, b"mark", 3 * MiB)
    os.close(fd)
    r.content("g", g)
    r.call("truncate same size", os.truncate, g, 4 * MiB)
    r.call("truncate dir", os.truncate, r.root, 0)
    r.call("truncate missing", os.truncate, r.p("missing"), 0)
    fd = os.open(g, os.O_RDONLY)
    r.call("ftruncate O_RDONLY fd", os.ftruncate, fd, 0)
    os.close(fd)
    r.stat("g stat", g)
    # Truncate while another fd holds the file open.
    h = r.p("h")
    write_all(h, rnd(50000, 12))
    fd = os.open(h, os.O_RDONLY)
    r.call("read before truncate", os.pread, fd, 100, 49000)
    os.truncate(h, 1000)
    r.call("read after truncate (other fd)", os.pread, fd, 100, 49000)
    r.call("read straddling new EOF", os.pread, fd, 100, 950)
    os.close(fd)


# ------------------------------------------------------ chmod, chown, utime

@op
def chmod_chown_utime(r):
    f, d = r.p("f"), r.p("d")
    write_all(f, b"data")
    os.mkdir(d)
    for m in (0o600, 0o4755, 0o2750, 0o000, 0o644):
        r.call("chmod %o" % m, os.chmod, f, m)
        r.stat("stat after chmod %o" % m, f)
    r.call("chmod dir 1777", os.chmod, d, 0o1777)
    r.stat("dir after chmod", d)
    r.call("chown 1234:5678", os.chown, f, 1234, 5678)
    r.stat("after chown", f)
    r.call("chown -1:42", os.chown, f, -1, 42)
    r.stat("after chgrp", f)
    r.call("chown dir", os.chown, d, 4321, 8765)
    r.stat("dir after chown", d)
    os.symlink("f", r.p("l"))
    r.call("lchown symlink", os.chown, r.p("l"), 999, 888, follow_symlinks=False)
    r.stat("symlink after lchown", r.p("l"), follow=False)
    r.stat("target unchanged by lchown", f)
    # Changing the owner of a setuid executable clears setuid (and setgid with g+x).
    write_all(r.p("suid"), b"#!/bin/sh\n")
    os.chmod(r.p("suid"), 0o6755)
    r.call("chown setuid file", os.chown, r.p("suid"), 1000, 1000)
    r.stat("setuid bits after chown", r.p("suid"))
    # A set-group-ID directory gives what is made in it its group, and a
    # directory made in it the bit too.
    sg = r.p("sgid")
    os.mkdir(sg)
    os.chown(sg, -1, 4242)
    os.chmod(sg, 0o2775)
    write_all(os.path.join(sg, "file"), b"x")
    os.mkdir(os.path.join(sg, "sub"), 0o755)
    os.symlink("file", os.path.join(sg, "link"))
    r.stat("file in a set-group-ID directory", os.path.join(sg, "file"))
    r.stat("directory in a set-group-ID directory", os.path.join(sg, "sub"))
    r.stat("symlink in a set-group-ID directory", os.path.join(sg, "link"), follow=False)
    write_all(os.path.join(sg, "sub", "deeper"), b"y")
    r.stat("file in an inherited set-group-ID directory", os.path.join(sg, "sub", "deeper"))
    r.call("chmod missing", os.chmod, r.p("missing"), 0o644)
    r.call("chown missing", os.chown, r.p("missing"), 1, 1)

    def times(path, follow=True):
        st = os.stat(path, follow_symlinks=follow)
        return (st.st_atime_ns, st.st_mtime_ns)

    for ns in [(1_000_000_123, 2_000_000_456), (0, 1), (2 ** 33 * 10 ** 9 + 5, 1_700_000_000_999_999_999)]:
        r.call("utime ns=%r" % (ns,), os.utime, f, ns=ns)
        r.call("times", times, f)
    r.call("utime dir", os.utime, d, ns=(123_456_789, 987_654_321))
    r.call("dir times", times, d)
    r.call("utime symlink itself", os.utime, r.p("l"), ns=(5, 6), follow_symlinks=False)
    r.call("symlink times", times, r.p("l"), False)
    r.call("target times untouched", times, f)
    r.call("utime missing", os.utime, r.p("missing"), ns=(1, 1))
    import time
    os.utime(f)
    r("utime(now) lands near now",
      abs(os.stat(f).st_mtime - time.time()) < 10)
    os.utime(f, ns=(10 ** 9, 10 ** 9))
    fd = os.open(f, os.O_WRONLY)
    os.write(fd, b"x")
    os.close(fd)
    r("write moves mtime forward", os.stat(f).st_mtime_ns > 10 ** 9)
    os.utime(f, ns=(10 ** 9, 10 ** 9))
    os.truncate(f, 1)
    r("truncate moves mtime forward", os.stat(f).st_mtime_ns > 10 ** 9)
    os.utime(d, ns=(10 ** 9, 10 ** 9))
    write_all(r.p("d", "child"), b"")
    r("create in dir moves dir mtime", os.stat(d).st_mtime_ns > 10 ** 9)
    c0 = os.stat(f).st_ctime_ns
    time.sleep(0.02)
    os.chmod(f, 0o640)
    r("chmod moves ctime", os.stat(f).st_ctime_ns > c0)


# ------------------------------------------------------------ mkdir / rmdir

@op
def mkdir_rmdir_unlink(r):
    d = r.p("d")
    r.call("mkdir", os.mkdir, d)
    r.stat("stat dir", d)
    r.call("mkdir again", os.mkdir, d)
    r.call("mkdir in missing parent", os.mkdir, r.p("missing", "x"))
    write_all(r.p("f"), b"x")
    r.call("mkdir under a file", os.mkdir, r.p("f", "x"))
    r.call("mkdir over a file", os.mkdir, r.p("f"))
    r.call("mkdir mode 700", os.mkdir, r.p("m700"), 0o700)
    r.stat("mode 700", r.p("m700"))
    r.call("mkdir mode 2777 (umask 022)", os.mkdir, r.p("m2777"), 0o2777)
    r.stat("mode 2777", r.p("m2777"))
    os.makedirs(r.p("d", "a", "b", "c"))
    write_all(r.p("d", "a", "file"), b"y")
    r.call("rmdir non-empty", os.rmdir, r.p("d"))
    r.call("rmdir non-empty (file only)", os.rmdir, r.p("d", "a", "b"))
    r.call("rmdir missing", os.rmdir, r.p("missing"))
    r.call("rmdir file", os.rmdir, r.p("f"))
    r.call("rmdir dot", os.rmdir, r.p("d", "a", "b", "c", "."))
    r.call("rmdir leaf", os.rmdir, r.p("d", "a", "b", "c"))
    r.call("rmdir leaf again", os.rmdir, r.p("d", "a", "b", "c"))
    r.call("listdir after rmdir", sorted, os.listdir(r.p("d", "a", "b")))
    r.call("unlink dir", os.unlink, r.p("d"))
    r.call("unlink missing", os.unlink, r.p("missing"))
    r.call("unlink through a file", os.unlink, r.p("f", "x"))
    r.call("unlink file", os.unlink, r.p("f"))
    r.call("unlink file again", os.unlink, r.p("f"))
    r.stat("stat unlinked", r.p("f"))
    r.call("rmdir symlink to dir", lambda: (os.symlink("d", r.p("ld")), os.rmdir(r.p("ld"))))
    r.call("unlink symlink to dir", os.unlink, r.p("ld"))
    r.stat("dir survives unlinking its symlink", r.p("d"))
    # A directory emptied file by file can be removed.
    os.mkdir(r.p("e"))
    for i in range(50):
        write_all(r.p("e", "f%d" % i), b"z" * i)
    for i in range(50):
        os.unlink(r.p("e", "f%d" % i))
    r.call("rmdir emptied dir", os.rmdir, r.p("e"))
    r.call("listdir", sorted, os.listdir(r.root))


@op
def dir_link_counts(r):
    """Directories count their subdirectories in st_nlink (find relies on it)."""
    os.mkdir(r.p("d"))
    r("empty dir nlink", os.stat(r.p("d")).st_nlink)
    for i in range(3):
        os.mkdir(r.p("d", "s%d" % i))
    write_all(r.p("d", "file"), b"")
    r("dir with 3 subdirs", os.stat(r.p("d")).st_nlink)
    os.rmdir(r.p("d", "s0"))
    r("after rmdir", os.stat(r.p("d")).st_nlink)
    os.mkdir(r.p("e"))
    os.rename(r.p("d", "s1"), r.p("e", "s1"))
    r("source parent after moving a subdir", os.stat(r.p("d")).st_nlink)
    r("target parent after moving a subdir", os.stat(r.p("e")).st_nlink)


# ------------------------------------------------------------------- rename

@op
def rename_cases(r):
    write_all(r.p("a"), b"AAAA")
    write_all(r.p("b"), b"BBBBBBBB")
    old_b = os.open(r.p("b"), os.O_RDONLY)
    r.call("rename file over file", os.rename, r.p("a"), r.p("b"))
    r.content("target has source content", r.p("b"))
    r.stat("source gone", r.p("a"))
    r.call("old target still readable via open fd", os.pread, old_b, 100, 0)
    r.call("old target fstat nlink", lambda: os.fstat(old_b).st_nlink)
    os.close(old_b)
    r.call("rename to itself", os.rename, r.p("b"), r.p("b"))
    r.content("still there", r.p("b"))
    r.call("rename missing", os.rename, r.p("missing"), r.p("x"))
    r.call("rename into missing dir", os.rename, r.p("b"), r.p("nodir", "b"))
    os.makedirs(r.p("src", "sub"))
    write_all(r.p("src", "sub", "leaf"), b"leaf")
    os.mkdir(r.p("empty"))
    r.call("rename dir over empty dir", os.rename, r.p("src"), r.p("empty"))
    r.content("child via new name", r.p("empty", "sub", "leaf"))
    r.stat("old dir name gone", r.p("src"))
    os.makedirs(r.p("full", "x"))
    r.call("rename dir over non-empty dir", os.rename, r.p("empty"), r.p("full"))
    r.call("rename file over dir", os.rename, r.p("b"), r.p("full"))
    r.call("rename dir over file", os.rename, r.p("full"), r.p("b"))
    r.call("rename dir into its own subtree", os.rename, r.p("full"), r.p("full", "x", "y"))
    r.call("rename dir onto its own child", os.rename, r.p("full"), r.p("full", "x"))
    r.call("rename parent over child", os.rename, r.p("full", "x"), r.p("full"))
    r.call("rename dot", os.rename, r.p("full", "."), r.p("dot"))
    # Across directories, then back.
    os.mkdir(r.p("d1"))
    os.mkdir(r.p("d2"))
    write_all(r.p("d1", "f"), rnd(10000, 20))
    r.call("rename across dirs", os.rename, r.p("d1", "f"), r.p("d2", "g"))
    r.call("listdirs", lambda: (sorted(os.listdir(r.p("d1"))), sorted(os.listdir(r.p("d2")))))
    r.content("moved content", r.p("d2", "g"))
    r.call("rename dir across dirs", os.rename, r.p("d2"), r.p("d1", "d2moved"))
    r.content("content via moved dir", r.p("d1", "d2moved", "g"))
    # Hard links to one inode: rename of one onto the other is a no-op.
    write_all(r.p("h1"), b"same")
    os.link(r.p("h1"), r.p("h2"))
    r.call("rename onto own hard link", os.rename, r.p("h1"), r.p("h2"))
    r.call("both names remain", sorted, [n for n in os.listdir(r.root) if n.startswith("h")])
    # Rename a file that is open for writing, then keep writing.
    fd = os.open(r.p("w"), os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"before ")
    r.call("rename open file", os.rename, r.p("w"), r.p("w2"))
    r.call("write after rename", os.write, fd, b"after")
    os.close(fd)
    r.content("renamed file content", r.p("w2"))
    # Rename over a symlink replaces the link, not its target.
    os.symlink("b", r.p("sl"))
    write_all(r.p("c"), b"C")
    r.call("rename over symlink", os.rename, r.p("c"), r.p("sl"))
    r.stat("symlink replaced", r.p("sl"), follow=False)
    r.content("symlink target untouched", r.p("b"))
    r.call("listdir", sorted, os.listdir(r.root))


@op
def renameat2_flags(r):
    write_all(r.p("a"), b"AAA")
    write_all(r.p("b"), b"BBBBBB")
    r.call("NOREPLACE onto existing", renameat2, r.p("a"), r.p("b"), RENAME_NOREPLACE)
    r.content("a intact", r.p("a"))
    r.content("b intact", r.p("b"))
    r.call("NOREPLACE onto new name", renameat2, r.p("a"), r.p("c"), RENAME_NOREPLACE)
    r.call("names", sorted, os.listdir(r.root))
    r.call("EXCHANGE two files", renameat2, r.p("b"), r.p("c"), RENAME_EXCHANGE)
    r.content("b now", r.p("b"))
    r.content("c now", r.p("c"))
    r.call("EXCHANGE with missing", renameat2, r.p("b"), r.p("missing"), RENAME_EXCHANGE)
    os.makedirs(r.p("d", "inner"))
    write_all(r.p("d", "inner", "x"), b"x")
    r.call("EXCHANGE file and dir", renameat2, r.p("b"), r.p("d"), RENAME_EXCHANGE)
    r.stat("b is a dir", r.p("b"))
    r.stat("d is a file", r.p("d"))
    r.content("content via exchanged dir", r.p("b", "inner", "x"))
    os.mkdir(r.p("other"))
    write_all(r.p("other", "y"), b"yy")
    r.call("EXCHANGE across dirs", renameat2, r.p("c"), r.p("other", "y"), RENAME_EXCHANGE)
    r.content("c", r.p("c"))
    r.content("other/y", r.p("other", "y"))
    r.call("EXCHANGE dir into its own subtree", renameat2, r.p("b"), r.p("b", "inner", "x"),
           RENAME_EXCHANGE)
    r.call("NOREPLACE|EXCHANGE", renameat2, r.p("c"), r.p("d"),
           RENAME_NOREPLACE | RENAME_EXCHANGE)
    r.call("NOREPLACE dir onto existing dir", renameat2, r.p("b"), r.p("other"),
           RENAME_NOREPLACE)
    r.call("unknown flag", renameat2, r.p("c"), r.p("z"), 1 << 10)
    r.call("listdir", sorted, os.listdir(r.root))


# ------------------------------------------------------- links and symlinks

@op
def link_symlink_readlink(r):
    a = r.p("a")
    write_all(a, b"original")
    r.call("link", os.link, a, r.p("b"))
    r.stat("a nlink 2", a)
    r("same inode", os.stat(a).st_ino == os.stat(r.p("b")).st_ino)
    fd = os.open(r.p("b"), os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"+via b")
    os.close(fd)
    r.content("write via b seen via a", a)
    r.call("link onto existing", os.link, a, r.p("b"))
    r.call("link missing", os.link, r.p("missing"), r.p("c"))
    os.mkdir(r.p("d"))
    r.call("link a directory", os.link, r.p("d"), r.p("dl"))
    r.call("link into subdir", os.link, a, r.p("d", "a3"))
    r.stat("nlink 3", a)
    r.call("unlink a", os.unlink, a)
    r.stat("b after unlinking a", r.p("b"))
    r.content("b content", r.p("b"))
    r.call("symlink", os.symlink, "b", r.p("s"))
    r.call("readlink", os.readlink, r.p("s"))
    r.stat("lstat symlink", r.p("s"), follow=False)
    r.stat("stat through symlink", r.p("s"))
    r.content("read through symlink", r.p("s"))
    r.call("symlink onto existing", os.symlink, "x", r.p("s"))
    r.call("readlink of a file", os.readlink, r.p("b"))
    r.call("readlink missing", os.readlink, r.p("missing"))
    r.call("dangling symlink", os.symlink, "nowhere/at/all", r.p("dang"))
    r.stat("stat dangling", r.p("dang"))
    r.stat("lstat dangling", r.p("dang"), follow=False)
    r.call("symlink to dir", os.symlink, "d", r.p("sd"))
    r.call("listdir via symlink", sorted, os.listdir(r.p("sd")))
    r.call("create via symlinked dir", write_all, r.p("sd", "new"), b"new")
    r.content("new via real dir", r.p("d", "new"))
    r.call("absolute target", os.symlink, "/etc/hostname-not-there", r.p("abs"))
    r.call("readlink absolute", os.readlink, r.p("abs"))
    long_target = "x/" * 1000 + "end"
    r.call("long target", os.symlink, long_target, r.p("long"))
    r.call("readlink long", lambda: os.readlink(r.p("long")) == long_target)
    r.stat("long symlink size", r.p("long"), follow=False)
    os.symlink("loop2", r.p("loop1"))
    os.symlink("loop1", r.p("loop2"))
    r.call("open symlink loop", os.open, r.p("loop1"), os.O_RDONLY)
    r.call("link to a symlink (no follow)", os.link, r.p("s"), r.p("s_hard"),
           follow_symlinks=False)
    r.stat("hard link to symlink", r.p("s_hard"), follow=False)
    r.call("listdir", sorted, os.listdir(r.root))


# -------------------------------------------------------------- directories

@op
def scandir_types(r):
    write_all(r.p("file"), b"f")
    os.mkdir(r.p("dir"))
    os.symlink("file", r.p("link_file"))
    os.symlink("dir", r.p("link_dir"))
    os.symlink("missing", r.p("link_dangling"))
    os.link(r.p("file"), r.p("hard"))
    rows, inode_ok = [], True
    with os.scandir(r.root) as it:
        for e in it:
            rows.append((e.name, e.is_file(), e.is_dir(), e.is_symlink(),
                         e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False)))
            inode_ok &= e.inode() == os.lstat(e.path).st_ino
    r("entries", sorted(rows))
    r("scandir inode == lstat inode", inode_ok)
    # d_type straight from readdir via ctypes-free check: DirEntry caches d_type;
    # an entry of unknown type would need a stat, which still agrees above.
    r("walk", sorted((os.path.relpath(p, r.root), sorted(d), sorted(f))
                     for p, d, f in os.walk(r.root)))


@op
def mknod_fifo(r):
    r.call("mkfifo", os.mkfifo, r.p("fifo"), 0o600)
    r.stat("fifo stat", r.p("fifo"), follow=False)
    with os.scandir(r.root) as it:
        r("scandir", sorted((e.name, e.is_file(), e.is_dir()) for e in it))


@op
def readdir_while_changing(r):
    """Names present for the whole listing appear exactly once."""
    for i in range(3000):
        os.close(os.open(r.p("f%04d" % i), os.O_CREAT | os.O_WRONLY))
    seen = []
    with os.scandir(r.root) as it:
        for k, e in enumerate(it):
            seen.append(e.name)
            if k == 100:
                for i in range(200):
                    os.unlink(r.p("f%04d" % (2999 - i)))
                for i in range(200):
                    os.close(os.open(r.p("g%04d" % i), os.O_CREAT | os.O_WRONLY))
    stable = {"f%04d" % i for i in range(2800)}
    r("stable names seen exactly once",
      all(seen.count(n) == 1 for n in stable if n in seen) and stable <= set(seen))
    r("no duplicates", len(seen) == len(set(seen)))
    r("final listing", sorted(os.listdir(r.root)))


@op
def statvfs_sane(r):
    v = os.statvfs(r.root)
    r("bsize > 0", v.f_bsize > 0)
    r("frsize > 0", v.f_frsize > 0)
    r("blocks > 0", v.f_blocks > 0)
    r("bfree <= blocks", v.f_bfree <= v.f_blocks)
    r("bavail <= bfree", v.f_bavail <= v.f_bfree)
    r("ffree <= files", v.f_ffree <= v.f_files)
    r("namemax >= 255", v.f_namemax >= 255)
    fd = os.open(r.p("f"), os.O_CREAT | os.O_WRONLY)
    r("fstatvfs agrees on block size", os.fstatvfs(fd).f_frsize == v.f_frsize)
    os.close(fd)


# ------------------------------------------------------------------- fallocate

@op
def fallocate_mode0(r):
    f = r.p("f")
    fd = os.open(f, os.O_CREAT | os.O_RDWR)
    r.call("fallocate 0..1 MiB on empty file", raw_fallocate, fd, 0, 0, MiB)
    r.call("size", lambda: os.fstat(fd).st_size)
    r.call("reads zeros", lambda: os.pread(fd, MiB, 0) == bytes(MiB))
    r.call("write into allocated range", os.pwrite, fd, b"data", 1000)
    r.call("fallocate inside data keeps size and bytes", raw_fallocate, fd, 0, 0, 5000)
    r.call("size", lambda: os.fstat(fd).st_size)
    r.call("bytes", os.pread, fd, 10, 998)
    r.call("fallocate past EOF", raw_fallocate, fd, 0, 2 * MiB, 4096)
    r.call("size after extending", lambda: os.fstat(fd).st_size)
    r.call("gap reads zeros", lambda: os.pread(fd, 4096, MiB + 100) == bytes(4096))
    r.call("len 0", raw_fallocate, fd, 0, 0, 0)
    r.call("negative offset", raw_fallocate, fd, 0, -1, 10)
    r.call("posix_fallocate", os.posix_fallocate, fd, 3 * MiB, 100)
    r.call("size after posix_fallocate", lambda: os.fstat(fd).st_size)
    os.close(fd)
    fd = os.open(f, os.O_RDONLY)
    r.call("fallocate on O_RDONLY fd", raw_fallocate, fd, 0, 0, 10)
    os.close(fd)
    r.content("content", f)


# ----------------------------------------------------------------- xattrs

@op
def xattrs(r):
    f = r.p("f")
    write_all(f, b"x")

    def user_names(p, follow=True):
        return sorted(n for n in os.listxattr(p, follow_symlinks=follow) if n.startswith("user."))

    r.call("list empty", user_names, f)
    r.call("get missing", os.getxattr, f, "user.nope")
    r.call("set a", os.setxattr, f, "user.a", b"1")
    r.call("get a", os.getxattr, f, "user.a")
    r.call("set b (binary)", os.setxattr, f, "user.b", bytes(range(256)))
    r.call("set empty value", os.setxattr, f, "user.empty", b"")
    r.call("get empty value", os.getxattr, f, "user.empty")
    r.call("list", user_names, f)
    r.call("replace a", os.setxattr, f, "user.a", b"2222")
    r.call("get a after replace", os.getxattr, f, "user.a")
    r.call("XATTR_CREATE existing", os.setxattr, f, "user.a", b"3", os.XATTR_CREATE)
    r.call("XATTR_REPLACE missing", os.setxattr, f, "user.zz", b"3", os.XATTR_REPLACE)
    r.call("XATTR_CREATE new", os.setxattr, f, "user.c", b"3", os.XATTR_CREATE)
    r.call("XATTR_REPLACE existing", os.setxattr, f, "user.c", b"4", os.XATTR_REPLACE)
    r.call("get c", os.getxattr, f, "user.c")
    r.call("large value", os.setxattr, f, "user.large", rnd(3000, 30))
    r.call("get large", os.getxattr, f, "user.large")
    r.call("remove a", os.removexattr, f, "user.a")
    r.call("remove a again", os.removexattr, f, "user.a")
    r.call("get removed", os.getxattr, f, "user.a")
    r.call("list after remove", user_names, f)
    r.call("empty name", os.setxattr, f, "user.", b"v")
    r.call("unknown namespace", os.setxattr, f, "bogus.name", b"v")
    r.call("name too long", os.setxattr, f, "user." + "n" * 300, b"v")
    r.call("value too large", os.setxattr, f, "user.huge", bytes(70000))
    os.mkdir(r.p("d"))
    r.call("set on dir", os.setxattr, r.p("d"), "user.d", b"dir")
    r.call("get on dir", os.getxattr, r.p("d"), "user.d")
    os.symlink("f", r.p("l"))
    r.call("get through symlink", os.getxattr, r.p("l"), "user.c")
    r.call("set user.* on symlink itself", os.setxattr, r.p("l"), "user.s", b"s",
           follow_symlinks=False)
    r.call("list on symlink itself", user_names, r.p("l"), False)
    r.call("get missing file", os.getxattr, r.p("missing"), "user.a")
    # Survives rename and hard link.
    os.rename(f, r.p("g"))
    os.link(r.p("g"), r.p("h"))
    r.call("list after rename via link", user_names, r.p("h"))
    r.call("get via link", os.getxattr, r.p("h"), "user.c")
    fd = os.open(r.p("g"), os.O_RDONLY)
    r.call("fsetxattr", os.setxattr, fd, "user.fd", b"byfd")
    r.call("fgetxattr", os.getxattr, fd, "user.fd")
    os.close(fd)


# ------------------------------------------------------------ SEEK_DATA/HOLE

@op
def seek_data_hole(r):
    f = r.p("sparse")
    fd = os.open(f, os.O_CREAT | os.O_RDWR)
    os.pwrite(fd, rnd(4096, 40), 0)
    os.pwrite(fd, rnd(8192, 41), MiB)
    os.ftruncate(fd, 2 * MiB)
    os.fsync(fd)
    for whence, wname in ((os.SEEK_DATA, "DATA"), (os.SEEK_HOLE, "HOLE")):
        for off in (0, 100, 4096, 65536, MiB, MiB + 4096, MiB + 8192, MiB + MiB // 2,
                    2 * MiB - 1, 2 * MiB, 3 * MiB):
            r.call("SEEK_%s %d" % (wname, off), os.lseek, fd, off, whence)
    r.call("SEEK_DATA negative", os.lseek, fd, -1, os.SEEK_DATA)
    r.call("read across hole", lambda: os.pread(fd, 8192, 4096 - 100))
    os.close(fd)
    g = r.p("dense")
    write_all(g, rnd(10000, 42))
    fd = os.open(g, os.O_RDONLY)
    r.call("dense SEEK_HOLE 0", os.lseek, fd, 0, os.SEEK_HOLE)
    r.call("dense SEEK_DATA 5000", os.lseek, fd, 5000, os.SEEK_DATA)
    os.close(fd)
    fd = os.open(r.p("empty"), os.O_CREAT | os.O_RDWR)
    r.call("empty SEEK_DATA 0", os.lseek, fd, 0, os.SEEK_DATA)
    r.call("empty SEEK_HOLE 0", os.lseek, fd, 0, os.SEEK_HOLE)
    os.close(fd)
    fd = os.open(r.p("allhole"), os.O_CREAT | os.O_RDWR)
    os.ftruncate(fd, MiB)
    r.call("all-hole SEEK_DATA 0", os.lseek, fd, 0, os.SEEK_DATA)
    r.call("all-hole SEEK_HOLE 10", os.lseek, fd, 10, os.SEEK_HOLE)
    os.close(fd)


# ------------------------------------------------------------------ O_DIRECT

@op
def o_direct_aligned(r):
    f = r.p("direct")
    block = 4096
    buf = mmap.mmap(-1, 4 * block + MiB)  # page-aligned memory
    data = rnd(len(buf), 50)
    buf[:] = data
    fd = r.open("open O_DIRECT create", f, os.O_CREAT | os.O_RDWR | os.O_DIRECT)
    r.call("aligned write", os.write, fd, buf)
    r.call("aligned pwrite at 8 KiB", os.pwrite, fd, memoryview(buf)[:block], 2 * block)
    rd = mmap.mmap(-1, len(buf))
    r.call("aligned pread", os.preadv, fd, [rd], 0)
    r("O_DIRECT read matches", rd[:] == data[:2 * block] + data[:block] + data[3 * block:])
    rd2 = mmap.mmap(-1, block)
    r.call("aligned read at EOF", os.preadv, fd, [rd2], len(buf))
    os.close(fd)
    r.content("buffered read of O_DIRECT file", f)
    # Page cache and O_DIRECT stay coherent in both directions.
    with open(f, "rb") as h:
        h.read()  # warm the page cache
    fd = os.open(f, os.O_WRONLY | os.O_DIRECT)
    patch = mmap.mmap(-1, block)
    patch[:] = b"D" * block
    os.pwrite(fd, patch, block)
    os.close(fd)
    r.call("buffered read sees O_DIRECT write", lambda: read_all(f)[block - 2:block + 2])
    fd = os.open(f, os.O_WRONLY)
    os.pwrite(fd, b"B" * 100, 0)
    os.close(fd)
    fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
    rd3 = mmap.mmap(-1, block)
    os.preadv(fd, [rd3], 0)
    os.close(fd)
    r("O_DIRECT read sees buffered write", rd3[:104])
    # A file opened with O_DIRECT maps like any other, and what is stored
    # through the mapping reads back through O_DIRECT.
    fd = os.open(f, os.O_RDWR | os.O_DIRECT)
    m = mmap.mmap(fd, 2 * block)
    r("mmap of O_DIRECT fd", m[block - 2:block + 2])
    m[10:14] = b"MMAP"
    m.flush()
    m.close()
    os.preadv(fd, [rd3], 0)
    os.close(fd)
    r("O_DIRECT read sees mmap write", rd3[:16])
    for m in (buf, rd, rd2, patch, rd3):
        m.close()


# ---------------------------------------------------------------------- mmap

@op
def mmap_read(r):
    f = r.p("f")
    data = rnd(MiB + 123, 60)
    write_all(f, data)
    with open(f, "rb") as h:
        with mmap.mmap(h.fileno(), 0, prot=mmap.PROT_READ) as m:
            r("len", len(m))
            r("whole", m[:])
            r("tail", m[-200:])
            r("random slices match", all(m[i:i + 777] == data[i:i + 777]
                                         for i in range(0, len(data), 99991)))
        with mmap.mmap(h.fileno(), 8192, prot=mmap.PROT_READ, offset=4096) as m:
            r("offset map", m[:])


@op
def mmap_shared_write(r):
    f = r.p("f")
    data = bytearray(rnd(64 * 1024 + 100, 61))
    write_all(f, data)
    fd = os.open(f, os.O_RDWR)
    m = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    m[10:20] = b"x" * 10
    m[65000:65100] = b"y" * 100
    m[len(m) - 1:] = b"z"
    data[10:20] = b"x" * 10
    data[65000:65100] = b"y" * 100
    data[-1:] = b"z"
    r.call("msync", m.flush)
    other = os.open(f, os.O_RDONLY)
    r("pread through another fd sees the mapping", os.pread(other, 200, 0))
    os.close(other)
    m.close()
    os.close(fd)
    r.content("after msync + munmap + reopen", f)
    r("equals model", read_all(f) == bytes(data))
    # Without msync: munmap and close must still write the pages back.
    fd = os.open(f, os.O_RDWR)
    m = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    m[30000:30010] = b"w" * 10
    data[30000:30010] = b"w" * 10
    m.close()
    os.close(fd)
    r("no msync: equals model after close", read_all(f) == bytes(data))
    # A mapping larger than the page-rounded file after extending with ftruncate.
    fd = os.open(f, os.O_RDWR)
    os.ftruncate(fd, 200000)
    m = mmap.mmap(fd, 200000, flags=mmap.MAP_SHARED)
    m[199990:200000] = b"E" * 10
    m.flush()
    m.close()
    os.close(fd)
    data.extend(bytes(200000 - len(data)))
    data[199990:200000] = b"E" * 10
    r("extended mapping equals model", read_all(f) == bytes(data))


# ----------------------------------------------------------- unlink while open

@op
def unlink_while_open(r):
    f = r.p("f")
    data = rnd(300000, 70)
    write_all(f, data)
    fd = os.open(f, os.O_RDWR)
    r.call("unlink", os.unlink, f)
    r.stat("stat after unlink", f)
    r.call("names", os.listdir, r.root)
    r.call("read through fd", os.pread, fd, len(data) + 10, 0)
    r.call("fstat nlink", lambda: os.fstat(fd).st_nlink)
    r.call("write through fd", os.pwrite, fd, b"more", 100)
    r.call("ftruncate through fd", os.ftruncate, fd, 200)
    r.call("read again", os.pread, fd, 1000, 0)
    r.call("fsync unlinked", os.fsync, fd)
    # The name can be reused while the old inode is still open.
    write_all(f, b"new file")
    r.content("new file under old name", f)
    r.call("old fd still old inode", os.pread, fd, 20, 0)
    os.close(fd)
    r.content("new file after close of old", f)
    # Last link removed via rename-over while open.
    write_all(r.p("victim"), b"victim bytes")
    vfd = os.open(r.p("victim"), os.O_RDONLY)
    write_all(r.p("winner"), b"winner")
    os.rename(r.p("winner"), r.p("victim"))
    r.call("replaced file readable via fd", os.pread, vfd, 100, 0)
    os.close(vfd)
    r.content("name has the winner", r.p("victim"))


# ------------------------------------------------------------- fsync, locks

@op
def fsync_fdatasync(r):
    f = r.p("f")
    fd = os.open(f, os.O_CREAT | os.O_RDWR)
    os.write(fd, rnd(100000, 80))
    r.call("fsync", os.fsync, fd)
    os.pwrite(fd, b"abc", 5)
    r.call("fdatasync", os.fdatasync, fd)
    os.close(fd)
    fd = os.open(f, os.O_RDONLY)
    r.call("fsync O_RDONLY fd", os.fsync, fd)
    os.close(fd)
    d = os.open(r.root, os.O_RDONLY | os.O_DIRECTORY)
    r.call("fsync dir", os.fsync, d)
    r.call("fdatasync dir", os.fdatasync, d)
    os.close(d)
    r.call("sync", os.sync)
    r.content("content", f)


LOCK_CHILD = textwrap.dedent(r"""
    import errno, fcntl, os, sys
    path, kind, start, length = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fd = os.open(path, os.O_RDWR)
    try:
        if kind == "flock":
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        elif kind == "flock_sh":
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        elif kind == "getlk":
            import struct
            req = struct.pack("hhqqi", fcntl.F_WRLCK, 0, start, length, 0)
            out = fcntl.fcntl(fd, fcntl.F_GETLK, req + bytes(8))
            t, _, s, l, pid = struct.unpack("hhqqi", out[:struct.calcsize("hhqqi")])
            print("type=%d start=%d len=%d" % (t, s, l))
            sys.exit(0)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
        print("ok")
    except OSError as e:
        print(errno.errorcode[e.errno])
""")


def lock_from_child(path, kind, start=0, length=0):
    out = subprocess.run([PY, "-c", LOCK_CHILD, path, kind, str(start), str(length)],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()[-200:]


@op
def fcntl_and_flock_locks(r):
    f = r.p("f")
    write_all(f, bytes(1000))
    fd = os.open(f, os.O_RDWR)
    r.call("flock LOCK_EX", fcntl.flock, fd, fcntl.LOCK_EX)
    r("child flock EX", lock_from_child(f, "flock"))
    r("child flock SH", lock_from_child(f, "flock_sh"))
    r.call("flock LOCK_UN", fcntl.flock, fd, fcntl.LOCK_UN)
    r("child flock EX after unlock", lock_from_child(f, "flock"))
    r.call("lockf 0..100", fcntl.lockf, fd, fcntl.LOCK_EX, 100, 0)
    r("child lockf 10..60 (overlap)", lock_from_child(f, "lockf", 10, 50))
    r("child lockf 200..300 (free)", lock_from_child(f, "lockf", 200, 100))
    r("child F_GETLK", lock_from_child(f, "getlk", 50, 10))
    r.call("lockf unlock", fcntl.lockf, fd, fcntl.LOCK_UN, 100, 0)
    r("child lockf after unlock", lock_from_child(f, "lockf", 10, 50))
    os.close(fd)


# ----------------------------------------------- fallocate modes, holes, st_blocks

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_NO_HIDE_STALE = 0x04
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_FL_INSERT_RANGE = 0x20
FALLOC_FL_UNSHARE_RANGE = 0x40
KiB = 1 << 10


def blocks(fd):
    return os.fstat(fd).st_blocks


def seek(fd, off, whence):
    return os.lseek(fd, off, whence)


@op
def fallocate_keep_size(r):
    f = r.p("f")
    write_all(f, rnd(8 * KiB, 30))
    fd = os.open(f, os.O_RDWR)
    r.call("KEEP_SIZE past EOF", raw_fallocate, fd, FALLOC_FL_KEEP_SIZE, 0, MiB)
    r.call("size unchanged", lambda: os.fstat(fd).st_size)
    r.call("bytes unchanged", os.pread, fd, 8 * KiB, 0)
    r.call("read past EOF", os.pread, fd, 10, 8 * KiB)
    r.call("write into the reserved range", os.pwrite, fd, rnd(64 * KiB, 31), 512 * KiB)
    r.call("size after write", lambda: os.fstat(fd).st_size)
    r.call("hole before the write", lambda: os.pread(fd, 64 * KiB, 256 * KiB) == bytes(64 * KiB))
    r.call("KEEP_SIZE inside the file", raw_fallocate, fd, FALLOC_FL_KEEP_SIZE, 4 * KiB, 4 * KiB)
    r.call("size", lambda: os.fstat(fd).st_size)
    os.close(fd)
    r.content("content", f)


@op
def fallocate_punch_hole(r):
    f = r.p("f")
    data = rnd(64 * KiB, 32)
    write_all(f, data)
    fd = os.open(f, os.O_RDWR)
    os.fsync(fd)
    r.call("blocks before", blocks, fd)
    r.call("punch 16..32 KiB", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           16 * KiB, 16 * KiB)
    r.call("size unchanged", lambda: os.fstat(fd).st_size)
    r.call("hole reads zeros", lambda: os.pread(fd, 16 * KiB, 16 * KiB) == bytes(16 * KiB))
    r.call("bytes before kept", lambda: os.pread(fd, 16 * KiB, 0) == data[:16 * KiB])
    r.call("bytes after kept", lambda: os.pread(fd, 32 * KiB, 32 * KiB) == data[32 * KiB:])
    r.call("SEEK_HOLE from 0", seek, fd, 0, os.SEEK_HOLE)
    r.call("SEEK_DATA from 16 KiB", seek, fd, 16 * KiB, os.SEEK_DATA)
    r.call("SEEK_HOLE from 20 KiB", seek, fd, 20 * KiB, os.SEEK_HOLE)
    r.call("SEEK_DATA from 0", seek, fd, 0, os.SEEK_DATA)
    r.call("blocks after punch", blocks, fd)
    r.call("punch the tail", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           48 * KiB, 16 * KiB)
    r.call("SEEK_HOLE from 32 KiB", seek, fd, 32 * KiB, os.SEEK_HOLE)
    r.call("SEEK_DATA from 48 KiB", seek, fd, 48 * KiB, os.SEEK_DATA)
    r.call("blocks after the tail", blocks, fd)
    r.call("punch past EOF", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           MiB, MiB)
    r.call("size", lambda: os.fstat(fd).st_size)
    r.call("write into the hole", os.pwrite, fd, b"x" * 4096, 20 * KiB)
    # ckptfs sees the write once the kernel's write-back cache hands it over.
    os.fsync(fd)
    r.call("SEEK_DATA from 16 KiB after the write", seek, fd, 16 * KiB, os.SEEK_DATA)
    r.call("blocks after refilling", blocks, fd)
    os.close(fd)
    r.content("content", f)


@op
def fallocate_punch_partial_blocks(r):
    """Unaligned edges: the other bytes of the edge blocks stay (st_blocks and
    SEEK_* differ here: ext4 frees whole blocks only, ckptfs exactly the range)."""
    f = r.p("f")
    data = rnd(40 * KiB, 33)
    write_all(f, data)
    fd = os.open(f, os.O_RDWR)
    r.call("punch 1000..10000", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           1000, 9000)
    r.call("punch 20000..20001", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           20000, 1)
    r.call("size", lambda: os.fstat(fd).st_size)
    os.close(fd)
    expect = bytearray(data)
    expect[1000:10000] = bytes(9000)
    expect[20000] = 0
    r("matches the expected bytes", read_all(f) == bytes(expect))
    r.content("content", f)
    g = r.p("small")
    write_all(g, rnd(3000, 34))
    fd = os.open(g, os.O_RDWR)
    r.call("punch in a small file", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           100, 200)
    r.call("write after the punch", os.pwrite, fd, b"abc", 2000)
    os.close(fd)
    r.content("small content", g)


@op
def fallocate_zero_range(r):
    f = r.p("f")
    data = rnd(64 * KiB, 35)
    write_all(f, data)
    fd = os.open(f, os.O_RDWR)
    r.call("ZERO_RANGE inside", raw_fallocate, fd, FALLOC_FL_ZERO_RANGE, 5000, 20000)
    r.call("size", lambda: os.fstat(fd).st_size)
    r.call("ZERO_RANGE|KEEP_SIZE past EOF", raw_fallocate, fd,
           FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 60 * KiB, 64 * KiB)
    r.call("size kept", lambda: os.fstat(fd).st_size)
    r.call("ZERO_RANGE extends", raw_fallocate, fd, FALLOC_FL_ZERO_RANGE, 100 * KiB, 8 * KiB)
    r.call("size extended", lambda: os.fstat(fd).st_size)
    os.close(fd)
    expect = bytearray(data)
    expect[5000:25000] = bytes(20000)
    expect[60 * KiB:] = bytes(4 * KiB)
    expect += bytes(44 * KiB)
    r("matches the expected bytes", read_all(f) == bytes(expect))
    r.content("content", f)


@op
def preallocation_counts_in_st_blocks(r):
    """Reserved space counts in st_blocks as preallocated blocks do, so a
    write into it leaves st_blocks as it was; a punch and a truncation give
    it back. Whole blocks only (ext4 counts blocks, ckptfs bytes)."""
    f = r.p("prealloc")
    fd = os.open(f, os.O_CREAT | os.O_RDWR, 0o644)
    r.call("allocate 1 MiB", raw_fallocate, fd, 0, 0, MiB)
    r.call("blocks after allocating", blocks, fd)
    r.call("SEEK_DATA in the allocation", lambda: seek_or_errno(fd, 0, os.SEEK_DATA))
    os.pwrite(fd, rnd(4 * KiB, 45), 64 * KiB)
    os.fsync(fd)
    r.call("blocks after writing 4 KiB into it", blocks, fd)
    r.call("SEEK_DATA after the write", seek, fd, 0, os.SEEK_DATA)
    r.call("KEEP_SIZE 1 MiB past EOF", raw_fallocate, fd, FALLOC_FL_KEEP_SIZE, MiB, MiB)
    r.call("blocks with the space past EOF", blocks, fd)
    r.call("punch 0..64 KiB", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
           0, 64 * KiB)
    r.call("blocks after the punch", blocks, fd)
    r.call("truncate to 512 KiB", os.ftruncate, fd, 512 * KiB)
    r.call("blocks after the truncation", blocks, fd)
    r.call("size", lambda: os.fstat(fd).st_size)
    os.close(fd)
    r.content("content", f)


@op
def fallocate_across_a_block_then_write(r):
    """2 bytes allocated across a block boundary, then written: the write
    lands in allocated blocks and st_blocks stays as it was. At 4 KiB (ext4's
    block, the page), and at each filesystem's own st_blksize."""
    for name, block in (("page", 4 * KiB), ("blksize", None)):
        f = r.p(name)
        fd = os.open(f, os.O_CREAT | os.O_RDWR, 0o644)
        bs = block or os.fstat(fd).st_blksize
        r.call(name + ": allocate 2 bytes at block - 1", raw_fallocate, fd, 0, bs - 1, 2)
        r(name + ": size past the block", os.fstat(fd).st_size - bs)
        allocated = blocks(fd)
        r.call(name + ": write the 2 bytes", os.pwrite, fd, b"xy", bs - 1)
        os.fsync(fd)
        r(name + ": blocks allocated", allocated > 0)
        r(name + ": blocks unchanged by the write", blocks(fd) == allocated)
        if block:
            r.call(name + ": blocks", blocks, fd)
        r.call(name + ": bytes", os.pread, fd, 2, bs - 1)
        os.close(fd)


def seek_or_errno(fd, off, whence):
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return lib.errno_name(e.errno)


@op
def fallocate_unsupported_modes(r):
    f = r.p("f")
    write_all(f, rnd(64 * KiB, 36))
    fd = os.open(f, os.O_RDWR)
    r.call("PUNCH_HOLE without KEEP_SIZE", raw_fallocate, fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)
    r.call("UNSHARE_RANGE", raw_fallocate, fd, FALLOC_FL_UNSHARE_RANGE, 0, 4096)
    r.call("PUNCH_HOLE|ZERO_RANGE", raw_fallocate, fd,
           FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096)
    r.call("size", lambda: os.fstat(fd).st_size)
    os.close(fd)


@op
def sparse_file_st_blocks(r):
    f = r.p("sparse")
    fd = os.open(f, os.O_CREAT | os.O_RDWR)
    r.call("4 KiB after a 1 MiB hole", os.pwrite, fd, rnd(4 * KiB, 37), MiB)
    os.fsync(fd)
    r.call("blocks", blocks, fd)
    r.call("SEEK_DATA", seek, fd, 0, os.SEEK_DATA)
    os.ftruncate(fd, 4 * MiB)
    r.call("blocks after extending with a hole", blocks, fd)
    r.call("truncate into the data", os.ftruncate, fd, MiB + 2048)
    os.fsync(fd)
    r.call("size", lambda: os.fstat(fd).st_size)
    os.close(fd)
    g = r.p("full")
    write_all(g, rnd(MiB, 38))
    fd = os.open(g, os.O_RDONLY)
    os.fsync(fd)
    r.call("fully written 1 MiB", blocks, fd)
    os.close(fd)


def make_sparse(path):
    """1 MiB hole, 4 KiB data, 1 MiB hole, 8 KiB data, 1 MiB hole: 4 MiB + 12 KiB."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.pwrite(fd, rnd(4 * KiB, 39), MiB)
    os.pwrite(fd, rnd(8 * KiB, 40), 3 * MiB)
    os.ftruncate(fd, 4 * MiB + 12 * KiB)
    os.fsync(fd)
    os.close(fd)


def sparse_summary(path):
    st = os.stat(path)
    return (st.st_size, st.st_blocks, lib.file_sha256(path))


@op
def cp_sparse_always(r):
    src, dst = r.p("src"), r.p("dst")
    make_sparse(src)
    r("source", sparse_summary(src))
    out = subprocess.run(["cp", "--sparse=always", src, dst], capture_output=True, text=True)
    r("cp", (out.returncode, out.stderr))
    r("copy", sparse_summary(dst))
    # Zeros written out become holes in the copy. cp looks for zeros in
    # pieces of st_blksize (1 MiB on ckptfs, 4 KiB on ext4): 2 MiB of them.
    z, zc = r.p("zeros"), r.p("zeros.copy")
    write_all(z, bytes(2 * MiB) + rnd(4 * KiB, 41))
    out = subprocess.run(["cp", "--sparse=always", z, zc], capture_output=True, text=True)
    r("cp zeros", (out.returncode, out.stderr))
    r("zeros copy", sparse_summary(zc))


@op
def tar_sparse(r):
    src = r.p("src")
    make_sparse(src)
    os.mkdir(r.p("out"))
    out = subprocess.run(["tar", "-S", "-cf", r.p("a.tar"), "-C", r.root, "src"],
                         capture_output=True, text=True)
    r("tar -S -c", (out.returncode, out.stderr))
    r("archive size", os.stat(r.p("a.tar")).st_size)
    out = subprocess.run(["tar", "-xf", r.p("a.tar"), "-C", r.p("out")],
                         capture_output=True, text=True)
    r("tar -x", (out.returncode, out.stderr))
    r("extracted", sparse_summary(r.p("out", "src")))
    r("same bytes", lib.file_sha256(src) == lib.file_sha256(r.p("out", "src")))


class FreeSpaceTest(unittest.TestCase):
    """statfs reports what a write can take: fallocate of the available
    space less 512 KiB succeeds, as on a plain directory. Both live on a
    tmpfs of their own, so that nothing else uses its space meanwhile."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.make_tmpdir()
        cls.fs = os.path.join(cls.tmp, "tmpfs")
        os.mkdir(cls.fs)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384m", "tmpfs", cls.fs], check=True)
        cls.m = harness.Mount(os.path.join(cls.fs, "store"), os.path.join(cls.tmp, "mnt"))
        try:
            cls.m.mount()
        except BaseException:
            subprocess.run(["umount", cls.fs], check=False)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.m.unmount()
        finally:
            subprocess.run(["umount", cls.fs], check=True)

    def fill(self, d):
        """fallocate of (f_bavail x f_bsize - 512 KiB) under d, as statfs
        reported it a moment before: what it returned and what statfs says
        is left after it."""
        v = os.statvfs(d)
        want = v.f_bavail * v.f_bsize - 512 * KiB
        self.assertGreater(want, 32 * MiB, d)
        p = os.path.join(d, "fill")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            raw_fallocate(fd, 0, 0, want)
            left = os.statvfs(d)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
            os.unlink(p)
        return size == want, left.f_bavail * left.f_bsize

    def test_available_space_can_be_allocated(self):
        plain = os.path.join(self.fs, "plain")
        os.mkdir(plain)
        for where, d in (("plain", plain), ("ckptfs", self.m.mnt)):
            allocated, left = self.fill(d)
            self.assertTrue(allocated, where)
            self.assertLessEqual(left, 512 * KiB, where)


class FallocateOnCkptfsTest(lib.MountAndPlainTestCase):
    """What ckptfs does where the plain directory cannot be the reference."""

    def test_beyond_free_space_is_enospc_with_nothing_changed(self):
        # Not run against the plain directory: ext4 allocates until the disk
        # is full and keeps the size it reached before failing with ENOSPC.
        f = self.m.path("big")
        write_all(f, rnd(8 * KiB, 42))
        fd = os.open(f, os.O_RDWR)
        try:
            v = os.statvfs(self.m.mnt)
            before = os.fstat(fd)
            for mode in (0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE):
                with self.assertRaises(OSError) as cm:
                    raw_fallocate(fd, mode, 0, v.f_bavail * v.f_frsize * 2)
                self.assertEqual(cm.exception.errno, errno.ENOSPC, mode)
                after = os.fstat(fd)
                self.assertEqual(after.st_size, before.st_size)
                self.assertEqual(after.st_blocks, before.st_blocks)
            self.assertEqual(read_all(f), rnd(8 * KiB, 42))
            # Within the free space: reserved, and the writes into it succeed.
            raw_fallocate(fd, 0, 0, 16 * MiB)
            self.assertEqual(os.fstat(fd).st_size, 16 * MiB)
            data = rnd(16 * MiB, 43)
            self.assertEqual(os.pwrite(fd, data, 0), len(data))
            os.fsync(fd)
            self.assertEqual(os.fstat(fd).st_blocks, 16 * MiB // 512)
        finally:
            os.close(fd)
        self.assertEqual(read_all(f), data)

    def test_collapse_and_insert_range_are_unsupported(self):
        # ext4 supports both; ckptfs (and the kernel's FUSE) does not.
        f = self.m.path("shift")
        write_all(f, rnd(64 * KiB, 44))
        fd = os.open(f, os.O_RDWR)
        try:
            for mode in (FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE,
                         FALLOC_FL_PUNCH_HOLE | FALLOC_FL_NO_HIDE_STALE | FALLOC_FL_KEEP_SIZE):
                with self.assertRaises(OSError) as cm:
                    raw_fallocate(fd, mode, 0, 4 * KiB)
                self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP, mode)
            self.assertEqual(os.fstat(fd).st_size, 64 * KiB)
        finally:
            os.close(fd)
        self.assertEqual(read_all(f), rnd(64 * KiB, 44))


# ------------------------------------------------------------------- the test

# ------------------------------- directories removed while open; file handles

SYS_getdents64 = {"x86_64": 217, "aarch64": 61}.get(os.uname().machine)
libc.syscall.restype = ctypes.c_long
MAX_HANDLE_SZ = 128


def getdents64(fd):
    """getdents64(2) itself (glibc's readdir hides its ENOENT): bytes read."""
    buf = ctypes.create_string_buffer(32768)
    n = libc.syscall(SYS_getdents64, fd, buf, len(buf))
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return n


def fstat_summary(fd, before):
    """What fstat of an open directory says, against its fstat `before`."""
    st = os.fstat(fd)
    return {"same inode": st.st_ino == before.st_ino and st.st_dev == before.st_dev,
            "dir": stat.S_ISDIR(st.st_mode), "perm": oct(stat.S_IMODE(st.st_mode)),
            "uid": st.st_uid, "gid": st.st_gid, "nlink": st.st_nlink}


def removed_dir_steps(r, fd, before, what):
    """What an open descriptor of a directory removed from the tree allows."""
    r.call(what + ": fstat", fstat_summary, fd, before)
    r.call(what + ": listdir(fd)", lambda: sorted(os.listdir(fd)))
    r.call(what + ": scandir(fd)", lambda: sorted(e.name for e in os.scandir(fd)))
    r.call(what + ": getdents64", getdents64, fd)
    r.call(what + ": openat O_CREAT", lambda: os.close(
        os.open("new", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)))
    r.call(what + ": mkdirat", os.mkdir, "sub", dir_fd=fd)
    r.call(what + ": fstatat missing", lambda: os.stat("new", dir_fd=fd).st_size)
    r.call(what + ": fchmod", os.chmod, fd, 0o700)
    r.call(what + ": fstat after fchmod", fstat_summary, fd, before)


@op
def dir_removed_while_open(r):
    """rmdir of an open directory: the descriptor still answers fstat with
    the old inode (no links), lists nothing and creates nothing."""
    a = r.p("a")
    os.mkdir(a)
    fd = os.open(a, os.O_RDONLY | os.O_DIRECTORY)
    before = os.fstat(fd)
    r.call("listdir before", os.listdir, fd)
    it = os.scandir(a)  # opendir before the removal, read after it
    r.call("rmdir", os.rmdir, a)
    r.stat("stat of the name", a)
    removed_dir_steps(r, fd, before, "rmdir")
    r.call("scandir opened before", lambda: sorted(e.name for e in it))
    it.close()
    os.close(fd)
    r.call("names after close", os.listdir, r.root)
    r.call("mkdir the name again", os.mkdir, a)
    r.call("listdir new", os.listdir, a)


@op
def dir_replaced_while_open(r):
    """rename of an empty directory over an open one."""
    a, b = r.p("a"), r.p("b")
    os.mkdir(a)
    os.mkdir(b)
    fd = os.open(a, os.O_RDONLY | os.O_DIRECTORY)
    dir_fd = os.open(r.root, os.O_RDONLY | os.O_DIRECTORY)
    before = os.fstat(fd)
    b_ino = os.stat(b).st_ino
    r.call("rename b over a", os.rename, b, a)
    r.call("a is b now", lambda: os.stat(a).st_ino == b_ino)
    removed_dir_steps(r, fd, before, "replaced")
    r.call("fstat the parent", lambda: stat.S_ISDIR(os.fstat(dir_fd).st_mode))
    os.close(fd)
    os.close(dir_fd)
    r.call("names after close", lambda: sorted(os.listdir(r.root)))
    # The same, with the replaced directory's parent changing too.
    os.mkdir(r.p("p"))
    os.mkdir(r.p("p", "victim"))
    fd = os.open(r.p("p", "victim"), os.O_RDONLY | os.O_DIRECTORY)
    before = os.fstat(fd)
    r.call("rename a over p/victim", os.rename, a, r.p("p", "victim"))
    removed_dir_steps(r, fd, before, "replaced across")
    os.close(fd)
    r.call("p after close", os.listdir, r.p("p"))


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


libc.name_to_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(FileHandle),
                                   ctypes.POINTER(ctypes.c_int), ctypes.c_int]
libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.POINTER(FileHandle), ctypes.c_int]


def name_to_handle(path):
    """name_to_handle_at(2): the handle of `path` (the kernel's bytes)."""
    fh = FileHandle()
    fh.handle_bytes = MAX_HANDLE_SZ
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, os.fsencode(path), ctypes.byref(fh),
                              ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return fh


def open_by_handle(mount_path, fh, flags):
    """open_by_handle_at(2) with an fd of `mount_path` (any directory of the
    mount). Needs CAP_DAC_READ_SEARCH."""
    mount_fd = os.open(mount_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.open_by_handle_at(mount_fd, ctypes.byref(fh), flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mount_fd)


def read_by_handle(mount_path, fh):
    fd = open_by_handle(mount_path, fh, os.O_RDONLY)
    try:
        return os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)


def list_by_handle(mount_path, fh):
    fd = open_by_handle(mount_path, fh, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return sorted(os.listdir(fd)), os.fstat(fd).st_nlink
    finally:
        os.close(fd)


def drop_caches():
    """Makes the kernel forget unused dentries and inodes (FORGET on ckptfs)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


@op
def file_handles(r):
    """name_to_handle_at / open_by_handle_at, also after the kernel forgot
    the inodes; a handle of a removed inode is stale."""
    f, d, e = r.p("f"), r.p("d"), r.p("d", "e")
    write_all(f, rnd(70000, 91))
    os.makedirs(e)
    write_all(os.path.join(e, "g"), b"deep file")
    handles = {}
    for name, path in (("f", f), ("d", d), ("e", e), ("g", os.path.join(e, "g"))):
        handles[name] = name_to_handle(path)
        r.call("handle of " + name, lambda h=handles[name]: h.handle_bytes > 0)
    r.call("open f while cached", read_by_handle, r.root, handles["f"])
    for round_ in ("after drop_caches", "again"):
        drop_caches()
        r.call("read f " + round_, read_by_handle, r.root, handles["f"])
        r.call("read g " + round_, read_by_handle, r.root, handles["g"])
        r.call("list d " + round_, list_by_handle, r.root, handles["d"])
        r.call("list e " + round_, list_by_handle, r.root, handles["e"])
    fd = open_by_handle(r.root, handles["f"], os.O_WRONLY)
    r.call("write through handle", os.pwrite, fd, b"written via handle", 0)
    os.close(fd)
    r.content("f after write", f)
    r.call("directory handle as file", open_by_handle, r.root, handles["d"], os.O_WRONLY)
    # Removed: the handles go stale, whether the kernel still caches the
    # inode or not.
    os.unlink(f)
    r.call("read removed f", read_by_handle, r.root, handles["f"])
    drop_caches()
    r.call("read removed f after drop_caches", read_by_handle, r.root, handles["f"])
    os.unlink(os.path.join(e, "g"))
    os.rmdir(e)
    drop_caches()
    r.call("read removed g", read_by_handle, r.root, handles["g"])
    r.call("list removed e", list_by_handle, r.root, handles["e"])
    r.call("list d", list_by_handle, r.root, handles["d"])
    r.call("name_to_handle_at missing", name_to_handle, r.p("missing"))


# ------------------------------------------------------------- access times
# Both sides are relatime (ckptfs's default; /tmp's filesystem is mounted so
# on the test machines). Each step sets the times first, so that none depends
# on the clock's granularity. Each read drops the file's cached pages first
# and each listing follows a new entry, so that it reaches ckptfs: reads
# served from the kernel's caches do not (mount_options_test.py shows that
# difference).

def atime_moved(path, set_times, action):
    set_times()
    before = os.stat(path).st_atime_ns
    action()
    return os.stat(path).st_atime_ns != before


@op
def atime_relatime(r):
    import time
    f, d = r.p("f"), r.p("d")
    write_all(f, b"a" * 10000)
    os.mkdir(d)
    now = time.time()

    def read():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while os.read(fd, 1 << 16):
                pass
        finally:
            os.close(fd)

    def dir_times(times):
        write_all(os.path.join(d, "e%d" % len(os.listdir(d))), b"")
        os.utime(d, times)

    r("read, atime before mtime", atime_moved(f, lambda: os.utime(f, (now - 1000, now - 500)),
                                              read))
    r("read, atime after mtime and ctime",
      atime_moved(f, lambda: os.utime(f, (now + 10000, now - 1000)), read))

    def write_after_old_atime():
        os.utime(f, (now - 1000, now - 1000))
        with open(f, "ab") as fh:
            fh.write(b"b")
    r("read after a write", atime_moved(f, write_after_old_atime, read))
    r("listing, atime before mtime",
      atime_moved(d, lambda: dir_times((now - 1000, now - 500)), lambda: os.listdir(d)))
    r("listing, atime after mtime and ctime",
      atime_moved(d, lambda: dir_times((now + 10000, now - 1000)), lambda: os.listdir(d)))


@op
def times_never_run_backwards(r):
    """Each change stamps a file with a time no earlier than the changes
    before it stamped other files: create, link, write, rename, chmod,
    mkdir, symlink, truncate, in turns (the kernel stamps some of them
    itself, with its coarse clock)."""
    b = r.p("b")
    write_all(b, b"b")
    d = r.p("d")
    os.mkdir(d)
    latest, backwards = 0, []

    def stamped(what, path):
        nonlocal latest
        st = os.lstat(path)
        t = max(st.st_ctime_ns, st.st_mtime_ns)
        if t < latest and len(backwards) < 3:
            backwards.append("%s: %d ns before the change before it" % (what, latest - t))
        latest = max(latest, t)

    for i in range(40):
        a = r.p("a%d" % i)
        os.close(os.open(a, os.O_CREAT | os.O_WRONLY, 0o644))
        stamped("create", a)
        os.link(b, r.p("c%d" % i))
        stamped("link", b)
        with open(b, "r+b") as f:
            f.write(b"w")
        stamped("write", b)
        os.rename(a, r.p("a%d.renamed" % i))
        stamped("rename", r.p("a%d.renamed" % i))
        os.chmod(b, 0o600 | (i & 1) * 0o40)
        stamped("chmod", b)
        os.mkdir(os.path.join(d, str(i)))
        stamped("mkdir", os.path.join(d, str(i)))
        os.symlink("x", os.path.join(d, "s%d" % i))
        stamped("symlink", os.path.join(d, "s%d" % i))
        os.truncate(b, i + 2)  # a new size: the same one stamps nothing on FUSE
        stamped("truncate", b)
    r("times that ran backwards", backwards)


class PosixTest(lib.MountAndPlainTestCase):
    def run_both(self, fn):
        results = {}
        for where, root in (("plain", self.plain), ("ckptfs", self.m.mnt)):
            d = os.path.join(root, fn.__name__)
            os.mkdir(d)
            rec = Rec(d)
            try:
                fn(rec)
            except Exception as e:  # an unexpected failure is a result too
                if where == "plain":
                    raise
                rec.obs.append(("unexpected exception", "%s: %s" % (type(e).__name__, e)))
            results[where] = rec.obs
        a, b = results["plain"], results["ckptfs"]
        problems = []
        for i in range(max(len(a), len(b))):
            x = a[i] if i < len(a) else ("<missing>", None)
            y = b[i] if i < len(b) else ("<missing>", None)
            if x != y:
                problems.append("step %d %r:\n    plain : %r\n    ckptfs: %r" %
                                (i, x[0] if x[0] != "<missing>" else y[0], x[1], y[1]))
        if problems:
            self.fail("%s differs from a plain directory in %d step(s):\n%s" %
                      (fn.__name__, len(problems), "\n".join(problems)))

    def test_control_files_hidden_but_reachable(self):
        self.assertNotIn(".ckptfs", os.listdir(self.m.mnt))
        stats = self.m.stats()
        self.assertIsInstance(stats, dict)
        with open(self.m.path(".ckptfs", "config")) as f:
            self.assertIn("coalesce_gap=", f.read())

    def test_listdir_large_directory(self):
        """100,000 entries (a fifth on PostgreSQL or under a sanitizer):
        listed once each, the same names as the plain directory's."""
        names = ["entry_%06d_%s" % (i, "x" * (i % 40))
                 for i in range(harness.scaled_count(100_000))]
        listings = {}
        for where, root in (("plain", self.plain), ("ckptfs", self.m.mnt)):
            d = os.path.join(root, "big_dir")
            os.mkdir(d)
            flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
            for n in names:
                os.close(os.open(os.path.join(d, n), flags, 0o644))
            listings[where] = os.listdir(d)
            with os.scandir(d) as it:
                self.assertEqual(sum(1 for _ in it), len(names), where)
        got = listings["ckptfs"]
        self.assertEqual(len(got), len(set(got)), "duplicate names in the listing")
        self.assertEqual(sorted(got), sorted(listings["plain"]))
        self.assertEqual(sorted(got), sorted(names))

    def test_zz_remount_keeps_file_handles(self):
        """ckptfs only (the plain directory's filesystem is not remounted
        here): a file handle taken before an unmount opens the same file or
        directory after the next mount; one of a file removed is stale."""
        d = self.m.path("handles_probe")
        os.makedirs(os.path.join(d, "sub"))
        data = rnd(123457, 93)
        write_all(os.path.join(d, "sub", "f"), data)
        write_all(os.path.join(d, "gone"), b"removed before the unmount")
        handles = {name: name_to_handle(os.path.join(d, name))
                   for name in ("sub/f", "sub", "gone", "")}
        os.unlink(os.path.join(d, "gone"))
        self.m.remount()
        self.assertEqual(read_by_handle(self.m.mnt, handles["sub/f"]), data)
        self.assertEqual(list_by_handle(self.m.mnt, handles["sub"]), (["f"], 2))
        self.assertEqual(list_by_handle(self.m.mnt, handles[""]), (["sub"], 3))
        with self.assertRaises(OSError) as cm:
            read_by_handle(self.m.mnt, handles["gone"])
        self.assertEqual(cm.exception.errno, errno.ESTALE)

    def test_zz_remount_preserves_everything(self):
        """Runs last: everything the table left on the mount survives remount."""
        def snapshot(root):
            out = {}
            for dirpath, dirs, files in os.walk(root):
                for n in dirs + files:
                    p = os.path.join(dirpath, n)
                    rel = os.path.relpath(p, root)
                    if rel.startswith("big_dir/"):
                        continue  # names only, compared below
                    st = os.lstat(p)
                    row = [stat.filemode(st.st_mode), st.st_uid, st.st_gid, st.st_nlink,
                           st.st_mtime_ns]
                    if stat.S_ISREG(st.st_mode):
                        row += [st.st_size, lib.file_sha256(p)]
                    elif stat.S_ISLNK(st.st_mode):
                        row.append(os.readlink(p))
                    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                        row.append(sorted((k, os.getxattr(p, k)) for k in os.listxattr(p)))
                    out[rel] = row
            big = os.path.join(root, "big_dir")
            out["<big_dir names>"] = (sorted(os.listdir(big)) if os.path.isdir(big) else None)
            return out

        os.makedirs(self.m.path("remount_probe", "a"), exist_ok=True)
        write_all(self.m.path("remount_probe", "a", "f"), rnd(2 * MiB + 1, 90))
        before = snapshot(self.m.mnt)
        self.m.remount()
        after = snapshot(self.m.mnt)
        self.assertEqual(sorted(before), sorted(after))
        diffs = ["%s: %r != %r" % (k, before[k], after[k]) for k in before
                 if before[k] != after[k]]
        self.assertFalse(diffs, "changed by remount:\n" + "\n".join(diffs[:30]))


def _add_table_tests():
    for fn in OPS:
        def t(self, fn=fn):
            self.run_both(fn)
        t.__doc__ = fn.__doc__
        setattr(PosixTest, "test_" + fn.__name__, t)


_add_table_tests()


# ------------------------------------------------------------- not root

NOBODY = 65534
NOBODY_CHILD = textwrap.dedent(r"""
    import errno, json, os, sys
    root = sys.argv[1]
    out = []
    def step(label, fn, *a, **kw):
        try:
            v = fn(*a, **kw)
            if isinstance(v, bytes):
                v = v.decode("latin-1")
            out.append([label, "ok", v])
        except OSError as e:
            out.append([label, errno.errorcode[e.errno]])
    def read(p):
        with open(p, "rb") as f:
            return f.read()
    def create(p):
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        os.write(fd, b"by nobody")
        os.close(fd)
    L = os.path.join(root, "locked")
    O = os.path.join(root, "open")
    step("whoami", lambda: [os.getuid(), os.geteuid(), os.getgid()])
    step("read 0644 file in 0755 root dir", read, os.path.join(L, "readable"))
    step("listdir 0755 root dir", lambda: sorted(os.listdir(L)))
    step("create in 0755 root dir", create, os.path.join(L, "new"))
    step("mkdir in 0755 root dir", os.mkdir, os.path.join(L, "sub"))
    step("symlink in 0755 root dir", os.symlink, "x", os.path.join(L, "sym"))
    step("unlink in 0755 root dir", os.unlink, os.path.join(L, "readable"))
    step("rename in 0755 root dir", os.rename, os.path.join(L, "readable"), os.path.join(L, "r2"))
    step("open root's 0644 file for write", os.open, os.path.join(L, "readable"), os.O_WRONLY)
    step("truncate root's 0644 file", os.truncate, os.path.join(L, "readable"), 0)
    step("chmod root's file", os.chmod, os.path.join(L, "readable"), 0o777)
    step("chown root's file", os.chown, os.path.join(L, "readable"), 65534, 65534)
    step("utime(now) root's file", os.utime, os.path.join(L, "readable"))
    step("utime(explicit) root's file", os.utime, os.path.join(L, "readable"), ns=(1, 1))
    step("setxattr root's file", os.setxattr, os.path.join(L, "readable"), "user.x", b"1")
    step("read 0600 root file", read, os.path.join(L, "secret"))
    step("listdir 0700 root dir", os.listdir, os.path.join(L, "private"))
    step("stat in 0700 root dir", lambda: os.stat(os.path.join(L, "private", "f")).st_size)
    step("create in 0777 dir", create, os.path.join(O, "mine"))
    step("read own file", read, os.path.join(O, "mine"))
    step("chmod own file", os.chmod, os.path.join(O, "mine"), 0o600)
    step("unlink root's file in sticky 1777 dir", os.unlink, os.path.join(O, "roots"))
    print(json.dumps(out))
""")


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


class NonRootTest(unittest.TestCase):
    """uid 65534 meets the same permission checks on the mount (allow_other)
    as on a plain directory."""

    maxDiff = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to switch to uid 65534")
        cls.tmp = harness.make_tmpdir()
        os.chmod(cls.tmp, 0o755)  # nobody must be able to reach both roots
        cls.plain = os.path.join(cls.tmp, "plain")
        os.mkdir(cls.plain)
        cls.m = harness.Mount(os.path.join(cls.tmp, "store"), os.path.join(cls.tmp, "mnt"),
                              ["allow_other"])
        cls.m.mount()

    @classmethod
    def tearDownClass(cls):
        cls.m.unmount()

    def prepare(self, root):
        os.chmod(root, 0o755)
        locked, opened = os.path.join(root, "locked"), os.path.join(root, "open")
        os.mkdir(locked, 0o755)
        os.chmod(locked, 0o755)
        write_all(os.path.join(locked, "readable"), b"world readable")
        os.chmod(os.path.join(locked, "readable"), 0o644)
        write_all(os.path.join(locked, "secret"), b"secret")
        os.chmod(os.path.join(locked, "secret"), 0o600)
        os.mkdir(os.path.join(locked, "private"))
        os.chmod(os.path.join(locked, "private"), 0o700)
        write_all(os.path.join(locked, "private", "f"), b"f")
        os.mkdir(opened)
        os.chmod(opened, 0o1777)
        write_all(os.path.join(opened, "roots"), b"root's")

    def run_as_nobody(self, root):
        p = subprocess.run([PY, "-c", NOBODY_CHILD, root], capture_output=True, text=True,
                           preexec_fn=as_nobody, cwd="/", timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        steps = json.loads(p.stdout)
        st = os.stat(os.path.join(root, "open", "mine"))
        steps.append(["owner of nobody's file", [st.st_uid, st.st_gid,
                                                 oct(stat.S_IMODE(st.st_mode))]])
        steps.append(["locked dir unchanged", sorted(os.listdir(os.path.join(root, "locked")))])
        return steps

    def test_permissions_match_plain_dir(self):
        results = {}
        for where, root in (("plain", self.plain), ("ckptfs", self.m.mnt)):
            self.prepare(root)
            results[where] = self.run_as_nobody(root)
        plain, mnt = results["plain"], results["ckptfs"]
        # The plain directory really denies: the test is about denials.
        self.assertIn(["create in 0755 root dir", "EACCES"], plain)
        self.assertIn(["read 0644 file in 0755 root dir", "ok", "world readable"], plain)
        diffs = ["%r\n    plain : %r\n    ckptfs: %r" % (a[0], a[1:], b[1:])
                 for a, b in zip(plain, mnt) if a != b]
        self.assertEqual(len(plain), len(mnt))
        self.assertFalse(diffs, "uid 65534 sees different results:\n" + "\n".join(diffs))

    def test_without_allow_other_nobody_is_refused(self):
        tmp = harness.make_tmpdir()
        os.chmod(tmp, 0o755)
        m = harness.Mount(os.path.join(tmp, "store"), os.path.join(tmp, "mnt"))
        m.mount()
        try:
            os.chmod(m.mnt, 0o755)
            p = subprocess.run([PY, "-c", "import os,sys\ntry:\n os.listdir(sys.argv[1]);"
                                "print('ok')\nexcept OSError as e:\n print(e.errno)", m.mnt],
                               capture_output=True, text=True, preexec_fn=as_nobody, cwd="/",
                               timeout=60)
            self.assertEqual(p.stdout.strip(), str(errno.EACCES), p.stderr)
        finally:
            m.unmount()


if __name__ == "__main__":
    harness.require_fuse(root=True)
    harness.set_deadline(280)
    os.umask(0o022)
    unittest.main(verbosity=2)
