#!/usr/bin/python3
"""The object-storage bed: a one-node Ceph cluster of the tests' own, under
a temporary directory, on 127.0.0.1 and ports of its own, as a store whose
data lives in RADOS or S3 would reach a real one.

    import ceph_bed
    bed = ceph_bed.Cluster(tmp)             # a monitor and one OSD: RADOS
    bed = ceph_bed.Cluster(tmp, s3=True)    # and radosgw: S3 on bed.s3_endpoint
    bed = ceph_bed.Cluster(tmp, cephfs=True)  # and a manager, an MDS: CephFS
    mnt = bed.mount_cephfs("a"); bed.unmount_cephfs(mnt)  # a ceph-fuse client
    bed = ceph_bed.Cluster(tmp, mgr=True)   # a manager: pool usage, quotas
    bed.make_pool("small", quota_bytes=4 << 20); bed.wait_pool_full("small")
    bed.rados("put", "name", path, pool=bed.pool)
    ceph_bed.py [--data|--s3|--s3-data] COMMAND [ARG...]  # beside a cluster (main)
    bed.kill_osd(); bed.start_osd()         # the OSD killed with -9, started again
    bed.kill_rgw(); bed.start_rgw()         # radosgw the same
    bed.stop()                              # clients, daemons, the monitor

The monitor and the OSD (BlueStore on a sparse file beside its data
directory), and where asked a manager (without one no pool's usage is
known: quotas never fill and CephFS's statfs reports 0 bytes) and an MDS,
run as the harness session's servers (ckptfs_harness.py), so that they go
whatever way the test ends; ceph-fuse clients are the session's mounts.
Authentication is off (`auth ... = none`): only this machine reaches the
cluster, on 127.0.0.1. Clients find it through bed.conf (ceph.conf), as
they find a real cluster through /etc/ceph; `pool` is a pool of size 1
made for the tests. radosgw answers S3 with a user of the bed's
(bed.access_key, bed.secret_key).

Needs Ceph's packages (scripts/install-deps.sh installs ceph-mon, ceph-osd,
radosgw, ceph-common, ceph-mgr, ceph-mds and ceph-fuse). Starts in about
6-10 s, 12-15 s with CephFS.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import ckptfs_harness as harness

START_S = 60
TOOLS = ("ceph-mon", "ceph-osd", "monmaptool", "ceph", "rados")
S3_TOOLS = ("radosgw", "radosgw-admin")
MGR_TOOLS = ("ceph-mgr",)
CEPHFS_TOOLS = ("ceph-mgr", "ceph-mds", "ceph-fuse")


def unavailable(s3=False, cephfs=False, mgr=False):
    """Why the bed cannot run here, or None."""
    tools = (TOOLS + (S3_TOOLS if s3 else ()) + (MGR_TOOLS if mgr else ())
             + (CEPHFS_TOOLS if cephfs else ()))
    for tool in tools:
        if shutil.which(tool) is None:
            return "%s is missing (scripts/install-deps.sh installs Ceph's packages)" % tool
    return None


def start_for_test(tmp_prefix, s3=False, cephfs=False, mgr=False):
    """A cluster for a test class's setUpClass: where it cannot run here,
    unittest.SkipTest saying why, and in CI (CI=true) a failure instead."""
    import unittest
    why = unavailable(s3, cephfs, mgr)
    if why:
        if os.environ.get("CI") == "true":
            raise AssertionError("the object-storage bed cannot run in CI: " + why)
        raise unittest.SkipTest(why)
    tmp = harness.make_tmpdir(tmp_prefix)
    t0 = time.monotonic()
    bed = Cluster(tmp, s3=s3, cephfs=cephfs, mgr=mgr)
    harness.log("ceph bed: %s up in %.1f s" % (bed.describe(), time.monotonic() - t0))
    return tmp, bed


CONF = """[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
# With authentication off, radosgw and radosgw-admin reach the monitor
# only in these modes.
ms mon client mode = crc secure
run dir = {dir}/run
admin socket = {dir}/run/$name.asok
pid file = {dir}/run/$name.pid
log file = {dir}/log/$name.log
keyring = {dir}/keyring
# One OSD: pools of one copy, placement over OSDs, not hosts.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# Starts in seconds, not tens of them.
paxos propose interval = 0.05
mon data avail warn = 1
mon data avail crit = 0
mon data = {dir}/$name
osd data = {dir}/$name
osd objectstore = bluestore
# The block file outside the OSD's data directory, sparse.
bluestore block path = {dir}/$name.block
bluestore block create = true
bluestore block size = {block_bytes}
bluestore fsck on mkfs = false
osd memory target = 1073741824

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw data = {dir}/rgw
rgw dns name = 127.0.0.1

[mgr]
mgr data = {dir}/$name

[mds]
mds data = {dir}/$name
"""


class Cluster:
    def __init__(self, tmp, s3=False, cephfs=False, mgr=False, block_gib=8):
        why = unavailable(s3, cephfs, mgr)
        if why:
            raise harness.HarnessError(why)
        self.s3, self.cephfs = s3, cephfs
        self.mgr = mgr or cephfs
        self.dir = os.path.join(tmp, "ceph")
        for sub in ("run", "log", "mon.a", "osd.0", "rgw", "mgr.x", "mds.a"):
            os.makedirs(os.path.join(self.dir, sub))
        self.mon_port = harness.free_port()
        self.rgw_port = harness.free_port() if s3 else None
        self.conf = os.path.join(self.dir, "ceph.conf")
        self.log = os.path.join(self.dir, "bed.log")
        self.fsid = str(uuid.uuid4())
        with open(self.conf, "w") as f:
            f.write(CONF.format(fsid=self.fsid, mon_port=self.mon_port, dir=self.dir,
                                rgw_port=self.rgw_port or 0, block_bytes=block_gib << 30))
        open(os.path.join(self.dir, "keyring"), "w").close()
        self.pool = "ckptfs"
        self.s3_endpoint = "http://127.0.0.1:%d" % self.rgw_port if s3 else None
        self.access_key = "CKPTFSBEDACCESSKEY00"
        self.secret_key = "ckptfs-bed-secret-key-0000000000000000000"
        self.osd_uuid = str(uuid.uuid4())
        self._names = []
        self._procs = {}
        self._cephfs_mounts = []
        try:
            self._start_mon()
            self._make_osd()
            self.start_osd()
            self.make_pool(self.pool)
            if self.mgr:
                self._start_mgr()
            if cephfs:
                self._start_cephfs()
            if s3:
                self._start_rgw()
        except BaseException:
            self.stop()
            raise

    def describe(self):
        """What runs, in words."""
        parts = ["a monitor", "an OSD"]
        if self.mgr:
            parts.append("a manager")
        if self.cephfs:
            parts.append("an MDS")
        if self.s3:
            parts.append("radosgw")
        return ", ".join(parts[:-1]) + " and " + parts[-1]

    # -- commands --

    def run(self, *cmd, timeout=60, check=True):
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise harness.HarnessError("ceph bed: %s: %s" % (" ".join(cmd), (r.stderr or r.stdout).strip()))
        return r

    def ceph(self, *args, timeout=60):
        return self.run("ceph", "-c", self.conf, "--connect-timeout", "10", *args,
                        timeout=timeout).stdout

    def status(self, *args):
        """`ceph ARGS -f json` parsed, or None when the cluster does not
        answer it (yet)."""
        r = self.run("ceph", "-c", self.conf, "--connect-timeout", "5", *args, "-f", "json",
                     check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def rados(self, *args, pool=None, timeout=60, check=True):
        return self.run("rados", "-c", self.conf, *(["-p", pool] if pool else []), *args,
                        timeout=timeout, check=check)

    def cpu_seconds(self):
        """The CPU time the cluster's daemons have used so far, in seconds."""
        return sum(harness.cpu_seconds(p.pid) for p in self._procs.values())

    # -- the daemons --

    def _server(self, name, cmd):
        self._procs[name] = harness.session().start_server(name, cmd, self.log)
        self._names.append(name)

    def _start_mon(self):
        monmap = os.path.join(self.dir, "monmap")
        self.run("monmaptool", "--create", "--fsid", self.fsid, "--addv", "a",
                 "[v2:127.0.0.1:%d]" % self.mon_port, monmap)
        self.run("ceph-mon", "-c", self.conf, "--mkfs", "-i", "a", "--monmap", monmap)
        self._server("ceph-mon-%d" % self.mon_port, ["ceph-mon", "-f", "-c", self.conf, "-i", "a"])
        self._wait("the monitor", lambda: self.run("ceph", "-c", self.conf, "--connect-timeout", "5",
                                                    "mon", "stat", check=False).returncode == 0)

    def _make_osd(self):
        osd_id = self.ceph("osd", "new", self.osd_uuid).strip()
        if osd_id != "0":
            raise harness.HarnessError("ceph bed: the OSD got id %r" % osd_id)
        self.run("ceph-osd", "-c", self.conf, "-i", "0", "--mkfs", "--osd-uuid", self.osd_uuid,
                 timeout=120)

    def _start_mgr(self):
        self._server("ceph-mgr-%d" % self.mon_port, ["ceph-mgr", "-f", "-c", self.conf, "-i", "x"])

        self._wait("the manager", lambda: (self.status("mgr", "stat") or {}).get("available"))

    def _start_cephfs(self):
        self._server("ceph-mds-%d" % self.mon_port, ["ceph-mds", "-f", "-c", self.conf, "-i", "a"])
        self.ceph("osd", "pool", "create", "cephfs_data", "8")
        self.ceph("osd", "pool", "create", "cephfs_metadata", "8")
        self.ceph("fs", "new", "cephfs", "cephfs_metadata", "cephfs_data")

        def active():
            mdsmap = (self.status("fs", "status", "cephfs") or {}).get("mdsmap", [])
            return any(m.get("state") == "active" for m in mdsmap)
        self._wait("the MDS", active)

    def mount_cephfs(self, name):
        """Mounts CephFS with a ceph-fuse client of its own (its admin
        socket, log and pid file named `name`), as one host mounts it;
        returns the mountpoint."""
        mnt = os.path.join(self.dir, "cephfs_" + name)
        run = os.path.join(self.dir, "run", "fuse-" + name)
        cmd = ["ceph-fuse", "-f", "-c", self.conf, "--admin-socket", run + ".asok",
               "--log-file", os.path.join(self.dir, "log", "fuse-%s.log" % name),
               "--pid-file", run + ".pid", mnt]
        harness.session().mount_command(cmd, mnt, self.log, store=None)
        self._cephfs_mounts.append(mnt)
        return mnt

    def unmount_cephfs(self, mnt):
        """Unmounts a ceph-fuse client: its caches are gone."""
        self._cephfs_mounts.remove(mnt)
        harness.session().unmount(mnt)

    def make_pool(self, name, quota_bytes=None):
        """Creates pool `name` (one copy, 8 placement groups), holding at
        most `quota_bytes` if given."""
        self.ceph("osd", "pool", "create", name, "8")
        self.ceph("osd", "pool", "application", "enable", name, "rados")
        if quota_bytes is not None:
            self.set_pool_quota(name, quota_bytes)

    def set_pool_quota(self, name, quota_bytes):
        """Pool `name` holds at most `quota_bytes` (0: no limit). The
        monitor marks it full once the manager reports it past the quota:
        seconds after the write that passed it."""
        self.ceph("osd", "pool", "set-quota", name, "max_bytes", str(quota_bytes))

    def pool_full(self, name):
        """Whether pool `name` is marked full (its quota reached)."""
        for p in json.loads(self.ceph("osd", "pool", "ls", "detail", "-f", "json")):
            if p["pool_name"] == name:
                return any(f.startswith("full") for f in p.get("flags_names", "").split(","))
        raise harness.HarnessError("ceph bed: no pool %s" % name)

    def wait_pool_full(self, name, full=True):
        """Waits until pool `name` is marked full (or, full=False, no longer)."""
        self._wait("pool %s %s" % (name, "full" if full else "with room"),
                   lambda: self.pool_full(name) == full)

    def osd_up(self):
        return (self.status("osd", "stat") or {}).get("num_up_osds", 0) == 1

    def start_osd(self):
        """Starts the OSD and waits until it serves the pool: up in the map,
        its placement groups active (a write goes through)."""
        self._server("ceph-osd-%d" % self.mon_port, ["ceph-osd", "-f", "-c", self.conf, "-i", "0"])
        self._wait("the OSD", self.osd_up)
        if self.pool in self.run("rados", "-c", self.conf, "lspools").stdout.split():
            self._wait("the OSD's placement groups", self.serves)

    def serves(self):
        """Whether a write to the pool goes through within 2 s."""
        r = self.run("rados", "-c", self.conf, "-p", self.pool, "--rados-osd-op-timeout", "2",
                     "put", "ckptfs-bed-probe", "/dev/null", check=False, timeout=30)
        return r.returncode == 0

    def kill_osd(self):
        """The OSD killed with -9 (it comes back with start_osd)."""
        name = "ceph-osd-%d" % self.mon_port
        proc = self._procs.pop(name)
        proc.kill()
        proc.wait()
        harness.session().stop_server(name)  # forgets it
        self._names.remove(name)

    def s3_environ(self):
        """The environment through which S3 clients find the gateway's
        keys, as they find a real service's: AWS's usual variables."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": "us-east-1", "CKPTFS_TEST_S3_ENDPOINT": self.s3_endpoint}

    def make_bucket(self, name, quota_bytes=None):
        """Creates bucket `name` through the gateway (curl, signed SigV4),
        with a quota of `quota_bytes` if given (radosgw-admin)."""
        out = subprocess.run(
            ["curl", "-sS", "-f", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3",
             "--user", "%s:%s" % (self.access_key, self.secret_key),
             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
             "%s/%s" % (self.s3_endpoint, name)],
            capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise harness.HarnessError("ceph bed: cannot create bucket %s: %s"
                                       % (name, out.stderr.strip()))
        if quota_bytes is not None:
            self.set_bucket_quota(name, quota_bytes)

    def set_bucket_quota(self, name, quota_bytes):
        """Bucket `name` holds at most `quota_bytes` (radosgw-admin)."""
        admin = ["radosgw-admin", "-c", self.conf, "-n", "client.rgw.a"]
        self.run(*admin, "quota", "set", "--quota-scope=bucket", "--bucket=" + name,
                 "--max-size=%d" % quota_bytes, timeout=120)
        self.run(*admin, "quota", "enable", "--quota-scope=bucket", "--bucket=" + name,
                 timeout=120)

    def kill_rgw(self):
        """radosgw killed with -9 (it comes back with start_rgw)."""
        name = "radosgw-%d" % self.rgw_port
        proc = self._procs.pop(name)
        proc.kill()
        proc.wait()
        harness.session().stop_server(name)  # forgets it
        self._names.remove(name)

    def start_rgw(self):
        """radosgw started again on its port; returns once it answers."""
        self._start_rgw(make_user=False)

    def _start_rgw(self, make_user=True):
        self._server("radosgw-%d" % self.rgw_port,
                     ["radosgw", "-f", "-c", self.conf, "-n", "client.rgw.a"])

        def answers():
            try:
                urllib.request.urlopen(self.s3_endpoint, timeout=2).read()
                return True
            except urllib.error.HTTPError:
                return True  # an S3 error: it answers
            except OSError:
                return False
        self._wait("radosgw", answers)
        if not make_user:
            return
        self.run("radosgw-admin", "-c", self.conf, "-n", "client.rgw.a", "user", "create",
                 "--uid", "ckptfs", "--display-name", "ckptfs", "--access-key", self.access_key,
                 "--secret", self.secret_key, timeout=120)

    def _wait(self, what, ready):
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        tail = ""
        try:
            with open(self.log, errors="replace") as f:
                tail = f.read()[-2000:]
        except OSError:
            pass
        raise harness.HarnessError("ceph bed: %s did not come up in %d s; its log: %s"
                                   % (what, START_S, tail))

    def stop(self):
        """The ceph-fuse clients, then the daemons in the reverse of their
        start (the file system failed first: an MDS stops at once then)."""
        for mnt in list(self._cephfs_mounts):
            self.unmount_cephfs(mnt)
        if self.cephfs and self._names:
            self.run("ceph", "-c", self.conf, "--connect-timeout", "5", "fs", "fail", "cephfs",
                     check=False, timeout=30)
        for name in reversed(self._names):
            harness.session().stop_server(name)
        self._names = []


# The quota of the bucket that --s3 makes to fill (radosgw refuses a PUT
# past it with QuotaExceeded).
FULL_BUCKET_BYTES = 1 << 20


def main(argv):
    """ceph_bed.py [--data | --s3 | --s3-data] COMMAND [ARG...]: runs COMMAND
    beside a cluster of its own, with CEPH_CONF naming it (Ceph's clients
    find it as they find a real one) and CKPTFS_TEST_RADOS_POOL its pool;
    with --data also CKPTFS_TEST_DATA=rados://POOL/NAMESPACE (a namespace
    of its own), which makes the engine's tests keep their stores' data
    there. --s3 adds radosgw and a bucket (CKPTFS_TEST_S3_BUCKET), its
    endpoint (CKPTFS_TEST_S3_ENDPOINT) and keys (AWS_ACCESS_KEY_ID, ...);
    --s3 also a bucket of FULL_BUCKET_BYTES at most
    (CKPTFS_TEST_S3_FULL_BUCKET); --s3-data the first bucket and
    CKPTFS_TEST_DATA=s3://BUCKET/tests. Exits with the
    command's status; a cluster that does not start is a failure."""
    mode = argv[0] if argv[:1] and argv[0] in ("--data", "--s3", "--s3-data") else None
    if mode:
        argv = argv[1:]
    if not argv:
        print("usage: ceph_bed.py [--data | --s3 | --s3-data] COMMAND [ARG...]", file=sys.stderr)
        return 2
    s3 = mode in ("--s3", "--s3-data")
    tmp = harness.make_tmpdir("ckptfs-ceph.")
    t0 = time.monotonic()
    bed = Cluster(tmp, s3=s3)
    try:
        env = dict(os.environ, CEPH_CONF=bed.conf, CKPTFS_TEST_RADOS_POOL=bed.pool)
        if mode == "--data":
            env["CKPTFS_TEST_DATA"] = "rados://%s/tests" % bed.pool
        if s3:
            bed.make_bucket("ckptfs-tests")
            env.update(bed.s3_environ(), CKPTFS_TEST_S3_BUCKET="ckptfs-tests")
        if mode == "--s3":
            bed.make_bucket("ckptfs-tests-full", quota_bytes=FULL_BUCKET_BYTES)
            env["CKPTFS_TEST_S3_FULL_BUCKET"] = "ckptfs-tests-full"
        if mode == "--s3-data":
            env["CKPTFS_TEST_DATA"] = "s3://ckptfs-tests/tests"
        harness.log("ceph bed: %s up in %.1f s" % (bed.describe(), time.monotonic() - t0))
        return subprocess.run(argv, env=env).returncode
    finally:
        bed.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
