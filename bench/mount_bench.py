#!/usr/bin/python3
"""Benchmark a ckptfs mount against a plain directory on the same disk.

Workloads (see bench/README.md for how to read the figures):
  big         one large file written in 1 MiB writes + fsync, read cold and warm,
              then cold through mmap
              (and the daemon's CPU and memory meanwhile)
  layout      per-parameter (orbax/zarr style) tree: N dirs of .zarray + 4 chunks;
              create, then cold restore
  frameworks  torch.save/torch.load of a state dict; zarr arrays written and read
              by 16 threads (bench/frameworks.py, one process per phase)
  sweep       cold restore of the layout tree under several coalescing settings
  scaling     1, 2, 4, 8 threads writing separate files at once
  disk        dd with O_DIRECT: the disk's sequential write and read limit
  pieces      one file written in 4 KiB and in 64 KiB write(2) calls + fsync
  cloud       layout's cold restore with the reader and the daemon in a cgroup
              whose disk reads are throttled to 3,000 IOPS and 250 MB/s

The FUSE floor, libfuse's example passthrough_hp (--nopassthrough) over a
directory on the same disk (--fuse-floor), is a third column of big, layout,
the torch pair of frameworks and steps: what any FUSE filesystem costs here.

Every measurement is repeated --reps times; ckptfs and the plain directory
(and the floor) alternate (and rotate their order every repetition) so that
drift on the machine hits all alike. Medians are reported with the min-max
spread; ratios are ckptfs/plain and ckptfs/floor as throughput (>1 means
ckptfs is faster).

Needs root (drop_caches, mounting). Run with /usr/bin/python3.
"""

# This file is the command line. The rest, by concern: target.py (the ckptfs
# mount and the FUSE floor, through the tests' mount harness, and the plain
# directory),
# workloads.py, measure.py (Meter, the machine, units) and report.py (the
# summary, results.md and the plots).

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time

import measure
from measure import GIB, BenchError, fs_of, human_size, log
from report import report_only, write_report
from target import BUILD_HINT, DEFAULT_CKPTFS, MOUNTPOINT, REPO, wipe
from workloads import DEFAULT_SWEEP, WORKLOADS, Bench, run_all


def environment(b):
    args = b.args
    rev = "?"
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            rev = r.stdout.strip()
            d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "engine",
                                "fs", "tools"], capture_output=True, text=True)
            if d.stdout.strip():
                rev += "+uncommitted"
    except OSError:
        pass
    fstype, dev = fs_of(b.work)
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "mem_gib": mem_kb / (1 << 20),
        "python": platform.python_version(),
        "work": b.work,
        "work_fs": fstype,
        "work_dev": dev,
        "ckptfs": b.fs.binary,
        "ckptfs_rev": rev,
        "mount_opts": ",".join(b.fs.base_opts),
        "fuse_floor": b.floor.binary if b.floor else None,
        "fuse_floor_command": (" ".join(("passthrough_hp",) + b.floor.ARGS + ("SRC", "MNT"))
                               if b.floor else None),
        "reps": args.reps,
        "quick": args.quick,
        "big_size": b.big_size,
        "dirs": b.dirs,
        "workloads": args.workloads,
        "wait_quiet_s": args.wait_quiet,
        "priority": args.priority,
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "argv": sys.argv,
    }


def default_fuse_floor(ckptfs):
    """BUILD/bench/passthrough_hp for the ckptfs binary BUILD/tools/ckptfs."""
    build = os.path.dirname(os.path.dirname(os.path.realpath(ckptfs)))
    return os.path.join(build, "bench", "passthrough_hp")


