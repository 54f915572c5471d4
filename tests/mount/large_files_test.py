#!/usr/bin/python3
"""Large files: their data files, kernel passthrough and its fallbacks.

With data_file_min=4M a file that grows past 4 MiB at its end moves to a data
file of its own (docs/FORMAT.md, "data/"). On a mount with `passthrough`,
read-only opens of a file its data file holds whole are passed through by
the kernel: no READ reaches the daemon, and read(2) and mmap return the data
file's bytes. Checked here, always against the same steps in a plain
directory, byte for byte:
  - sequential writes, an overwrite in the middle, truncation down and up,
    appends and sparse writes, read back by read(2) and through mmap, with
    the page cache dropped;
  - passthrough in use exactly while the file is whole in its data file
    (the stats file counts the opens, and cold reads send no READ);
  - a writer, or a truncation, while a passthrough reader is open fails with
    ETXTBSY, and succeeds once the reader is closed;
  - torch.save / torch.load and np.save / np.load(mmap_mode="r");
  - on a default mount (no passthrough) the daemon writes data files, and
    reads them in large reads, past the page cache (the kernel caches the
    file's pages itself; `no_direct_io`: through it), and all of
    the round trips above again; with passthrough the pages it writes stay
    cached, since reads are served from them;
  - a mount by an unprivileged user (no CAP_SYS_ADMIN) falls back to the
    daemon's reads, says why in the stats file and returns the same bytes;
  - with verify_reads passthrough is off, and a flipped byte in a data file
    reads as EIO;
  - with passthrough_writes all of the above again, and: a new file's writes
    reach no daemon, its size shows while it is open, and its checksums
    (adopted at close and fsync) pass `ckptfs verify`; small new files move
    into segments at their last close; readers and writers of a new file
    share its data file through rewrites and truncation; an open with
    O_TRUNC of an existing file (torch.save to the same path) truncates in
    the OPEN and is then written directly as a new file is, and
    O_RDONLY|O_TRUNC and the times it sets are as in a plain directory.
Needs root (drop_caches, setuid to 65534) and CKPTFS_BIN.
"""

import errno
import json
import mmap
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

MiB = 1 << 20
THRESHOLD = 4 * MiB
NOBODY = 65534
BIN = os.environ.get("CKPTFS_BIN")


def passthrough_possible():
    """Whether this kernel and user can pass through (`ckptfs --version`)."""
    out = subprocess.run([harness.ckptfs_bin(), "--version"], capture_output=True,
                         text=True).stdout
    return any(l.startswith("passthrough yes") for l in out.splitlines())


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def mmap_all(path):
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            return m[:]


