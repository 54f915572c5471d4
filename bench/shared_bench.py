#!/usr/bin/python3
"""The `shared` workload: several mounts of one shared store (its index in
PostgreSQL, docs/SHARED.md) against one mount of an embedded store and a
plain directory on the same disk, in the same run.

For 1, 2 and 4 mounts (--mounts) of a fresh shared store, each its own host:
  tree      the orbax flow: mount 1 makes step_1.orbax-checkpoint-tmp/, the
            mounts write --dirs parameter directories (.zarray and 4 chunks
            of --chunk bytes) under it, one writer thread per mount, the
            directories dealt out in turn; mount 1 renames it to step_1.
            Files per second, all mounts together.
  ranks     one --rank-size file per mount, as torch.distributed.checkpoint
            writes one per rank (1 MiB writes, fsync), all mounts at once.
            MB/s, all mounts together.
  restore   every mount unmounted, the caches dropped, mounted again; then
            each mount reads, one after the other, the directories it wrote
            ("own") and as many that another mount wrote ("others"), and
            the rank file of the next mount. Files/s and MB/s per mount,
            medians over the mounts.
  sealed    mount 1 seals step_1 (the user.ckptfs.seal attribute); every
            mount is mounted again cold, and the last one (another host
            than the sealing one, with several) reads all of step_1:
            files/s, and its round trips to PostgreSQL per file: all of
            them but those of reading its stats file, and those beyond the
            polls it makes while idle (its lease, the hosts watch, grants;
            measured for 2 s before). The plain directory reads its tree
            again cold. With several mounts, all of them then read all of
            step_1 at once, cold, each in a process of its own: the
            slowest one's files/s, and its ratio to the last mount alone.
            The rank files are moved into step_1 before the seal and read
            the same way after the tree (MB/s), alone and at once.
            The share of the machine's CPUs busy (/proc/stat) during the
            restore alone and during the one at once.
The embedded store (one mount) and the plain directory (one writer) do the
same work. With --netfs every setup runs on the network-filesystem bed
(tests/mount/netfs_bed.py: a private sshd on 127.0.0.1, one sshfs client
per host, the mounts' stores and the plain directory on its export), a
save ends with sync(2), and a cold restore mounts each host's sshfs
client again too. PostgreSQL transactions per file created come from the server's
pg_stat_database; round trips per file, and the share of the writers' time
that the daemons spent waiting on the server, from the mounts' stats
(engine.index_round_trips, engine.index_wait_ns).

Run beside a PostgreSQL cluster, as root (drop_caches, mounting):
  scripts/with-postgres.sh /usr/bin/python3 bench/shared_bench.py
  scripts/with-postgres.sh --tcp /usr/bin/python3 bench/shared_bench.py --netfs
(scripts/with-postgres.sh starts a private one and sets CKPTFS_TEST_PG.)
It asserts nothing about speed; it checks every byte it reads.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import BenchError, drop_caches, log  # noqa: E402
from target import DEFAULT_CKPTFS, wipe  # noqa: E402
import ckptfs_harness as harness  # noqa: E402  (target.py put tests/mount on the path)
import netfs_bed  # noqa: E402

MiB = 1 << 20
ZARRAY = json.dumps({"chunks": [64, 64], "dtype": "<f4", "shape": [128, 128],
                     "zarr_format": 2}).encode()
CHUNKS = ("0.0", "0.1", "1.0", "1.1")


def chunk(i, c, size):
    seed = hashlib.sha256(b"%d/%d" % (i, c)).digest()
    return (seed * (size // len(seed) + 1))[:size]


def write_dirs(root, dirs, size):
    for i in dirs:
        d = os.path.join(root, "params.layer_%05d" % i)
        os.mkdir(d)
        with open(os.path.join(d, ".zarray"), "wb") as f:
            f.write(ZARRAY)
        for c, name in enumerate(CHUNKS):
            with open(os.path.join(d, name), "wb") as f:
                f.write(chunk(i, c, size))


def read_dirs(root, dirs, size):
    """Reads and checks them; returns (files, bytes)."""
    files = nbytes = 0
    for i in dirs:
        d = os.path.join(root, "params.layer_%05d" % i)
        with open(os.path.join(d, ".zarray"), "rb") as f:
            if f.read() != ZARRAY:
                raise BenchError("%s/.zarray differs" % d)
        for c, name in enumerate(CHUNKS):
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            if data != chunk(i, c, size):
                raise BenchError("%s/%s differs from what was written" % (d, name))
            nbytes += len(data)
        files += 1 + len(CHUNKS)
    return files, nbytes


def rank_block(k, n):
    return hashlib.sha256(b"rank%d/%d" % (k, n)).digest() * (MiB // 32)


def write_rank(path, k, size):
    with open(path, "wb") as f:
        for n in range(size // MiB):
            f.write(rank_block(k, n))
        f.flush()
        os.fsync(f.fileno())


def read_rank(path, k, size):
    got = 0
    with open(path, "rb") as f:
        for n in range(size // MiB):
            if f.read(MiB) != rank_block(k, n):
                raise BenchError("%s differs at MiB %d" % (path, n))
            got += MiB
    return got


def cpu_times():
    """(busy, all) jiffies of every CPU so far (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle, iowait
    return sum(v) - idle, sum(v)


def busy_since(t):
    """The share of the machine's CPUs busy since cpu_times() gave `t`."""
    now = cpu_times()
    return (now[0] - t[0]) / max(1, now[1] - t[1])


def timed_read(root, dirs, size, start_at):
    """read_dirs from `start_at` (time.monotonic(), one clock for every
    process); returns files per second."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    t0 = time.monotonic()
    n, _ = read_dirs(root, dirs, size)
    return n / (time.monotonic() - t0)


def read_ranks(root, ranks, size):
    """Reads rank files 0..ranks-1 under `root`; returns their bytes."""
    return sum(read_rank(os.path.join(root, "rank_%d.distcp" % k), k, size) for k in range(ranks))


def timed_ranks(root, ranks, size, start_at):
    """read_ranks from `start_at`; returns MB/s."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    t0 = time.monotonic()
    return read_ranks(root, ranks, size) / MiB / (time.monotonic() - t0)


def run_all(fns):
    """Runs the callables at once, one thread each; returns their results."""
    with concurrent.futures.ThreadPoolExecutor(len(fns)) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]