def parser():
    """The command line's options."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes (512 MiB big file, 1,000 dirs, 128 MiB state dict, "
                         "500 zarr arrays, 256 MiB scaling writes); under 3 minutes")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--big-size", help="big file size, e.g. 4G (default 4G; 512M with --quick)")
    ap.add_argument("--dirs", type=int,
                    help="directories in the layout workload (default 10000; 1000 with --quick)")
    ap.add_argument("--sweep", default=DEFAULT_SWEEP,
                    help="coalescing settings GAP/MAX, comma-separated; 'off' = coalesce_gap=0 "
                         "(default %s)" % DEFAULT_SWEEP)
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="subset of %s (default all)" % ",".join(WORKLOADS))
    ap.add_argument("--mount-opts", default="",
                    help="extra -o options for every ckptfs mount, e.g. threads=4")
    ap.add_argument("--ckptfs", default=DEFAULT_CKPTFS, help="the ckptfs binary (default %(default)s)")
    ap.add_argument("--fuse-floor", metavar="PATH",
                    help="libfuse's passthrough_hp for the FUSE floor column (default: "
                         "bench/passthrough_hp of the ckptfs binary's build dir; "
                         "the column is left out when it is not there)")
    ap.add_argument("--work", default="/tmp/ckptfs-bench-work",
                    help="work dir; the plain dir and the store live here (default %(default)s)")
    ap.add_argument("--out", default="/tmp/ckptfs-bench", help="results dir (default %(default)s)")
    ap.add_argument("--keep", action="store_true", help="leave the work dir's data behind")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                    help="before each timed phase, wait up to SECONDS for the host to be idle "
                         "(for shared machines; default 0: do not wait)")
    ap.add_argument("--fuse-read-ahead-kb", type=int, metavar="KB",
                    help="after each mount, write KB to the mount's "
                         "/sys/class/bdi/MAJ:MIN/read_ahead_kb (the kernel caps FUSE "
                         "readahead at 128 KiB by default); default: leave it")
    ap.add_argument("--priority", action="store_true",
                    help="run the benchmark, dd and the daemons it starts at nice -20 and in "
                         "the realtime I/O class, to shield the figures from other work on a "
                         "shared machine")
    ap.add_argument("--report-only", metavar="DIR",
                    help="measure nothing: rebuild results.md and coalescing.png in DIR from "
                         "DIR/results.json")
    return ap


def check_args(ap, args):
    """Exits with a message unless the options make a run that can measure;
    resolves --fuse-floor (None: the floor's column is left out)."""
    unknown = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        ap.error("unknown workloads: %s" % ",".join(sorted(unknown)))
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if os.geteuid() != 0:
        sys.exit("mount_bench: run as root (needs /proc/sys/vm/drop_caches and mounts)")
    if not os.access(args.ckptfs, os.X_OK):
        sys.exit("mount_bench: no ckptfs binary at %s; build it with:\n  %s"
                 % (args.ckptfs, BUILD_HINT))
    if args.fuse_floor is None:
        args.fuse_floor = default_fuse_floor(args.ckptfs)
    if not os.access(args.fuse_floor, os.X_OK):
        log("no FUSE floor: no passthrough_hp at %s (ninja -C BUILD passthrough_hp); "
            "leaving its column out" % args.fuse_floor)
        args.fuse_floor = None


def raise_priority():
    """nice -20 and the realtime I/O class for this process and, inherited,
    every child: dd, `ckptfs mount` and so the daemons."""
    os.setpriority(os.PRIO_PROCESS, 0, -20)
    r = subprocess.run(["ionice", "-c", "1", "-n", "0", "-p", str(os.getpid())],
                       capture_output=True, text=True)
    if r.returncode != 0:
        log("ionice failed: %s" % r.stderr.strip())


def prepare_work(b):
    """Makes the work and results dirs, unmounts what an earlier run left
    mounted and checks the work dir has room; returns the (target,
    mountpoint) pairs the run mounts."""
    os.makedirs(b.work, exist_ok=True)
    os.makedirs(b.args.out, exist_ok=True)
    mounts = [(b.fs, b.path(MOUNTPOINT["ckptfs"]))]
    if b.floor:
        mounts.append((b.floor, b.path(MOUNTPOINT["floor"])))
    for m, mnt in mounts:
        if not m.unmount_leftover(mnt):
            sys.exit("mount_bench: cannot unmount %s" % mnt)
    if b.floor:
        wipe(b.floor.log_path)
    workloads = b.args.workloads
    need = (2 * b.big_size + 2 * GIB) if ("big" in workloads or "disk" in workloads) else GIB
    free = shutil.disk_usage(b.work).free
    if free < need:
        sys.exit("mount_bench: %s has %.1f GiB free, need %.1f GiB"
                 % (b.work, free / GIB, need / GIB))
    fstype, _ = fs_of(b.work)
    if fstype in ("tmpfs", "ramfs", "overlay"):
        log("warning: %s is on %s, not a disk: figures will not mean much" % (b.work, fstype))
    return mounts


def probe_mount_defaults(b):
    """Records in the environment the default coalescing, configuration and
    FUSE readahead of a fresh mount, for the report."""
    env = b.results["env"]
    b.fs.mount(b.path("store-probe"), b.path("mnt"))
    cfg = b.fs.config()
    env["default_coalesce_gap"] = human_size(int(cfg.get("coalesce_gap", 0)))
    env["default_coalesce_max"] = human_size(int(cfg.get("coalesce_max", 0)))
    env["default_config"] = cfg
    env["fuse_read_ahead_kb"] = b.fs.bdi_read_ahead_kb()
    b.fs.umount()
    wipe(b.path("store-probe"))


# What the workloads leave in the work dir.
WORK_ENTRIES = ("store-big", "plain-big", "store-layout", "plain-layout",
                "store-probe", "dd.bin", "warm-up.bin", "store-fw", "plain-fw",
                "store-scaling", "plain-scaling", "store-pieces",
                "plain-pieces", "floor-big", "floor-layout", "floor.log")


def remove_work(b):
    """Deletes what the workloads left in the work dir."""
    for name in WORK_ENTRIES:
        p = b.path(name)
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)


