#!/usr/bin/env python3
"""The loader's C ABI (libckptfs_loader.so) through Python ctypes and the
gpu/ckptfs_loader.py wrapper, on plain files in host memory (the mount and
direct paths are tested by gpu_loader_mount_test). With CUDA built and a GPU
present, also into torch CUDA memory. Exit 77 (skipped) without the library.
"""
import ctypes
import errno
import json
import os
import random
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_loader  # noqa: E402


def safetensors_bytes(tensors, metadata=None):
    header, data, off = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main():
    lib_path = os.environ.get("CKPTFS_LOADER_LIB")
    if not lib_path or not os.path.exists(lib_path):
        print("SKIP: CKPTFS_LOADER_LIB not set or missing")
        return 77
    ld = ckptfs_loader.Loader(lib_path)
    lib = ld.lib
    rng = random.Random(1)
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    n = lib.ckptfs_cuda_device_count()
    check(lib.ckptfs_cuda_built() in (0, 1), "cuda_built")
    check(n >= 0 or (lib.ckptfs_cuda_built() == 0 and n == -errno.ENOTSUP), "device count %d" % n)

    with tempfile.TemporaryDirectory(prefix="ckptfs-ctypes-") as d:
        path = os.path.join(d, "blob")
        data = bytes(rng.getrandbits(8) for _ in range(300000)) * 20  # ~6 MiB
        with open(path, "wb") as f:
            f.write(data)

        # Raw C calls: open, read, ranges, close.
        h = lib.ckptfs_open(path.encode(), 0)
        check(bool(h), "open")
        check(lib.ckptfs_file_size(h) == len(data), "size")
        check(lib.ckptfs_file_direct(h) == 0, "plain file is not direct")
        check(b"not on a ckptfs mount" in lib.ckptfs_file_fallback_reason(h), "reason")
        buf = ctypes.create_string_buffer(len(data))
        st = ckptfs_loader.LoadStats()
        rc = lib.ckptfs_read(h, -1, buf, len(data), 0, len(data), ctypes.byref(st))
        check(rc == 0 and buf.raw == data, "whole read")
        check(st.bytes == len(data) and st.direct == 0, "stats")
        offs = (ctypes.c_uint64 * 3)(5, 1000000, len(data) - 7)
        lens = (ctypes.c_uint64 * 3)(10, 20000, 7)
        small = ctypes.create_string_buffer(20017)
        rc = lib.ckptfs_read_ranges(h, -1, small, 20017, offs, lens, None, 3, None)
        check(rc == 0 and small.raw == data[5:15] + data[1000000:1020000] + data[-7:], "packed ranges")
        rc = lib.ckptfs_read(h, -1, small, 20017, len(data) - 3, 4, None)
        check(rc == -errno.EINVAL and b"past the end" in lib.ckptfs_last_error(), "range past EOF")
        lib.ckptfs_close(h)

        check(not lib.ckptfs_open(b"/nonexistent/x", 0), "open missing")
        check(b"/nonexistent/x" in lib.ckptfs_last_error(), "error names the path")
        rc = lib.ckptfs_load_file(b"/nonexistent/x", -1, buf, len(data), 0, None)
        check(rc == -errno.ENOENT, "load_file missing: %d" % rc)
        rc = lib.ckptfs_load_file(path.encode(), -1, buf, len(data) - 1, ckptfs_loader.CKPTFS_NO_DIRECT, None)
        check(rc == -errno.EINVAL, "destination too small")

        # Library-owned host memory.
        p = lib.ckptfs_alloc(-1, len(data))
        check(bool(p), "alloc")
        st = ld.load_file(path, -1, p, len(data))
        check(ctypes.string_at(p, len(data)) == data and st.bytes == len(data), "load_file")
        lib.ckptfs_free(-1, p)

        # numpy through the wrapper.
        arr = ld.load_file_numpy(path)
        check(arr.tobytes() == data, "numpy")

        # safetensors through the C ABI.
        w = bytes(rng.getrandbits(8) for _ in range(4 * 64 * 33))
        tensors = [("w", "F32", [64, 33], w), ("b", "BF16", [7], w[:14]), ("s", "I64", [], w[:8]),
                   ("e", "F16", [0], b"")]
        st_path = os.path.join(d, "m.safetensors")
        with open(st_path, "wb") as f:
            f.write(safetensors_bytes(tensors, {"format": "pt"}))
        s = lib.ckptfs_safetensors_load(st_path.encode(), -1, 0)
        check(bool(s), "safetensors load: %s" % lib.ckptfs_last_error())
        check(lib.ckptfs_safetensors_count(s) == 4, "count")
        got = {}
        for i in range(lib.ckptfs_safetensors_count(s)):
            name = lib.ckptfs_safetensors_name(s, i).decode()
            shape = [lib.ckptfs_safetensors_shape(s, i)[k] for k in range(lib.ckptfs_safetensors_ndim(s, i))]
            nbytes = lib.ckptfs_safetensors_nbytes(s, i)
            raw = ctypes.string_at(lib.ckptfs_safetensors_data(s, i), nbytes) if nbytes else b""
            got[name] = (lib.ckptfs_safetensors_dtype(s, i).decode(), shape, raw)
        for name, dtype, shape, raw in tensors:
            check(got.get(name) == (dtype, shape, raw), "tensor %s" % name)
        check(lib.ckptfs_safetensors_metadata(s, b"format") == b"pt", "metadata")
        check(lib.ckptfs_safetensors_metadata(s, b"nope") is None, "metadata absent")
        check(lib.ckptfs_safetensors_bytes(s) == len(w) + 14 + 8, "allocation size")
        lib.ckptfs_safetensors_free(s)
        with open(os.path.join(d, "bad.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", 2) + b"[]")
        check(not lib.ckptfs_safetensors_load(os.path.join(d, "bad.safetensors").encode(), -1, 0),
              "bad safetensors refused")
        check(b"not a JSON object" in lib.ckptfs_last_error(), "bad safetensors message")

        # torch through the wrapper: CPU always, CUDA when there is a GPU.
        try:
            import torch
        except ImportError:
            torch = None
        devices = []
        if torch is not None:
            devices.append("cpu")
            if ld.cuda_built() and ld.cuda_device_count() > 0 and torch.cuda.is_available():
                devices.append("cuda:0")
        for dev in devices:
            t = ld.load_file_torch(path, dev)
            check(bytes(t.cpu().numpy()) == data, "torch %s" % dev)
            ts = ld.load_safetensors_torch(st_path, dev)
            check(list(ts["w"].shape) == [64, 33] and ts["w"].dtype == torch.float32, "torch shape")
            check(bytes(ts["w"].cpu().contiguous().view(torch.uint8).numpy()) == w, "torch bytes %s" % dev)
            check(bytes(ts["b"].cpu().view(torch.uint8).numpy()) == w[:14], "torch bf16 %s" % dev)
        print("devices tried with torch:", devices or "none (no torch)")

    if failures:
        print("%d failures" % len(failures))
        return 1
    print("ctypes test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
