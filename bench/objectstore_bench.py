#!/usr/bin/python3
"""Checkpoints on object storage (docs/OBJECT_STORAGE.md), beside a one-node
Ceph cluster of the benchmark's own (tests/mount/ceph_bed.py: a monitor, an
OSD, a manager, an MDS and radosgw on 127.0.0.1, under a temporary
directory, stopped at exit).

Two workloads, each saved and then restored cold (the mount remounted and
the page cache dropped; the cluster's own caches stay as they are for
every side):
  - tree: a per-parameter tree of --dirs directories, each a .zarray and
    four chunk files of --chunk bytes (16 KiB: past inline_max, so that
    the chunks go to the object store; orbax/TensorStore's zarr layout);
  - ranks: --ranks files of --rank-mib MiB (torch.distributed.checkpoint's
    one file per rank), written and read 1 MiB at a time.
Sides:
  - ckptfs on RADOS: a mount made with -o data=rados://POOL/NAMESPACE;
  - ckptfs on S3: -o data=s3://BUCKET/PREFIX,s3_endpoint=URL (radosgw);
  - one object per file through the same radosgw, one request after the
    other on a kept connection (what an S3 FUSE filesystem or fsspec does);
  - the plain directory on CephFS of the same cluster, through ceph-fuse
    (restored cold: the client mounted again, the page cache dropped);
  - raw RADOS throughput (`rados bench`, 4 MiB objects, 16 in flight), for
    the rank files.
Prints one JSON line per workload and side: seconds, files or MB/s, and
requests to the object store per file (the mount's engine.object_*). For
the rank files through ckptfs and for rados bench, also the CPU seconds per
GB that the client (the writer or reader, the ckptfs daemon, the rados
command) and the cluster's daemons spent: client and cluster share this
machine's cores.

Run as root (mounting):
  /usr/bin/python3 bench/objectstore_bench.py --ckptfs build/tools/ckptfs
It asserts nothing about speed.
"""

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from target import DEFAULT_CKPTFS  # noqa: E402
import ckptfs_harness as harness  # noqa: E402  (target.py put tests/mount on the path)
import ceph_bed  # noqa: E402

CHUNKS = (".zarray", "0.0", "0.1", "1.0", "1.1")
BLOCK = 1 << 20


class S3:
    """One kept HTTP connection to the gateway, requests signed with SigV4
    (UNSIGNED-PAYLOAD, as ckptfs's own client signs)."""

    def __init__(self, endpoint, access_key, secret_key, region="us-east-1"):
        u = urllib.parse.urlparse(endpoint)
        self.host = u.netloc
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        self.access_key, self.secret_key, self.region = access_key, secret_key, region

    def _headers(self, method, path):
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"host": self.host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
                   "x-amz-date": amz_date}
        names = ";".join(sorted(headers))
        canonical = "\n".join([method, path, "",
                               "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers)),
                               names, "UNSIGNED-PAYLOAD"])
        scope = "%s/%s/s3/aws4_request" % (day, self.region)
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret_key).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s"
            % (self.access_key, scope, names, signature))
        return headers

    def request(self, method, path, body=None):
        path = urllib.parse.quote(path)
        self.conn.request(method, path, body=body, headers=self._headers(method, path))
        r = self.conn.getresponse()
        data = r.read()
        if r.status // 100 != 2:
            raise RuntimeError("%s %s: HTTP %d %s" % (method, path, r.status, data[:200]))
        return data


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def tree_paths(dirs):
    for i in range(dirs):
        for name in CHUNKS:
            yield "params.layer_%05d/%s" % (i, name)


def save_tree(root, a, data, block):
    for i in range(a.dirs):
        d = os.path.join(root, "params.layer_%05d" % i)
        os.mkdir(d)
        for name in CHUNKS:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    os.sync()


def restore_tree(root, a, data, block):
    for rel in tree_paths(a.dirs):
        with open(os.path.join(root, rel), "rb") as f:
            if f.read() != data:
                raise RuntimeError("wrong bytes in " + rel)


def save_ranks(root, a, data, block):
    for r in range(a.ranks):
        with open(os.path.join(root, "rank_%02d.distcp" % r), "wb") as f:
            for _ in range(a.rank_mib):
                f.write(block)
            os.fsync(f.fileno())


def restore_ranks(root, a, data, block):
    for r in range(a.ranks):
        with open(os.path.join(root, "rank_%02d.distcp" % r), "rb", buffering=0) as f:
            for _ in range(a.rank_mib):
                if f.read(BLOCK) != block:
                    raise RuntimeError("wrong bytes in rank %d" % r)


