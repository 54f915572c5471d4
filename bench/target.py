"""What mount_bench.py measures: a ckptfs mount, mounted and unmounted through
the mount harness of the tests (tests/mount/ckptfs_harness.py), which
always unmounts, also on errors, Ctrl-C, SIGTERM and SIGKILL; and the plain
directory beside it."""

import os
import shutil
import sys

from measure import BenchError, log, proc_cpu_s, proc_status_kb

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


class Ckptfs:
    """Mounts one store at a time at one mountpoint, with the same options
    (`base_opts`, "k=v" strings) for every mount."""

    def __init__(self, binary, base_opts, read_ahead_kb=None):
        self.binary = binary
        self.base_opts = base_opts
        self.read_ahead_kb = read_ahead_kb  # set the mount's bdi readahead when not None
        self.m = None  # the harness.Mount while mounted

    @property
    def mnt(self):
        return self.m.mnt if self.m else None

    @property
    def pid(self):
        """The daemon's pid while mounted."""
        return self.m.pid if self.m else None

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

    def peak_rss_kb(self):
        return proc_status_kb(self.pid, "VmHWM") if self.pid else None

    def cpu_s(self):
        return proc_cpu_s(self.pid) if self.pid else None

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

    def unmount_leftover(self, mnt):
        """Unmounts what an earlier, killed run may have left mounted at `mnt`."""
        if harness.is_mounted(mnt):
            log("unmounting a leftover mount at %s" % mnt)
            harness.fuse_unmount(mnt, binary=self.binary)
        return not harness.is_mounted(mnt)


def fresh_target(b, who, name, extra_opts=()):
    """An empty place to write to: a fresh store mounted at WORK/mnt for "ckptfs"
    (the store is WORK/store-NAME, mounted with `extra_opts` besides the
    bench's own), else the plain directory WORK/plain-NAME."""
    if who == "ckptfs":
        store = b.path("store-" + name)
        wipe(store)
        b.fs.mount(store, b.path("mnt"), extra_opts)
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
