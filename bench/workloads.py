"""The workloads of mount_bench.py (bench/README.md numbers them): each runs
against the ckptfs mount or the plain directory (workloads 1 and 2 also on
the FUSE floor) and returns its raw measurements; run_all alternates them and
rotates the order every repetition."""

import itertools
import json
import math
import mmap
import os
import random
import struct
import subprocess
import sys
import time

from measure import (GIB, MIB, BenchError, Meter, ReadThrottle, allocated_bytes, count_files,
                     drop_caches, human_size, log, parse_size, proc_storage_read_bytes)
from target import Ckptfs, FuseFloor, daemon_pid, fresh_target, make_cold, remove_target, wipe

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
WORKLOADS = ("big", "layout", "frameworks", "sweep", "scaling", "disk", "pieces", "cloud",
             "steps")


# Workload 1: one big file

PIECE = 512 * MIB  # the reads' daemon CPU is also taken per piece of this size


class PieceCpu:
    """The daemon's CPU s/GiB over each PIECE of a read (tick() after every
    MiB), to tell a steady cost per byte from bursts in some pieces."""

    def __init__(self, cpu_s):
        self.cpu_s = cpu_s
        self.per_gib = []
        self.blocks = 0
        self.c0 = cpu_s()

    def tick(self):
        self.blocks += 1
        if self.blocks % (PIECE // MIB) == 0:
            c = self.cpu_s()
            if c is not None and self.c0 is not None:
                self.per_gib.append((c - self.c0) / (PIECE / GIB))
            self.c0 = c


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


def big_read(path, size, base, tick=None):
    """1 MiB reads to EOF; checks every block's index and three blocks in full;
    calls tick() after each block."""
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
            if tick:
                tick()
    if total != size:
        raise BenchError("%s: read %d bytes, expected %d" % (path, total, size))


def big_mmap_read(path, size, base, tick=None):
    """Copies the file out of a read-only mapping 1 MiB at a time, as a
    safetensors load does: every byte arrives by page fault. Checks and
    calls tick() as big_read does."""
    nblocks = size // MIB
    full_check = {0, nblocks // 2, nblocks - 1}
    with open(path, "rb", buffering=0) as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            if len(mm) != size:
                raise BenchError("%s: mapped %d bytes, expected %d" % (path, len(mm), size))
            for i in range(nblocks):
                block = mm[i * MIB:(i + 1) * MIB]
                if struct.unpack_from("<Q", block, 0)[0] != i:
                    raise BenchError("%s: mapped block %d has wrong contents" % (path, i))
                if i in full_check and block[8:] != base[8:]:
                    raise BenchError("%s: mapped block %d differs from what was written"
                                     % (path, i))
                if tick:
                    tick()


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
        pieces = PieceCpu(b.fs.cpu_s)
        big_read(path, b.big_size, b.big_base, pieces.tick)
    out["cold_read"] = m.as_dict()
    out["cold_read"]["daemon_cpu_s_per_GiB_pieces"] = pieces.per_gib
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
    drop_caches()
    b.fs.mount(store, mnt)
    e0 = b.fs.engine_stats()
    with Meter(b.fs.pid) as m:
        pieces = PieceCpu(b.fs.cpu_s)
        big_mmap_read(path, b.big_size, b.big_base, pieces.tick)
    out["mmap_read"] = m.as_dict()
    out["mmap_read"]["daemon_cpu_s_per_GiB_pieces"] = pieces.per_gib
    out["mmap_read"]["engine_delta"] = delta(e0, b.fs.engine_stats())
    out["mmap_read"]["daemon_peak_rss_kb"] = b.fs.peak_rss_kb()
    b.fs.umount()
    out["store_files"] = count_files(store)
    out["store_allocated_bytes"] = allocated_bytes(store)
    wipe(store)
    return out


# What the FUSE floor measures of workloads 1 and 2 (report.py's floor cells);
# of workload 3 it runs the torch pair (zarr's 25,001 files are more than its
# daemon can hold open), and workload 10's saves.
FLOOR_BIG_PHASES = ("write", "cold_read", "warm_read", "mmap_read")
FLOOR_LAYOUT_KEYS = ("create_files_per_s", "create_sync_files_per_s", "restore_files_per_s",
                     "restore_MBps")


def run_big_dir(b, rep, who):
    """Workload 1 on the plain directory, or on the FUSE floor."""
    d = fresh_target(b, who, "big")
    path = os.path.join(d, "big.bin")
    out = {"rep": rep}
    try:
        with Meter(daemon_pid(b, who)) as m:
            big_write(path, b.big_size, b.big_base)
        out["write"] = m.as_dict()
        make_cold(b, who)
        for phase in ("cold_read", "warm_read"):
            with Meter(daemon_pid(b, who)) as m:
                big_read(path, b.big_size, b.big_base)
            out[phase] = m.as_dict()
        make_cold(b, who)
        with Meter(daemon_pid(b, who)) as m:
            big_mmap_read(path, b.big_size, b.big_base)
        out["mmap_read"] = m.as_dict()
    finally:
        remove_target(b, who, "big")
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


def layout_create(b, root, dirs=None):
    """Plain Python writes, the way a zarr store writes: makedirs, open/write/close.
    `dirs` arrays (default b.dirs)."""
    meta = json.dumps(ZARRAY, indent=4, sort_keys=True).encode()
    os.makedirs(root)
    for i in range(dirs or b.dirs):
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


def layout_restore(b, root, threads=1, dirs=None):
    """Lists the checkpoint dir and restores every array, with one thread or with
    `threads` threads taking one array at a time (as tensorstore/orbax and zarr
    with a thread pool do); `dirs` arrays are expected (default b.dirs).
    Returns (files, bytes)."""
    names = sorted(os.listdir(root))
    if len(names) != (dirs or b.dirs):
        raise BenchError("%s holds %d entries, expected %d" % (root, len(names),
                                                               dirs or b.dirs))
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
    q0 = b.fs.requests()
    with Meter(b.fs.pid) as m:
        layout_create(b, root)
    out["create"] = m.as_dict()
    out["create"]["requests"] = delta(q0, b.fs.requests())
    with Meter(b.fs.pid, quiet=False) as m:
        os.sync()
    out["create_sync"] = m.as_dict()
    out["create_engine"] = b.fs.engine_stats()
    out["create_daemon_peak_rss_kb"] = b.fs.peak_rss_kb()
    out["create_umount_s"] = b.fs.umount()
    drop_caches()
    out["remount_s"] = b.fs.mount(store, mnt)
    e0 = b.fs.engine_stats()
    q0 = b.fs.requests()
    with Meter(b.fs.pid) as m:
        files, nbytes = layout_restore(b, root)
    out["restore"] = m.as_dict()
    out["restore"]["requests"] = delta(q0, b.fs.requests())
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
    # `ckptfs warmup` right before a restore.
    drop_caches()
    b.fs.mount(store, mnt)
    e0 = b.fs.engine_stats()
    with Meter(b.fs.pid) as m:
        r = subprocess.run([b.fs.binary, "warmup", "--json", root], capture_output=True,
                           text=True)
    if r.returncode != 0:
        raise BenchError("ckptfs warmup %s: %s" % (root, r.stderr.strip()))
    out["warmup"] = dict(m.as_dict(), **json.loads(r.stdout))
    out["warmup"]["engine_delta"] = delta(e0, b.fs.engine_stats())
    q0 = b.fs.requests()
    with Meter(b.fs.pid) as m:
        files_w, _ = layout_restore(b, root)
    out["restore_warm"] = m.as_dict()
    out["restore_warm"]["requests"] = delta(q0, b.fs.requests())
    if files_w != files:
        raise BenchError("restore after warmup read %d files, expected %d" % (files_w, files))
    b.fs.umount()
    out["store_files"] = count_files(store)
    out["store_allocated_bytes"] = allocated_bytes(store)
    if not keep:
        wipe(store)
    return out


def floor_layout_dirs(b):
    """The arrays of the FUSE floor's tree: b.dirs, or fewer where its daemon
    would run out of file descriptors (passthrough_hp holds one for every
    inode the kernel knows: a directory and 5 files an array, and the limit
    is the hard RLIMIT_NOFILE, with 2,000 to spare)."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return b.dirs
    return max(1, min(b.dirs, (hard - 2000) // (1 + len(CHUNK_NAMES) + 1)))


def run_layout_dir(b, rep, who, keep=False):
    """Workload 2 on the plain directory (kept for the sweep with `keep`), or
    on the FUSE floor (create, create + sync and the single-threaded cold
    restore, of floor_layout_dirs arrays)."""
    d = fresh_target(b, who, "layout")
    root = os.path.join(d, "checkpoint")
    dirs = floor_layout_dirs(b) if who == "floor" else b.dirs
    out = {"rep": rep, "dirs": dirs}
    try:
        with Meter(daemon_pid(b, who)) as m:
            layout_create(b, root, dirs)
        out["create"] = m.as_dict()
        with Meter(daemon_pid(b, who), quiet=False) as m:
            os.sync()
        out["create_sync"] = m.as_dict()
        make_cold(b, who)
        with Meter(daemon_pid(b, who)) as m:
            files, nbytes = layout_restore(b, root, dirs=dirs)
        out["restore"] = m.as_dict()
        out["files"], out["bytes"] = files, nbytes
        if who == "plain":
            drop_caches()
            with Meter() as m:
                layout_restore(b, root, RESTORE_THREADS)
            out["restore_parallel"] = m.as_dict()
            out["store_files"] = count_files(d)
            out["store_allocated_bytes"] = allocated_bytes(d)
    finally:
        if who == "floor" or not keep:
            remove_target(b, who, "layout")
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

FRAMEWORKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frameworks.py")


def framework_phase(phase, d, n):
    """Runs one frameworks.py phase; returns its JSON (the timed part's seconds)."""
    r = subprocess.run([sys.executable, FRAMEWORKS, phase, d, str(n)], capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise BenchError("frameworks.py %s %s failed: %s%s" % (phase, d, r.stdout, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_frameworks(b, rep, who):
    """torch.save + torch.load, then zarr write + read (not on the FUSE floor);
    reads cold (caches dropped, the mount started afresh)."""
    out = {"rep": rep}
    pairs = [("torch-save", "torch-load", b.torch_mib)]
    if who != "floor":
        pairs.append(("zarr-write", "zarr-read", b.zarr_arrays))
    for write, read, n in pairs:
        d = fresh_target(b, who, "fw")
        with Meter(daemon_pid(b, who)) as m:
            res = framework_phase(write, d, n)
        out[write] = dict(m.as_dict(), **res)
        make_cold(b, who)
        e0 = b.fs.engine_stats() if who == "ckptfs" else None
        pid = daemon_pid(b, who)
        io0 = proc_storage_read_bytes(pid) if pid else None
        with Meter(pid) as m:
            res = framework_phase(read, d, n)
        out[read] = dict(m.as_dict(), **res)
        if e0 is not None:
            out[read]["engine_delta"] = delta(e0, b.fs.engine_stats())
        if io0 is not None and proc_storage_read_bytes(pid) is not None:
            out[read]["daemon_storage_read_bytes"] = proc_storage_read_bytes(pid) - io0
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
            with Meter(daemon_pid(b, who)) as m:
                seconds, nbytes = scaling_write(d, n, b.scaling_bytes, b.big_base)
            r = m.as_dict()
            r.update({"writers": n, "seconds": seconds, "bytes": nbytes})
            out["runs"].append(r)
    finally:
        remove_target(b, who, "scaling")
    return out


# ---------------------------------------------------------------------------
# Workload 8: one file written in small pieces

PIECES = (4096, 65536)


def pieces_write(path, size, piece, base):
    """`size` bytes in `piece`-byte write(2) calls, fsync, close."""
    mv = memoryview(base)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        pos = 0
        while pos < size:
            off = pos % len(base)
            n = os.write(fd, mv[off:off + min(piece, size - pos)])
            pos += n
        os.fsync(fd)
    finally:
        os.close(fd)


def pieces_check(path, size, base):
    """Compares the file with what pieces_write wrote."""
    with open(path, "rb", buffering=0) as f:
        pos = 0
        while pos < size:
            want = min(len(base), size - pos)
            got = f.read(want)
            if got != base[:want]:
                raise BenchError("%s: bytes at %d differ from what was written" % (path, pos))
            pos += want
        if f.read(1):
            raise BenchError("%s is longer than %d bytes" % (path, size))


def run_pieces(b, rep, who):
    out = {"rep": rep, "runs": []}
    d = fresh_target(b, who, "pieces")
    try:
        for piece in PIECES:
            path = os.path.join(d, "pieces-%d.bin" % piece)
            q0 = b.fs.requests() if who == "ckptfs" else None
            with Meter(daemon_pid(b, who)) as m:
                pieces_write(path, b.pieces_bytes, piece, b.big_base)
            r = m.as_dict()
            r.update({"piece": piece, "bytes": b.pieces_bytes})
            if q0 is not None:
                r["requests"] = delta(q0, b.fs.requests())
            out["runs"].append(r)
            pieces_check(path, b.pieces_bytes, b.big_base)
            os.unlink(path)
    finally:
        remove_target(b, who, "pieces")
    return out


# ---------------------------------------------------------------------------
# Workload 9: cold restore of workload 2's tree on a throttled disk

CLOUD_READ_IOPS = 3000
CLOUD_READ_BPS = 250 * 1000 * 1000


def run_cloud(b, rep, who):
    """The single-threaded cold restore of workload 2 with the reader (and the
    daemon) in a cgroup whose reads are throttled like a cloud volume."""
    out = {"rep": rep, "read_iops": CLOUD_READ_IOPS, "read_bps": CLOUD_READ_BPS}
    drop_caches()
    with ReadThrottle(b.work, CLOUD_READ_IOPS, CLOUD_READ_BPS) as t:
        if who == "ckptfs":
            mnt = b.path("mnt")
            b.fs.mount(b.path("store-layout"), mnt)
            t.join(b.fs.pid)
            root = os.path.join(mnt, "checkpoint")
        else:
            root = os.path.join(b.path("plain-layout"), "checkpoint")
        t.join(os.getpid())
        try:
            with Meter(daemon_pid(b, who)) as m:
                files, nbytes = layout_restore(b, root)
        finally:
            if who == "ckptfs":
                b.fs.umount()
    out["restore"] = m.as_dict()
    out["files"], out["bytes"] = files, nbytes
    return out


# ---------------------------------------------------------------------------
# Workload 10: "keep the last step" saves with background compaction

STEPS = 5
STEP_SHARDS = 8
# The variants of a rep: the plain directory, ckptfs with its defaults
# (background compaction on), and ckptfs with background compaction off.
STEPS_VARIANTS = ("plain", "ckptfs", "ckptfs-nocompact")


def step_bytes(d):
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))


def run_steps(b, rep, variant):
    """STEPS checkpoint steps of STEP_SHARDS shards, each written (1 MiB
    writes, fsync) and then the step before it deleted, as "keep the last
    step" does. Every delete leaves as many dead bytes as are live, which
    starts background compaction (when on) while the next step is saved:
    the saves of steps 2.. are timed. The space is measured once the store
    is idle. Variant "floor": the saves on the FUSE floor."""
    who = variant if variant in ("plain", "floor") else "ckptfs"
    out = {"rep": rep, "variant": variant, "saves": []}
    root = fresh_target(b, who, "steps",
                        ["compact_dead=0"] if variant == "ckptfs-nocompact" else [])
    shard = b.steps_bytes // STEP_SHARDS
    try:
        for step in range(STEPS):
            d = os.path.join(root, "step%d" % step)
            os.mkdir(d)
            with Meter(daemon_pid(b, who)) as m:
                for i in range(STEP_SHARDS):
                    big_write(os.path.join(d, "shard%d.bin" % i), shard, b.big_base)
            if step >= 2:
                r = m.as_dict()
                r["step"] = step
                out["saves"].append(r)
            written = step_bytes(d)
            if written != b.steps_bytes:
                raise BenchError("%s holds %d bytes, not %d" % (d, written, b.steps_bytes))
            if step > 0:
                wipe(os.path.join(root, "step%d" % (step - 1)))
        if who == "ckptfs":
            # The space once background work settles: unchanged for 3 s (at
            # most 30 s).
            st, since, deadline = None, time.monotonic(), time.monotonic() + 30
            while time.monotonic() < deadline and time.monotonic() - since < 3:
                now = b.fs.stats()
                if st is None or (now["storage"]["segment_file_bytes"] !=
                                  st["storage"]["segment_file_bytes"]):
                    since = time.monotonic()
                st = now
                time.sleep(0.5)
            out["segment_file_bytes"] = st["storage"]["segment_file_bytes"]
            out["live_bytes"] = st["storage"]["live_bytes"]
            out["last_compaction"] = st.get("last_compaction")
        big_read(os.path.join(root, "step%d" % (STEPS - 1), "shard0.bin"), shard, b.big_base)
    finally:
        remove_target(b, who, "steps")
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
        self.pieces_bytes = (64 * MIB if args.quick else GIB)
        # Not a divisor of the 1 GiB segment: steps share segments, so a
        # delete leaves segments partly dead, which only copying reclaims.
        self.steps_bytes = (96 * MIB if args.quick else 384 * MIB)
        base_opts = [o for o in (args.mount_opts or "").split(",") if o]
        self.fs = Ckptfs(os.path.realpath(args.ckptfs), base_opts, args.fuse_read_ahead_kb)
        # The FUSE floor's column, when its binary is there (mount_bench.py checks).
        self.floor = (FuseFloor(os.path.realpath(args.fuse_floor), self.path("floor.log"))
                      if args.fuse_floor else None)
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
    """Runs every repetition of the workloads in --workloads, in a fixed
    order, each side's results into b.results under the workload's key."""
    wl = set(b.args.workloads.split(","))
    if "big" in wl or "disk" in wl:
        run_big_reps(b, wl)
    sweep_needs_tree = "sweep" in wl or "cloud" in wl
    if "layout" in wl or sweep_needs_tree:
        run_layout_reps(b, wl, sweep_needs_tree)
    if sweep_needs_tree:
        run_sweep_reps(b)
    if "cloud" in wl:
        run_cloud_reps(b)
    if "pieces" in wl:
        run_pieces_reps(b)
    if "steps" in wl:
        run_steps_reps(b)
    if "frameworks" in wl:
        run_frameworks_reps(b)
    if "scaling" in wl:
        run_scaling_reps(b)


def run_big_reps(b, wl):
    """Workload 1 (when "big" is in `wl`) and dd's disk limit (when "disk" is)."""
    reps = b.args.reps
    R = b.results["big"] = {"size_bytes": b.big_size, "ckptfs": [], "plain": [], "dd": []}
    if "big" in wl and b.floor:
        R["floor"] = []
    R["warm_up_write_s"] = warm_up_disk(b)
    for rep in range(reps):
        items = []
        if "disk" in wl:
            items.append("dd")
        if "big" in wl:
            items += ["ckptfs", "plain"] + (["floor"] if b.floor else [])
        for who in order_for(rep, items):
            log("big %s: rep %d/%d, %s" % (human_size(b.big_size), rep + 1, reps, who))
            if who == "ckptfs":
                R[who].append(run_big_ckptfs(b, rep))
            elif who == "dd":
                R[who].append(run_dd(b, rep))
            else:
                R[who].append(run_big_dir(b, rep, who))


def warm_up_disk(b):
    """One untimed big write; returns its seconds. The first large write of a
    run on this VM's disk runs at a third of the later ones' speed whichever
    side makes it (the host allocates behind the virtual disk)."""
    log("big %s: warm-up write, untimed" % human_size(b.big_size))
    warm = b.path("warm-up.bin")
    with Meter() as m:
        big_write(warm, b.big_size, b.big_base)
    os.unlink(warm)
    return m.seconds


def run_layout_reps(b, wl, sweep_needs_tree):
    """Workload 2; only one repetition, without the floor, when "layout" is
    not in `wl` and the tree is only built for the sweep. With
    `sweep_needs_tree`, the last repetition keeps its trees."""
    R = b.results["layout"] = {"dirs": b.dirs, "files_per_dir": 1 + len(CHUNK_NAMES),
                               "chunk_bytes": CHUNK_BYTES, "ckptfs": [], "plain": []}
    reps = b.args.reps if "layout" in wl else 1
    items = ["ckptfs", "plain"]
    if "layout" in wl and b.floor:
        items.append("floor")
        R["floor"] = []
    for rep in range(reps):
        keep = sweep_needs_tree and rep == reps - 1
        for who in order_for(rep, items):
            log("layout %d dirs: rep %d/%d, %s" % (b.dirs, rep + 1, reps, who))
            if who == "ckptfs":
                R[who].append(run_layout_ckptfs(b, rep, keep))
            else:
                R[who].append(run_layout_dir(b, rep, who, keep))
    if "layout" not in wl:
        R["only_built_for_sweep"] = True


def run_sweep_reps(b):
    """Workload 4: the layout tree's cold restore, plain and under each --sweep setting."""
    reps = b.args.reps
    settings = parse_sweep(b.args.sweep)
    R = b.results["sweep"] = {"settings": settings, "runs": []}
    for rep in range(reps):
        items = ["plain"] + [s["label"] for s in settings]
        for label in order_for(rep, items):
            log("sweep: rep %d/%d, %s" % (rep + 1, reps, label))
            if label == "plain":
                R["runs"].append(run_sweep_plain(b, rep))
            else:
                s = next(s for s in settings if s["label"] == label)
                R["runs"].append(run_sweep_ckptfs(b, rep, s))


def run_cloud_reps(b):
    """Workload 9: the layout tree's cold restore with reads throttled."""
    reps = b.args.reps
    R = b.results["cloud"] = {"dirs": b.dirs, "read_iops": CLOUD_READ_IOPS,
                              "read_bps": CLOUD_READ_BPS, "ckptfs": [], "plain": []}
    for rep in range(reps):
        for who in order_for(rep, ["ckptfs", "plain"]):
            log("cloud-disk restore: rep %d/%d, %s" % (rep + 1, reps, who))
            R[who].append(run_cloud(b, rep, who))


def run_pieces_reps(b):
    """Workload 8: one file in small write(2) calls."""
    reps = b.args.reps
    R = b.results["pieces"] = {"bytes": b.pieces_bytes, "pieces": list(PIECES), "ckptfs": [],
                               "plain": []}
    for rep in range(reps):
        for who in order_for(rep, ["ckptfs", "plain"]):
            log("pieces %s: rep %d/%d, %s" % (human_size(b.pieces_bytes), rep + 1, reps, who))
            R[who].append(run_pieces(b, rep, who))


def run_steps_reps(b):
    """Workload 10: saves of steps while the step before is deleted."""
    reps = b.args.reps
    R = b.results["steps"] = {"bytes": b.steps_bytes, "steps": STEPS, "shards": STEP_SHARDS}
    variants = list(STEPS_VARIANTS) + (["floor"] if b.floor else [])
    for v in variants:
        R[v] = []
    for rep in range(reps):
        for v in order_for(rep, variants):
            log("steps %s: rep %d/%d, %s" % (human_size(b.steps_bytes), rep + 1, reps, v))
            R[v].append(run_steps(b, rep, v))


def run_frameworks_reps(b):
    """Workload 3: torch and zarr, one process per phase."""
    reps = b.args.reps
    R = b.results["frameworks"] = {"torch_mib": b.torch_mib, "zarr_arrays": b.zarr_arrays,
                                   "threads": 16, "ckptfs": [], "plain": []}
    items = ["ckptfs", "plain"]
    if b.floor:
        items.append("floor")
        R["floor"] = []
    for rep in range(reps):
        for who in order_for(rep, items):
            log("frameworks: rep %d/%d, %s" % (rep + 1, reps, who))
            R[who].append(run_frameworks(b, rep, who))


def run_scaling_reps(b):
    """Workload 5: N threads writing separate files, for each N."""
    reps = b.args.reps
    R = b.results["scaling"] = {"bytes": b.scaling_bytes, "writers": list(SCALING_WRITERS),
                                "ckptfs": [], "plain": []}
    for rep in range(reps):
        for who in order_for(rep, ["ckptfs", "plain"]):
            log("scaling %s: rep %d/%d, %s" % (human_size(b.scaling_bytes), rep + 1, reps, who))
            R[who].append(run_scaling(b, rep, who))
