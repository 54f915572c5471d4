#!/usr/bin/python3
"""The measuring half of scripts/demo.sh: saves and restores a PyTorch
checkpoint and a per-parameter zarr tree on a fresh ckptfs store and on a
plain directory beside it, on the same disk, and prints a short table.

    demo.py --bin CKPTFS [--mib N] [--arrays N] WORK

WORK must exist and be empty but for demo.sh's files. The store is
WORK/store, mounted on WORK/mnt; the plain directory is WORK/plain. The
workloads are the benchmark's (bench/): frameworks.py's torch.save and
torch.load, workloads.py's per-parameter tree (workload 2) and its restore on
the cloud-disk profile (workload 9). Mounts go through the tests' mount
harness, which unmounts on errors, signals and, through its guardian, when
this process is killed. Cold restores: the page cache dropped (as root) and
ckptfs remounted. Exits 1 with a one-line reason on failure, 130 when
interrupted. Run with /usr/bin/python3 (Debian's python3-torch).
"""

import argparse
import os
import random
import statistics
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests", "mount"))

import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as testlib  # noqa: E402
import frameworks  # noqa: E402
import measure  # noqa: E402
import workloads  # noqa: E402
from measure import MIB, BenchError  # noqa: E402
from target import Ckptfs, wipe  # noqa: E402

ROOT = os.geteuid() == 0
COLD = "cold" if ROOT else "remounted"
RESTORES = 3  # cold restores of each checkpoint on each side


def say(line=""):
    print(line, flush=True)


class Demo:
    """What the bench's per-parameter workloads (workloads.layout_create,
    layout_restore, run_cloud) take: the work directory with its places by
    the bench's names, the ckptfs mount, the tree's size and chunk contents."""

    PLACES = {"store-layout": "store", "plain-layout": "plain", "mnt": "mnt"}
    floor = None  # no FUSE floor mount

    def __init__(self, work, binary, arrays):
        self.work = work
        self.fs = Ckptfs(binary, [])
        self.dirs = arrays
        rng = random.Random(42)
        self.chunk_pool = [rng.randbytes(workloads.CHUNK_BYTES) for _ in range(64)]

    def path(self, name):
        return os.path.join(self.work, self.PLACES[name])


def cold(demo, mnt=None):
    """Before a cold restore: drops the page cache (as root) and, given a
    mountpoint, mounts the store there again."""
    demo.fs.umount()
    if ROOT:
        measure.drop_caches()
    if mnt:
        demo.fs.mount(demo.path("store-layout"), mnt)


def save_tree(demo, root):
    """Workload 2's save: the tree written as zarr writes it, then sync."""
    workloads.layout_create(demo, root)
    os.sync()


def timed(fn, *args):
    with measure.Meter(quiet=False) as m:
        fn(*args)
    return m.seconds


