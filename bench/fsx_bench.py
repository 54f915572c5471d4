#!/usr/bin/python3
"""xfstests' fsx on a fresh ckptfs mount and on a plain directory beside it.

fsx (ltp/fsx.c of xfstests, built on its own) runs random reads, writes,
truncates and mmap reads/writes on one file, checking every byte against its
own copy. It is the harshest small-overwrite workload: each operation
replaces a few extents of the same file.

    bench/fsx_bench.py --fsx /path/to/fsx -N 100000 [-N 10000 ...] [--work DIR]
                       [--ckptfs build/tools/ckptfs] [--fsx-args "-l 262144"]

For each -N: fsx -N N on the mount (a fresh store each time) and in a plain
directory on the same filesystem. Prints seconds, the ratio ckptfs/plain,
the daemon's CPU seconds and its peak RSS (VmHWM). fsx failing on either is
an error (exit 1). Without --fsx (or CKPTFS_FSX) it prints why and exits 0.
Needs what mounting needs (see tests/mount/ckptfs_harness.py).
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile

from measure import BenchError, Meter, log
from target import DEFAULT_CKPTFS, Ckptfs, harness, wipe

# fsx's defaults of xfstests' generic/ tests that run it: a file of at most
# 256 KiB, fixed seed so that both sides see the same operations.
DEFAULT_FSX_ARGS = "-q -l 262144 -S 1"


def run_fsx(fsx, extra, ops, directory, daemon_pid=None):
    """Runs fsx on DIRECTORY/fsx.file; returns the Meter. Raises on failure."""
    path = os.path.join(directory, "fsx.file")
    cmd = [fsx] + shlex.split(extra) + ["-N", str(ops), path]
    with Meter(daemon_pid, quiet=False) as m:
        r = subprocess.run(cmd, cwd=directory, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stdout + r.stderr)[-2000:]
        raise BenchError("fsx failed in %s (exit %d):\n%s" % (directory, r.returncode, tail))
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fsx", default=os.environ.get("CKPTFS_FSX"),
                    help="the fsx binary (default: $CKPTFS_FSX)")
    ap.add_argument("-N", dest="ops", type=int, action="append",
                    help="operations per run (repeatable; default 100000)")
    ap.add_argument("--fsx-args", default=DEFAULT_FSX_ARGS,
                    help="more fsx arguments (default: %(default)r)")
    ap.add_argument("--ckptfs", default=DEFAULT_CKPTFS, help="the ckptfs binary")
    ap.add_argument("--opts", default="", help="mount options, comma-separated k=v")
    ap.add_argument("--work", default=None, help="where the store, mountpoint and plain "
                    "directory go (default: a fresh directory under /tmp)")
    args = ap.parse_args()
    if not args.fsx:
        print("SKIP: no fsx binary given (--fsx PATH or CKPTFS_FSX); build ltp/fsx.c of "
              "xfstests and pass its path")
        return 0
    if not os.access(args.fsx, os.X_OK):
        print("fsx_bench: %s is not an executable" % args.fsx, file=sys.stderr)
        return 2
    if not os.access(args.ckptfs, os.X_OK):
        print("fsx_bench: no ckptfs binary at %s" % args.ckptfs, file=sys.stderr)
        return 2
    harness.require_fuse()
    ops_list = args.ops or [100000]
    work = args.work or tempfile.mkdtemp(prefix="ckptfs-fsx-bench-")
    os.makedirs(work, exist_ok=True)
    fs = Ckptfs(args.ckptfs, [o for o in args.opts.split(",") if o])
    rows = []
    try:
        for ops in ops_list:
            store, mnt, plain = (os.path.join(work, n) for n in ("store", "mnt", "plain"))
            wipe(store)
            os.makedirs(mnt, exist_ok=True)
            fs.mount(store, mnt)
            try:
                ck = run_fsx(args.fsx, args.fsx_args, ops, mnt, fs.pid)
                rss_kb = fs.peak_rss_kb()
            finally:
                fs.umount()
            wipe(store)
            wipe(plain)
            os.makedirs(plain)
            pl = run_fsx(args.fsx, args.fsx_args, ops, plain)
            wipe(plain)
            rows.append((ops, ck.seconds, pl.seconds, ck.daemon_cpu_s, rss_kb))
            log("fsx -N %d: ckptfs %.1f s, plain %.1f s" % (ops, ck.seconds, pl.seconds))
    except BenchError as e:
        print("fsx_bench: %s" % e, file=sys.stderr)
        return 1
    finally:
        fs.umount()
        if not args.work:
            wipe(work)
    print("%8s %12s %10s %7s %14s %14s" % ("ops", "ckptfs_s", "plain_s", "ratio",
                                           "daemon_cpu_s", "daemon_rss_mb"))
    for ops, ck_s, pl_s, cpu_s, rss_kb in rows:
        print("%8d %12.1f %10.1f %7.1f %14s %14s" % (
            ops, ck_s, pl_s, ck_s / pl_s if pl_s > 0 else float("inf"),
            "%.1f" % cpu_s if cpu_s is not None else "?",
            "%.0f" % (rss_kb / 1024) if rss_kb is not None else "?"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
