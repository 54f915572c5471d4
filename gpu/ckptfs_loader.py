"""Python bindings (ctypes) of the ckptfs loader, libckptfs_loader.so.

The C ABI is gpu/ckptfs_loader.h; this module adds numpy and torch helpers:

    import ckptfs_loader
    ld = ckptfs_loader.Loader()                       # $CKPTFS_LOADER_LIB or a build dir
    arr = ld.load_file_numpy("/mnt/ckpt/shard.bin")   # host numpy uint8 array
    t = ld.load_file_torch("/mnt/ckpt/shard.bin", "cuda:0")
    tensors = ld.load_safetensors_torch("/mnt/ckpt/model.safetensors", "cuda:0")

Files on a ckptfs mount are read directly from the store's segment files when
the caller may open them (verified, zstd decoded on the CPU); anything else is
read through its path. Pass direct=False to always read through the path.
Errors raise OSError with the errno and the loader's message.
"""

import ctypes
import glob
import json
import os
import struct

CKPTFS_HOST = -1
CKPTFS_NO_DIRECT = 1


class LoadStats(ctypes.Structure):
    _fields_ = [
        ("bytes", ctypes.c_uint64),
        ("backing_bytes", ctypes.c_uint64),
        ("records", ctypes.c_uint64),
        ("compressed_records", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("direct", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


def _find_library():
    env = os.environ.get("CKPTFS_LOADER_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    for pattern in (os.path.join(here, "libckptfs_loader.so"),
                    os.path.join(root, "build*", "gpu", "libckptfs_loader.so")):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return "libckptfs_loader.so"  # the dynamic linker's search path


_SAFETENSORS_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "I64": "int64", "U64": "uint64", "F64": "float64",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
}


class Loader:
    def __init__(self, path=None):
        lib = ctypes.CDLL(path or _find_library())
        u64, p, c, i = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        stats = ctypes.POINTER(LoadStats)
        sig = {
            "ckptfs_abi_version": (i, []),
            "ckptfs_cuda_built": (i, []),
            "ckptfs_cuda_device_count": (i, []),
            "ckptfs_last_error": (c, []),
            "ckptfs_open": (p, [c, ctypes.c_uint32]),
            "ckptfs_file_size": (u64, [p]),
            "ckptfs_file_direct": (i, [p]),
            "ckptfs_file_fallback_reason": (c, [p]),
            "ckptfs_read_ranges": (i, [p, i, p, u64, ctypes.POINTER(u64), ctypes.POINTER(u64),
                                      ctypes.POINTER(u64), ctypes.c_size_t, stats]),
            "ckptfs_read": (i, [p, i, p, u64, u64, u64, stats]),
            "ckptfs_close": (None, [p]),
            "ckptfs_load_file": (i, [c, i, p, u64, ctypes.c_uint32, stats]),
            "ckptfs_alloc": (p, [i, u64]),
            "ckptfs_free": (None, [i, p]),
            "ckptfs_safetensors_load": (p, [c, i, ctypes.c_uint32]),
            "ckptfs_safetensors_count": (ctypes.c_size_t, [p]),
            "ckptfs_safetensors_name": (c, [p, ctypes.c_size_t]),
            "ckptfs_safetensors_dtype": (c, [p, ctypes.c_size_t]),
            "ckptfs_safetensors_ndim": (i, [p, ctypes.c_size_t]),
            "ckptfs_safetensors_shape": (ctypes.POINTER(ctypes.c_int64), [p, ctypes.c_size_t]),
            "ckptfs_safetensors_data": (p, [p, ctypes.c_size_t]),
            "ckptfs_safetensors_nbytes": (u64, [p, ctypes.c_size_t]),
            "ckptfs_safetensors_base": (p, [p]),
            "ckptfs_safetensors_bytes": (u64, [p]),
            "ckptfs_safetensors_metadata": (c, [p, c]),
            "ckptfs_safetensors_stats": (None, [p, stats]),
            "ckptfs_safetensors_free": (None, [p]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        self.lib = lib
        if lib.ckptfs_abi_version() != 1:
            raise OSError("libckptfs_loader ABI %d, expected 1" % lib.ckptfs_abi_version())

    # ---- plumbing ----
    def error(self, rc=None, what=""):
        msg = self.lib.ckptfs_last_error().decode(errors="replace")
        code = -rc if rc is not None and rc < 0 else 5  # EIO
        return OSError(code, "%s%s" % (what + ": " if what else "", msg))

    def cuda_built(self):
        return self.lib.ckptfs_cuda_built() == 1

    def cuda_device_count(self):
        n = self.lib.ckptfs_cuda_device_count()
        return max(n, 0)

    def open(self, path, direct=True):
        """Returns a File (use as a context manager)."""
        h = self.lib.ckptfs_open(os.fsencode(path), 0 if direct else CKPTFS_NO_DIRECT)
        if not h:
            raise self.error(what=path)
        return File(self, h)

    def load_file(self, path, device, dst, capacity, direct=True):
        """Whole file into raw memory at dst (host when device is -1). Returns LoadStats."""
        st = LoadStats()
        rc = self.lib.ckptfs_load_file(os.fsencode(path), device, dst, capacity,
                                       0 if direct else CKPTFS_NO_DIRECT, ctypes.byref(st))
        if rc != 0:
            raise self.error(rc, path)
        return st

    # ---- numpy / torch ----
    def load_file_numpy(self, path, direct=True):
        import numpy as np
        with self.open(path, direct) as f:
            out = np.empty(f.size, dtype=np.uint8)
            f.read_into(CKPTFS_HOST, out.ctypes.data, f.size)
            return out

    def load_file_torch(self, path, device="cpu", direct=True):
        import torch
        dev = torch.device(device)
        with self.open(path, direct) as f:
            out = torch.empty(f.size, dtype=torch.uint8, device=dev)
            f.read_into(_device_index(dev), out.data_ptr(), f.size)
            return out

    def load_safetensors_torch(self, path, device="cpu", direct=True):
        """{name: tensor} viewing one torch allocation that holds all tensor data."""
        import torch
        dev = torch.device(device)
        with self.open(path, direct) as f:
            head = bytearray(8)
            f.read_into(CKPTFS_HOST, _address(head), 8, file_offset=0)
            (n,) = struct.unpack("<Q", bytes(head))
            if n > f.size - 8:
                raise OSError(22, "%s: bad safetensors header length %d" % (path, n))
            text = bytearray(n)
            f.read_into(CKPTFS_HOST, _address(text), n, file_offset=8)
            header = json.loads(bytes(text))
            header.pop("__metadata__", None)
            end = max([t["data_offsets"][1] for t in header.values()] or [0])
            buf = torch.empty(end, dtype=torch.uint8, device=dev)
            if end:
                f.read_into(_device_index(dev), buf.data_ptr(), end, file_offset=8 + n)
        out = {}
        for name, t in header.items():
            b, e = t["data_offsets"]
            dtype = getattr(torch, _SAFETENSORS_DTYPES[t["dtype"]])
            raw = buf[b:e]
            if b % torch.empty((), dtype=dtype).element_size():
                raw = raw.clone()  # misaligned for its dtype: a view is impossible
            out[name] = raw.view(dtype).reshape(t["shape"])
        return out


class File:
    def __init__(self, loader, handle):
        self.loader, self.handle = loader, handle
        lib = loader.lib
        self.size = lib.ckptfs_file_size(handle)
        self.direct = lib.ckptfs_file_direct(handle) == 1
        self.fallback_reason = lib.ckptfs_file_fallback_reason(handle).decode()

    def read_into(self, device, dst, length, file_offset=0, capacity=None):
        st = LoadStats()
        rc = self.loader.lib.ckptfs_read(self.handle, device, dst,
                                         length if capacity is None else capacity,
                                         file_offset, length, ctypes.byref(st))
        if rc != 0:
            raise self.loader.error(rc)
        return st

    def read_ranges_into(self, device, dst, capacity, ranges):
        """ranges: [(file_offset, length, dest_offset)]"""
        n = len(ranges)
        arr = ctypes.c_uint64 * n
        offs, lens, dests = arr(*[r[0] for r in ranges]), arr(*[r[1] for r in ranges]), \
            arr(*[r[2] for r in ranges])
        st = LoadStats()
        rc = self.loader.lib.ckptfs_read_ranges(self.handle, device, dst, capacity, offs, lens,
                                                dests, n, ctypes.byref(st))
        if rc != 0:
            raise self.loader.error(rc)
        return st

    def close(self):
        if self.handle:
            self.loader.lib.ckptfs_close(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def _device_index(dev):
    if dev.type == "cpu":
        return CKPTFS_HOST
    if dev.type != "cuda":
        raise ValueError("ckptfs_loader: device must be cpu or cuda, not %s" % dev)
    import torch
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _address(buf):
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)) if len(buf) else None
