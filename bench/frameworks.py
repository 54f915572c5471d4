#!/usr/bin/python3
"""Real-framework phases for mount_bench.py (workload 3), one per process.

  frameworks.py torch-save DIR MIB     torch.save of a ~MIB MiB state dict, then fsync
  frameworks.py torch-load DIR MIB     torch.load of it; every tensor compared
  frameworks.py zarr-write DIR ARRAYS  ARRAYS zarr arrays written by 16 threads
  frameworks.py zarr-read DIR ARRAYS   the same arrays read back by 16 threads, compared

Each prints one JSON line: {"seconds": timed part, "bytes": payload, "files": n}.
Building the data, importing the framework and comparing are not timed.
Run with /usr/bin/python3 (Debian's python3-torch and python3-zarr).
"""

import concurrent.futures
import json
import os
import sys
import time

import numpy as np

THREADS = 16
MIB = 1 << 20

# The state dict: the tensor shapes of a transformer block, repeated until the
# size is reached; float32 weights, bfloat16 and float16 copies, small biases.
BLOCK = [
    ("attn.qkv.weight", (1536, 512), "float32"),
    ("attn.qkv.bias", (1536,), "float32"),
    ("attn.proj.weight", (512, 512), "bfloat16"),
    ("attn.proj.bias", (512,), "bfloat16"),
    ("mlp.fc1.weight", (2048, 512), "float16"),
    ("mlp.fc1.bias", (2048,), "float16"),
    ("mlp.fc2.weight", (512, 2048), "float32"),
    ("mlp.fc2.bias", (512,), "float32"),
    ("norm.weight", (512,), "float32"),
]


def state_dict(mib):
    """Deterministic tensors: slices of one random pool, so building 1 GiB costs copies only."""
    import torch
    gen = torch.Generator().manual_seed(1234)
    pool = torch.randn(16 * MIB // 4, generator=gen)  # 16 MiB of float32
    out = {}
    total = 0
    layer = 0
    while total < mib * MIB:
        for name, shape, dtype in BLOCK:
            n = 1
            for s in shape:
                n *= s
            start = (layer * 7919 + len(out) * 104729) % (pool.numel() - n)
            t = pool[start:start + n].reshape(shape).to(getattr(torch, dtype)).clone()
            out["layers.%d.%s" % (layer, name)] = t
            total += t.numel() * t.element_size()
        layer += 1
    return out, total


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def torch_save(d, mib):
    import torch
    sd, total = state_dict(mib)
    path = os.path.join(d, "model.pt")
    t0 = time.perf_counter()
    torch.save(sd, path)
    fsync_path(path)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "bytes": os.path.getsize(path), "payload_bytes": total,
            "tensors": len(sd), "files": 1}


def torch_load(d, mib):
    import torch
    path = os.path.join(d, "model.pt")
    t0 = time.perf_counter()
    got = torch.load(path, map_location="cpu")
    seconds = time.perf_counter() - t0
    want, total = state_dict(mib)
    if got.keys() != want.keys():
        raise SystemExit("torch-load: %s has other tensor names than were saved" % path)
    for k, t in want.items():
        if got[k].dtype != t.dtype or not torch.equal(got[k], t):
            raise SystemExit("torch-load: %s: tensor %s differs from what was saved" % (path, k))
    return {"seconds": seconds, "bytes": os.path.getsize(path), "payload_bytes": total,
            "tensors": len(got), "files": 1}


# Zarr: like the per-parameter layout, one array per parameter, 4 chunks of 16 KiB.
SHAPE, CHUNKS = (256, 64), (128, 32)


def array_data(i):
    rng = np.random.default_rng(i)
    return rng.standard_normal(SHAPE, dtype=np.float32)


def zarr_write(d, n):
    import zarr
    data = [array_data(i) for i in range(n)]
    root = os.path.join(d, "ckpt.zarr")
    t0 = time.perf_counter()
    g = zarr.open_group(root, mode="w")

    def put(i):
        a = g.create_dataset("param_%05d" % i, shape=SHAPE, chunks=CHUNKS, dtype="f4",
                             compressor=None)
        a[:] = data[i]

    with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
        list(ex.map(put, range(n)))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "bytes": n * data[0].nbytes, "files": n * 5 + 1}


def zarr_read(d, n):
    import zarr
    root = os.path.join(d, "ckpt.zarr")
    t0 = time.perf_counter()
    g = zarr.open_group(root, mode="r")
    names = sorted(g.array_keys())

    def get(name):
        return g[name][:]

    with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
        arrays = list(ex.map(get, names))
    seconds = time.perf_counter() - t0
    if len(names) != n:
        raise SystemExit("zarr-read: %s holds %d arrays, expected %d" % (root, len(names), n))
    for name, a in zip(names, arrays):
        if not np.array_equal(a, array_data(int(name.split("_")[1]))):
            raise SystemExit("zarr-read: %s/%s differs from what was written" % (root, name))
    return {"seconds": seconds, "bytes": sum(a.nbytes for a in arrays), "files": n * 5 + 1}


PHASES = {"torch-save": torch_save, "torch-load": torch_load,
          "zarr-write": zarr_write, "zarr-read": zarr_read}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in PHASES:
        raise SystemExit("usage: frameworks.py {%s} DIR N" % ",".join(PHASES))
    out = PHASES[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
