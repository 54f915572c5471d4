#!/usr/bin/python3
"""What one FUSE request costs on this machine, and how many a file takes.

  request_costs.py [--ckptfs BIN] [--work DIR] [--n N]

Mounts a fresh store at WORK/mnt beside a plain directory WORK/plain and
prints, for both:
  - the time of a getxattr that finds nothing (one request on the mount),
  - the time of open+close of a cached file (an OPEN and a RELEASE);
then, on the mount only, the FUSE requests per file (from MNT/.ckptfs/stats)
for creating N files of 16 KiB in one directory, and for reading them back
cold (unmounted, caches dropped, mounted again).

Needs root (mounting, drop_caches). A benchmark: it asserts nothing.
"""

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import drop_caches  # noqa: E402
from target import DEFAULT_CKPTFS, Ckptfs, wipe  # noqa: E402


def per_call_us(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def latencies(path, n):
    def getxattr_miss():
        try:
            os.getxattr(path, "user.absent")
        except OSError:
            pass

    def open_close():
        os.close(os.open(path, os.O_RDONLY))

    getxattr_miss()
    open_close()
    return {"getxattr_miss_us": per_call_us(getxattr_miss, n),
            "open_close_us": per_call_us(open_close, n)}


def ops(fs):
    return fs.stats()["fs"]["ops"]


def ops_per_file(before, after, files):
    per = {k: round((after[k] - before.get(k, 0)) / files, 2) for k in after}
    return {k: v for k, v in per.items() if v}  # reading the stats file adds a few


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckptfs", default=DEFAULT_CKPTFS)
    ap.add_argument("--work", default="/tmp/ckptfs-request-costs")
    ap.add_argument("--n", type=int, default=20000, help="calls timed, and files created")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("request_costs: run as root")
    work = os.path.realpath(args.work)
    store, mnt, plain = (os.path.join(work, x) for x in ("store", "mnt", "plain"))
    for d in (store, plain):
        wipe(d)
    os.makedirs(plain)
    fs = Ckptfs(os.path.realpath(args.ckptfs), [])
    out = {}
    try:
        fs.mount(store, mnt)
        for where, root in (("plain", plain), ("ckptfs", mnt)):
            f = os.path.join(root, "f")
            with open(f, "wb") as fh:
                fh.write(b"x")
            out[where] = latencies(f, args.n)
        data = os.urandom(16 << 10)
        os.mkdir(os.path.join(mnt, "d"))
        before = ops(fs)
        for i in range(args.n):
            with open(os.path.join(mnt, "d", "f%d" % i), "wb") as fh:
                fh.write(data)
        out["ckptfs"]["requests_per_created_file"] = ops_per_file(before, ops(fs), args.n)
        fs.umount()
        drop_caches()
        fs.mount(store, mnt)
        before = ops(fs)
        for i in range(args.n):
            with open(os.path.join(mnt, "d", "f%d" % i), "rb") as fh:
                if fh.read() != data:
                    sys.exit("request_costs: f%d reads back wrong" % i)
        out["ckptfs"]["requests_per_file_read_cold"] = ops_per_file(before, ops(fs), args.n)
    finally:
        fs.umount()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
