#!/usr/bin/python3
"""Benchmark a ckptfs mount against a plain directory on the same disk.

Workloads (see bench/README.md for how to read the figures):
  big         one large file written in 1 MiB writes + fsync, read cold and warm
              (and the daemon's CPU and memory meanwhile)
  layout      per-parameter (orbax/zarr style) tree: N dirs of .zarray + 4 chunks;
              create, then cold restore
  frameworks  torch.save/torch.load of a state dict; zarr arrays written and read
              by 16 threads (bench/frameworks.py, one process per phase)
  sweep       cold restore of the layout tree under several coalescing settings
  scaling     1, 2, 4, 8 threads writing separate files at once
  disk        dd with O_DIRECT: the disk's sequential write and read limit

Every measurement is repeated --reps times; ckptfs and the plain directory
alternate (and swap order every repetition) so that drift on the machine hits
both alike. Medians are reported with the min-max spread; ratios are
ckptfs/plain as throughput (>1 means ckptfs is faster).

Needs root (drop_caches, mounting). Run with /usr/bin/python3.
"""

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
MB = 1e6  # throughput figures are in MB/s (10^6 bytes), like dd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CKPTFS = os.path.join(REPO, "build-bench", "tools", "ckptfs")
BUILD_HINT = ("cmake -S {r} -B {r}/build-bench -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo && "
              "ninja -C {r}/build-bench ckptfs").format(r=REPO)

# Layout workload: one zarr v2 array per directory, 4 chunks of 16 KiB.
ZARRAY = {
    "chunks": [128, 32],
    "compressor": None,
    "dimension_separator": ".",
    "dtype": "<f4",
    "fill_value": None,
    "filters": None,
    "order": "C",
    "shape": [256, 64],
    "zarr_format": 2,
}
CHUNK_BYTES = 128 * 32 * 4  # 16 KiB
CHUNK_NAMES = ["0.0", "0.1", "1.0", "1.1"]
VERIFY_EVERY = 101  # compare the full contents of every 101st chunk

DEFAULT_SWEEP = "off,64K/256K,256K/1M,1M/4M"
WORKLOADS = ("big", "layout", "frameworks", "sweep", "scaling", "disk")


class BenchError(Exception):
    pass


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def parse_size(text):
    t = text.strip().upper()
    for suffix in ("IB", "B"):
        if t.endswith(suffix) and len(t) > len(suffix):
            t = t[: -len(suffix)]
            break
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    return int(float(t) * mult)


def human_size(n):
    for unit, size in (("G", GIB), ("M", MIB), ("K", 1024)):
        if n >= size and n % size == 0:
            return "%d%s" % (n // size, unit)
    return str(n)


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "values": values}


# ---------------------------------------------------------------------------
# System helpers


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mounted_at(path):
    """True when something is mounted exactly at `path` (by /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            mp = mp.encode().decode("unicode_escape")  # octal escapes such as \040
            if mp == path:
                return True
    return False


def fs_of(path):
    """(fstype, source) of the filesystem holding `path`."""
    path = os.path.realpath(path)
    best = ("?", "?", "")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            mp = parts[4].encode().decode("unicode_escape")
            sep = parts.index("-")
            if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best[2]):
                best = (parts[sep + 1], parts[sep + 2], mp)
    return best[0], best[1]


def proc_cpu_s(pid):
    """utime+stime of a process (all threads), in seconds; None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def host_cpu():
    """(busy, total) jiffies over all CPUs."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return total - idle, total


# Set from --wait-quiet: before each timed phase, wait up to this many seconds
# for the host to be idle (other processes skew every figure on a small machine).
QUIET_WAIT_S = 0.0
QUIET_BUSY = 0.10  # "idle": at most this fraction of all CPUs busy over a 0.5 s sample


def wait_quiet():
    """Waits until the host is idle or QUIET_WAIT_S has passed. Returns seconds waited."""
    if QUIET_WAIT_S <= 0:
        return 0.0
    t0 = time.perf_counter()
    while True:
        a = host_cpu()
        time.sleep(0.5)
        b = host_cpu()
        busy = (b[0] - a[0]) / max(1, b[1] - a[1])
        waited = time.perf_counter() - t0
        if busy <= QUIET_BUSY or waited >= QUIET_WAIT_S:
            return waited


class Meter:
    """Wall time, host CPU busy fraction, our own CPU (with children such as dd),
    a daemon's CPU, and the CPU that everything else on the host used, over a phase."""

    def __init__(self, daemon_pid=None, quiet=True):
        self.pid = daemon_pid
        self.quiet = quiet

    def __enter__(self):
        self.quiet_wait_s = wait_quiet() if self.quiet else 0.0
        self.h0 = host_cpu()
        self.c0 = os.times()
        self.d0 = proc_cpu_s(self.pid) if self.pid else None
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        h1 = host_cpu()
        c1 = os.times()
        d1 = proc_cpu_s(self.pid) if self.pid else None
        dt = h1[1] - self.h0[1]
        self.host_busy = (h1[0] - self.h0[0]) / dt if dt > 0 else None
        self.client_cpu_s = sum(getattr(c1, f) - getattr(self.c0, f) for f in
                                ("user", "system", "children_user", "children_system"))
        self.daemon_cpu_s = (d1 - self.d0) if (d1 is not None and self.d0 is not None) else None
        # Busy CPU time not charged to us or the daemon: other processes, plus kernel
        # threads (writeback, interrupts) that may be working for us.
        busy_s = (h1[0] - self.h0[0]) / os.sysconf("SC_CLK_TCK")
        other = busy_s - self.client_cpu_s - (self.daemon_cpu_s or 0)
        self.other_cores = max(0.0, other) / self.seconds if self.seconds > 0 else None
        return False

    def as_dict(self):
        return {"seconds": self.seconds, "host_cpu_busy": self.host_busy,
                "client_cpu_s": self.client_cpu_s, "daemon_cpu_s": self.daemon_cpu_s,
                "other_cpu_cores": self.other_cores, "quiet_wait_s": self.quiet_wait_s,
                # A sync phase's "other" CPU is mostly the kernel writing back our own
                # pages: it says nothing about neighbours.
                "counts_for_contention": self.quiet}


def count_files(root):
    """Regular files under root (what `find root -type f | wc -l` prints)."""
    n = 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    n += 1
    return n


def allocated_bytes(root):
    """Disk blocks used by everything under root (what `du -s --block-size=1` prints)."""
    total = 0
    stack = [root]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return total


def wipe(path):
    if mounted_at(path):
        raise BenchError("refusing to delete %s: it is a mountpoint" % path)
    if os.path.lexists(path):
        shutil.rmtree(path)


# ---------------------------------------------------------------------------
# The ckptfs mount