def cached_pages(path):
    """How many pages of `path` the page cache holds (util-linux fincore)."""
    out = subprocess.run(["fincore", "--noheadings", "--raw", "--output", "PAGES", path],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def write_medium_file(test, name):
    """Writes a 3 MiB file (below data_file_min: its bytes go to segments)
    through test.m with fsync; returns how many pages of its records the
    segment files' cache holds then, and how many pages it has, and checks
    its bytes cold."""
    data = os.urandom(3 * MiB + 100)
    lib.write_file(test.m.path(name), data, fsync=True)
    info = json.loads(subprocess.run([harness.ckptfs_bin(), "info", "--json", test.m.path(name)],
                                     capture_output=True, text=True, check=True).stdout)[0]
    records = [e for e in info["extents"] if e.get("segment")]
    test.assertEqual(sum(e["length"] for e in records), len(data))  # all in segments
    cached = sum(lib.resident_pages(e["segment"], e["record_offset"], e["stored_len"])
                 for e in records)
    drop_caches()
    test.assertTrue(read_all(test.m.path(name)) == data)
    return cached, len(data) // 4096


def offers_direct_io(path):
    """Whether the filesystem of directory `path` takes O_DIRECT opens."""
    probe = os.path.join(path, ".direct-io-probe")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def pattern(seed, size):
    block = bytes((seed * 131 + i * 7) & 0xFF for i in range(4096))
    return (block * (size // 4096 + 1))[:size]


# Each step acts on a file under `root` and returns nothing; the tests apply
# the same steps to the mount and to a plain directory.
def sequential(root):
    with open(os.path.join(root, "seq"), "wb") as f:
        for i in range(12):
            f.write(pattern(i, MiB))


def overwrite_middle(root):
    p = os.path.join(root, "mid")
    with open(p, "wb") as f:
        f.write(pattern(1, 10 * MiB + 123))
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"middle" * 1000, 5 * MiB - 17)
    finally:
        os.close(fd)


def truncate_down_up_append(root):
    p = os.path.join(root, "cut")
    with open(p, "wb") as f:
        f.write(pattern(2, 9 * MiB))
    os.truncate(p, 5 * MiB + 5)
    os.truncate(p, 7 * MiB)
    with open(p, "ab") as f:
        f.write(pattern(3, 3 * MiB + 1))


def sparse(root):
    p = os.path.join(root, "sparse")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.pwrite(fd, pattern(4, MiB), 0)
        os.pwrite(fd, pattern(5, 2 * MiB), 6 * MiB)   # past the end: a hole
        os.pwrite(fd, pattern(6, MiB), 12 * MiB)
    finally:
        os.close(fd)


STEPS = [("seq", sequential), ("mid", overwrite_middle), ("cut", truncate_down_up_append),
         ("sparse", sparse)]


def check_round_trips(test):
    """Runs STEPS on test.m and test.plain and compares, cold, by read(2)
    and through mmap."""
    for name, step in STEPS:
        with test.subTest(step=name):
            step(test.m.mnt)
            step(test.plain)
            drop_caches()
            want = read_all(os.path.join(test.plain, name))
            got = read_all(test.m.path(name))
            test.assertEqual(len(got), len(want))
            test.assertTrue(got == want, "%s: read(2) differs" % name)
            drop_caches()
            test.assertTrue(mmap_all(test.m.path(name)) == want, "%s: mmap differs" % name)
            test.assertEqual(os.stat(test.m.path(name)).st_size, len(want))


class RootMountTestCase(lib.MountAndPlainTestCase):
    """A mount, by root (passthrough and drop_caches need it), and a plain
    directory."""

    @classmethod
    def setUpClass(cls):
        harness.require_fuse(root=True)
        super().setUpClass()


class DaemonWritesTest(RootMountTestCase):
    """The default mount: no passthrough, the kernel's write-back cache, and
    every byte written and read through the daemon."""
    mount_options = ("data_file_min=4M",)

    def test_round_trips_read_and_mmap_as_in_a_plain_directory(self):
        check_round_trips(self)

    def test_data_files_are_written_and_read_past_the_page_cache(self):
        if not offers_direct_io(self.m.store):
            self.skipTest("no direct I/O on the store's filesystem")
        # Its first 4 MiB go to segments and are copied into the data file
        # when it moves there; the rest goes there in the kernel's writeback.
        data = os.urandom(16 * MiB + 5)
        before = self.m.stats()["engine"]
        lib.write_file(self.m.path("big"), data, fsync=True)
        data_file = os.path.join(self.m.store, "data",
                                 "%08d.dat" % os.stat(self.m.path("big")).st_ino)
        self.assertEqual(os.path.getsize(data_file), len(data))
        # No byte written to the data file twice (the stats file counts;
        # a write-back out of order may leave some in segments).
        after = self.m.stats()["engine"]
        written = after["data_file_write_bytes"] - before["data_file_write_bytes"]
        self.assertLessEqual(written, len(data))
        self.assertGreater(written, len(data) // 2)
        # Only the page of the last 5 bytes went through the page cache.
        self.assertLessEqual(cached_pages(data_file), 1)
        # Large reads take its blocks past the page cache too (the kernel
        # caches the file's pages), each block read once.
        drop_caches()
        before = after
        self.assertTrue(read_all(self.m.path("big")) == data)
        after = self.m.stats()["engine"]
        # Whole blocks (a block again only where the kernel dropped the
        # pages of its reply before the reader got to them).
        read = after["data_file_read_bytes"] - before["data_file_read_bytes"]
        self.assertGreaterEqual(read, written)
        self.assertLessEqual(read, 2 * len(data))
        self.assertGreaterEqual(after["data_file_reads"] - before["data_file_reads"],
                                written // MiB)
        self.assertLessEqual(cached_pages(data_file), 1)
        drop_caches()
        self.assertTrue(mmap_all(self.m.path("big")) == data)


    def test_each_data_file_byte_is_read_once_whatever_the_request_sizes(self):
        # Readers whose requests do not line up with the data file's 1 MiB
        # checksum blocks: each block still comes from the disk once per
        # cold pass, and every byte read is the byte written.
        data = os.urandom(24 * MiB + 12345)
        p = self.m.path("odd")
        lib.write_file(p, data, fsync=True)

        def odd_reads(size):
            def read():
                out = bytearray()
                with open(p, "rb", buffering=0) as f:
                    while True:
                        b = f.read(size)
                        if not b:
                            return bytes(out)
                        out += b
            return read

        def dd():
            return subprocess.run(["dd", "if=" + p, "bs=1000003", "status=none"],
                                  capture_output=True, check=True).stdout

        def numpy_load():
            import numpy
            return numpy.fromfile(p, dtype=numpy.uint8).tobytes()

        readers = [("read 777777", odd_reads(777777)), ("read 4097", odd_reads(4097)),
                   ("dd bs=1000003", dd), ("mmap", lambda: mmap_all(p)),
                   ("numpy.fromfile", numpy_load)]
        for name, reader in readers:
            with self.subTest(reader=name):
                drop_caches()
                before = self.m.stats()["engine"]["data_file_read_bytes"]
                self.assertTrue(reader() == data, "%s: bytes differ" % name)
                read = self.m.stats()["engine"]["data_file_read_bytes"] - before
                self.assertLessEqual(read, len(data), name)


def storage_read_bytes(pid):
    """Bytes the storage read for process `pid` (the page cache's answers
    are not counted)."""
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise AssertionError("no read_bytes in /proc/%d/io" % pid)


class HalfReadBlocksTest(RootMountTestCase):
    """The default mount (direct_io): a reader that takes the first part of
    every block of a data file, then the rest of each, as torch.load does
    when it loads tensors in another order than they lie. More blocks are
    left half read than the daemon keeps in memory: their pages wait in the
    data file's page cache, which hands each block over once."""
    mount_options = ("data_file_min=4M",)

    def test_each_byte_comes_from_the_storage_once(self):
        if not offers_direct_io(self.m.store):
            self.skipTest("no direct I/O on the store's filesystem")
        blocks = 40  # 40 MiB half read at once; the daemon keeps 16 MiB
        data = os.urandom(blocks * MiB)
        p = self.m.path("jumps")
        lib.write_file(p, data, fsync=True)
        data_file = os.path.join(self.m.store, "data", "%08d.dat" % os.stat(p).st_ino)
        cut = 600000  # not on a page or block boundary

        def half_then_rest():
            """The storage's bytes read for one load of the file."""
            drop_caches()
            before = storage_read_bytes(self.m.pid)
            got = bytearray(len(data))
            fd = os.open(p, os.O_RDONLY)
            try:
                # No readahead: the kernel asks for exactly these pieces.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for start, length in ((0, cut), (cut, MiB - cut)):
                    for k in range(blocks):
                        got[k * MiB + start:k * MiB + start + length] = os.pread(
                            fd, length, k * MiB + start)
            finally:
                os.close(fd)
            self.assertTrue(bytes(got) == data)
            return storage_read_bytes(self.m.pid) - before

        # The pages waiting in the cache are the kernel's to reclaim: a
        # machine short of memory (the host taking it back, other tests)
        # may drop some, and their blocks are then read again. A daemon
        # that reads twice does so on every load; one load of three that
        # reads each byte once shows it does not.
        loads = []
        for _ in range(3):
            loads.append(half_then_rest())
            self.assertGreaterEqual(loads[-1], len(data))
            if loads[-1] <= len(data) + MiB:  # and a little of the index
                break
        self.assertLessEqual(min(loads), len(data) + MiB, loads)
        # Each block's pages went once it was taken whole: cached once.
        self.assertEqual(cached_pages(data_file), 0)


class MediumFilesTest(RootMountTestCase):
    """The default mount, a fresh store: files below data_file_min."""

    def test_medium_files_are_written_to_segments_past_the_page_cache(self):
        if not offers_direct_io(self.m.store):
            self.skipTest("no direct I/O on the store's filesystem")
        # The kernel caches the file's pages; once synced, the segment
        # file's cache keeps no second copy.
        for i in range(3):
            cached, pages = write_medium_file(self, "medium%d" % i)
            self.assertLessEqual(cached, pages // 10)


class NoDirectIoTest(RootMountTestCase):
    """no_direct_io: the daemon's writes of data files go through the page
    cache."""
    mount_options = ("data_file_min=4M", "no_direct_io")

    def test_data_files_are_written_through_the_page_cache(self):
        data = os.urandom(16 * MiB + 5)
        before = self.m.stats()["engine"]
        lib.write_file(self.m.path("big"), data, fsync=True)
        data_file = os.path.join(self.m.store, "data",
                                 "%08d.dat" % os.stat(self.m.path("big")).st_ino)
        self.assertEqual(os.path.getsize(data_file), len(data))
        # Every page the daemon wrote there (the bytes copied from segments
        # and those of the writeback; a write-back out of order may leave
        # some in segments) stays cached.
        after = self.m.stats()["engine"]
        written = after["data_file_write_bytes"] - before["data_file_write_bytes"]
        self.assertGreater(written, len(data) // 2)
        self.assertGreaterEqual(cached_pages(data_file), written // 4096)
        drop_caches()
        self.assertTrue(read_all(self.m.path("big")) == data)

    def test_medium_files_are_written_to_segments_through_the_page_cache(self):
        cached, pages = write_medium_file(self, "medium")
        self.assertGreaterEqual(cached, pages - 8)


class PassthroughTest(RootMountTestCase):
    mount_options = ("passthrough", "data_file_min=4M")

    def pt(self):
        return self.m.stats()["fs"]["passthrough"]

    def open_passthrough_reader(self, path):
        """A read-only fd of `path` that the kernel passes through. The
        kernel sends a writer's RELEASE after its close(2) has returned, and
        until the daemon has it a new reader is the daemon's (open_files.h):
        so a reader opened at once after a write may be, and is retried."""
        for _ in range(100):
            before = self.pt()["passthrough_opens"]
            fd = os.open(path, os.O_RDONLY)
            if self.pt()["passthrough_opens"] > before:
                return fd
            os.close(fd)
            time.sleep(0.02)
        self.fail("%s: no read-only open was passed through" % path)

    def engine_reads(self):
        """Reads of file data the daemon served (reads of the stats file
        are not among them)."""
        return self.m.stats()["engine"]["reads"]

    def test_stats_say_whether_passthrough_is_in_use(self):
        used = self.pt()["in_use"]
        if passthrough_possible():
            self.assertEqual(used, "yes")
        else:
            self.assertTrue(used.startswith("no: "), used)

    def test_round_trips_read_and_mmap_as_in_a_plain_directory(self):
        check_round_trips(self)

    def test_data_files_written_through_the_daemon_stay_cached(self):
        # An open for reading and writing is the daemon's, with or without
        # passthrough_writes: the reads that come after are passed through
        # to the data file and find its pages cached.
        data = os.urandom(16 * MiB + 5)
        fd = os.open(self.m.path("rw"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        data_file = os.path.join(self.m.store, "data",
                                 "%08d.dat" % os.stat(self.m.path("rw")).st_ino)
        self.assertEqual(os.path.getsize(data_file), len(data))
        self.assertGreaterEqual(cached_pages(data_file), 16 * MiB // 4096)
        self.assertTrue(read_all(self.m.path("rw")) == data)

    def test_cold_reads_of_a_whole_data_file_send_no_read(self):
        if not passthrough_possible():
            self.skipTest("no passthrough here")
        data = os.urandom(20 * MiB + 3)
        lib.write_file(self.m.path("whole"), data)
        drop_caches()
        before_pt = self.pt()["passthrough_opens"]
        before_reads = self.engine_reads()
        self.assertTrue(read_all(self.m.path("whole")) == data)
        self.assertTrue(mmap_all(self.m.path("whole")) == data)
        self.assertEqual(self.pt()["passthrough_opens"], before_pt + 2)
        self.assertEqual(self.engine_reads(), before_reads)
        # Small files and files overwritten in the middle are the daemon's.
        lib.write_file(self.m.path("small"), b"s" * 1000)
        fd = os.open(self.m.path("whole"), os.O_WRONLY)
        os.pwrite(fd, b"new", 10 * MiB)
        os.close(fd)
        data = data[:10 * MiB] + b"new" + data[10 * MiB + 3:]
        drop_caches()
        before_pt = self.pt()["passthrough_opens"]
        before_reads = self.engine_reads()
        self.assertTrue(read_all(self.m.path("whole")) == data)
        self.assertEqual(read_all(self.m.path("small")), b"s" * 1000)
        self.assertEqual(self.pt()["passthrough_opens"], before_pt)
        self.assertGreater(self.engine_reads(), before_reads)

    def test_writer_while_a_passthrough_reader_is_open_is_busy(self):
        if not passthrough_possible():
            self.skipTest("no passthrough here")
        p = self.m.path("busy")
        data = os.urandom(6 * MiB)
        lib.write_file(p, data)
        reader = self.open_passthrough_reader(p)
        try:
            self.assertEqual(os.pread(reader, 100, 0), data[:100])
            for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
                with self.assertRaises(OSError) as e:
                    os.close(os.open(p, flags))
                self.assertEqual(e.exception.errno, errno.ETXTBSY)
            with self.assertRaises(OSError) as e:
                os.truncate(p, 10)
            self.assertEqual(e.exception.errno, errno.ETXTBSY)
            # A second reader shares the backing file.
            self.assertTrue(read_all(p) == data)
        finally:
            os.close(reader)
        self.assertGreaterEqual(self.pt()["busy"], 4)
        # Closed: writers and truncation go on at once, and readers see them.
        for i in range(20):
            with open(p, "rb") as f:
                f.read(10)
            with open(p, "r+b") as f:
                f.seek(i)
                f.write(b"w")
        os.truncate(p, 5 * MiB)
        self.assertTrue(read_all(p) == b"w" * 20 + data[20:5 * MiB])

    def test_torch_and_numpy_round_trips(self):
        import numpy as np
        import torch
        torch.manual_seed(0)
        state = {"w%d" % i: torch.randn(512, 1024) for i in range(6)}  # 12 MiB
        torch.save(state, self.m.path("model.pt"))
        torch.save(state, os.path.join(self.plain, "model.pt"))
        drop_caches()
        self.assertEqual(lib.file_sha256(self.m.path("model.pt")),
                         lib.file_sha256(os.path.join(self.plain, "model.pt")))
        loaded = torch.load(self.m.path("model.pt"))
        for k, v in state.items():
            self.assertTrue(torch.equal(loaded[k], v), k)
        arr = np.arange(3 * MiB, dtype=np.float32)
        np.save(self.m.path("arr.npy"), arr)
        drop_caches()
        m = np.load(self.m.path("arr.npy"), mmap_mode="r")
        self.assertTrue(np.array_equal(m, arr))
        del m


def verify(path):
    return subprocess.run([harness.ckptfs_bin(), "verify", path], capture_output=True, text=True)


class PassthroughWritesTest(PassthroughTest):
    """PassthroughTest's steps with passthrough_writes, and what it adds."""
    mount_options = ("passthrough_writes", "data_file_min=4M")

    def setUp(self):
        if not passthrough_possible():
            self.skipTest("no passthrough here")

    def engine(self):
        return self.m.stats()["engine"]

    def test_a_new_files_writes_reach_no_daemon_and_are_adopted_at_close(self):
        self.assertTrue(self.pt()["writes"])
        data = os.urandom(24 * MiB + 5)
        before = self.engine()
        p = self.m.path("direct")
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for off in range(0, len(data), MiB):
                os.write(fd, data[off:off + MiB])
            # The size shows while the kernel writes.
            self.assertEqual(os.stat(p).st_size, len(data))
            self.assertEqual(os.fstat(fd).st_size, len(data))
        finally:
            os.close(fd)
        after = self.engine()
        self.assertEqual(after["writes"], before["writes"])
        self.assertEqual(after["direct_writes"], before["direct_writes"] + 1)
        self.assertGreaterEqual(after["direct_adopted_bytes"] - before["direct_adopted_bytes"],
                                len(data))
        drop_caches()
        self.assertTrue(read_all(p) == data)
        self.assertTrue(mmap_all(p) == data)
        r = verify(p)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_small_new_files_move_into_segments_at_their_last_close(self):
        store_data = os.path.join(self.m.store, "data")
        files_before = len(os.listdir(store_data))
        sizes = {"tiny": 10, "some": 300 * 1024, "empty": 0}
        for name, size in sizes.items():
            lib.write_file(self.m.path(name), pattern(7, size))
        # RELEASE comes after close(2) has returned; a data file goes once
        # the copy of its bytes in segments is durable (an fsync of any file).
        for _ in range(100):
            fd = os.open(self.m.path("tiny"), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if len(os.listdir(store_data)) == files_before:
                break
            time.sleep(0.05)
        self.assertEqual(len(os.listdir(store_data)), files_before)
        drop_caches()
        for name, size in sizes.items():
            self.assertEqual(read_all(self.m.path(name)), pattern(7, size), name)
        r = verify(self.m.path("some"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_an_overwrite_with_o_trunc_is_written_directly_as_a_new_file(self):
        self.assertTrue(self.m.stats()["fs"]["atomic_o_trunc"])
        p = self.m.path("again")
        lib.write_file(p, pattern(9, 12 * MiB))
        # Into segments first: a write in the middle (the daemon's).
        fd = os.open(p, os.O_WRONLY)
        os.pwrite(fd, b"middle", 5 * MiB)
        os.close(fd)
        old = os.stat(p)
        time.sleep(0.01)
        data = os.urandom(20 * MiB + 7)
        before = self.engine()
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        try:
            self.assertEqual(os.fstat(fd).st_size, 0)
            self.assertEqual(os.stat(p).st_size, 0)
            for off in range(0, len(data), MiB):
                os.write(fd, data[off:off + MiB])
        finally:
            os.close(fd)
        after = self.engine()
        self.assertEqual(after["writes"], before["writes"])
        self.assertEqual(after["direct_writes"], before["direct_writes"] + 1)
        st = os.stat(p)
        self.assertEqual(st.st_size, len(data))
        self.assertGreater(st.st_mtime_ns, old.st_mtime_ns)
        self.assertGreater(st.st_ctime_ns, old.st_ctime_ns)
        drop_caches()
        self.assertTrue(read_all(p) == data)
        self.assertTrue(mmap_all(p) == data)
        r = verify(p)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # torch.save to the same path again.
        import torch
        for seed in (1, 2):
            torch.manual_seed(seed)
            state = {"w%d" % i: torch.randn(512, 1024) for i in range(4)}  # 8 MiB
            before = self.engine()
            torch.save(state, p)
            self.assertEqual(self.engine()["writes"], before["writes"])
            drop_caches()
            loaded = torch.load(p)
            for k, v in state.items():
                self.assertTrue(torch.equal(loaded[k], v), k)

    def test_o_trunc_opens_as_in_a_plain_directory(self):
        for root in (self.plain, self.m.mnt):
            for name in ("ro", "rw", "empty"):
                lib.write_file(os.path.join(root, name), b"" if name == "empty" else pattern(3, 6 * MiB))
        times = {}
        for root in (self.plain, self.m.mnt):
            old = {n: os.stat(os.path.join(root, n)) for n in ("ro", "rw", "empty")}
            time.sleep(0.01)
            os.close(os.open(os.path.join(root, "ro"), os.O_RDONLY | os.O_TRUNC))
            fd = os.open(os.path.join(root, "rw"), os.O_RDWR | os.O_TRUNC)
            os.write(fd, b"short")
            os.close(fd)
            os.close(os.open(os.path.join(root, "empty"), os.O_WRONLY | os.O_TRUNC))
            # An existing empty file's times move too (POSIX).
            times[root] = {n: (os.stat(os.path.join(root, n)).st_mtime_ns > old[n].st_mtime_ns,
                               os.stat(os.path.join(root, n)).st_ctime_ns > old[n].st_ctime_ns)
                           for n in old}
        self.assertEqual(times[self.m.mnt], times[self.plain])
        self.assertEqual(times[self.plain], {n: (True, True) for n in ("ro", "rw", "empty")})
        drop_caches()
        for name in ("ro", "rw", "empty"):
            self.assertEqual(read_all(self.m.path(name)), read_all(os.path.join(self.plain, name)),
                             name)

    def test_control_files_opened_with_o_trunc(self):
        # The config file empties and takes the settings written after;
        # the stats file cannot be truncated (as a SETATTR without it).
        config = self.m.path(".ckptfs", "config")
        for gap in (8192, 4096):
            with open(config, "w") as f:
                f.write("coalesce_gap=%d\n" % gap)
            self.assertEqual(self.m.stats()["options"]["coalesce_gap"], gap)
        with self.assertRaises(OSError) as e:
            os.close(os.open(self.m.path(".ckptfs", "stats"), os.O_WRONLY | os.O_TRUNC))
        self.assertEqual(e.exception.errno, errno.EPERM)
        json.loads(open(self.m.path(".ckptfs", "stats")).read())

    def test_readers_and_writers_of_a_new_file_share_its_data_file(self):
        p = self.m.path("shared")
        model = bytearray(pattern(8, 8 * MiB))
        w = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(w, model)
            r = os.open(p, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(r, 100, len(model) - 100), model[-100:])
                os.pwrite(w, b"X" * 10, 1000)  # a rewrite of adopted-to-be bytes
                model[1000:1010] = b"X" * 10
                os.ftruncate(w, 6 * MiB)  # no waiting for the reader
                del model[6 * MiB:]
                os.write(w, b"tail")  # at offset 8 MiB: a hole before it
                model += bytes(2 * MiB) + b"tail"
                os.fsync(w)
                self.assertTrue(os.pread(r, len(model) + 10, 0) == model)
            finally:
                os.close(r)
        finally:
            os.close(w)
        drop_caches()
        self.assertTrue(read_all(p) == model)
        r = verify(p)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


    def test_verify_while_the_kernel_writes_checks_the_bytes_written_so_far(self):
        p = self.m.path("open_writer")
        data = bytearray(pattern(4, 12 * MiB + 3))
        lib.write_file(os.path.join(self.tmp, "open_writer.src"), data)
        # The writer is a process of its own: a close of its descriptor, as
        # in the child of a fork that execs, would adopt its writes.
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, p, os.path.join(self.tmp, "open_writer.src")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(writer.stdout.readline().strip(), "written")
            data[5 * MiB + 100:5 * MiB + 100 + 4096] = b"Y" * 4096
            data += b"more"
            adoptions = self.engine()["direct_adoptions"]
            r = verify(p)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("12.0 MiB checked: every checksum matches", r.stdout)
            self.assertEqual(self.engine()["direct_adoptions"], adoptions + 1)
            self.assertEqual(os.stat(p).st_size, len(data))
        finally:
            writer.communicate("close\n", timeout=60)
        self.assertEqual(writer.returncode, 0)
        drop_caches()
        self.assertTrue(read_all(p) == data)


# Writes argv[2]'s bytes to the new file argv[1] and fsyncs (an adoption);
# then rewrites 4 KiB in the middle and appends, which the kernel writes to
# the data file with no request to the daemon; keeps the file open until a
# line comes on stdin.
WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, open(sys.argv[2], "rb").read())
os.fsync(fd)
os.pwrite(fd, b"Y" * 4096, 5 * 1024 * 1024 + 100)
os.write(fd, b"more")
print("written", flush=True)
sys.stdin.readline()
os.close(fd)
"""


class UnprivilegedFallbackTest(unittest.TestCase):
    """A mount by uid 65534 asks for passthrough and cannot have it."""

    def setUp(self):
        harness.require_fuse(root=True)
        # Other users may open /dev/fuse on most systems (0666); where they
        # may not, they may for this test.
        self.fuse_mode = os.stat("/dev/fuse").st_mode & 0o777
        if self.fuse_mode & 0o006 != 0o006:
            os.chmod("/dev/fuse", self.fuse_mode | 0o006)
        self.tmp = harness.make_tmpdir()
        os.chmod(self.tmp, 0o755)
        for d in ("store", "mnt"):
            os.mkdir(os.path.join(self.tmp, d))
            os.chown(os.path.join(self.tmp, d), NOBODY, NOBODY)
        # The daemon runs as 65534 through a copy of the binary it may run.
        self.bin = os.path.join(self.tmp, "ckptfs")
        shutil.copy(harness.ckptfs_bin(), self.bin)
        os.chmod(self.bin, 0o755)
        wrapper = os.path.join(self.tmp, "ckptfs-nobody")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec setpriv --reuid=%d --regid=%d --clear-groups %s \"$@\"\n"
                    % (NOBODY, NOBODY, self.bin))
        os.chmod(wrapper, 0o755)
        self.m = harness.Mount(os.path.join(self.tmp, "store"), os.path.join(self.tmp, "mnt"),
                               ["passthrough", "data_file_min=4M"], binary=wrapper)

    def tearDown(self):
        try:
            self.m.unmount()
        finally:
            os.chmod("/dev/fuse", self.fuse_mode)

    def as_nobody(self, *cmd, stdin=None):
        r = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                            "--clear-groups"] + list(cmd), input=stdin, capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def stats(self):
        # Root reads another user's mount only with allow_other.
        return json.loads(self.as_nobody("cat", self.m.path(".ckptfs", "stats")))

    def test_same_bytes_through_the_daemon(self):
        self.m.mount()
        pt = self.stats()["fs"]["passthrough"]
        self.assertEqual(pt["in_use"], "no: needs CAP_SYS_ADMIN (mount as root)")
        data = pattern(9, 9 * MiB + 77)
        self.as_nobody(sys.executable, "-c",
                       "import sys; open(sys.argv[1], 'wb').write(sys.stdin.buffer.read())",
                       self.m.path("big"), stdin=data)
        drop_caches()
        self.assertTrue(self.as_nobody("cat", self.m.path("big")) == data)
        stats = self.stats()
        self.assertEqual(stats["fs"]["passthrough"]["passthrough_opens"], 0)
        self.assertGreater(stats["engine"]["reads"], 0)


class VerifyReadsTest(unittest.TestCase):
    """verify_reads: passthrough off, and damage reads as EIO."""

    def setUp(self):
        harness.require_fuse(root=True)
        self.tmp = harness.make_tmpdir()
        self.m = harness.Mount(os.path.join(self.tmp, "store"), os.path.join(self.tmp, "mnt"),
                               ["passthrough", "verify_reads", "data_file_min=4M"])

    def tearDown(self):
        self.m.unmount()

    def test_flipped_byte_is_eio(self):
        self.m.mount()
        self.assertEqual(self.m.stats()["fs"]["passthrough"]["in_use"],
                         "no: verify_reads checks every read in the daemon")
        data = pattern(7, 8 * MiB)
        lib.write_file(self.m.path("big"), data)
        ino = os.stat(self.m.path("big")).st_ino
        self.m.unmount()
        data_file = os.path.join(self.m.store, "data", "%08d.dat" % ino)
        with open(data_file, "r+b") as f:
            f.seek(6 * MiB + 5)
            f.write(bytes([data[6 * MiB + 5] ^ 0xFF]))
        self.m.mount()
        drop_caches()
        with open(self.m.path("big"), "rb") as f:
            self.assertEqual(f.read(MiB), data[:MiB])
            f.seek(6 * MiB)
            with self.assertRaises(OSError) as e:
                f.read(MiB)
            self.assertEqual(e.exception.errno, errno.EIO)


if __name__ == "__main__":
    harness.require_fuse(root=True)
    unittest.main()
