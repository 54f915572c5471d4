#!/usr/bin/python3
"""The mount harness: the one place that mounts ckptfs for tests and benchmarks.

Python (the mount tests, bench/):

    import ckptfs_harness as harness
    harness.require_fuse()             # exits 77 (ctest SKIP) when mounts are impossible
    harness.set_deadline(240)          # the watchdog (below); CKPTFS_TEST_DEADLINE overrides
    tmp = harness.make_tmpdir()        # a fresh directory under /tmp, removed at the end
    m = harness.Mount(tmp + "/store", tmp + "/mnt", ["coalesce_gap=0"])
    m.mount(); ...; m.remount(); ...; m.unmount()

Command line (the bash tests through ckptfs_mount_lib.sh, gpu/test_mount.h):

    ckptfs_harness.py check [--root]       exit 0, or print "SKIP: why" and exit 77
    ckptfs_harness.py session --owner PID [--deadline S]
                                           start a session for process PID; prints
                                           its directory, which the commands below
                                           find in $CKPTFS_HARNESS_SESSION
    ckptfs_harness.py tmpdir [PREFIX]      a fresh directory under /tmp; prints it
    ckptfs_harness.py mount STORE MNT [OPTIONS]
    ckptfs_harness.py unmount MNT
    ckptfs_harness.py is-mounted MNT       exit 0 when a FUSE filesystem is at MNT
    ckptfs_harness.py cleanup              unmount, check, remove; ends the session

The binary is $CKPTFS_BIN (or Mount's `binary`). Mounting runs `ckptfs mount`
and returns once the mount is up; unmounting runs `ckptfs umount` (retried
while busy, then `fusermount3 -uz`) and waits for the daemon to exit, so
that the store is closed and can be mounted again at once. Another FUSE
daemon (bench/'s FUSE floor, libfuse's passthrough_hp) is mounted with
session().mount_command and unmounted the same way (`fusermount3 -u`).

Sessions. Every process that mounts through the harness owns a session: a
directory /tmp/ckptfs-harness.XXXXXX that records its mounts and temporary
directories. Whatever way the owner ends, nothing is left behind:
  - normally the owner cleans up itself (Mount.unmount in finally blocks, an
    atexit hook, SIGTERM and SIGHUP turned into KeyboardInterrupt; the bash
    tests' EXIT trap runs `cleanup`; TestMount's destructor unmounts);
  - a guardian process started with the session waits for the owner to exit
    and then cleans up what is left, after a crash or SIGKILL too;
  - the guardian is also the watchdog: when the owner passes its deadline it
    asks the owner for its stacks (Python: faulthandler on SIGUSR1), unmounts
    lazily, kills the daemons (which unblocks whatever hung in a FUSE call),
    then terminates the owner and its children.
Temporary directories are removed only when nothing is mounted under them.

Sanitizers. The daemon runs in the background, so a sanitizer report there
could not fail a test through an exit status. Every `ckptfs` the harness
starts gets log_path=SESSION/sanitizer/ckptfs added to ASAN_OPTIONS,
UBSAN_OPTIONS, LSAN_OPTIONS and TSAN_OPTIONS; unmount (after the daemon has
exited) and cleanup print any report found there and fail. Without a
sanitizer build these variables are ignored.
"""

import argparse
import atexit
import faulthandler
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77  # ctest SKIP_RETURN_CODE
SESSION_ENV = "CKPTFS_HARNESS_SESSION"
SANITIZER_OPTION_VARS = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")

MOUNT_TIMEOUT_S = 300  # for `ckptfs mount` to come up
DAEMON_EXIT_S = 120  # for a daemon to close its store after the unmount
WATCHDOG_GRACE_S = 5  # between the watchdog's steps


class HarnessError(RuntimeError):
    """A mount that did not come up or would not go away, or a sanitizer report."""


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# ---------------------------------------------------------------------------
# What this machine allows


def unavailable(root=False):
    """Why real mounts cannot be tested here; "" when they can."""
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "needs /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "needs fusermount3"
    if root and os.geteuid() != 0:
        return "needs root"
    return ""


