#!/usr/bin/python3
"""The network-filesystem bed: one directory served by a private sshd on
127.0.0.1, and one sshfs mount of it per host, as several machines mount
one export of a network filesystem.

    import netfs_bed
    bed = netfs_bed.Bed(tmp)     # generates its keys, starts the sshd
    view = bed.mount("h1")       # the export as host h1 sees it: a client of its own
    bed.remount("h1")            # h1's client afresh: nothing cached
    bed.unmount("h1")
    bed.stop()                   # every client, then the sshd

    bed = netfs_bed.Bed(tmp, rate_mb_s=50)  # the export served at 50 MB/s at most

Each host's client is Debian's sshfs with its default options, as a user
mounts it: one SFTP round trip per operation, and a cache of names and
attributes of its own (20 s), so that one host does not see at once the
size another host's writes gave a file it holds open, as on NFS. The sshd
listens on 127.0.0.1 only and takes only a key generated for the bed; each
connection runs an sftp-server process of its own. Mounts and the sshd are
the harness session's (ckptfs_harness.py): whatever way the test ends, they
go. Needs root (the sshd), sshd, sshfs and ssh-keygen
(scripts/install-deps.sh installs them).

With a rate, the bed stands for a file server under load: the sshd runs in
a network namespace of its own, reached over a veth pair whose two ends
each send at most that many MB/s (a token bucket, tc's tbf), so that the
bytes it serves all hosts together come at that rate. The namespace and
the pair go with the bed (stop).
"""

import os
import shutil
import socket
import subprocess
import time

import ckptfs_harness as harness

SSHD = "/usr/sbin/sshd"  # the sshd re-executes itself: an absolute path
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
START_S = 30