class Ckptfs:
    """Mounts and unmounts one store at one mountpoint, always cleanly."""

    def __init__(self, binary, base_opts, read_ahead_kb=None):
        self.binary = binary
        self.base_opts = base_opts  # list of "k=v" strings for every mount
        self.read_ahead_kb = read_ahead_kb  # set the mount's bdi readahead when not None
        self.mnt = None
        self.pid = None

    def mount(self, store, mnt, extra_opts=()):
        if self.mnt:
            raise BenchError("already mounted at %s" % self.mnt)
        os.makedirs(store, exist_ok=True)
        os.makedirs(mnt, exist_ok=True)
        opts = list(self.base_opts) + list(extra_opts)
        cmd = [self.binary, "mount"]
        if opts:
            cmd += ["-o", ",".join(opts)]
        cmd += [store, mnt]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            raise BenchError("%s failed (rc %d): %s%s" % (" ".join(cmd), r.returncode,
                                                         r.stdout, r.stderr))
        self.mnt = mnt
        st = self.stats()
        self.pid = int(st["pid"]) if "pid" in st else None
        if self.read_ahead_kb is not None:
            with open(self.bdi_path("read_ahead_kb"), "w") as f:
                f.write("%d\n" % self.read_ahead_kb)
        return seconds

    def bdi_path(self, name):
        """/sys/class/bdi/MAJOR:MINOR/name of the mount (the kernel's FUSE bdi)."""
        dev = os.stat(self.mnt).st_dev
        return "/sys/class/bdi/%d:%d/%s" % (os.major(dev), os.minor(dev), name)

    def bdi_read_ahead_kb(self):
        try:
            with open(self.bdi_path("read_ahead_kb")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def stats(self):
        with open(os.path.join(self.mnt, ".ckptfs", "stats")) as f:
            return json.load(f)

    def engine_stats(self):
        st = self.stats()
        return dict(st.get("engine", st))

    def config(self):
        """MNT/.ckptfs/config as a dict."""
        out = {}
        with open(os.path.join(self.mnt, ".ckptfs", "config")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.strip().split("=", 1)
                    out[k.strip()] = v.strip()
        return out

    def peak_rss_kb(self):
        return proc_status_kb(self.pid, "VmHWM") if self.pid else None

    def cpu_s(self):
        return proc_cpu_s(self.pid) if self.pid else None

    def umount(self):
        """Unmounts and waits for the daemon to exit. Returns seconds taken."""
        if not self.mnt:
            return 0.0
        mnt, pid = self.mnt, self.pid
        t0 = time.perf_counter()
        ok = False
        try:
            r = subprocess.run([self.binary, "umount", mnt], capture_output=True, text=True,
                               timeout=300)
            ok = r.returncode == 0
            if not ok:
                log("ckptfs umount %s failed: %s" % (mnt, (r.stderr or r.stdout).strip()))
        except (OSError, subprocess.TimeoutExpired) as e:
            log("ckptfs umount %s failed: %s" % (mnt, e))
        if not ok:
            force_unmount(mnt)
        wait_gone(pid, 300)
        self.mnt = None
        self.pid = None
        return time.perf_counter() - t0


def force_unmount(mnt):
    for args in (["fusermount3", "-u", mnt], ["fusermount3", "-uz", mnt]):
        if not mounted_at(mnt):
            return
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            log("%s: %s" % (" ".join(args), r.stderr.strip()))


def wait_gone(pid, timeout):
    if not pid:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                text = f.read()
            if text[text.rfind(")") + 2] == "Z":
                return
        except OSError:
            return
        time.sleep(0.02)
    log("daemon %d still running %ds after unmount" % (pid, timeout))


# ---------------------------------------------------------------------------
# Workload 1: one big file


def big_write(path, size, base):
    """1 MiB writes, fsync, close. Each block carries its index in its first 8 bytes."""
    buf = bytearray(base)
    nblocks = size // MIB
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for i in range(nblocks):
            struct.pack_into("<Q", buf, 0, i)
            mv = memoryview(buf)
            while mv:
                n = os.write(fd, mv)
                mv = mv[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def big_read(path, size, base):
    """1 MiB reads to EOF; checks every block's index and three blocks in full."""
    nblocks = size // MIB
    full_check = {0, nblocks // 2, nblocks - 1}
    buf = bytearray(MIB)
    mv = memoryview(buf)
    total = 0
    i = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            got = 0
            while got < MIB:
                n = f.readinto(mv[got:])
                if not n:
                    break
                got += n
            if got == 0:
                break
            if got != MIB or struct.unpack_from("<Q", buf, 0)[0] != i:
                raise BenchError("%s: block %d has wrong contents (%d bytes)" % (path, i, got))
            if i in full_check and mv[8:] != memoryview(base)[8:]:
                raise BenchError("%s: block %d differs from what was written" % (path, i))
            total += got
            i += 1
    if total != size:
        raise BenchError("%s: read %d bytes, expected %d" % (path, total, size))


def run_big_ckptfs(b, rep):
    store, mnt = b.path("store-big"), b.path("mnt")
    wipe(store)
    out = {"rep": rep}
    out["mount_s"] = b.fs.mount(store, mnt)
    path = os.path.join(mnt, "big.bin")
    with Meter(b.fs.pid) as m:
        big_write(path, b.big_size, b.big_base)
    out["write"] = m.as_dict()
    out["write"]["daemon_peak_rss_kb"] = b.fs.peak_rss_kb()
    out["write"]["engine"] = b.fs.engine_stats()
    out["write_umount_s"] = b.fs.umount()
    drop_caches()
    out["remount_s"] = b.fs.mount(store, mnt)
    e0 = b.fs.engine_stats()
    with Meter(b.fs.pid) as m:
        big_read(path, b.big_size, b.big_base)
    out["cold_read"] = m.as_dict()
    out["cold_read"]["engine_delta"] = delta(e0, b.fs.engine_stats())
    e0 = b.fs.engine_stats()
    with Meter(b.fs.pid) as m:
        big_read(path, b.big_size, b.big_base)
    out["warm_read"] = m.as_dict()
    out["warm_read"]["engine_delta"] = delta(e0, b.fs.engine_stats())
    out["read_daemon_peak_rss_kb"] = b.fs.peak_rss_kb()
    out["cold_read"]["daemon_peak_rss_kb"] = out["read_daemon_peak_rss_kb"]
    out["warm_read"]["daemon_peak_rss_kb"] = out["read_daemon_peak_rss_kb"]
    b.fs.umount()
    out["store_files"] = count_files(store)
    out["store_allocated_bytes"] = allocated_bytes(store)
    wipe(store)
    return out


def run_big_plain(b, rep):
    d = b.path("plain-big")
    wipe(d)
    os.makedirs(d)
    path = os.path.join(d, "big.bin")
    out = {"rep": rep}
    with Meter() as m:
        big_write(path, b.big_size, b.big_base)
    out["write"] = m.as_dict()
    drop_caches()
    with Meter() as m:
        big_read(path, b.big_size, b.big_base)
    out["cold_read"] = m.as_dict()
    with Meter() as m:
        big_read(path, b.big_size, b.big_base)
    out["warm_read"] = m.as_dict()
    wipe(d)
    return out


def run_dd(b, rep):
    path = b.path("dd.bin")
    count = b.big_size // MIB
    out = {"rep": rep}
    for phase, args in (
            ("write", ["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=%d" % count,
                       "oflag=direct", "conv=fsync"]),
            ("read", ["dd", "if=" + path, "of=/dev/null", "bs=1M", "iflag=direct"])):
        if phase == "read":
            drop_caches()
        with Meter() as m:
            r = subprocess.run(args, capture_output=True, text=True)
        wall = m.seconds
        if r.returncode != 0:
            raise BenchError("%s: %s" % (" ".join(args), r.stderr))
        # "N bytes (...) copied, S s, R MB/s": dd's own figure excludes process start.
        seconds = wall
        try:
            last = r.stderr.strip().splitlines()[-1]
            seconds = float(last.split(" copied, ")[1].split(" s")[0])
        except (IndexError, ValueError):
            pass
        out[phase] = m.as_dict()
        out[phase].update({"seconds": seconds, "wall_s": wall,
                           "dd": r.stderr.strip().splitlines()[-1]})
    os.unlink(path)
    return out


def delta(a, b):
    return {k: b[k] - a.get(k, 0) for k in b if isinstance(b[k], (int, float))}


# ---------------------------------------------------------------------------
# Workload 2: per-parameter layout


def chunk_bytes(b, k):
    data = bytearray(b.chunk_pool[k % len(b.chunk_pool)])
    struct.pack_into("<Q", data, 0, k)
    return data


def dir_name(i):
    return "params.layer_%05d.kernel" % i


def layout_create(b, root):
    """Plain Python writes, the way a zarr store writes: makedirs, open/write/close."""
    meta = json.dumps(ZARRAY, indent=4, sort_keys=True).encode()
    os.makedirs(root)
    for i in range(b.dirs):
        d = os.path.join(root, dir_name(i))
        os.makedirs(d)
        with open(os.path.join(d, ".zarray"), "wb") as f:
            f.write(meta)
        for c, name in enumerate(CHUNK_NAMES):
            with open(os.path.join(d, name), "wb") as f:
                f.write(chunk_bytes(b, i * len(CHUNK_NAMES) + c))


RESTORE_THREADS = 16


def restore_array(b, root, name):
    """Reads one array the way zarr does: its .zarray, parsed, then the chunks its
    metadata names; checks them. Returns (files, bytes)."""
    i = int(name.split("_")[1].split(".")[0])
    d = os.path.join(root, name)
    with open(os.path.join(d, ".zarray"), "rb") as f:
        raw = f.read()
    meta = json.loads(raw)
    files, nbytes = 1, len(raw)
    grid = [range(math.ceil(s / c)) for s, c in zip(meta["shape"], meta["chunks"])]
    for c, idx in enumerate(itertools.product(*grid)):
        with open(os.path.join(d, ".".join(map(str, idx))), "rb") as f:
            data = f.read()
        k = i * len(CHUNK_NAMES) + c
        if len(data) != CHUNK_BYTES or struct.unpack_from("<Q", data, 0)[0] != k:
            raise BenchError("%s chunk %d has wrong contents" % (d, c))
        if k % VERIFY_EVERY == 0 and data != chunk_bytes(b, k):
            raise BenchError("%s chunk %d differs from what was written" % (d, c))
        files += 1
        nbytes += len(data)
    return files, nbytes


def layout_restore(b, root, threads=1):
    """Lists the checkpoint dir and restores every array, with one thread or with
    `threads` threads taking one array at a time (as tensorstore/orbax and zarr
    with a thread pool do). Returns (files, bytes)."""
    names = sorted(os.listdir(root))
    if len(names) != b.dirs:
        raise BenchError("%s holds %d entries, expected %d" % (root, len(names), b.dirs))
    if threads == 1:
        done = [restore_array(b, root, name) for name in names]
    else:
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(threads) as ex:
            done = list(ex.map(lambda name: restore_array(b, root, name), names))
    return sum(f for f, _ in done), sum(n for _, n in done)


def run_layout_ckptfs(b, rep, keep):
    store, mnt = b.path("store-layout"), b.path("mnt")
    wipe(store)
    out = {"rep": rep}
    out["mount_s"] = b.fs.mount(store, mnt)
    root = os.path.join(mnt, "checkpoint")
    with Meter(b.fs.pid) as m:
        layout_create(b, root)
    out["create"] = m.as_dict()
    with Meter(b.fs.pid, quiet=False) as m:
        os.sync()
    out["create_sync"] = m.as_dict()
    out["create_engine"] = b.fs.engine_stats()
    out["create_daemon_peak_rss_kb"] = b.fs.peak_rss_kb()
    out["create_umount_s"] = b.fs.umount()
    drop_caches()
    out["remount_s"] = b.fs.mount(store, mnt)
    e0 = b.fs.engine_stats()
    with Meter(b.fs.pid) as m:
        files, nbytes = layout_restore(b, root)
    out["restore"] = m.as_dict()
    out["restore"]["engine_delta"] = delta(e0, b.fs.engine_stats())
    out["restore"]["daemon_peak_rss_kb"] = b.fs.peak_rss_kb()
    out["files"], out["bytes"] = files, nbytes
    b.fs.umount()
    drop_caches()
    b.fs.mount(store, mnt)
    with Meter(b.fs.pid) as m:
        files_p, _ = layout_restore(b, root, RESTORE_THREADS)
    out["restore_parallel"] = m.as_dict()
    if files_p != files:
        raise BenchError("parallel restore read %d files, expected %d" % (files_p, files))
    b.fs.umount()
    out["store_files"] = count_files(store)
    out["store_allocated_bytes"] = allocated_bytes(store)
    if not keep:
        wipe(store)
    return out


def run_layout_plain(b, rep, keep):
    d = b.path("plain-layout")
    wipe(d)
    root = os.path.join(d, "checkpoint")
    out = {"rep": rep}
    with Meter() as m:
        layout_create(b, root)
    out["create"] = m.as_dict()
    with Meter(quiet=False) as m:
        os.sync()
    out["create_sync"] = m.as_dict()
    drop_caches()
    with Meter() as m:
        files, nbytes = layout_restore(b, root)
    out["restore"] = m.as_dict()
    out["files"], out["bytes"] = files, nbytes
    drop_caches()
    with Meter() as m:
        layout_restore(b, root, RESTORE_THREADS)
    out["restore_parallel"] = m.as_dict()
    out["store_files"] = count_files(d)
    out["store_allocated_bytes"] = allocated_bytes(d)
    if not keep:
        wipe(d)
    return out


# ---------------------------------------------------------------------------
# Workload 4: coalescing sweep


def parse_sweep(text):
    settings = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.lower() in ("off", "0"):
            settings.append({"label": "off", "coalesce_gap": 0, "coalesce_max": None})
            continue
        gap, _, mx = item.partition("/")
        settings.append({"label": item, "coalesce_gap": parse_size(gap),
                         "coalesce_max": parse_size(mx) if mx else None})
    return settings


def run_sweep_ckptfs(b, rep, setting):
    store, mnt = b.path("store-layout"), b.path("mnt")
    opts = ["coalesce_gap=%d" % setting["coalesce_gap"]]
    if setting["coalesce_max"] is not None:
        opts.append("coalesce_max=%d" % setting["coalesce_max"])
    drop_caches()
    out = {"rep": rep, "setting": setting["label"]}
    out["mount_s"] = b.fs.mount(store, mnt, opts)
    cfg = b.fs.config()
    out["config"] = {k: cfg.get(k) for k in ("coalesce_gap", "coalesce_max", "cache_size")}
    if cfg and cfg.get("coalesce_gap") not in (None, str(setting["coalesce_gap"])):
        raise BenchError("mount -o %s: config reads back coalesce_gap=%s"
                         % (",".join(opts), cfg.get("coalesce_gap")))
    e0 = b.fs.engine_stats()
    with Meter(b.fs.pid) as m:
        files, nbytes = layout_restore(b, os.path.join(mnt, "checkpoint"))
    out["restore"] = m.as_dict()
    out["restore"]["engine_delta"] = delta(e0, b.fs.engine_stats())
    out["files"], out["bytes"] = files, nbytes
    b.fs.umount()
    return out


def run_sweep_plain(b, rep):
    drop_caches()
    out = {"rep": rep, "setting": "plain"}
    with Meter() as m:
        files, nbytes = layout_restore(b, os.path.join(b.path("plain-layout"), "checkpoint"))
    out["restore"] = m.as_dict()
    out["files"], out["bytes"] = files, nbytes
    return out


# ---------------------------------------------------------------------------
# Workload 3: real frameworks (each phase in its own /usr/bin/python3 process)

FRAMEWORKS = os.path.join(REPO, "bench", "frameworks.py")


def framework_phase(phase, d, n):
    """Runs one frameworks.py phase; returns its JSON (the timed part's seconds)."""
    r = subprocess.run([sys.executable, FRAMEWORKS, phase, d, str(n)], capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise BenchError("frameworks.py %s %s failed: %s%s" % (phase, d, r.stdout, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def fresh_target(b, who, name):
    """An empty place to write to: a fresh store mounted at WORK/mnt for "ckptfs"
    (the store is WORK/store-NAME), else the plain directory WORK/plain-NAME."""
    if who == "ckptfs":
        store = b.path("store-" + name)
        wipe(store)
        b.fs.mount(store, b.path("mnt"))
        return b.path("mnt")
    d = b.path("plain-" + name)
    wipe(d)
    os.makedirs(d)
    return d


def remove_target(b, who, name):
    """Undoes fresh_target: unmounts and deletes the store, or the plain directory."""
    if who == "ckptfs":
        b.fs.umount()
        wipe(b.path("store-" + name))
    else:
        wipe(b.path("plain-" + name))


def run_frameworks(b, rep, who):
    """torch.save + torch.load, then zarr write + read; reads cold (caches dropped,
    ckptfs remounted)."""
    out = {"rep": rep}
    for write, read, n in (("torch-save", "torch-load", b.torch_mib),
                           ("zarr-write", "zarr-read", b.zarr_arrays)):
        d = fresh_target(b, who, "fw")
        with Meter(b.fs.pid if who == "ckptfs" else None) as m:
            res = framework_phase(write, d, n)
        out[write] = dict(m.as_dict(), **res)
        if who == "ckptfs":
            b.fs.umount()
            drop_caches()
            b.fs.mount(b.path("store-fw"), d)
        else:
            drop_caches()
        with Meter(b.fs.pid if who == "ckptfs" else None) as m:
            res = framework_phase(read, d, n)
        out[read] = dict(m.as_dict(), **res)
        remove_target(b, who, "fw")
    return out


# ---------------------------------------------------------------------------
# Workload 5: concurrent writers of separate files

SCALING_WRITERS = (1, 2, 4, 8)


def scaling_write(d, writers, total, base):
    """`writers` threads each write total/writers bytes to their own file in 1 MiB
    writes and fsync it. Returns wall seconds from the first write to the last fsync."""
    import threading
    per = total // writers // MIB * MIB
    errors = []
    start = threading.Barrier(writers + 1)

    def one(k):
        try:
            start.wait()
            big_write(os.path.join(d, "w%d.bin" % k), per, base)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise BenchError("scaling writer failed: %s" % errors[0])
    for k in range(writers):
        p = os.path.join(d, "w%d.bin" % k)
        if os.path.getsize(p) != per:
            raise BenchError("%s holds %d bytes, expected %d" % (p, os.path.getsize(p), per))
        os.unlink(p)
    return seconds, per * writers


def run_scaling(b, rep, who):
    out = {"rep": rep, "runs": []}
    d = fresh_target(b, who, "scaling")
    try:
        for n in SCALING_WRITERS:
            with Meter(b.fs.pid if who == "ckptfs" else None) as m:
                seconds, nbytes = scaling_write(d, n, b.scaling_bytes, b.big_base)
            r = m.as_dict()
            r.update({"writers": n, "seconds": seconds, "bytes": nbytes})
            out["runs"].append(r)
    finally:
        remove_target(b, who, "scaling")
    return out


# ---------------------------------------------------------------------------
# Driver


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = os.path.realpath(args.work)
        self.big_size = (parse_size(args.big_size) if args.big_size else
                         (512 * MIB if args.quick else 4 * GIB)) // MIB * MIB
        self.dirs = args.dirs if args.dirs else (1000 if args.quick else 10000)
        self.torch_mib = 128 if args.quick else 1024
        self.zarr_arrays = 500 if args.quick else 5000
        self.scaling_bytes = (256 * MIB if args.quick else 2 * GIB)
        base_opts = [o for o in (args.mount_opts or "").split(",") if o]
        self.fs = Ckptfs(os.path.realpath(args.ckptfs), base_opts, args.fuse_read_ahead_kb)
        rng = random.Random(42)
        self.big_base = rng.randbytes(MIB)
        self.chunk_pool = [rng.randbytes(CHUNK_BYTES) for _ in range(64)]
        self.results = {}

    def path(self, name):
        return os.path.join(self.work, name)


def order_for(rep, items):
    k = rep % len(items)
    return items[k:] + items[:k]


def run_all(b):
    args = b.args
    wl = set(args.workloads.split(","))
    R = b.results
    if "big" in wl or "disk" in wl:
        R["big"] = {"size_bytes": b.big_size, "ckptfs": [], "plain": [], "dd": []}
        for rep in range(args.reps):
            items = []
            if "disk" in wl:
                items.append("dd")
            if "big" in wl:
                items += ["ckptfs", "plain"]
            for who in order_for(rep, items):
                log("big %s: rep %d/%d, %s" % (human_size(b.big_size), rep + 1, args.reps, who))
                fn = {"ckptfs": run_big_ckptfs, "plain": run_big_plain, "dd": run_dd}[who]
                R["big"][who].append(fn(b, rep))
    sweep_needs_tree = "sweep" in wl
    if "layout" in wl or sweep_needs_tree:
        R["layout"] = {"dirs": b.dirs, "files_per_dir": 1 + len(CHUNK_NAMES),
                       "chunk_bytes": CHUNK_BYTES, "ckptfs": [], "plain": []}
        reps = args.reps if "layout" in wl else 1
        for rep in range(reps):
            keep = sweep_needs_tree and rep == reps - 1
            for who in order_for(rep, ["ckptfs", "plain"]):
                log("layout %d dirs: rep %d/%d, %s" % (b.dirs, rep + 1, reps, who))
                fn = run_layout_ckptfs if who == "ckptfs" else run_layout_plain
                R["layout"][who].append(fn(b, rep, keep))
        if "layout" not in wl:
            R["layout"]["only_built_for_sweep"] = True
    if sweep_needs_tree:
        settings = parse_sweep(args.sweep)
        R["sweep"] = {"settings": settings, "runs": []}
        for rep in range(args.reps):
            items = ["plain"] + [s["label"] for s in settings]
            for label in order_for(rep, items):
                log("sweep: rep %d/%d, %s" % (rep + 1, args.reps, label))
                if label == "plain":
                    R["sweep"]["runs"].append(run_sweep_plain(b, rep))
                else:
                    s = next(s for s in settings if s["label"] == label)
                    R["sweep"]["runs"].append(run_sweep_ckptfs(b, rep, s))
    if "frameworks" in wl:
        R["frameworks"] = {"torch_mib": b.torch_mib, "zarr_arrays": b.zarr_arrays,
                           "threads": 16, "ckptfs": [], "plain": []}
        for rep in range(args.reps):
            for who in order_for(rep, ["ckptfs", "plain"]):
                log("frameworks: rep %d/%d, %s" % (rep + 1, args.reps, who))
                R["frameworks"][who].append(run_frameworks(b, rep, who))
    if "scaling" in wl:
        R["scaling"] = {"bytes": b.scaling_bytes, "writers": list(SCALING_WRITERS),
                        "ckptfs": [], "plain": []}
        for rep in range(args.reps):
            for who in order_for(rep, ["ckptfs", "plain"]):
                log("scaling %s: rep %d/%d, %s" % (human_size(b.scaling_bytes), rep + 1,
                                                   args.reps, who))
                R["scaling"][who].append(run_scaling(b, rep, who))


# ---------------------------------------------------------------------------
# Report


def fmt_spread(s, fmt="%.0f"):
    if not s:
        return "n/a"
    if s["n"] == 1:
        return fmt % s["median"]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (s["median"], s["min"], s["max"])


def ratio(a, b):
    if not a or not b or not b["median"]:
        return None
    return a["median"] / b["median"]


def fmt_ratio(r):
    return "n/a" if r is None else "%.2fx" % r


def fmt_pct(r):
    return "n/a" if r is None else "%.0f%%" % (100 * r)


def compute_summary(b):
    R = b.results
    S = {}
    if "big" in R:
        big = R["big"]
        size = big["size_bytes"]
        S["big"] = {}
        for who in ("ckptfs", "plain"):
            for phase in ("write", "cold_read", "warm_read"):
                S["big"]["%s_%s_MBps" % (who, phase)] = summarize(
                    [size / MB / r[phase]["seconds"] for r in big[who]])
        for phase in ("write", "cold_read", "warm_read"):
            S["big"]["%s_cpu_s_per_GiB" % phase] = summarize(
                [r[phase]["daemon_cpu_s"] / (size / GIB) for r in big["ckptfs"]
                 if r[phase]["daemon_cpu_s"] is not None])
            S["big"]["%s_peak_rss_MiB" % phase] = summarize(
                [r[phase]["daemon_peak_rss_kb"] / 1024 for r in big["ckptfs"]
                 if r[phase].get("daemon_peak_rss_kb") is not None])
            for who in ("ckptfs", "plain"):
                S["big"]["%s_%s_app_cpu_s_per_GiB" % (who, phase)] = summarize(
                    [r[phase]["client_cpu_s"] / (size / GIB) for r in big[who]])
        for phase in ("write", "read"):
            S["big"]["dd_%s_MBps" % phase] = summarize(
                [size / MB / r[phase]["seconds"] for r in big["dd"]])
    if "layout" in R:
        lay = R["layout"]
        S["layout"] = {}
        for who in ("ckptfs", "plain"):
            runs = lay[who]
            S["layout"]["%s_create_files_per_s" % who] = summarize(
                [r["files"] / r["create"]["seconds"] for r in runs])
            S["layout"]["%s_create_sync_files_per_s" % who] = summarize(
                [r["files"] / (r["create"]["seconds"] + r["create_sync"]["seconds"])
                 for r in runs])
            S["layout"]["%s_restore_files_per_s" % who] = summarize(
                [r["files"] / r["restore"]["seconds"] for r in runs])
            S["layout"]["%s_restore_parallel_files_per_s" % who] = summarize(
                [r["files"] / r["restore_parallel"]["seconds"] for r in runs
                 if "restore_parallel" in r])
            S["layout"]["%s_restore_MBps" % who] = summarize(
                [r["bytes"] / MB / r["restore"]["seconds"] for r in runs])
            S["layout"]["%s_backing_files" % who] = summarize([r["store_files"] for r in runs])
            S["layout"]["%s_allocated_MiB" % who] = summarize(
                [r["store_allocated_bytes"] / MIB for r in runs])
        for key in ("backing_reads", "coalesced_reads", "cache_hits", "backing_read_bytes"):
            S["layout"]["ckptfs_restore_" + key] = summarize(
                [r["restore"]["engine_delta"].get(key) for r in lay["ckptfs"]])
        S["layout"]["ckptfs_create_daemon_cpu_s"] = summarize(
            [r["create"]["daemon_cpu_s"] for r in lay["ckptfs"]])
        S["layout"]["ckptfs_restore_daemon_cpu_s"] = summarize(
            [r["restore"]["daemon_cpu_s"] for r in lay["ckptfs"]])
    if "sweep" in R:
        sw = R["sweep"]
        S["sweep"] = {}
        for label in ["plain"] + [s["label"] for s in sw["settings"]]:
            runs = [r for r in sw["runs"] if r["setting"] == label]
            e = {"restore_s": summarize([r["restore"]["seconds"] for r in runs]),
                 "files_per_s": summarize([r["files"] / r["restore"]["seconds"] for r in runs])}
            if label != "plain":
                for key in ("backing_reads", "coalesced_reads", "cache_hits",
                            "backing_read_bytes"):
                    e[key] = summarize([r["restore"]["engine_delta"].get(key) for r in runs])
                e["daemon_cpu_s"] = summarize([r["restore"]["daemon_cpu_s"] for r in runs])
            S["sweep"][label] = e
    if "frameworks" in R:
        fw = R["frameworks"]
        S["frameworks"] = {}
        for phase in FRAMEWORK_PHASES:
            for who in ("ckptfs", "plain"):
                runs = [r[phase] for r in fw[who]]
                S["frameworks"]["%s_%s_MBps" % (who, phase)] = summarize(
                    [r["bytes"] / MB / r["seconds"] for r in runs])
                S["frameworks"]["%s_%s_s" % (who, phase)] = summarize(
                    [r["seconds"] for r in runs])
    if "scaling" in R:
        sc = R["scaling"]
        S["scaling"] = {}
        for n in sc["writers"]:
            for who in ("ckptfs", "plain"):
                S["scaling"]["%s_%d_MBps" % (who, n)] = summarize(
                    [x["bytes"] / MB / x["seconds"] for r in sc[who] for x in r["runs"]
                     if x["writers"] == n])
    others = [m["other_cpu_cores"] for m in iter_meters(R, skip_keys=("create_sync",))
              if m.get("other_cpu_cores") is not None and m.get("counts_for_contention", True)]
    S["other_cpu_cores"] = summarize(others)
    S["quiet_wait_s"] = sum(m.get("quiet_wait_s") or 0 for m in iter_meters(R))
    R["summary"] = S
    return S


def iter_meters(obj, skip_keys=()):
    """Every Meter record (a dict with "other_cpu_cores") inside the results,
    leaving out the subtrees under `skip_keys`."""
    if isinstance(obj, dict):
        if "other_cpu_cores" in obj:
            yield obj
        for k, v in obj.items():
            if k != "summary" and k not in skip_keys:
                yield from iter_meters(v, skip_keys)
    elif isinstance(obj, list):
        for v in obj:
            yield from iter_meters(v, skip_keys)


def render_markdown(b):
    R, S = b.results, b.results["summary"]
    env = R["env"]
    L = []
    L.append("# ckptfs mount benchmark")
    L.append("")
    L.append("%s, %s, kernel %s, %d CPUs, %.0f GiB RAM; work dir %s (%s on %s); "
             "ckptfs %s; mount options: %s; FUSE read_ahead_kb %s; %d repetitions%s; "
             "median (min-max)."
             % (env["date"], env["host"], env["kernel"], env["cpus"], env["mem_gib"],
                env["work"], env["work_fs"], env["work_dev"], env["ckptfs_rev"],
                env["mount_opts"] or "defaults", env.get("fuse_read_ahead_kb", "?"),
                env["reps"],
                ", --priority (nice -20, realtime I/O)" if env.get("priority") else ""))
    L.append("Ratios are ckptfs/plain as throughput (>1: ckptfs faster); \"% of disk\" is "
             "relative to dd with O_DIRECT on the same disk.")
    oc = S.get("other_cpu_cores")
    if oc:
        L.append("")
        L.append("CPU used by other processes and kernel threads during the timed phases "
                 "(sync phases left out): "
                 "median %.2f, max %.2f cores of %d%s." % (
                     oc["median"], oc["max"], env["cpus"],
                     (" (waited %.0f s for quiet)" % S["quiet_wait_s"]) if S["quiet_wait_s"] else ""))
        if oc["median"] > 0.25 or oc["max"] > 0.5 * env["cpus"]:
            L.append("**Warning: the host was busy with other work during this run; "
                     "treat the figures as skewed (other_cpu_cores in results.json says "
                     "which phases); rerun when it is quiet, or with --priority or "
                     "--wait-quiet.**")
    if "big" in S and R["big"]["ckptfs"]:
        s = S["big"]
        size = R["big"]["size_bytes"]
        L.append("")
        L.append("## 1. Big file: %s in 1 MiB writes + fsync, 1 MiB reads (MB/s)"
                 % human_size(size))
        L.append("")
        L.append("| phase | plain | ckptfs | ckptfs/plain | plain % of disk | ckptfs % of disk |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for phase, label, dd in (("write", "write + fsync", "dd_write_MBps"),
                                 ("cold_read", "cold read", "dd_read_MBps"),
                                 ("warm_read", "warm read", "dd_read_MBps")):
            p, c = s["plain_%s_MBps" % phase], s["ckptfs_%s_MBps" % phase]
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                label, fmt_spread(p), fmt_spread(c), fmt_ratio(ratio(c, p)),
                fmt_pct(ratio(p, s.get(dd))), fmt_pct(ratio(c, s.get(dd)))))
    if "layout" in S and not R["layout"].get("only_built_for_sweep"):
        s = S["layout"]
        lay = R["layout"]
        nfiles = lay["dirs"] * lay["files_per_dir"]
        L.append("")
        L.append("## 2. Per-parameter layout: %d dirs x (.zarray + %d x %d KiB chunks) "
                 "= %d files" % (lay["dirs"], len(CHUNK_NAMES), CHUNK_BYTES // 1024, nfiles))
        L.append("")
        L.append("| metric | plain | ckptfs | ckptfs/plain |")
        L.append("|---|---:|---:|---:|")
        for key, label in (("create_files_per_s", "create, files/s"),
                           ("create_sync_files_per_s", "create + sync, files/s"),
                           ("restore_files_per_s", "cold restore, files/s"),
                           ("restore_MBps", "cold restore, MB/s"),
                           ("restore_parallel_files_per_s",
                            "cold restore, %d threads, files/s" % RESTORE_THREADS)):
            p, c = s["plain_" + key], s["ckptfs_" + key]
            L.append("| %s | %s | %s | %s |" % (label, fmt_spread(p), fmt_spread(c),
                                                fmt_ratio(ratio(c, p))))
        L.append("| files in backing directory | %s | %s | |" % (
            fmt_spread(s["plain_backing_files"]), fmt_spread(s["ckptfs_backing_files"])))
        L.append("| disk allocated, MiB | %s | %s | |" % (
            fmt_spread(s["plain_allocated_MiB"], "%.1f"),
            fmt_spread(s["ckptfs_allocated_MiB"], "%.1f")))
        L.append("| backing_reads during restore | | %s | |"
                 % fmt_spread(s["ckptfs_restore_backing_reads"]))
        L.append("| coalesced_reads during restore | | %s | |"
                 % fmt_spread(s["ckptfs_restore_coalesced_reads"]))
        L.append("")
        L.append("Restore lists the checkpoint dir, then reads each array: its .zarray "
                 "(parsed), then the chunks it names; with one thread, or with %d threads "
                 "taking one array at a time (as tensorstore or a zarr thread pool do). "
                 "Before each restore all caches are dropped and ckptfs is remounted, with "
                 "default coalescing (%s/%s)." % (
                     RESTORE_THREADS, env.get("default_coalesce_gap", "?"),
                     env.get("default_coalesce_max", "?")))
    L += render_frameworks(b)
    if "sweep" in S:
        s = S["sweep"]
        plain = s["plain"]["restore_s"]
        L.append("")
        L.append("## 4. Coalescing sweep: cold restore of workload 2 (%d files)"
                 % (R["layout"]["dirs"] * R["layout"]["files_per_dir"]))
        L.append("")
        L.append("| coalesce_gap/coalesce_max | restore s | files/s | ckptfs/plain "
                 "| backing_reads | coalesced_reads | backing MB read | daemon CPU s |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        L.append("| plain directory | %s | %s | 1.00x | | | | |" % (
            fmt_spread(plain, "%.2f"), fmt_spread(s["plain"]["files_per_s"])))
        for st in R["sweep"]["settings"]:
            e = s[st["label"]]
            r = ratio(plain, e["restore_s"])
            bytes_mb = None
            if e["backing_read_bytes"]:
                bytes_mb = {k: (v / MB if k != "n" and k != "values" else v)
                            for k, v in e["backing_read_bytes"].items()}
                bytes_mb["values"] = [v / MB for v in e["backing_read_bytes"]["values"]]
            label = ("off (gap=0)" if st["label"] == "off" else st["label"])
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                label, fmt_spread(e["restore_s"], "%.2f"), fmt_spread(e["files_per_s"]),
                fmt_ratio(r), fmt_spread(e["backing_reads"]),
                fmt_spread(e["coalesced_reads"]), fmt_spread(bytes_mb, "%.1f"),
                fmt_spread(e["daemon_cpu_s"], "%.2f")))
        L.append("")
        L.append("Plot: coalescing.png.")
    L += render_scaling(b)
    if "big" in S and S["big"].get("dd_write_MBps"):
        s = S["big"]
        L.append("")
        L.append("## 6. Disk limit: dd, O_DIRECT, bs=1M, %s (MB/s)"
                 % human_size(R["big"]["size_bytes"]))
        L.append("")
        L.append("| phase | MB/s |")
        L.append("|---|---:|")
        L.append("| write (oflag=direct conv=fsync) | %s |" % fmt_spread(s["dd_write_MBps"]))
        L.append("| read (iflag=direct) | %s |" % fmt_spread(s["dd_read_MBps"]))
    if "big" in S and R["big"]["ckptfs"]:
        s = S["big"]
        L.append("")
        L.append("## 7. Daemon resources during workload 1")
        L.append("")
        L.append("| phase | daemon CPU s/GiB | daemon peak RSS (VmHWM, MiB) "
                 "| app CPU s/GiB, ckptfs | app CPU s/GiB, plain |")
        L.append("|---|---:|---:|---:|---:|")
        for phase, label in (("write", "write + fsync"), ("cold_read", "cold read"),
                             ("warm_read", "warm read")):
            L.append("| %s | %s | %s | %s | %s |" % (
                label, fmt_spread(s["%s_cpu_s_per_GiB" % phase], "%.2f"),
                fmt_spread(s["%s_peak_rss_MiB" % phase]),
                fmt_spread(s["ckptfs_%s_app_cpu_s_per_GiB" % phase], "%.2f"),
                fmt_spread(s["plain_%s_app_cpu_s_per_GiB" % phase], "%.2f")))
        L.append("")
        L.append("Peak RSS is the daemon's VmHWM since its mount: the write daemon is "
                 "mounted fresh for the write; the read daemon for the cold+warm reads. "
                 "App CPU is the benchmark process itself (user+system: the kernel's "
                 "copies and FUSE round trips are charged here).")
    return "\n".join(L) + "\n"


# (phase, label, dd phase for "% of disk")
FRAMEWORK_PHASES = ("torch-save", "torch-load", "zarr-write", "zarr-read")
FRAMEWORK_LABELS = {
    "torch-save": ("torch.save + fsync", "dd_write_MBps"),
    "torch-load": ("torch.load, cold", "dd_read_MBps"),
    "zarr-write": ("zarr write, 16 threads", "dd_write_MBps"),
    "zarr-read": ("zarr read, 16 threads, cold", "dd_read_MBps"),
}


def render_frameworks(b):
    R, S = b.results, b.results["summary"]
    if "frameworks" not in S:
        return []
    s, fw = S["frameworks"], R["frameworks"]
    dd = S.get("big", {})
    L = ["", "## 3. Real frameworks: torch.save/load of a %s state dict; zarr, %d arrays "
         "(%d files) by %d threads (MB/s)"
         % (human_size(fw["torch_mib"] * MIB), fw["zarr_arrays"], fw["zarr_arrays"] * 5 + 1,
            fw["threads"]), "",
         "| phase | plain | ckptfs | ckptfs/plain | plain s | ckptfs s | ckptfs % of disk |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for phase in FRAMEWORK_PHASES:
        label, ddkey = FRAMEWORK_LABELS[phase]
        p, c = s["plain_%s_MBps" % phase], s["ckptfs_%s_MBps" % phase]
        L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt_spread(p), fmt_spread(c), fmt_ratio(ratio(c, p)),
            fmt_spread(s["plain_%s_s" % phase], "%.2f"),
            fmt_spread(s["ckptfs_%s_s" % phase], "%.2f"), fmt_pct(ratio(c, dd.get(ddkey)))))
    L += ["", "Each phase runs in its own /usr/bin/python3 process (bench/frameworks.py); "
          "the time covers the framework's calls only (torch.save includes an fsync of the "
          "file). Reads are cold: caches dropped, ckptfs remounted."]
    return L


def render_scaling(b):
    R, S = b.results, b.results["summary"]
    if "scaling" not in S:
        return []
    s, sc = S["scaling"], R["scaling"]
    dd = S.get("big", {}).get("dd_write_MBps")
    L = ["", "## 5. Scaling: N threads writing separate files, %s in all, 1 MiB writes + "
         "fsync (aggregate MB/s)" % human_size(sc["bytes"]), "",
         "| writers | plain | ckptfs | ckptfs/plain | ckptfs % of disk |",
         "|---:|---:|---:|---:|---:|"]
    for n in sc["writers"]:
        p, c = s["plain_%d_MBps" % n], s["ckptfs_%d_MBps" % n]
        L.append("| %d | %s | %s | %s | %s |" % (n, fmt_spread(p), fmt_spread(c),
                                                 fmt_ratio(ratio(c, p)), fmt_pct(ratio(c, dd))))
    L += ["", "Plot: scaling.png."]
    return L


def pyplot():
    """matplotlib.pyplot without a display (Debian's python3-matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_scaling(b, path):
    S = b.results["summary"].get("scaling")
    if not S:
        return False
    plt = pyplot()
    writers = b.results["scaling"]["writers"]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for who, color in (("plain", "#c44e52"), ("ckptfs", "#4c72b0")):
        med = [S["%s_%d_MBps" % (who, n)]["median"] for n in writers]
        lo = [m - S["%s_%d_MBps" % (who, n)]["min"] for m, n in zip(med, writers)]
        hi = [S["%s_%d_MBps" % (who, n)]["max"] - m for m, n in zip(med, writers)]
        ax.errorbar(writers, med, yerr=[lo, hi], marker="o", capsize=4, color=color,
                    label="plain directory" if who == "plain" else "ckptfs")
    dd = b.results["summary"].get("big", {}).get("dd_write_MBps")
    if dd:
        ax.axhline(dd["median"], color="gray", linestyle=":",
                   label="disk limit, dd O_DIRECT write (%.0f MB/s)" % dd["median"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(writers)
    ax.set_xticklabels([str(n) for n in writers])
    ax.set_xlabel("concurrent writers (separate files)")
    ax.set_ylabel("aggregate write + fsync, MB/s (median, min-max)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("ckptfs writer scaling: %s in all" % human_size(b.results["scaling"]["bytes"]),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_sweep(b, path):
    S = b.results["summary"].get("sweep")
    if not S:
        return False
    plt = pyplot()
    settings = [s["label"] for s in b.results["sweep"]["settings"]]
    med = [S[l]["restore_s"]["median"] for l in settings]
    lo = [S[l]["restore_s"]["median"] - S[l]["restore_s"]["min"] for l in settings]
    hi = [S[l]["restore_s"]["max"] - S[l]["restore_s"]["median"] for l in settings]
    reads = [S[l]["backing_reads"]["median"] if S[l]["backing_reads"] else 0 for l in settings]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    x = range(len(settings))
    ax.bar(x, med, yerr=[lo, hi], capsize=4, color="#4c72b0", label="ckptfs cold restore")
    p = S["plain"]["restore_s"]
    ax.axhline(p["median"], color="#c44e52", linestyle="--",
               label="plain directory (%.2f s)" % p["median"])
    ax.axhspan(p["min"], p["max"], color="#c44e52", alpha=0.12)
    ax.set_xticks(list(x))
    ax.set_xticklabels([("off" if l == "off" else l) for l in settings])
    ax.set_xlabel("coalesce_gap / coalesce_max")
    ax.set_ylabel("cold restore time, s (median, min-max)")
    ax2 = ax.twinx()
    ax2.plot(list(x), reads, "o-", color="#dd8452", label="backing reads")
    ax2.set_ylabel("backing reads (median)")
    ax2.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              fontsize=8, frameon=False)
    lay = b.results["layout"]
    ax.set_title("ckptfs coalescing sweep: %d dirs, %d files"
                 % (lay["dirs"], lay["dirs"] * lay["files_per_dir"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


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


def write_report(b, out):
    compute_summary(b)
    md = render_markdown(b)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(b.results, f, indent=1)
    if plot_sweep(b, os.path.join(out, "coalescing.png")):
        log("wrote %s" % os.path.join(out, "coalescing.png"))
    if plot_scaling(b, os.path.join(out, "scaling.png")):
        log("wrote %s" % os.path.join(out, "scaling.png"))
    return md


def report_only(out):
    b = Bench.__new__(Bench)
    with open(os.path.join(out, "results.json")) as f:
        b.results = json.load(f)
    print(write_report(b, out))


def main():
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
    args = ap.parse_args()
    global QUIET_WAIT_S
    QUIET_WAIT_S = args.wait_quiet

    if args.report_only:
        return report_only(args.report_only)
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

    if args.priority:
        # Inherited by every child: dd, `ckptfs mount` and so the daemons.
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        r = subprocess.run(["ionice", "-c", "1", "-n", "0", "-p", str(os.getpid())],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log("ionice failed: %s" % r.stderr.strip())

    b = Bench(args)
    os.makedirs(b.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    if mounted_at(b.path("mnt")):
        log("unmounting a leftover mount at %s" % b.path("mnt"))
        subprocess.run([b.fs.binary, "umount", b.path("mnt")], capture_output=True)
        force_unmount(b.path("mnt"))
    need = (2 * b.big_size + 2 * GIB) if ("big" in args.workloads or "disk" in args.workloads) \
        else GIB
    free = shutil.disk_usage(b.work).free
    if free < need:
        sys.exit("mount_bench: %s has %.1f GiB free, need %.1f GiB"
                 % (b.work, free / GIB, need / GIB))
    fstype, _ = fs_of(b.work)
    if fstype in ("tmpfs", "ramfs", "overlay"):
        log("warning: %s is on %s, not a disk: figures will not mean much" % (b.work, fstype))

    b.results["env"] = environment(b)

    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)

    t0 = time.perf_counter()
    ok = False
    try:
        # The mount's default coalescing, for the report.
        b.fs.mount(b.path("store-probe"), b.path("mnt"))
        cfg = b.fs.config()
        b.results["env"]["default_coalesce_gap"] = human_size(int(cfg.get("coalesce_gap", 0)))
        b.results["env"]["default_coalesce_max"] = human_size(int(cfg.get("coalesce_max", 0)))
        b.results["env"]["default_config"] = cfg
        b.results["env"]["fuse_read_ahead_kb"] = b.fs.bdi_read_ahead_kb()
        b.fs.umount()
        wipe(b.path("store-probe"))
        run_all(b)
        ok = True
    finally:
        try:
            b.fs.umount()
        finally:
            if mounted_at(b.path("mnt")):
                force_unmount(b.path("mnt"))
            if not args.keep and not mounted_at(b.path("mnt")):
                for name in ("store-big", "plain-big", "store-layout", "plain-layout",
                             "store-probe", "dd.bin", "store-fw", "plain-fw",
                             "store-scaling", "plain-scaling"):
                    p = b.path(name)
                    if os.path.isdir(p):
                        shutil.rmtree(p, ignore_errors=True)
                    elif os.path.lexists(p):
                        os.unlink(p)
        b.results["env"]["elapsed_s"] = time.perf_counter() - t0
        b.results["env"]["completed"] = ok
        with open("/proc/loadavg") as f:
            b.results["env"]["loadavg_end"] = f.read().split()[:3]
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(b.results, f, indent=1)

    b.results["env"]["elapsed_s"] = time.perf_counter() - t0
    md = write_report(b, args.out)
    print(md)
    log("results in %s (results.md, results.json); %.0f s" % (args.out,
                                                               b.results["env"]["elapsed_s"]))


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        sys.exit("mount_bench: %s" % e)