def pg_commits():
    pg = os.environ.get("CKPTFS_TEST_PG")
    if not pg:
        return None
    time.sleep(1.2)  # the server publishes its counters about once a second
    r = subprocess.run(["psql", pg, "-Atc", "select xact_commit + xact_rollback from "
                        "pg_stat_database where datname = current_database()"],
                       capture_output=True, text=True)
    return int(r.stdout.strip()) if r.returncode == 0 else None


class Setup:
    """One configuration: `n` mounts of a fresh store (shared with `meta`),
    or a plain directory (mounts 0)."""

    def __init__(self, args, name, n, meta=None):
        self.args, self.name, self.n, self.meta = args, name, n, meta
        self.bed = args.bed  # None: on the local disk
        self.base = self.bed.view("h1", name) if self.bed else os.path.join(args.work, name)
        self.mnt_base = os.path.join(args.work, name)
        self.mounts = []

    def roots(self):
        if self.n == 0:
            return [self.base + "/plain"]
        return [m.mnt for m in self.mounts]

    def store(self, k):
        """The store as mount k's host sees it."""
        if self.bed:
            return self.bed.view("h%d" % (k + 1), self.name, "store")
        return os.path.join(self.base, "store")

    def mount_all(self):
        for k in range(self.n):
            opts = ["host=h%d" % (k + 1)] if self.meta else []
            if self.meta and k == 0:
                opts.append("meta=" + self.meta)
            if self.meta and self.args.peers_off:
                opts.append("peers=off")
            m = harness.Mount(self.store(k), os.path.join(self.mnt_base, "mnt%d" % k), opts,
                              binary=self.args.ckptfs)
            m.mount()
            self.mounts.append(m)

    def cold(self):
        """Nothing cached in the kernels, the daemons or the bed's clients."""
        if self.n:
            self.unmount_all()
            self.mounts = []
        drop_caches()
        if self.bed:
            for host in list(self.bed.hosts):
                self.bed.remount(host)
        if self.n:
            self.mount_all()

    def unmount_all(self):
        for m in self.mounts:
            m.unmount()

    def index_waits(self):
        """Round trips to PostgreSQL and seconds spent waiting on them, over
        every mount (the engine's index_round_trips and index_wait_ns)."""
        engines = [m.stats()["engine"] for m in self.mounts]
        return (sum(e.get("index_round_trips", 0) for e in engines),
                sum(e.get("index_wait_ns", 0) for e in engines) / 1e9)

    def run(self):
        a = self.args
        wipe(self.base)
        os.makedirs(self.base + "/plain")
        if self.n:
            self.mount_all()
        roots = self.roots()
        writers = max(1, self.n)
        share = [list(range(k, a.dirs, writers)) for k in range(writers)]
        out = {"setup": self.name, "mounts": self.n}
        try:
            tmp = "step_1.orbax-checkpoint-tmp"
            os.mkdir(os.path.join(roots[0], tmp))
            c0 = pg_commits() if self.meta else None
            w0 = self.index_waits() if self.meta else None
            t0 = time.monotonic()
            run_all([lambda k=k: write_dirs(os.path.join(roots[k], tmp), share[k], a.chunk)
                     for k in range(writers)])
            os.rename(os.path.join(roots[0], tmp), os.path.join(roots[0], "step_1"))
            if self.bed:
                os.sync()
            files = a.dirs * (1 + len(CHUNKS))
            elapsed = time.monotonic() - t0
            out["create_files_s"] = files / elapsed
            if self.meta:
                w1 = self.index_waits()
                out["pg_round_trips_per_file"] = (w1[0] - w0[0]) / files
                # Of the writers' time, the share the daemons spent waiting
                # on the server (one writer a mount).
                out["pg_wait_share"] = (w1[1] - w0[1]) / (elapsed * writers)
            c1 = pg_commits() if self.meta else None
            if c0 is not None and c1 is not None:
                out["pg_txns_per_file"] = (c1 - c0) / files
            t0 = time.monotonic()
            run_all([lambda k=k: write_rank(os.path.join(roots[k], "rank_%d.distcp" % k), k,
                                            a.rank_size) for k in range(writers)])
            out["ranks_mb_s"] = writers * a.rank_size / MiB / (time.monotonic() - t0)

            self.cold()
            roots = self.roots()
            own, others, ranks = [], [], []
            for k in range(writers):
                root = os.path.join(roots[k], "step_1")
                t0 = time.monotonic()
                n, _ = read_dirs(root, share[k], a.chunk)
                own.append(n / (time.monotonic() - t0))
                if writers > 1:
                    t0 = time.monotonic()
                    n, _ = read_dirs(root, share[(k + 1) % writers], a.chunk)
                    others.append(n / (time.monotonic() - t0))
                t0 = time.monotonic()
                nbytes = read_rank(os.path.join(roots[k], "rank_%d.distcp" % ((k + 1) % writers)),
                                   (k + 1) % writers, a.rank_size)
                ranks.append(nbytes / MiB / (time.monotonic() - t0))
            med = lambda v: sorted(v)[len(v) // 2] if v else None  # noqa: E731
            out["restore_own_files_s"] = med(own)
            out["restore_others_files_s"] = med(others)
            out["restore_rank_mb_s"] = med(ranks)
            self.sealed_restore(out)
        finally:
            if self.n:
                self.unmount_all()
            wipe(self.base)
        log("%s: %s" % (self.name, json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                               for k, v in out.items()})))
        return out


    def sealed_restore(self, out):
        """Moves the rank files into step_1 and seals it from mount 1 (not
        the plain directory); then, cold, the last mount (another host, with
        several) reads all of it."""
        a = self.args
        writers = max(1, self.n)
        for k in range(writers):
            name = "rank_%d.distcp" % k
            os.rename(os.path.join(self.roots()[0], name), os.path.join(self.roots()[0], "step_1", name))
        if self.n:
            t0 = time.monotonic()
            os.setxattr(os.path.join(self.roots()[0], "step_1"), "user.ckptfs.seal", b"1")
            out["seal_s"] = time.monotonic() - t0
        self.cold()
        k = max(0, self.n - 1)
        root = os.path.join(self.roots()[k], "step_1")
        trips = lambda: self.mounts[k].stats()["engine"].get("index_round_trips", 0)  # noqa: E731
        if self.meta:
            r0 = trips()
            own = trips() - r0  # those of reading the stats file
            # The mount's own polls (lease, hosts, grants) while idle.
            r0, t0 = trips(), time.monotonic()
            time.sleep(2)
            idle = (trips() - r0 - own) / (time.monotonic() - t0)
            out["idle_round_trips_s"] = idle
            r0 = trips()
        tree = a.dirs * (len(ZARRAY) + len(CHUNKS) * a.chunk)
        served = self.bed.served_bytes if self.bed else None
        s0 = served() if served else None
        c0, t0 = cpu_times(), time.monotonic()
        n, _ = read_dirs(root, range(a.dirs), a.chunk)
        elapsed = time.monotonic() - t0
        if served:
            # What the shared storage served for it, in copies of the tree.
            out["sealed_storage_copies"] = (served() - s0) / tree
        out["sealed_restore_files_s"] = n / elapsed
        out["sealed_restore_cpus_busy"] = busy_since(c0)
        if self.meta:
            # All of the mount's round trips but the stats file's, and those
            # beyond its idle polls.
            asked = trips() - r0 - own
            out["sealed_round_trips_per_file"] = asked / n
            out["sealed_restore_round_trips_per_file"] = max(0.0, asked - idle * elapsed) / n
        ranks = writers * a.rank_size
        s0 = served() if served else None
        t0 = time.monotonic()
        read_ranks(root, writers, a.rank_size)
        out["sealed_rank_mb_s"] = ranks / MiB / (time.monotonic() - t0)
        if served:
            out["sealed_rank_storage_copies"] = (served() - s0) / ranks
        if self.n > 1:
            # Every mount, cold again, reads all of step_1 at once, each in a
            # process of its own; the slowest against the last mount alone.
            self.cold()
            start_at = time.monotonic() + 1.0
            with concurrent.futures.ProcessPoolExecutor(self.n) as ex:
                futures = [ex.submit(timed_read, os.path.join(r, "step_1"), range(a.dirs), a.chunk,
                                     start_at) for r in self.roots()]
                s0 = served() if served else None
                time.sleep(max(0.0, start_at - time.monotonic()))
                c0 = cpu_times()
                rates = [f.result() for f in futures]
                out["sealed_all_cpus_busy"] = busy_since(c0)
                if served:
                    out["sealed_all_storage_copies"] = (served() - s0) / tree
                # Then every rank file, all mounts at once again.
                start_at = time.monotonic() + 1.0
                futures = [ex.submit(timed_ranks, os.path.join(r, "step_1"), writers, a.rank_size,
                                     start_at) for r in self.roots()]
                s0 = served() if served else None
                mb_s = [f.result() for f in futures]
                if served:
                    out["sealed_all_rank_storage_copies"] = (served() - s0) / ranks
            out["sealed_all_files_s"] = min(rates)
            out["sealed_all_x_alone"] = min(rates) / out["sealed_restore_files_s"]
            out["sealed_all_rank_mb_s"] = min(mb_s)
            out["sealed_all_rank_x_alone"] = min(mb_s) / out["sealed_rank_mb_s"]


