"""Units, sizes and measuring the machine for mount_bench.py: wall time and the
CPU of the benchmark, the daemon and everyone else over a phase (Meter),
dropping caches, counting files and allocated bytes."""

import errno
import os
import statistics
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
MB = 1e6  # throughput figures are in MB/s (10^6 bytes), like dd


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


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


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


def proc_storage_read_bytes(pid):
    """Bytes a process had the storage read for it (/proc/PID/io read_bytes:
    reads the page cache answered are not counted); None when unknown."""
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


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


# Where the guest's kernel hands free memory back to its host (free page
# reporting with this counter, as on the benchmark VM): a page handed back
# costs a fault in the host at its next first touch, charged to whoever
# touches it (for a read through FUSE, the daemon's copy into the page cache).
REPORTED_KIB = "/sys/module/page_reporting/parameters/reported_kib"


def reported_kib():
    """KiB of free memory the guest has reported to its host so far; None where
    the kernel does not count them."""
    try:
        with open(REPORTED_KIB) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


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
        self.r0 = reported_kib()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        h1 = host_cpu()
        c1 = os.times()
        d1 = proc_cpu_s(self.pid) if self.pid else None
        r1 = reported_kib()
        self.reported_mib = (r1 - self.r0) / 1024 if (r1 is not None and self.r0 is not None) else None
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
                "reported_to_host_MiB": self.reported_mib,
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


def disk_of(path):
    """"MAJ:MIN" of the whole disk that holds `path` (throttles apply to disks,
    not partitions)."""
    dev = os.stat(path).st_dev
    sysdir = "/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev))
    if os.path.exists(os.path.join(sysdir, "partition")):
        with open(os.path.join(os.path.realpath(sysdir), "..", "dev")) as f:
            return f.read().strip()
    return "%d:%d" % (os.major(dev), os.minor(dev))


class ReadThrottle:
    """A cgroup whose reads from the disk holding `path` are limited to `iops`
    and `bps`, like a cloud volume: cgroup v1 blkio.throttle.* where mounted,
    else cgroup v2 io.max. join(pid) moves a process (all its threads) in;
    leaving the context moves them back and removes the cgroup."""

    V1 = "/sys/fs/cgroup/blkio"
    V2 = "/sys/fs/cgroup"

    def __init__(self, path, iops, bps, name="ckptfs-bench-cloud"):
        self.disk = disk_of(path)
        self.iops, self.bps = iops, bps
        if os.path.exists(os.path.join(self.V1, "blkio.throttle.read_iops_device")):
            self.root, self.v2 = self.V1, False
        elif os.path.exists(os.path.join(self.V2, "cgroup.controllers")):
            self.root, self.v2 = self.V2, True
        else:
            raise BenchError("no cgroup blkio (v1) or io (v2) controller to throttle reads")
        self.dir = os.path.join(self.root, name)
        self.members = []

    def __enter__(self):
        os.makedirs(self.dir, exist_ok=True)
        if self.v2:
            with open(os.path.join(self.root, "cgroup.subtree_control"), "w") as f:
                f.write("+io\n")
            with open(os.path.join(self.dir, "io.max"), "w") as f:
                f.write("%s riops=%d rbps=%d\n" % (self.disk, self.iops, self.bps))
        else:
            for key, value in (("read_iops_device", self.iops), ("read_bps_device", self.bps)):
                with open(os.path.join(self.dir, "blkio.throttle." + key), "w") as f:
                    f.write("%s %d\n" % (self.disk, value))
        return self

    def join(self, pid):
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write("%d\n" % pid)
        self.members.append(pid)

    def __exit__(self, *exc):
        for pid in self.members:
            try:
                with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                    f.write("%d\n" % pid)
            except OSError:
                pass  # gone
        self.members = []
        # A member that is exiting stays listed until it is reaped: EBUSY
        # for a moment.
        deadline = time.monotonic() + 5
        while True:
            try:
                os.rmdir(self.dir)
                break
            except OSError as e:
                if e.errno == errno.EBUSY and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                log("cannot remove cgroup %s: %s" % (self.dir, e))
                break
        return False
