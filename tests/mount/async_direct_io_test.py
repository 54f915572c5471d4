#!/usr/bin/python3
"""Asynchronous direct writes and readers through the page cache.

A writer rewrites a 640 KiB file with asynchronous O_DIRECT writes (Linux
AIO: io_setup, io_submit, io_getevents, what libaio wraps), each write a new
generation of the whole file in 64 KiB pieces, while four processes read the
file in a loop through the page cache. After every completed generation the
writer reads the file back through the page cache: every byte must be of
that generation (a read that starts after a write completed never returns
older bytes). The same runs against a plain directory, then on the mount
for CKPTFS_ASYNC_DIO_SECONDS (default 8).

Needs CKPTFS_BIN and root (the mount); x86_64 or aarch64 (system call
numbers).
"""

import array
import ctypes
import mmap
import multiprocessing
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

KiB = 1 << 10
FILE_BYTES = 640 * KiB
PIECE = 64 * KiB
READERS = 4
SECONDS = float(os.environ.get("CKPTFS_ASYNC_DIO_SECONDS", "8"))

SYSCALLS = {"x86_64": (206, 209, 208, 207), "aarch64": (0, 2, 4, 1)}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
IOCB_CMD_PWRITE = 1


class IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class Iocb(ctypes.Structure):
    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32),
                ("aio_rw_flags", ctypes.c_int32), ("aio_lio_opcode", ctypes.c_uint16),
                ("aio_reqprio", ctypes.c_int16), ("aio_fildes", ctypes.c_uint32),
                ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64),
                ("aio_flags", ctypes.c_uint32), ("aio_resfd", ctypes.c_uint32)]


def sys_call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


class Aio:
    """One Linux AIO context."""

    def __init__(self, depth):
        self.setup, self.submit, self.getevents, self.destroy = SYSCALLS[os.uname().machine]
        self.ctx = ctypes.c_ulong(0)
        sys_call(self.setup, ctypes.c_long(depth), ctypes.byref(self.ctx))

    def pwrite_all(self, fd, buf, pieces):
        """Submits one write per (offset, length) of `buf` at once, and waits
        for all of them. Returns the results (bytes written or -errno)."""
        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        iocbs = (Iocb * len(pieces))()
        ptrs = (ctypes.POINTER(Iocb) * len(pieces))()
        for i, (off, n) in enumerate(pieces):
            iocbs[i].aio_data = i
            iocbs[i].aio_lio_opcode = IOCB_CMD_PWRITE
            iocbs[i].aio_fildes = fd
            iocbs[i].aio_buf = base + off
            iocbs[i].aio_nbytes = n
            iocbs[i].aio_offset = off
            ptrs[i] = ctypes.pointer(iocbs[i])
        submitted = sys_call(self.submit, self.ctx, ctypes.c_long(len(pieces)), ptrs)
        if submitted != len(pieces):
            raise OSError("io_submit took %d of %d" % (submitted, len(pieces)))
        events = (IoEvent * len(pieces))()
        got = 0
        results = [None] * len(pieces)
        while got < len(pieces):
            n = sys_call(self.getevents, self.ctx, ctypes.c_long(len(pieces) - got),
                         ctypes.c_long(len(pieces) - got), events, None)
            for e in events[:n]:
                results[e.data] = e.res
            got += n
        return results

    def close(self):
        sys_call(self.destroy, self.ctx)


WORDS = array.array("I", [0, 0]) * (FILE_BYTES // 8)
WORDS[1::2] = array.array("I", range(0, FILE_BYTES, 8))


def generation(g):
    """The file's bytes at generation g: 8-byte words (g, offset), native order."""
    words = array.array("I", WORDS)
    words[0::2] = array.array("I", [g]) * (FILE_BYTES // 8)
    return words.tobytes()


def read_loop(path, stop):
    fd = os.open(path, os.O_RDONLY)
    try:
        while not stop.is_set():
            os.pread(fd, FILE_BYTES, 0)
    finally:
        os.close(fd)


def first_stale(data, g):
    """(offset, generation found) of the first word not of generation g."""
    if data == generation(g):
        return None
    for off in range(0, FILE_BYTES, 8):
        found, where = struct.unpack_from("=II", data, off)
        if found != g or where != off:
            return off, found
    return None


def rewrite_while_read(path, seconds):
    """Runs the writer and readers on `path` for `seconds`. Returns
    (generations written, the first stale read as a message or None)."""
    with open(path, "wb") as f:
        f.write(generation(0))
    stop = multiprocessing.Event()
    readers = [multiprocessing.Process(target=read_loop, args=(path, stop))
               for _ in range(READERS)]
    for p in readers:
        p.start()
    buf = mmap.mmap(-1, FILE_BYTES)  # page-aligned, as O_DIRECT needs
    aio = Aio(FILE_BYTES // PIECE)
    wfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    rfd = os.open(path, os.O_RDONLY)
    pieces = [(off, PIECE) for off in range(0, FILE_BYTES, PIECE)]
    g, stale = 0, None
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and stale is None:
            g += 1
            buf[:] = generation(g)
            results = aio.pwrite_all(wfd, buf, pieces)
            if results != [PIECE] * len(pieces):
                raise AssertionError("generation %d: write results %r" % (g, results))
            data = os.pread(rfd, FILE_BYTES, 0)
            bad = first_stale(data, g)
            if bad is not None:
                stale = ("generation %d: the read after its writes completed found "
                         "generation %d at offset %d" % (g, bad[1], bad[0]))
    finally:
        stop.set()
        for p in readers:
            p.join()
        os.close(wfd)
        os.close(rfd)
        aio.close()
        buf.close()
    return g, stale


@unittest.skipUnless(os.uname().machine in SYSCALLS, "no AIO system call numbers for this machine")
class AsyncDirectWritesTest(lib.MountAndPlainTestCase):
    def test_reads_after_completed_async_direct_writes_are_fresh(self):
        n, stale = rewrite_while_read(os.path.join(self.plain, "f"), min(SECONDS, 3))
        self.assertIsNone(stale, "plain directory")
        harness.log("plain directory: %d generations" % n)
        n, stale = rewrite_while_read(self.m.path("f"), SECONDS)
        self.assertIsNone(stale)
        harness.log("ckptfs: %d generations, every read fresh" % n)
        self.assertGreater(n, 10)


if __name__ == "__main__":
    harness.require_fuse(root=True)
    unittest.main()
