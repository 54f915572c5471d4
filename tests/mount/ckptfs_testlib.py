"""Helpers for Python tests that mount ckptfs for real (kernel FUSE).

    import ckptfs_testlib as lib
    lib.require_fuse()                 # exits 77 (ctest SKIP) without /dev/fuse
    lib.start_watchdog(240)            # hard deadline: unmount, dump stacks, exit
    tmp = lib.make_tmpdir()            # fresh directory under /tmp, removed at exit
    m = lib.Mount(tmp + "/store", tmp + "/mnt", ["coalesce_gap=0"])
    m.mount(); ...; m.remount(); ...; m.unmount()

The binary comes from $CKPTFS_BIN. Every mount made here is unmounted when the
process ends, whatever the way: Mount.unmount in the tests' finally blocks, an
atexit hook, SIGTERM/SIGHUP turned into KeyboardInterrupt (like SIGINT), and a
watchdog thread that unmounts lazily and exits when a test hangs past its
deadline. Temporary
directories are removed only when nothing is mounted under them.
"""

import atexit
import errno
import faulthandler
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SKIP = 77  # ctest SKIP_RETURN_CODE

_mounts = []  # live Mount objects
_tmpdirs = []  # directories from make_tmpdir
_lock = threading.RLock()


def ckptfs_bin():
    b = os.environ.get("CKPTFS_BIN")
    if not b:
        here = os.path.dirname(os.path.abspath(__file__))
        b = os.path.join(here, "..", "..", "build-mt", "tools", "ckptfs")
    b = os.path.abspath(b)
    if not os.access(b, os.X_OK):
        sys.exit("ckptfs binary %s is missing: set CKPTFS_BIN" % b)
    return b


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def require_fuse(root=False):
    """Exits with SKIP when real mounts are impossible here."""
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        print("SKIP: needs /dev/fuse and fusermount3")
        sys.exit(SKIP)
    if root and os.geteuid() != 0:
        print("SKIP: needs root")
        sys.exit(SKIP)


def make_tmpdir(prefix="ckptfs-mt-"):
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    with _lock:
        _tmpdirs.append(d)
    return d


def mounts_under(path):
    """Mountpoints in /proc/mounts at or below `path`."""
    path = os.path.realpath(path).rstrip("/") + "/"
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            mp = line.split()[1].replace("\\040", " ")
            if (mp.rstrip("/") + "/").startswith(path):
                out.append(mp)
    return out


def is_mounted(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt and line.split()[2].startswith("fuse")
                   for line in f)


def process_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return True
    return st[st.rfind(")") + 2] == "Z"


def wait_pid_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.02)
    return process_gone(pid)


def fuse_unmount(mnt, lazy_only=False):
    """fusermount3 -u, then -uz when busy. True when nothing is mounted there."""
    if not is_mounted(mnt):
        return True
    if not lazy_only:
        for _ in range(10):
            r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
            if r.returncode == 0 or not is_mounted(mnt):
                return True
            if "busy" not in r.stderr.lower():
                break
            time.sleep(0.2)
        log("unmount %s: %s; unmounting lazily" % (mnt, r.stderr.strip()))
    subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
    return not is_mounted(mnt)