def unmount_all(b, mounts):
    """Unmounts every target; unless --keep, and only once nothing is left
    mounted, deletes the work dir's data. Records the floor's output."""
    try:
        for m, _ in mounts:
            m.umount()
        if b.floor:
            b.results["env"]["fuse_floor_output"] = b.floor.output()
    finally:
        if all([m.unmount_leftover(mnt) for m, mnt in mounts]) and not b.args.keep:
            remove_work(b)


def save_raw_results(b, t0, ok):
    """Writes results.json as the run left it, complete (`ok`) or not."""
    env = b.results["env"]
    env["elapsed_s"] = time.perf_counter() - t0
    env["completed"] = ok
    with open("/proc/loadavg") as f:
        env["loadavg_end"] = f.read().split()[:3]
    with open(os.path.join(b.args.out, "results.json"), "w") as f:
        json.dump(b.results, f, indent=1)


def measure_all(b, mounts):
    """Runs the workloads; whatever happens, unmounts and saves results.json.
    Returns the time it started (time.perf_counter)."""
    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)

    t0 = time.perf_counter()
    ok = False
    try:
        probe_mount_defaults(b)
        run_all(b)
        ok = True
    finally:
        try:
            unmount_all(b, mounts)
        finally:
            save_raw_results(b, t0, ok)
    return t0


def main():
    ap = parser()
    args = ap.parse_args()
    measure.QUIET_WAIT_S = args.wait_quiet
    if args.report_only:
        return report_only(args.report_only)
    check_args(ap, args)
    if args.priority:
        raise_priority()

    b = Bench(args)
    mounts = prepare_work(b)
    b.results["env"] = environment(b)
    t0 = measure_all(b, mounts)

    b.results["env"]["elapsed_s"] = time.perf_counter() - t0
    md = write_report(b.results, args.out)
    print(md)
    log("results in %s (results.md, results.json); %.0f s" % (args.out,
                                                               b.results["env"]["elapsed_s"]))


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        sys.exit("mount_bench: %s" % e)
