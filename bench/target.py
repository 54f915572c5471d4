"""What mount_bench.py measures: a ckptfs mount; the plain directory beside
it; and the FUSE floor, libfuse's example passthrough_hp mirroring a
directory on the same disk. Both mounts are mounted and unmounted through the
mount harness of the tests (tests/mount/ckptfs_harness.py), which always
unmounts, also on errors, Ctrl-C, SIGTERM and SIGKILL."""

import os
import shutil
import sys
import time

from measure import BenchError, drop_caches, log, proc_cpu_s, proc_status_kb

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CKPTFS = os.path.join(REPO, "build-bench", "tools", "ckptfs")
BUILD_HINT = ("cmake -S {r} -B {r}/build-bench -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo && "
              "ninja -C {r}/build-bench ckptfs").format(r=REPO)

sys.path.insert(0, os.path.join(REPO, "tests", "mount"))
import ckptfs_harness as harness  # noqa: E402


def wipe(path):
    """Deletes `path` (a directory or a file); refuses when anything is mounted there."""
    if harness.mounts_under(path):
        raise BenchError("refusing to delete %s: something is mounted there" % path)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


class Daemon:
    """What the two mounts have in common: one mount at a time, its daemon's
    pid, CPU and peak memory, and a cold start."""

    pid = None  # the daemon's pid while mounted
    umount_binary = None  # unmounts with `BINARY umount MNT`; None: fusermount3 -u

    def peak_rss_kb(self):
        return proc_status_kb(self.pid, "VmHWM") if self.pid else None

    def cpu_s(self):
        return proc_cpu_s(self.pid) if self.pid else None

    def remount_cold(self):
        """Unmounts, drops the caches and mounts the same again, so that
        neither the kernel nor the daemon holds anything of it."""
        where = self.where()
        self.umount()
        drop_caches()
        self.mount(*where)

    def unmount_leftover(self, mnt):
        """Unmounts what an earlier, killed run may have left mounted at `mnt`."""
        if harness.is_mounted(mnt):
            log("unmounting a leftover mount at %s" % mnt)
            harness.fuse_unmount(mnt, binary=self.umount_binary)
        return not harness.is_mounted(mnt)


class Ckptfs(Daemon):
    """Mounts one store at a time at one mountpoint, with the same options
    (`base_opts`, "k=v" strings) for every mount."""

    def __init__(self, binary, base_opts, read_ahead_kb=None):
        self.binary = self.umount_binary = binary
        self.base_opts = base_opts
        self.read_ahead_kb = read_ahead_kb  # set the mount's bdi readahead when not None
        self.m = None  # the harness.Mount while mounted
        self.extra_opts = ()

    @property
    def mnt(self):
        return self.m.mnt if self.m else None

    @property
    def pid(self):
        """The daemon's pid while mounted."""
        return self.m.pid if self.m else None

    def where(self):
        """mount()'s arguments for the store mounted now."""
        return self.m.store, self.m.mnt, self.extra_opts

    def mount(self, store, mnt, extra_opts=()):
        """Mounts `store` on `mnt`; returns the seconds `ckptfs mount` took."""
        if self.m:
            raise BenchError("already mounted at %s" % self.m.mnt)
        m = harness.Mount(store, mnt, list(self.base_opts) + list(extra_opts), self.binary)
        try:
            m.mount()
        except harness.HarnessError as e:
            raise BenchError(str(e))
        self.m = m
        self.extra_opts = tuple(extra_opts)
        if self.read_ahead_kb is not None:
            with open(self.bdi_path("read_ahead_kb"), "w") as f:
                f.write("%d\n" % self.read_ahead_kb)
        return m.mount_seconds

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
        return self.m.stats()

    def engine_stats(self):
        st = self.stats()
        return dict(st.get("engine", st))

    def requests(self):
        """The FUSE requests the mount has answered so far, by kind, and "all"."""
        ops = dict(self.stats()["fs"]["ops"])
        ops["all"] = sum(ops.values())
        return ops

    def config(self):
        """MNT/.ckptfs/config as a dict."""
        return self.m.config()

    def umount(self):
        """Unmounts and waits for the daemon to exit. Returns seconds taken."""
        if not self.m:
            return 0.0
        m, self.m = self.m, None
        try:
            m.unmount()
        except harness.HarnessError as e:
            log("unmount of %s: %s" % (m.mnt, e))
        return m.unmount_seconds