class Mount:
    """One store mounted on one mountpoint by `ckptfs mount`."""

    def __init__(self, store, mnt, options=()):
        self.store = os.path.abspath(store)
        self.mnt = os.path.abspath(mnt)
        self.options = list(options)
        self.pid = None  # the daemon's pid while mounted

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def mount(self, options=None):
        if options is not None:
            self.options = list(options)
        os.makedirs(self.mnt, exist_ok=True)
        cmd = [ckptfs_bin(), "mount"]
        if self.options:
            cmd += ["-o", ",".join(self.options)]
        cmd += [self.store, self.mnt]
        with _lock:
            _mounts.append(self)
        if os.environ.get("CKPTFS_TEST_DAEMON_LOG"):
            return self._mount_foreground(cmd)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("%s failed (rc %d): %s" % (" ".join(cmd), r.returncode,
                                                          r.stderr.strip()))
        if not is_mounted(self.mnt):
            raise RuntimeError("%s returned 0 but %s is not mounted" % (cmd, self.mnt))
        self.pid = self.daemon_pid()
        return self

    def _mount_foreground(self, cmd):
        """Debugging aid: with CKPTFS_TEST_DAEMON_LOG=DIR the daemon runs in the
        foreground (-f), optionally under $CKPTFS_TEST_DAEMON_WRAPPER (e.g.
        "gdb -batch -ex run -ex 'thread apply all bt' --args"), with its output
        appended to DIR/daemon.log."""
        import shlex
        log_dir = os.environ["CKPTFS_TEST_DAEMON_LOG"]
        os.makedirs(log_dir, exist_ok=True)
        wrapper = shlex.split(os.environ.get("CKPTFS_TEST_DAEMON_WRAPPER", ""))
        cmd = wrapper + cmd[:2] + ["-f"] + cmd[2:]
        out = open(os.path.join(log_dir, "daemon.log"), "a")
        out.write("\n==== %s\n" % " ".join(cmd))
        out.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
        out.close()
        deadline = time.monotonic() + 120
        while not is_mounted(self.mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("%s did not mount; see %s" % (cmd, log_dir))
            time.sleep(0.05)
        self.pid = self.daemon_pid()
        return self

    def stats(self):
        with open(self.path(".ckptfs", "stats")) as f:
            return json.load(f)

    def daemon_pid(self):
        try:
            return int(self.stats()["pid"])
        except (OSError, ValueError, KeyError):
            pass
        # Fall back to the command line of the daemon.
        r = subprocess.run(["pgrep", "-f", "ckptfs mount.*%s" % self.store],
                           capture_output=True, text=True)
        pids = [int(p) for p in r.stdout.split()]
        return pids[0] if len(pids) == 1 else None

    def unmount(self, lazy=False):
        """Unmounts and waits for the daemon to exit (the store is then closed)."""
        ok = fuse_unmount(self.mnt, lazy_only=lazy)
        if self.pid is not None and not wait_pid_gone(self.pid, 120):
            log("daemon %d still running 120 s after unmount; killing it" % self.pid)
            os.kill(self.pid, signal.SIGKILL)
            wait_pid_gone(self.pid, 10)
        self.pid = None
        with _lock:
            if self in _mounts and not is_mounted(self.mnt):
                _mounts.remove(self)
        if not ok:
            raise RuntimeError("%s is still mounted" % self.mnt)

    def remount(self, options=None):
        self.unmount()
        return self.mount(options)


class MountAndPlainTestCase(unittest.TestCase):
    """A test class with a fresh store mounted at cls.m (a Mount) and a plain
    directory cls.plain beside it, under one temporary directory cls.tmp."""
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = make_tmpdir()
        cls.plain = os.path.join(cls.tmp, "plain")
        os.mkdir(cls.plain)
        cls.m = Mount(os.path.join(cls.tmp, "store"), os.path.join(cls.tmp, "mnt"))
        cls.m.mount()

    @classmethod
    def tearDownClass(cls):
        cls.m.unmount()


def cleanup():
    """Unmounts every mount made here; removes temp dirs with nothing mounted."""
    with _lock:
        for m in list(_mounts):
            try:
                m.unmount()
            except Exception as e:  # keep going: the next mounts still need it
                log("cleanup: %s" % e)
                fuse_unmount(m.mnt, lazy_only=True)
        for d in list(_tmpdirs):
            left = mounts_under(d)
            if left:
                log("cleanup: keeping %s, still mounted: %s" % (d, left))
                continue
            shutil.rmtree(d, ignore_errors=True)
            _tmpdirs.remove(d)


atexit.register(cleanup)


def _on_signal(signum, frame):
    # KeyboardInterrupt, not SystemExit: unittest records any other exception
    # as a test error and goes on with the next test. The atexit hook unmounts.
    signal.signal(signum, signal.SIG_DFL)
    raise KeyboardInterrupt("signal %d" % signum)


signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGHUP, _on_signal)


def start_watchdog(seconds):
    """After `seconds`, dumps every thread's stack, unmounts lazily, kills the
    daemons and exits 1, even when the main thread is stuck in a FUSE call."""

    def run():
        time.sleep(seconds)
        log("WATCHDOG: test still running after %d s; dumping stacks, unmounting" % seconds)
        faulthandler.dump_traceback(all_threads=True)
        for m in list(_mounts):
            pid = m.pid
            fuse_unmount(m.mnt, lazy_only=True)
            if pid and not wait_pid_gone(pid, 20):
                os.kill(pid, signal.SIGKILL)
        for _ in range(3):  # the main thread may still be writing there
            for d in list(_tmpdirs):
                if not mounts_under(d):
                    shutil.rmtree(d, ignore_errors=True)
            time.sleep(0.1)
        os._exit(1)

    t = threading.Thread(target=run, name="watchdog", daemon=True)
    t.start()


# ---- Small utilities shared by the tests. ----

def sha256(data):
    return hashlib.sha256(data).hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data, fsync=False):
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def tree_snapshot(root, content=True):
    """{relative path: (kind, size, sha256 or link target)} for everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_size, file_sha256(p) if content else None)
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out


def diff_snapshots(a, b, limit=20):
    """Human-readable differences between two tree_snapshot results."""
    lines = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            lines.append("%s: %r != %r" % (k, a.get(k), b.get(k)))
            if len(lines) >= limit:
                lines.append("...")
                break
    return "\n".join(lines)


def errno_name(e):
    return errno.errorcode.get(e, str(e))
