#!/usr/bin/python3
"""A file's size after a write that returned is never an older one while
other threads list its directory and the kernel evicts inodes (it drops
every dentry and inode of the machine without pause: run alone). Runs for
$CKPTFS_FRESH_SIZE_SECONDS (default 20). Needs root and CKPTFS_BIN.
"""

import collections
import os
import random
import sys
import threading
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

FRESH_SIZE_SECONDS = float(os.environ.get("CKPTFS_FRESH_SIZE_SECONDS", "20"))


class FreshSizeTest(unittest.TestCase):
    """A file's size after a write that returned is never an older one,
    while other threads list its directory (READDIRPLUS hands out the
    attributes of the entries it lists) and the kernel evicts inodes: a
    listing whose attributes were read before the write and that reaches
    the kernel after it, once the kernel has evicted the inode, must not
    become the file's size (with the write-back cache the kernel keeps the
    size of an inode it built for good)."""

    WRITERS = 4
    LISTERS = 4
    KEEP = 30  # files each writer keeps and checks
    FILLER = 300  # other files in the directory: each listing takes longer

    def test_sizes_stay_fresh_while_listed_and_evicted(self):
        if os.geteuid() != 0:
            self.skipTest("needs root, to drop the kernel's inodes")
        tmp = harness.make_tmpdir()
        m = harness.Mount(os.path.join(tmp, "store"), os.path.join(tmp, "mnt"), [])
        m.mount()
        try:
            os.mkdir(m.path("d"))
            for i in range(self.FILLER):
                lib.write_file(m.path("d", "filler%04d" % i), b"f" * i)
            stop = threading.Event()
            errors = []
            checks = [0] * self.WRITERS

            def writer(idx):
                try:
                    write_and_check(idx)
                except Exception:  # any failure fails the test
                    errors.append(traceback.format_exc())
                    stop.set()

            def write_and_check(idx):
                # Each round creates a file, appends to one of the last
                # KEEP, and checks the sizes of all of them: a stale size
                # stays, so it is found whenever it came.
                rng = random.Random(idx)
                files = collections.OrderedDict()  # path -> size written
                n = 0
                while not stop.is_set():
                    n += 1
                    p = m.path("d", "w%d_%06d" % (idx, n))
                    size = rng.choice([10, 5000])
                    lib.write_file(p, bytes([n % 251]) * size)
                    files[p] = size
                    q = rng.choice(list(files))
                    more = rng.choice([1, 333, 1869])
                    with open(q, "ab") as f:
                        f.write(bytes([n % 251]) * more)
                    files[q] += more
                    for q, size in files.items():
                        got = os.stat(q).st_size
                        checks[idx] += 1
                        if got != size:
                            errors.append("%s: size %d, written %d" % (q, got, size))
                            stop.set()
                    if len(files) > self.KEEP:
                        os.unlink(files.popitem(last=False)[0])  # the directory changes

            def lister():
                while not stop.is_set():
                    os.listdir(m.path("d"))

            def evictor():
                while not stop.is_set():
                    with open("/proc/sys/vm/drop_caches", "w") as f:
                        f.write("2\n")  # dentries and inodes

            threads = [threading.Thread(target=writer, args=(i,)) for i in range(self.WRITERS)]
            threads += [threading.Thread(target=lister) for _ in range(self.LISTERS)]
            threads.append(threading.Thread(target=evictor))
            for t in threads:
                t.start()
            stop.wait(FRESH_SIZE_SECONDS)
            stop.set()
            for t in threads:
                t.join()
            harness.log("fresh sizes: %d sizes checked" % sum(checks))
            self.assertEqual(errors[:5], [])
            self.assertGreater(sum(checks), 1000)
        finally:
            m.unmount()


if __name__ == "__main__":
    harness.require_fuse(root=True)
    harness.set_deadline(FRESH_SIZE_SECONDS + 200)
    unittest.main(verbosity=2)