class FuseFloor(Daemon):
    """The FUSE floor: libfuse's example passthrough_hp (bench/CMakeLists.txt
    builds it) mirroring a source directory, one at a time, as ckptfs's
    default mount serves files: through the daemon (`--nopassthrough`), with
    the kernel's write-back cache and long cache timeouts: what any FUSE
    filesystem costs on this kernel. It runs in the foreground, so that the
    benchmark holds its pid; its output goes to `log_path`."""

    ARGS = ("--foreground", "--nopassthrough")

    def __init__(self, binary, log_path):
        self.binary = binary
        self.log_path = log_path
        self.mounted = None  # (source, mountpoint) while mounted
        self.pid = None

    @property
    def mnt(self):
        return self.mounted[1] if self.mounted else None

    def command(self, src, mnt):
        return [self.binary] + list(self.ARGS) + [src, mnt]

    def where(self):
        return self.mounted

    def mount(self, src, mnt):
        """Mirrors `src` on `mnt`; returns the seconds until the mount was up."""
        if self.mounted:
            raise BenchError("already mounted at %s" % self.mnt)
        try:
            self.pid, seconds = harness.session().mount_command(
                self.command(src, mnt), mnt, self.log_path, source=src)
        except harness.HarnessError as e:
            raise BenchError(str(e))
        self.mounted = (src, mnt)
        return seconds

    def output(self):
        """What the daemons wrote to their log, the harness's command lines left out."""
        try:
            with open(self.log_path, errors="replace") as f:
                return [l.rstrip() for l in f if l.strip() and not l.startswith("====")]
        except FileNotFoundError:
            return []

    def umount(self):
        """Unmounts (fusermount3 -u, retried while busy, then -uz) and waits for
        the daemon to exit. Returns seconds taken."""
        if not self.mounted:
            return 0.0
        mnt, self.mounted, self.pid = self.mnt, None, None
        t0 = time.monotonic()
        try:
            harness.session().unmount(mnt)
        except harness.HarnessError as e:
            log("unmount of %s: %s" % (mnt, e))
        return time.monotonic() - t0


def mount_of(b, who):
    """The mount behind `who` ("ckptfs" or "floor"); None for the plain directory."""
    return {"ckptfs": b.fs, "floor": b.floor}.get(who)


def daemon_pid(b, who):
    """The pid of the daemon serving `who` (None for the plain directory)."""
    m = mount_of(b, who)
    return m.pid if m else None


def make_cold(b, who):
    """Before a cold read: the caches dropped and a mount started afresh."""
    m = mount_of(b, who)
    if m:
        m.remount_cold()
    else:
        drop_caches()


# Where fresh_target puts each one's files, and the mountpoint of the mounts.
BACKING = {"ckptfs": "store-", "floor": "floor-", "plain": "plain-"}
MOUNTPOINT = {"ckptfs": "mnt", "floor": "mnt-floor"}


def fresh_target(b, who, name, extra_opts=()):
    """An empty place to write to: for "ckptfs" a fresh store WORK/store-NAME
    mounted at WORK/mnt (with `extra_opts` besides the bench's own); for
    "floor" the fresh directory WORK/floor-NAME mirrored at WORK/mnt-floor;
    else the plain directory WORK/plain-NAME."""
    d = b.path(BACKING[who] + name)
    wipe(d)
    if who == "ckptfs":
        b.fs.mount(d, b.path(MOUNTPOINT[who]), extra_opts)
        return b.path(MOUNTPOINT[who])
    os.makedirs(d)
    if who == "floor":
        b.floor.mount(d, b.path(MOUNTPOINT[who]))
        return b.path(MOUNTPOINT[who])
    return d


def remove_target(b, who, name):
    """Undoes fresh_target: unmounts, and deletes the store or the directory."""
    m = mount_of(b, who)
    if m:
        m.umount()
    wipe(b.path(BACKING[who] + name))