# Each workload's save and restore (root, args, chunk bytes, 1 MiB block).
WORKLOADS = {"tree": (save_tree, restore_tree), "ranks": (save_ranks, restore_ranks)}


def timed(fn, *args):
    """Seconds `fn(*args)` took."""
    t0 = time.monotonic()
    fn(*args)
    return time.monotonic() - t0


class CpuMeter:
    """CPU seconds spent on the client side (this process and the pids
    given) and by the cluster's daemons, from one point on: where the cores
    of a machine that runs client and cluster at once go."""

    def __init__(self, bed, pids=()):
        self.bed, self.pids = bed, pids
        self.client, self.cluster = self._client(), bed.cpu_seconds()

    def _client(self):
        t = os.times()
        return t.user + t.system + sum(harness.cpu_seconds(p) for p in self.pids)

    def per_gb(self, gb, more_client=0.0):
        """{"client", "cluster"}: CPU seconds per GB since the start, the
        client side's with `more_client` seconds added."""
        return {"client": round((self._client() - self.client + more_client) / gb, 2),
                "cluster": round((self.bed.cpu_seconds() - self.cluster) / gb, 2)}


def rank_gb(a):
    """The GB the rank files hold."""
    return a.ranks * a.rank_mib * BLOCK / 1e9


def workload_files(workload, a):
    """How many files `workload` saves."""
    return a.dirs * len(CHUNKS) if workload == "tree" else a.ranks


def row(workload, side, a, save, restore, **more):
    """One workload's JSON row: seconds, and MB/s for the rank files."""
    out = {"workload": workload, "side": side, "files": workload_files(workload, a),
           "save_s": round(save, 2), "restore_s": round(restore, 2), **more}
    if workload == "ranks":
        mb = rank_gb(a) * 1e3
        out.update(save_mb_s=round(mb / save), restore_mb_s=round(mb / restore))
    return out


def object_requests(m):
    e = m.stats()["engine"]
    return e["object_reads"], e["object_writes"] + e["object_other"]


def ckptfs_side(bed, tmp, name, options, a, data, block):
    """Both workloads through one mount: seconds, requests per file, and
    for the rank files the CPU seconds per GB of client and cluster."""
    out = []
    key = name.split()[-1].lower()
    m = harness.Mount(os.path.join(tmp, key, "store"), os.path.join(tmp, key, "mnt"), options)
    m.mount()
    try:
        for workload in ("tree", "ranks"):
            root = m.path(workload)
            os.mkdir(root)
            files = workload_files(workload, a)
            save_fn, restore_fn = WORKLOADS[workload]
            more = {}

            def metered(key, fn):
                """`fn` timed, and for the rank files its CPU per GB under `key`."""
                cpu = CpuMeter(bed, [m.pid])
                seconds = timed(fn, root, a, data, block)
                if workload == "ranks":
                    more[key] = cpu.per_gb(rank_gb(a))
                return seconds
            _, w0 = object_requests(m)
            save = metered("save_cpu_s_per_gb", save_fn)
            _, w1 = object_requests(m)
            m.unmount()
            drop_caches()
            m.mount(options=[])
            r0, _ = object_requests(m)
            restore = metered("restore_cpu_s_per_gb", restore_fn)
            r1, _ = object_requests(m)
            out.append(row(workload, name, a, save, restore,
                           save_requests_per_file=round((w1 - w0) / files, 3),
                           restore_requests_per_file=round((r1 - r0) / files, 3), **more))
    finally:
        m.unmount()
    return out


def cephfs_side(bed, a, data, block):
    """Both workloads as plain files on CephFS (ceph-fuse; bed.stop
    unmounts it whatever happens)."""
    out = []
    mnt = bed.mount_cephfs("bench")
    for workload in ("tree", "ranks"):
        root = os.path.join(mnt, workload)
        os.mkdir(root)
        save_fn, restore_fn = WORKLOADS[workload]
        save = timed(save_fn, root, a, data, block)
        bed.unmount_cephfs(mnt)
        drop_caches()
        mnt = bed.mount_cephfs("bench")
        restore = timed(restore_fn, os.path.join(mnt, workload), a, data, block)
        out.append(row(workload, "plain directory on CephFS (ceph-fuse)", a, save, restore))
    bed.unmount_cephfs(mnt)
    return out