def unavailable():
    """Why the bed cannot run here, or None."""
    if os.geteuid() != 0:
        return "the network-filesystem bed needs root (its sshd)"
    for tool in (SSHD, SFTP_SERVER):
        if not os.access(tool, os.X_OK):
            return "%s is missing (scripts/install-deps.sh installs openssh-server)" % tool
    for tool in ("sshfs", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return "%s is missing (scripts/install-deps.sh installs it)" % tool
    return None


class Bed:
    def __init__(self, tmp, rate_mb_s=None):
        why = unavailable()
        if why:
            raise harness.HarnessError(why)
        self.dir = os.path.join(tmp, "netfs")
        self.export = os.path.join(self.dir, "export")
        os.makedirs(self.export)
        self.port = harness.free_port()
        self.name = "sshd-%d" % self.port
        self.log = os.path.join(self.dir, "bed.log")
        self.hosts = {}  # host -> its mountpoint
        self.address = "127.0.0.1"
        self.netns = None
        self.rate_mb_s = rate_mb_s
        if rate_mb_s:
            self._limit(rate_mb_s)
        try:
            self._keys()
            self._start_sshd()
        except BaseException:
            self._unlimit()
            raise

    def _limit(self, rate_mb_s):
        """A namespace for the sshd, its veth pair, and their rate."""
        net = 16 + self.port % 200  # 10.NET.X.1 here, .2 in the namespace
        self.netns = "ckptfs-bed-%d" % self.port
        here, there = "ckb%d" % self.port, "ckbn%d" % self.port
        self.address = "10.%d.%d.2" % (net, self.port % 250)
        ip = lambda *a: subprocess.run(["ip"] + list(a), check=True,  # noqa: E731
                                       capture_output=True)
        ip("netns", "add", self.netns)
        try:
            ip("link", "add", here, "type", "veth", "peer", "name", there)
            ip("link", "set", there, "netns", self.netns)
            ip("addr", "add", "10.%d.%d.1/30" % (net, self.port % 250), "dev", here)
            ip("link", "set", here, "up")
            ip("-n", self.netns, "addr", "add", self.address + "/30", "dev", there)
            ip("-n", self.netns, "link", "set", there, "up")
            ip("-n", self.netns, "link", "set", "lo", "up")
            rate = "%dmbit" % (rate_mb_s * 8)
            for ns, dev in ((None, here), (self.netns, there)):
                subprocess.run(["tc"] + (["-n", ns] if ns else []) +
                               ["qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                                "burst", "256kb", "latency", "200ms"],
                               check=True, capture_output=True)
        except subprocess.CalledProcessError as e:
            self._unlimit()
            raise harness.HarnessError("the bed's rate limit: %s: %s" % (
                " ".join(e.cmd), e.stderr.decode(errors="replace").strip()))

    def _unlimit(self):
        if self.netns:
            # The veth pair goes with its end in the namespace.
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
            self.netns = None

    def _keys(self):
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ckptfs-bed",
                            "-f", os.path.join(self.dir, key)], check=True)
        shutil.copy(os.path.join(self.dir, "client_key.pub"),
                    os.path.join(self.dir, "authorized_keys"))
        config = os.path.join(self.dir, "sshd_config")
        with open(config, "w") as f:
            f.write("\n".join([
                "ListenAddress %s" % self.address,
                "Port %d" % self.port,
                "HostKey %s/host_key" % self.dir,
                "AuthorizedKeysFile %s/authorized_keys" % self.dir,
                "PidFile none",
                "StrictModes no",  # the keys lie under /tmp
                "UsePAM no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UseDNS no",
                "MaxStartups 64",
                "LogLevel ERROR",
                "Subsystem sftp %s" % SFTP_SERVER,
                ""]))
        self.config = config

    def _start_sshd(self):
        # The privilege-separation directory that the sshd service makes at boot.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        proc = harness.session().start_server(
            self.name, prefix + [SSHD, "-D", "-e", "-f", self.config], self.log,
            netns=self.netns)
        self.sshd_pid = proc.pid
        deadline = time.monotonic() + START_S
        while True:
            try:
                socket.create_connection((self.address, self.port), timeout=1).close()
                return
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    harness.session().stop_server(self.name)  # and its namespace
                    raise harness.HarnessError("the bed's sshd did not start; see " + self.log)
                time.sleep(0.05)

    def mount(self, host):
        """Mounts the export for `host` with a client of its own; returns the
        mountpoint (the export as that host sees it)."""
        mnt = os.path.join(self.dir, "host_" + host)
        os.makedirs(mnt, exist_ok=True)
        cmd = ["sshfs", "-f", "root@%s:%s" % (self.address, self.export), mnt, "-o",
               ",".join(["port=%d" % self.port,
                         "IdentityFile=%s/client_key" % self.dir,
                         "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null",
                         "BatchMode=yes", "LogLevel=ERROR"])]
        harness.session().mount_command(cmd, mnt, self.log, store=None)
        self.hosts[host] = mnt
        return mnt

    def unmount(self, host):
        harness.session().unmount(self.hosts.pop(host))

    def remount(self, host):
        """`host`'s client unmounted and mounted again: its caches are gone."""
        self.unmount(host)
        return self.mount(host)

    def served_bytes(self):
        """Bytes the bed's sftp servers have read (their rchar: the files'
        bytes they served, and the clients' small requests), summed over
        those running now: a client's server goes when it unmounts."""
        parents, servers = {}, []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    stat = f.read()
            except OSError:
                continue
            # "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(pid)] = int(stat[stat.rindex(")") + 2:].split()[1])
            if comm == "sftp-server":
                servers.append(int(pid))
        total = 0
        for pid in servers:
            p = pid
            while p > 1 and p != self.sshd_pid:
                p = parents.get(p, 1)
            if p != self.sshd_pid:
                continue  # another sshd's
            try:
                with open("/proc/%d/io" % pid) as f:
                    total += int(dict(line.split(": ") for line in f.read().splitlines())["rchar"])
            except (OSError, KeyError, ValueError):
                pass  # gone meanwhile
        return total

    def view(self, host, *parts):
        """A path on the export as `host` sees it."""
        return os.path.join(self.hosts[host], *parts)

    def stop(self):
        for host in list(self.hosts):
            self.unmount(host)
        harness.session().stop_server(self.name)