def scaled_count(n):
    """`n`, the count of files a test makes to reach a size, where each create
    is cheap: an embedded index and an optimized daemon. A fifth of it (at
    least one) where each create is a round trip to PostgreSQL
    (CKPTFS_TEST_META) or the daemon runs under a sanitizer
    (CKPTFS_TEST_SANITIZER); what such a test checks does not depend on the
    size past a few thousand entries."""
    slow = bool(os.environ.get("CKPTFS_TEST_META") or os.environ.get("CKPTFS_TEST_SANITIZER"))
    return max(1, n // 5) if slow else n


def require_fuse(root=False):
    """Exits with SKIP (77) when real mounts are impossible here."""
    why = unavailable(root)
    if why:
        print("SKIP: " + why, flush=True)
        sys.exit(SKIP)


def ckptfs_bin():
    """$CKPTFS_BIN, which must name an executable."""
    b = os.environ.get("CKPTFS_BIN")
    if not b:
        raise HarnessError("set CKPTFS_BIN to the ckptfs binary")
    b = os.path.abspath(b)
    if not os.access(b, os.X_OK):
        raise HarnessError("ckptfs binary %s is missing: set CKPTFS_BIN" % b)
    return b


# ---------------------------------------------------------------------------
# Mounts and processes, from /proc


def _canonical(path):
    """The absolute path with symlinks resolved in its parent only: the last
    component may be a dead mount, which cannot be stat()ed."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _mountinfo():
    """(mountpoint, fstype) of every mount in this mount namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])
            out.append((mp, parts[sep + 1]))
    return out


def is_mounted(mnt):
    """True when a FUSE filesystem is mounted exactly at `mnt`."""
    mnt = _canonical(mnt)
    return any(mp == mnt and fstype.startswith("fuse") for mp, fstype in _mountinfo())


