"""Helpers for the Python mount tests: a test case with a mounted store beside
a plain directory, and small file and tree utilities. Mounting, unmounting,
skipping and cleaning up are ckptfs_harness.py's.

    import ckptfs_harness as harness
    import ckptfs_testlib as lib

    class MyTest(lib.MountAndPlainTestCase):
        def test_x(self):
            lib.write_file(self.m.path("f"), b"x")
            lib.write_file(os.path.join(self.plain, "f"), b"x")
            self.assertEqual(lib.tree_snapshot(self.m.mnt), lib.tree_snapshot(self.plain))
"""

import ctypes
import errno
import hashlib
import mmap
import os
import stat
import unittest

import ckptfs_harness as harness


class MountAndPlainTestCase(unittest.TestCase):
    """A test class with a fresh store mounted at cls.m (a harness.Mount) and a
    plain directory cls.plain beside it, under one temporary directory cls.tmp.
    The mount gets the options in cls.mount_options."""
    maxDiff = None
    mount_options = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.make_tmpdir()
        cls.plain = os.path.join(cls.tmp, "plain")
        os.mkdir(cls.plain)
        cls.m = harness.Mount(os.path.join(cls.tmp, "store"), os.path.join(cls.tmp, "mnt"),
                              list(cls.mount_options))
        cls.m.mount()

    @classmethod
    def tearDownClass(cls):
        cls.m.unmount()


# ---- Small utilities shared by the tests. ----

def sha256(data):
    return hashlib.sha256(data).hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def segment_bytes(store):
    """Bytes of a store's segment files (what its data takes on disk)."""
    d = os.path.join(store, "segments")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))


def resident_pages(path, offset, length):
    """How many of the whole pages in [offset, offset+length) of `path` the
    page cache holds (mincore)."""
    page = os.sysconf("SC_PAGE_SIZE")
    first, end = -(-offset // page), (offset + length) // page
    if end <= first:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = (end - first) * page
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, first * page)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap " + path)
        try:
            vec = ctypes.create_string_buffer(end - first)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore " + path)
            return sum(b & 1 for b in vec.raw)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data, fsync=False):
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def tree_snapshot(root, content=True):
    """{relative path: (kind, size, sha256 or link target)} for everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_size, file_sha256(p) if content else None)
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out


def diff_snapshots(a, b, limit=20):
    """Human-readable differences between two tree_snapshot results."""
    lines = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            lines.append("%s: %r != %r" % (k, a.get(k), b.get(k)))
            if len(lines) >= limit:
                lines.append("...")
                break
    return "\n".join(lines)


def errno_name(e):
    return errno.errorcode.get(e, str(e))