def object_per_file_side(bed, a, data, block):
    """Each file an object of its own, PUT and GET one after the other."""
    bucket = "perfile"
    bed.make_bucket(bucket)
    s3 = S3(bed.s3_endpoint, bed.access_key, bed.secret_key)
    body = block * a.rank_mib
    files = {"tree": [("/%s/tree/%s" % (bucket, rel), data) for rel in tree_paths(a.dirs)],
             "ranks": [("/%s/ranks/rank_%02d.distcp" % (bucket, r), body)
                       for r in range(a.ranks)]}

    def put(objects):
        for key, want in objects:
            s3.request("PUT", key, want)

    def get(objects):
        for key, want in objects:
            if s3.request("GET", key) != want:
                raise RuntimeError("wrong bytes in " + key)
    out = []
    for workload, objects in files.items():
        save, restore = timed(put, objects), timed(get, objects)
        out.append(row(workload, "object per file (radosgw)", a, save, restore,
                       save_requests_per_file=1.0, restore_requests_per_file=1.0))
    return out


def rados_bench_side(bed, seconds):
    """rados bench: 4 MiB objects, 16 in flight, written then read back."""
    def mb_s(text):
        for line in text.splitlines():
            if line.startswith("Bandwidth (MB/sec):"):
                return round(float(line.split(":")[1]) * 1.048576)  # MiB/s to MB/s
        raise RuntimeError("rados bench said: " + text[-500:])
    def bench(*args):
        """rados bench's output and its CPU seconds per GB moved, the
        rados command's own (wait4) on the client side."""
        cpu = CpuMeter(bed)
        with tempfile.TemporaryFile(mode="w+") as out:
            p = subprocess.Popen(["timeout", str(seconds + 120), "rados", "-c", bed.conf,
                                  "-p", bed.pool, "bench", str(seconds), *args, "-t", "16"],
                                 stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            text = out.read()
        if p.returncode != 0:
            raise RuntimeError("rados bench said: " + text[-500:])
        for line in text.splitlines():
            if line.startswith("Total time run:"):
                gb = mb_s(text) * float(line.split(":")[1]) / 1e3
                return text, cpu.per_gb(gb, usage.ru_utime + usage.ru_stime)
        raise RuntimeError("rados bench said: " + text[-500:])
    w, save_cpu = bench("write", "--no-cleanup")
    r, restore_cpu = bench("seq")
    bed.rados("cleanup", pool=bed.pool, timeout=120)
    return [{"workload": "ranks", "side": "raw RADOS (rados bench)",
             "save_mb_s": mb_s(w), "restore_mb_s": mb_s(r),
             "save_cpu_s_per_gb": save_cpu, "restore_cpu_s_per_gb": restore_cpu}]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirs", type=int, default=10000, help="parameter directories (default 10000)")
    ap.add_argument("--chunk", type=int, default=16384, help="chunk file bytes (default 16384)")
    ap.add_argument("--ranks", type=int, default=2, help="rank files (default 2)")
    ap.add_argument("--rank-mib", type=int, default=512, help="MiB per rank file (default 512)")
    ap.add_argument("--ckptfs", default=DEFAULT_CKPTFS, help="the binary (default %(default)s)")
    a = ap.parse_args()
    os.environ["CKPTFS_BIN"] = a.ckptfs
    harness.require_fuse(root=True)
    why = ceph_bed.unavailable(s3=True, cephfs=True)
    if why:
        raise SystemExit("objectstore_bench: " + why)
    tmp = harness.make_tmpdir("ckptfs-objectstore-bench.")  # removed at exit
    bed = ceph_bed.Cluster(tmp, s3=True, cephfs=True, block_gib=16 + (a.ranks * a.rank_mib >> 10) * 4)
    try:
        os.environ["CEPH_CONF"] = bed.conf
        os.environ.update(bed.s3_environ())
        bed.make_bucket("ckptfs")
        data = os.urandom(a.chunk)
        block = os.urandom(BLOCK)
        rows = []
        rows += ckptfs_side(bed, tmp, "ckptfs on RADOS", ["data=rados://%s/bench" % bed.pool], a,
                            data, block)
        rows += ckptfs_side(bed, tmp, "ckptfs on S3",
                            ["data=s3://ckptfs/bench", "s3_endpoint=" + bed.s3_endpoint], a,
                            data, block)
        rows += object_per_file_side(bed, a, data, block)
        rows += cephfs_side(bed, a, data, block)
        rows += rados_bench_side(bed, 5)
        for row in rows:
            print(json.dumps(row), flush=True)
    finally:
        bed.stop()


if __name__ == "__main__":
    main()