def fmt(v, digits=0):
    return "-" if v is None else "{:,.{}f}".format(v, digits)


def print_table(results):
    """The results as a Markdown table, with ratios to the plain directory."""
    plain, emb = results[0], results[1]
    print("\n| setup | create files/s | x plain | x embedded | rank writes MB/s | x plain "
          "| cold restore, own files/s | x plain | others' files/s | rank read MB/s | x plain "
          "| PostgreSQL txns/file | round trips/file | time waiting on PostgreSQL "
          "| sealed, cold restore on the last mount, files/s | x plain | its round trips/file "
          "| of them beyond its idle polls | its idle polls/s "
          "| sealed, every mount at once, the slowest's files/s | x the last mount alone "
          "| CPUs busy, alone / at once "
          "| bytes the storage served, x the tree: alone / at once "
          "| sealed rank files, last mount alone, MB/s | every mount at once, the slowest's MB/s "
          "| x alone | bytes the storage served, x the rank files: alone / at once |")
    print("| --- |" + " ---: |" * 26)
    for r in results:
        share = r.get("pg_wait_share")
        busy = [r.get(k) for k in ("sealed_restore_cpus_busy", "sealed_all_cpus_busy")]
        copies = [r.get(k) for k in ("sealed_storage_copies", "sealed_all_storage_copies")]
        rank_copies = [r.get(k) for k in ("sealed_rank_storage_copies",
                                          "sealed_all_rank_storage_copies")]
        print("| %s |" % r["setup"] + " %s |" * 26 % (
            fmt(r["create_files_s"]), fmt(r["create_files_s"] / plain["create_files_s"], 2),
            fmt(r["create_files_s"] / emb["create_files_s"], 2),
            fmt(r["ranks_mb_s"]), fmt(r["ranks_mb_s"] / plain["ranks_mb_s"], 2),
            fmt(r["restore_own_files_s"]),
            fmt(r["restore_own_files_s"] / plain["restore_own_files_s"], 2),
            fmt(r.get("restore_others_files_s")), fmt(r["restore_rank_mb_s"]),
            fmt(r["restore_rank_mb_s"] / plain["restore_rank_mb_s"], 2),
            fmt(r.get("pg_txns_per_file"), 1), fmt(r.get("pg_round_trips_per_file"), 1),
            "-" if share is None else "%.0f%%" % (100 * share),
            fmt(r["sealed_restore_files_s"]),
            fmt(r["sealed_restore_files_s"] / plain["sealed_restore_files_s"], 2),
            fmt(r.get("sealed_round_trips_per_file"), 3),
            fmt(r.get("sealed_restore_round_trips_per_file"), 4),
            fmt(r.get("idle_round_trips_s"), 1),
            fmt(r.get("sealed_all_files_s")), fmt(r.get("sealed_all_x_alone"), 2),
            " / ".join("-" if b is None else "%.0f%%" % (100 * b) for b in busy),
            " / ".join(fmt(c, 2) for c in copies),
            fmt(r["sealed_rank_mb_s"]), fmt(r.get("sealed_all_rank_mb_s")),
            fmt(r.get("sealed_all_rank_x_alone"), 2),
            " / ".join(fmt(c, 2) for c in rank_copies)))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mounts", default="1,2,4", help="shared-store mount counts (default 1,2,4)")
    ap.add_argument("--dirs", type=int, default=400, help="parameter directories (default 400)")
    ap.add_argument("--chunk", type=int, default=16384, help="chunk file bytes (default 16384)")
    ap.add_argument("--rank-size", type=int, default=512, help="rank file MiB (default 512)")
    ap.add_argument("--ckptfs", default=DEFAULT_CKPTFS, help="the binary (default %(default)s)")
    ap.add_argument("--work", default="/tmp/ckptfs-shared-bench", help="work directory")
    ap.add_argument("--json", metavar="PATH", help="also write the results there")
    ap.add_argument("--netfs", action="store_true",
                    help="on the network-filesystem bed (tests/mount/netfs_bed.py)")
    ap.add_argument("--peers-off", action="store_true",
                    help="shared-store mounts with peers=off: every host reads the storage")
    ap.add_argument("--rate", type=float, metavar="MB/S",
                    help="with --netfs: the bed's file server sends and receives at most this "
                         "many MB/s (a file server under load)")
    a = ap.parse_args()
    a.rank_size *= MiB
    meta = os.environ.get("CKPTFS_TEST_PG")
    if not meta:
        raise SystemExit("run beside PostgreSQL: scripts/with-postgres.sh /usr/bin/python3 %s"
                         % sys.argv[0])
    os.environ["CKPTFS_BIN"] = a.ckptfs
    os.environ.pop("CKPTFS_TEST_META", None)  # the embedded setup stays embedded
    harness.require_fuse(root=True)
    a.bed = None
    if a.netfs:
        a.bed = netfs_bed.Bed(harness.make_tmpdir("ckptfs-netfs-bench."), rate_mb_s=a.rate)
        for k in range(max([1] + [int(x) for x in a.mounts.split(",")])):
            a.bed.mount("h%d" % (k + 1))
    results = [Setup(a, "plain", 0).run(), Setup(a, "embedded", 1).run()]
    for n in [int(x) for x in a.mounts.split(",")]:
        results.append(Setup(a, "shared-%d" % n, n, meta).run())
    print_table(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