def mounts_under(path):
    """Mountpoints (of any type) at or below `path`."""
    path = _canonical(path).rstrip("/") + "/"
    return [mp for mp, _ in _mountinfo() if (mp.rstrip("/") + "/").startswith(path)]


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def process_start(pid):
    """The start time of process `pid` (clock ticks after boot), or None."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields else None


def cpu_seconds(pid):
    """The CPU time (user and system) process `pid` has used, or 0 when it is gone."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def process_gone(pid, start=None):
    """True when `pid` has exited (or is a zombie); with `start`, also when the
    pid now belongs to another process."""
    fields = proc_stat(pid)
    return (fields is None or fields[0] == "Z" or
            (start is not None and int(fields[19]) != start))


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server of
    a test's own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_pid_gone(pid, timeout, start=None):
    deadline = time.monotonic() + timeout
    while not process_gone(pid, start):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill(pid, sig, start=None):
    if not process_gone(pid, start):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _descendants(pid):
    """Every live process below `pid` in the process tree."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = proc_stat(int(name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def read_stats(mnt):
    """MNT/.ckptfs/stats as a dict."""
    with open(os.path.join(mnt, ".ckptfs", "stats")) as f:
        return json.load(f)


def read_ahead_kb(mnt):
    """The kernel's read-ahead window of the mount on `mnt`, in KiB
    (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb)."""
    dev = os.stat(mnt).st_dev
    with open("/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(dev), os.minor(dev))) as f:
        return int(f.read())


def daemon_pid(mnt):
    """The pid of the daemon serving `mnt` (from its stats file), or None."""
    try:
        return int(read_stats(mnt)["pid"])
    except (OSError, ValueError, KeyError):
        return None


def fuse_unmount(mnt, lazy_only=False, binary=None, env=None):
    """`BINARY umount MNT` (`fusermount3 -u` without a binary), retried while
    the mount is busy, then `fusermount3 -uz`. True when nothing is mounted
    at `mnt` afterwards. Does not wait for the daemon beyond what `ckptfs
    umount` does."""
    if not is_mounted(mnt):
        return True
    if not lazy_only:
        cmd = [binary, "umount", mnt] if binary else ["fusermount3", "-u", mnt]
        why = ""
        for _ in range(10):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                   timeout=DAEMON_EXIT_S + 60)
                why = (r.stderr or r.stdout).strip()
                if r.returncode == 0:
                    return True
            except (OSError, subprocess.TimeoutExpired) as e:
                why = str(e)
            if not is_mounted(mnt):
                return True
            if "busy" not in why.lower():
                break
            time.sleep(0.2)
        log("unmount %s: %s; unmounting lazily" % (mnt, why))
    subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
    return not is_mounted(mnt)


def start_foreground(cmd, mnt, log_path, env=None, on_start=None):
    """Starts `cmd`, a FUSE daemon that stays in the foreground, in a session
    of its own with its output appended to `log_path`; calls on_start(Popen);
    returns the Popen once `mnt` is mounted. Raises HarnessError when the
    daemon exits first or the mount does not come up in MOUNT_TIMEOUT_S (the
    daemon is killed then)."""
    with open(log_path, "a") as out:
        out.write("\n==== %s\n" % " ".join(cmd))
        out.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, env=env)
    if on_start:
        on_start(proc)
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not is_mounted(mnt):
        if proc.poll() is not None or time.monotonic() > deadline:
            if not is_mounted(mnt):
                proc.kill()
                proc.wait()
            raise HarnessError("%s did not mount; see %s" % (" ".join(cmd), log_path))
        time.sleep(0.05)
    return proc


# ---------------------------------------------------------------------------
# Sessions


class Session:
    """The state directory of one owner process: session.json (owner, its
    start time, deadline), mounts/ (one JSON record per live mount),
    servers/ (one per server process a test started: the bed's sshd),
    tmpdirs/ (one file per temporary directory, holding its path) and
    sanitizer/ (the reports of every ckptfs the harness started)."""

    def __init__(self, path):
        self.path = path

    @classmethod
    def create(cls, owner, deadline_s=None, dump_signal=None):
        """A new session for process `owner`, and its guardian."""
        s = cls(tempfile.mkdtemp(prefix="ckptfs-harness.", dir="/tmp"))
        for sub in ("mounts", "servers", "tmpdirs", "sanitizer"):
            os.mkdir(os.path.join(s.path, sub))
        s._write_info({"owner": owner, "owner_start": process_start(owner),
                       "deadline": None, "deadline_s": None, "dump_signal": dump_signal})
        if deadline_s:
            s.set_deadline(deadline_s)
        # The guardian reports on our stderr (the test's log), so whoever
        # starts a session must not wait for EOF on that (capture stdout only).
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "guard", s.path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         start_new_session=True)
        return s

    @classmethod
    def from_env(cls):
        path = os.environ.get(SESSION_ENV)
        if not path or not os.path.isfile(os.path.join(path, "session.json")):
            raise HarnessError("no harness session: run `ckptfs_harness.py session` and "
                               "export %s" % SESSION_ENV)
        return cls(path)

    def _file(self, *parts):
        return os.path.join(self.path, *parts)

    def _list(self, sub):
        """The names in SESSION/sub ([] once the session is being removed)."""
        try:
            return sorted(os.listdir(self._file(sub)))
        except FileNotFoundError:
            return []

    def _write_json(self, path, obj):
        tmp = path + ".new"
        with open(tmp, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, path)

    def _write_info(self, info):
        self._write_json(self._file("session.json"), info)

    def info(self):
        try:
            with open(self._file("session.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def set_deadline(self, seconds, dump_signal=None):
        """The watchdog fires `seconds` from now (time.monotonic is the same
        clock in every process)."""
        info = self.info()
        info["deadline"] = time.monotonic() + seconds
        info["deadline_s"] = seconds
        if dump_signal is not None:
            info["dump_signal"] = dump_signal
        self._write_info(info)

    # -- records --

    def _mount_file(self, mnt):
        return self._file("mounts", _canonical(mnt).strip("/").replace("/", "%") + ".json")

    def record_mount(self, mnt, **fields):
        rec = {"mnt": _canonical(mnt)}
        rec.update(fields)
        self._write_json(self._mount_file(mnt), rec)

    def mount_record(self, mnt):
        try:
            with open(self._mount_file(mnt)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def forget_mount(self, mnt):
        try:
            os.unlink(self._mount_file(mnt))
        except FileNotFoundError:
            pass

    def mount_records(self):
        out = []
        for name in self._list("mounts"):
            if name.endswith(".json"):
                try:
                    with open(self._file("mounts", name)) as f:
                        out.append(json.load(f))
                except (OSError, ValueError):
                    pass
        return out

    def make_tmpdir(self, prefix):
        d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        with open(self._file("tmpdirs", os.path.basename(d)), "w") as f:
            f.write(d)
        return d

    def tmpdirs(self):
        out = []
        for name in self._list("tmpdirs"):
            with open(self._file("tmpdirs", name)) as f:
                out.append((name, f.read()))
        return out

    # -- sanitizers --

    def sanitizer_env(self):
        """The environment for a `ckptfs` process: sanitizer reports go to
        SESSION/sanitizer/ckptfs.PID."""
        env = dict(os.environ)
        prefix = self._file("sanitizer", "ckptfs")
        for var in SANITIZER_OPTION_VARS:
            env[var] = ":".join(x for x in (env.get(var, ""), "log_path=" + prefix) if x)
        return env

    def new_sanitizer_reports(self):
        """The reports written since the last call, as text."""
        out = []
        d = self._file("sanitizer")
        for name in self._list("sanitizer"):
            if name.endswith(".seen"):
                continue
            p = os.path.join(d, name)
            with open(p, errors="replace") as f:
                text = f.read()
            os.replace(p, p + ".seen")
            out.append("==== sanitizer report %s\n%s" % (name, text.rstrip()))
        return out

    # -- mounting --

    def mount(self, store, mnt, options=(), binary=None):
        """Mounts `store` on `mnt` (created when missing); returns (daemon pid,
        seconds `ckptfs mount` took)."""
        binary = binary or ckptfs_bin()
        store, mnt = os.path.abspath(store), os.path.abspath(mnt)
        os.makedirs(mnt, exist_ok=True)
        cmd = [binary, "mount"]
        options = list(options)
        # CKPTFS_TEST_META (scripts/with-postgres.sh --meta): stores keep
        # their index in that PostgreSQL database.
        meta = os.environ.get("CKPTFS_TEST_META")
        if meta and not any(o.startswith("meta=") for o in options):
            options.append("meta=" + meta)
        # CKPTFS_TEST_DATA (ceph_bed.py --data): new stores keep their data
        # in that object store.
        data = os.environ.get("CKPTFS_TEST_DATA")
        if data and not any(o.startswith("data=") for o in options):
            options.append("data=" + data)
            endpoint = os.environ.get("CKPTFS_TEST_S3_ENDPOINT")
            if data.startswith("s3://") and endpoint:
                options.append("s3_endpoint=" + endpoint)
        if options:
            cmd += ["-o", ",".join(options)]
        cmd += [store, mnt]
        # Recorded first: a mount that comes up after all is still cleaned up.
        self.record_mount(mnt, store=store, binary=binary, pid=None, pid_start=None)
        t0 = time.monotonic()
        try:
            if os.environ.get("CKPTFS_TEST_DAEMON_LOG"):
                self._mount_foreground(cmd, mnt)
            else:
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True,
                                       timeout=MOUNT_TIMEOUT_S, env=self.sanitizer_env())
                except subprocess.TimeoutExpired:
                    raise HarnessError("%s did not return in %d s" % (" ".join(cmd),
                                                                      MOUNT_TIMEOUT_S))
                if r.returncode != 0:
                    raise HarnessError("%s failed (rc %d): %s" % (
                        " ".join(cmd), r.returncode, (r.stderr + r.stdout).strip()))
            if not is_mounted(mnt):
                raise HarnessError("%s returned 0 but %s is not mounted" % (" ".join(cmd), mnt))
        except HarnessError:
            if not is_mounted(mnt):
                self.forget_mount(mnt)
            raise
        seconds = time.monotonic() - t0
        pid = daemon_pid(mnt)
        self.record_mount(mnt, store=store, binary=binary, pid=pid,
                          pid_start=process_start(pid) if pid else None)
        return pid, seconds

    def _mount_foreground(self, cmd, mnt):
        """Debugging aid: with CKPTFS_TEST_DAEMON_LOG=DIR the daemon runs in the
        foreground (-f), optionally under $CKPTFS_TEST_DAEMON_WRAPPER (e.g.
        "gdb -batch -ex run -ex 'thread apply all bt' --args"), with its output
        appended to DIR/daemon.log."""
        import shlex
        log_dir = os.environ["CKPTFS_TEST_DAEMON_LOG"]
        os.makedirs(log_dir, exist_ok=True)
        wrapper = shlex.split(os.environ.get("CKPTFS_TEST_DAEMON_WRAPPER", ""))
        cmd = wrapper + cmd[:2] + ["-f"] + cmd[2:]
        start_foreground(cmd, mnt, os.path.join(log_dir, "daemon.log"), self.sanitizer_env())

    def mount_command(self, cmd, mnt, log_path, **fields):
        """Mounts `mnt` with `cmd`, a FUSE daemon other than ckptfs that stays
        in the foreground (the benchmark's passthrough_hp), its output
        appended to `log_path`. Recorded (with `fields`) like a ckptfs mount:
        unmount() and the guardian unmount it with fusermount3 and end its
        daemon. Returns (daemon pid, seconds until the mount was up)."""
        mnt = os.path.abspath(mnt)
        os.makedirs(mnt, exist_ok=True)
        self.record_mount(mnt, binary=None, pid=None, pid_start=None, **fields)
        t0 = time.monotonic()
        try:
            proc = start_foreground(cmd, mnt, log_path, on_start=lambda p: self.record_mount(
                mnt, binary=None, pid=p.pid, pid_start=process_start(p.pid), **fields))
        except HarnessError:
            if not is_mounted(mnt):
                self.forget_mount(mnt)
            raise
        return proc.pid, time.monotonic() - t0

    def unmount(self, mnt, lazy=False, daemon_exit_s=DAEMON_EXIT_S):
        """Unmounts `mnt`, waits for its daemon to exit (SIGKILL after
        `daemon_exit_s`) and checks the sanitizer reports. Raises HarnessError
        when `mnt` stays mounted or a sanitizer reported anything."""
        rec = self.mount_record(mnt) or {}
        pid, start = rec.get("pid"), rec.get("pid_start")
        if pid is None and is_mounted(mnt):
            pid = daemon_pid(mnt)
        ok = fuse_unmount(mnt, lazy_only=lazy, binary=rec.get("binary"),
                          env=self.sanitizer_env())
        if pid and not wait_pid_gone(pid, daemon_exit_s, start):
            log("daemon %d still running %d s after the unmount of %s; killing it"
                % (pid, daemon_exit_s, mnt))
            _kill(pid, signal.SIGKILL, start)
            wait_pid_gone(pid, 10, start)
        problems = []
        if ok:
            self.forget_mount(mnt)
        else:
            problems.append("%s is still mounted" % mnt)
        problems += self.new_sanitizer_reports()
        if problems:
            raise HarnessError("\n".join(problems))

    # -- servers --

    def start_server(self, name, cmd, log_path, netns=None):
        """Starts `cmd`, a server that stays in the foreground, in a session of
        its own with its output appended to `log_path`; recorded as `name`,
        so that stop_server and cleanup (the guardian's too) end it, and
        delete network namespace `netns` (made for it) after it."""
        with open(log_path, "a") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True)
        self._write_json(self._file("servers", name + ".json"),
                         {"name": name, "pid": proc.pid, "pid_start": process_start(proc.pid),
                          "netns": netns})
        return proc

    def stop_server(self, name):
        """Ends server `name` (SIGTERM, then SIGKILL) and forgets it."""
        path = self._file("servers", name + ".json")
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return
        _kill(rec["pid"], signal.SIGTERM, rec["pid_start"])
        if not wait_pid_gone(rec["pid"], WATCHDOG_GRACE_S, rec["pid_start"]):
            _kill(rec["pid"], signal.SIGKILL, rec["pid_start"])
            wait_pid_gone(rec["pid"], WATCHDOG_GRACE_S, rec["pid_start"])
        if rec.get("netns"):
            subprocess.run(["ip", "netns", "del", rec["netns"]], capture_output=True)
        os.unlink(path)

    # -- the end --

    def cleanup(self, lazy=False, daemon_exit_s=DAEMON_EXIT_S):
        """Unmounts every recorded mount and whatever is mounted under the
        temporary directories, checks the sanitizer reports, removes the
        temporary directories with nothing mounted below, and, when all went
        well, the session. Returns the problems (text)."""
        problems = []
        # ckptfs mounts first: their stores may lie on the other mounts (the
        # bed's sshfs).
        for rec in sorted(self.mount_records(), key=lambda r: r.get("binary") is None):
            if is_mounted(rec["mnt"]):
                log("cleanup: unmounting %s" % rec["mnt"])
            try:
                self.unmount(rec["mnt"], lazy=lazy, daemon_exit_s=daemon_exit_s)
            except HarnessError as e:
                problems.append(str(e))
        for name in self._list("servers"):
            self.stop_server(name[:-len(".json")])
        for name, d in self.tmpdirs():
            for mp in sorted(mounts_under(d), reverse=True):
                log("cleanup: unmounting %s (not made by this session)" % mp)
                fuse_unmount(mp, lazy_only=lazy)
            left = mounts_under(d)
            if left:
                problems.append("keeping %s: still mounted: %s" % (d, ", ".join(left)))
                continue
            shutil.rmtree(d, ignore_errors=True)
            os.unlink(self._file("tmpdirs", name))
        problems += self.new_sanitizer_reports()
        if not problems:
            self.end()
        return problems

    def end(self):
        """Removes the session; first session.json, which makes it one no more."""
        try:
            os.unlink(self._file("session.json"))
        except FileNotFoundError:
            pass
        shutil.rmtree(self.path, ignore_errors=True)


# ---------------------------------------------------------------------------
# The guardian and watchdog (a process of its own; `guard SESSION`)


def _guard(path):
    s = Session(path)
    info = s.info()
    if info is None:
        return
    owner, owner_start = info["owner"], info["owner_start"]
    try:
        pidfd = os.pidfd_open(owner)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):
        poller = None
    fired = False
    while s.info() is not None and not process_gone(owner, owner_start):
        info = s.info() or info
        if not fired and info.get("deadline") and time.monotonic() >= info["deadline"]:
            fired = True
            _watchdog(s, info)
        if poller:
            poller.poll(500)
        else:
            time.sleep(0.5)
    if s.info() is not None:  # the owner ended without cleaning up
        for p in s.cleanup(lazy=True, daemon_exit_s=WATCHDOG_GRACE_S):
            log("harness: %s" % p)
    else:  # ended, or the owner was killed while ending it
        shutil.rmtree(path, ignore_errors=True)


def _watchdog(s, info):
    owner, start = info["owner"], info["owner_start"]
    log("WATCHDOG: pid %d still running after %.0f s; unmounting, then stopping it"
        % (owner, info["deadline_s"]))
    if info.get("dump_signal"):
        _kill(owner, info["dump_signal"], start)
        time.sleep(1)
    # Lazy unmounts and dead daemons fail whatever hangs in a FUSE call.
    for rec in s.mount_records():
        fuse_unmount(rec["mnt"], lazy_only=True)
        if rec.get("pid") and not wait_pid_gone(rec["pid"], WATCHDOG_GRACE_S, rec["pid_start"]):
            _kill(rec["pid"], signal.SIGKILL, rec["pid_start"])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        # Again for SIGKILL: the owner may have started more (its cleanup).
        for p in [owner] + _descendants(owner):
            if p != os.getpid():
                _kill(p, sig)
        if wait_pid_gone(owner, WATCHDOG_GRACE_S, start):
            break


# ---------------------------------------------------------------------------
# The Python interface: one session per process, made on first use


_lock = threading.RLock()
_session = None


def session():
    """This process's session (created, with its guardian, on first use)."""
    global _session
    with _lock:
        if _session is None:
            atexit.register(_cleanup_at_exit)
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) == signal.SIG_DFL:
                    signal.signal(sig, _raise_interrupt)
        if _session is None or _session.info() is None:
            _session = Session.create(os.getpid())
        return _session


def _raise_interrupt(signum, frame):
    # KeyboardInterrupt, not SystemExit: unittest records any other exception
    # as a test error and goes on with the next test. The atexit hook unmounts.
    signal.signal(signum, signal.SIG_DFL)
    raise KeyboardInterrupt("signal %d" % signum)


def _cleanup_at_exit():
    s = _session
    if s is None or s.info() is None or s.info()["owner"] != os.getpid():
        return
    problems = s.cleanup()
    if problems:
        log("harness cleanup:\n" + "\n".join(problems))
        sys.stdout.flush()
        os._exit(1)


def set_deadline(seconds):
    """The watchdog: `seconds` from now ($CKPTFS_TEST_DEADLINE when set), the
    guardian dumps every thread's stack to stderr, unmounts lazily, kills the
    daemons and terminates this process, even when its main thread is stuck
    in a FUSE call."""
    seconds = float(os.environ.get("CKPTFS_TEST_DEADLINE", seconds))
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    session().set_deadline(seconds, dump_signal=int(signal.SIGUSR1))


def make_tmpdir(prefix="ckptfs-mt-"):
    """A fresh directory under /tmp, removed at exit unless something is
    mounted below it."""
    return session().make_tmpdir(prefix)


class Mount:
    """One store mounted on one mountpoint by `ckptfs mount`."""

    def __init__(self, store, mnt, options=(), binary=None):
        self.store = os.path.abspath(store)
        self.mnt = os.path.abspath(mnt)
        self.options = list(options)
        self.binary = binary  # None: $CKPTFS_BIN
        self.pid = None  # the daemon's pid while mounted
        self.mount_seconds = None  # how long the last mount and unmount took
        self.unmount_seconds = None

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def mount(self, options=None):
        if options is not None:
            self.options = list(options)
        self.pid, self.mount_seconds = session().mount(self.store, self.mnt, self.options,
                                                       self.binary)
        return self

    def stats(self):
        return read_stats(self.mnt)

    def config_text(self):
        """MNT/.ckptfs/config as it reads."""
        with open(self.path(".ckptfs", "config")) as f:
            return f.read()

    def config(self):
        """MNT/.ckptfs/config's settings as a dict (comment lines left out)."""
        out = {}
        with open(self.path(".ckptfs", "config")) as f:
            for line in f:
                if "=" in line and not line.startswith("#"):
                    k, v = line.strip().split("=", 1)
                    out[k.strip()] = v.strip()
        return out

    def unmount(self, lazy=False):
        """Unmounts and waits for the daemon to exit (the store is then closed).
        Raises HarnessError when the mount stays or the daemon's sanitizer
        reported errors."""
        t0 = time.monotonic()
        try:
            session().unmount(self.mnt, lazy=lazy)
        finally:
            self.pid = None
            self.unmount_seconds = time.monotonic() - t0

    def remount(self, options=None):
        self.unmount()
        return self.mount(options)


# ---------------------------------------------------------------------------
# Command line


def main(argv):
    ap = argparse.ArgumentParser(prog="ckptfs_harness.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check", help="exit 77 (printing why) when mounts are impossible")
    p.add_argument("--root", action="store_true", help="root is needed too")
    p = sub.add_parser("session", help="start a session; prints its directory")
    p.add_argument("--owner", type=int, required=True, help="the process the session serves")
    p.add_argument("--deadline", type=float, help="seconds; default $CKPTFS_TEST_DEADLINE")
    p = sub.add_parser("tmpdir", help="a fresh directory under /tmp; prints it")
    p.add_argument("prefix", nargs="?", default="ckptfs-test.")
    p = sub.add_parser("mount", help="mount STORE on MNT with $CKPTFS_BIN")
    p.add_argument("store")
    p.add_argument("mnt")
    p.add_argument("options", nargs="?", default="", help="comma-separated -o options")
    p = sub.add_parser("unmount", help="unmount MNT, wait for its daemon, check reports")
    p.add_argument("mnt")
    p = sub.add_parser("is-mounted", help="exit 0 when a FUSE filesystem is mounted at MNT")
    p.add_argument("mnt")
    sub.add_parser("cleanup", help="unmount, check and remove everything; end the session")
    p = sub.add_parser("guard")  # internal: the guardian of a session
    p.add_argument("session")
    args = ap.parse_args(argv)

    if args.cmd == "check":
        why = unavailable(args.root)
        if why:
            print("SKIP: " + why)
            return SKIP
        return 0
    if args.cmd == "guard":
        _guard(args.session)
        return 0
    if args.cmd == "is-mounted":
        return 0 if is_mounted(args.mnt) else 1
    try:
        if args.cmd == "session":
            deadline = args.deadline or float(os.environ.get("CKPTFS_TEST_DEADLINE", 0))
            print(Session.create(args.owner, deadline_s=deadline or None).path)
            return 0
        s = Session.from_env()
        if args.cmd == "tmpdir":
            print(s.make_tmpdir(args.prefix))
        elif args.cmd == "mount":
            s.mount(args.store, args.mnt, [o for o in args.options.split(",") if o])
        elif args.cmd == "unmount":
            s.unmount(args.mnt)
        elif args.cmd == "cleanup":
            problems = s.cleanup()
            if problems:
                log("harness cleanup:\n" + "\n".join(problems))
                return 1
        return 0
    except HarnessError as e:
        log("harness %s: %s" % (args.cmd, e))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