def throttle_unavailable(work):
    """Why the cloud-disk row cannot run here; "" when it can."""
    if not ROOT:
        return "it needs root (a cgroup and drop_caches)"
    dev = os.stat(work).st_dev
    if not os.path.exists("/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev))):
        return "%s is not on a disk (%s)" % (work, measure.fs_of(work)[0])
    try:
        measure.ReadThrottle(work, workloads.CLOUD_READ_IOPS, workloads.CLOUD_READ_BPS)
    except BenchError as e:
        return str(e)
    return ""


class Table:
    """The table, a row at a time as each is measured; ratio = plain / ckptfs."""

    FORMAT = "%-48s %8s %8s %7s"

    def __init__(self):
        self.ratios = {}
        say(self.FORMAT % ("workload", "plain", "ckptfs", "ratio"))

    def row(self, key, label, plain_s, ckptfs_s):
        self.ratios[key] = plain_s / ckptfs_s
        say(self.FORMAT % (label, "%.2f s" % plain_s, "%.2f s" % ckptfs_s,
                           "%.2fx" % self.ratios[key]))

    def median_row(self, key, label, plain, ckptfs):
        """A row of restores: plain() and ckptfs() each run one and return its
        seconds; RESTORES runs each, alternating which goes first; the medians."""
        runs = {"plain": [], "ckptfs": []}
        for rep in range(RESTORES):
            for who in workloads.order_for(rep, ["plain", "ckptfs"]):
                runs[who].append(plain() if who == "plain" else ckptfs())
        self.row(key, label, statistics.median(runs["plain"]), statistics.median(runs["ckptfs"]))


def wrap(text):
    for line in textwrap.wrap(text, 90, break_on_hyphens=False):
        say(line)


def header(demo):
    fstype, dev = measure.fs_of(demo.work)
    wrap("in %s (%s on %s): a ckptfs store (store/, mounted on mnt/) and a plain directory "
         "(plain/) on the same disk; each checkpoint saved to both once and restored %d times "
         "(the median shown). ratio = plain time / ckptfs time: above 1, ckptfs is faster. %s"
         % (demo.work, fstype, dev, RESTORES,
            "Cold: the page cache dropped and ckptfs remounted before the restore." if ROOT
            else "Not root: the page cache is not dropped, so restores read from memory."))
    say()


def torch_rows(demo, t, mib):
    """torch.save and torch.load of frameworks.py's state dict (every tensor compared)."""
    mnt, plain = demo.path("mnt"), demo.path("plain-layout")
    ckptfs_s = frameworks.torch_save(mnt, mib)["seconds"]
    saved = frameworks.torch_save(plain, mib)
    t.row("torch.save", "torch.save: %d MiB state dict, fsync" % (saved["bytes"] // MIB),
          saved["seconds"], ckptfs_s)

    def load(d):
        cold(demo, mnt if d == mnt else None)
        return frameworks.torch_load(d, mib)["seconds"]

    t.median_row("torch.load", "torch.load, %s" % COLD, lambda: load(plain), lambda: load(mnt))


def tree_rows(demo, t):
    """Workload 2's tree saved, then restored single-threaded; returns the
    last ckptfs restore's FUSE requests and segment file reads."""
    tree = os.path.join(demo.path("mnt"), "checkpoint")
    plain_tree = os.path.join(demo.path("plain-layout"), "checkpoint")
    ckptfs_s = timed(save_tree, demo, tree)
    t.row("zarr save", "zarr tree save: {:,} arrays, {:,} files, sync".format(
        demo.dirs, tree_files(demo)), timed(save_tree, demo, plain_tree), ckptfs_s)
    counts = {}

    def restore(root):
        cold(demo, demo.path("mnt") if root == tree else None)
        if root != tree:
            return timed(workloads.layout_restore, demo, root)
        q0, e0 = demo.fs.requests()["all"], demo.fs.engine_stats()["backing_reads"]
        seconds = timed(workloads.layout_restore, demo, root)
        counts["requests"] = demo.fs.requests()["all"] - q0
        counts["segment_reads"] = demo.fs.engine_stats()["backing_reads"] - e0
        return seconds

    t.median_row("zarr restore", "zarr tree restore, %s" % COLD, lambda: restore(plain_tree),
                 lambda: restore(tree))
    return counts["requests"], counts["segment_reads"]


def cloud_row(demo, t, why_not):
    """Workload 9: the tree's cold restore with reads throttled like a cloud volume."""
    if why_not:
        say("skipped the cloud-disk profile row: %s" % why_not)
        return
    demo.fs.umount()  # run_cloud drops the caches and mounts the store itself

    def restore(who):
        return workloads.run_cloud(demo, 0, who)["restore"]["seconds"]

    t.median_row("cloud", "zarr tree restore, cold, cloud-disk profile",
                 lambda: restore("plain"), lambda: restore("ckptfs"))
    disk = os.path.basename(os.path.realpath("/sys/dev/block/" + measure.disk_of(demo.work)))
    say("cloud-disk profile: reads from {} limited to {:,} IOPS and {:,} MB/s (cgroup)".format(
        disk, workloads.CLOUD_READ_IOPS, workloads.CLOUD_READ_BPS // 1000000))


def check_identical(demo):
    """Every file on the mount against the plain directory's, byte for byte."""
    plain = demo.path("plain-layout")
    demo.fs.mount(demo.path("store-layout"), demo.path("mnt"))
    want, got = testlib.tree_snapshot(plain), testlib.tree_snapshot(demo.path("mnt"))
    demo.fs.umount()
    if got != want:
        raise BenchError("the mount's files differ from the plain directory's:\n"
                         + testlib.diff_snapshots(want, got, limit=5))
    files = [v[1] for v in want.values() if v[0] == "file"]
    say("identical: every tensor torch.load returned, and all {:,} files ({:,} MiB) byte for "
        "byte".format(len(files), sum(files) // MIB))


def tree_files(demo):
    return demo.dirs * (1 + len(workloads.CHUNK_NAMES))


def run(demo, mib, why_no_throttle):
    os.makedirs(demo.path("plain-layout"))
    demo.fs.mount(demo.path("store-layout"), demo.path("mnt"))
    header(demo)
    t = Table()
    torch_rows(demo, t, mib)
    requests, segment_reads = tree_rows(demo, t)
    cloud_row(demo, t, why_no_throttle)
    say()
    check_identical(demo)
    say("files on disk: {:,} in the store directory, {:,} in the plain tree".format(
        measure.count_files(demo.path("store-layout")),
        measure.count_files(demo.path("plain-layout"))))
    files = tree_files(demo)
    say("cold zarr restore through ckptfs: %.1f FUSE requests and %.3f segment file reads "
        "per file" % (requests / files, segment_reads / files))
    r = t.ratios
    wrap("in short, here: the many small files of the zarr tree restored at %.1fx%s and "
         "saved at %.1fx; the one big torch file saved at %.1fx and loaded at %.1fx." % (
             r["zarr restore"],
             " (%.1fx on the cloud-disk profile)" % r["cloud"] if "cloud" in r else "",
             r["zarr save"], r["torch.save"], r["torch.load"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the ckptfs binary")
    ap.add_argument("--mib", type=int, default=256, help="torch state dict size in MiB")
    ap.add_argument("--arrays", type=int, default=1000, help="arrays in the zarr tree")
    ap.add_argument("work")
    args = ap.parse_args()
    work = os.path.realpath(args.work)
    why = harness.unavailable()
    if why:
        sys.exit("ckptfs demo: cannot mount here: " + why)
    demo = Demo(work, os.path.realpath(args.bin), args.arrays)
    try:
        run(demo, args.mib, throttle_unavailable(work))
    except (BenchError, harness.HarnessError) as e:
        sys.exit("ckptfs demo: %s" % e)
    except KeyboardInterrupt as e:  # Ctrl-C; the harness makes SIGTERM and SIGHUP one too
        print("ckptfs demo: interrupted%s; unmounting" % (" (%s)" % e if str(e) else ""),
              file=sys.stderr, flush=True)
        sys.exit(130)
    finally:
        demo.fs.umount()
    wipe(demo.path("plain-layout"))
    say("store kept in %s (plain copies removed); to look inside:" % demo.path("store-layout"))
    say("  %s mount %s %s" % (args.bin, demo.path("store-layout"), demo.path("mnt")))


if __name__ == "__main__":
    main()
