#!/usr/bin/python3
"""Real checkpoint clients on a real ckptfs mount.

Each test drives one client (torch.save/load, zarr, h5py, numpy, the orbax
finalize pattern, tar, rsync) twice: into a directory on the mount and into a
plain directory under /tmp. It then checks, before and after unmount +
remount:
  - the client reads back exactly what it wrote (compared with an in-memory
    model: torch.equal, numpy array_equal), and
  - the files the client produced on the mount are byte-for-byte the files it
    produced on the plain filesystem (these clients write deterministically).

Needs CKPTFS_BIN; /usr/bin/python3 with Debian's torch, zarr, h5py, numpy.
"""

import concurrent.futures
import os
import shutil
import stat
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

MiB = 1 << 20
# pax keeps nanosecond mtimes; atime and ctime would make two archives differ.
TAR_PAX = ["--format=posix", "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"]


class ClientsTest(lib.MountAndPlainTestCase):
    # -- helpers --

    def dirs(self, name):
        """A fresh directory `name` on the plain filesystem and on the mount."""
        p, m = os.path.join(self.plain, name), self.m.path(name)
        os.mkdir(p)
        os.mkdir(m)
        return p, m

    def assert_same_tree(self, plain, mnt, what):
        a, b = lib.tree_snapshot(plain), lib.tree_snapshot(mnt)
        self.assertTrue(a, "%s: the plain tree is empty" % what)
        self.assertEqual(a, b, "%s: the mount differs from the plain directory:\n%s" %
                         (what, lib.diff_snapshots(a, b)))

    # The remount also changes the read planner's settings: reads then take
    # other paths (wide coalescing, no record cache) over the same records.
    REMOUNT_OPTIONS = ["coalesce_gap=1M", "coalesce_max=8M", "cache_size=0"]

    def verify_twice(self, plain, mnt, verify):
        """verify(mnt) and a byte comparison, then remount and both again."""
        for when in ("before remount", "after remount"):
            with self.subTest(when=when):
                verify(mnt)
                self.assert_same_tree(plain, mnt, when)
            if when == "before remount":
                self.m.remount(self.REMOUNT_OPTIONS)
        self.m.remount([])

    # -- torch --

    def test_torch_save_load_state_dict(self):
        import torch
        torch.manual_seed(1234)
        dtypes = [torch.float32, torch.bfloat16, torch.float16]
        sd = {}
        for i in range(330):
            dt = dtypes[i % 3]
            if i % 50 == 0:
                shape = (1024, 1024 + i % 7)  # a few MiB each
            elif i % 11 == 0:
                shape = ()  # scalar
            elif i % 13 == 0:
                shape = (0, 5)  # empty
            else:
                shape = (1 + i % 17, 3 + (i * 7) % 97)
            sd["layers.%03d.%s" % (i, ("weight", "bias", "scale")[i % 3])] = \
                torch.randn(shape).to(dt)
        sd["step"] = torch.tensor(1000, dtype=torch.int64)
        sd["tied"] = sd["layers.001.bias"]  # shared storage
        plain, mnt = self.dirs("torch")
        for d in (plain, mnt):
            torch.save(sd, os.path.join(d, "model.pt"))
            torch.save({"opt": {k: v * 2 for k, v in list(sd.items())[:40]}},
                       os.path.join(d, "optim.pt"))

        def verify(d):
            got = torch.load(os.path.join(d, "model.pt"), map_location="cpu")
            self.assertEqual(sorted(got), sorted(sd))
            for k, v in sd.items():
                self.assertEqual(got[k].dtype, v.dtype, k)
                self.assertEqual(got[k].shape, v.shape, k)
                self.assertTrue(torch.equal(got[k], v), "tensor %s differs" % k)
            self.assertEqual(got["tied"].data_ptr(), got["layers.001.bias"].data_ptr())
            opt = torch.load(os.path.join(d, "optim.pt"))["opt"]
            for k, v in list(sd.items())[:40]:
                self.assertTrue(torch.equal(opt[k], v * 2), k)

        self.verify_twice(plain, mnt, verify)

    # -- zarr, per-parameter layout --

    def test_zarr_arrays_16_threads(self):
        """2,048 arrays (a fifth on PostgreSQL or under a sanitizer) written
        by 16 threads, read back as on the plain directory."""
        import zarr
        n_arrays, n_groups = harness.scaled_count(2048), 64
        dtypes = ["<f4", "<f2", "<i8", "<f8"]

        def spec(i):
            dt = dtypes[i % 4]
            if i % 10 == 0:
                return (37,), (16,), dt  # 3 chunks, last partial
            return (24, 40), (12, 20), dt  # 4 chunks

        def data(i):
            shape, _, dt = spec(i)
            rng = np.random.default_rng(i)
            return (rng.standard_normal(shape) * 100).astype(dt)

        def name(i):
            return "params/layer_%02d/param_%04d" % (i % n_groups, i)

        def write(root):
            g = zarr.open_group(root, mode="w")
            params = g.create_group("params")
            for j in range(n_groups):
                params.create_group("layer_%02d" % j)

            def one(t):
                for i in range(t, n_arrays, 16):
                    shape, chunks, dt = spec(i)
                    a = g.create_dataset(name(i), shape=shape, chunks=chunks, dtype=dt)
                    a[...] = data(i)
                    if i % 7 == 0:
                        a.attrs["index"] = i

            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                list(ex.map(one, range(16)))

        plain, mnt = self.dirs("zarr")
        for d in (plain, mnt):
            write(os.path.join(d, "ckpt.zarr"))

        def verify(d):
            g = zarr.open_group(os.path.join(d, "ckpt.zarr"), mode="r")

            def check(t):
                bad = []
                for i in range(t, n_arrays, 16):
                    a = g[name(i)]
                    if a.dtype != np.dtype(spec(i)[2]) or not np.array_equal(a[...], data(i)):
                        bad.append(name(i))
                    if i % 7 == 0 and a.attrs.get("index") != i:
                        bad.append(name(i) + "/.zattrs")
                return bad

            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                bad = sum(ex.map(check, range(16)), [])
            self.assertEqual(bad, [], "arrays that read back wrong")
            # Each array is a directory with .zarray and chunk files.
            first = os.path.join(d, "ckpt.zarr", name(1))
            self.assertEqual(sorted(os.listdir(first)), [".zarray", "0.0", "0.1", "1.0", "1.1"])

        self.verify_twice(plain, mnt, verify)

    # -- h5py --

    def test_h5py_chunked_random_overwrites(self):
        import h5py
        shape, chunks = (1200, 500), (100, 50)

        def run(path):
            """Writes and returns the numpy model of every dataset."""
            rng = np.random.default_rng(7)
            model = {"x": np.zeros(shape), "z": np.zeros(shape, dtype="f4")}
            with h5py.File(path, "w") as f:
                f.create_dataset("x", shape=shape, dtype="f8", chunks=chunks)
                f.create_dataset("z", shape=shape, dtype="f4", chunks=chunks, compression="gzip")
                f.attrs["step"] = 3
            for session in range(3):  # close and reopen in between
                with h5py.File(path, "r+") as f:
                    for k in range(100):
                        key = "x" if k % 3 else "z"
                        r0, c0 = rng.integers(0, shape[0] - 1), rng.integers(0, shape[1] - 1)
                        r1 = min(shape[0], r0 + rng.integers(1, 300))
                        c1 = min(shape[1], c0 + rng.integers(1, 120))
                        block = rng.standard_normal((r1 - r0, c1 - c0))
                        f[key][r0:r1, c0:c1] = block
                        model[key][r0:r1, c0:c1] = block
                        if k % 25 == 0:
                            for kk in model:  # reads in the middle of writing
                                np.testing.assert_array_equal(f[kk][...], model[kk])
            return model

        plain, mnt = self.dirs("h5")
        model = run(os.path.join(plain, "ckpt.h5"))
        model_m = run(os.path.join(mnt, "ckpt.h5"))
        for k in model:
            np.testing.assert_array_equal(model[k], model_m[k])

        def verify(d):
            with h5py.File(os.path.join(d, "ckpt.h5"), "r") as f:
                self.assertEqual(f.attrs["step"], 3)
                for k in model:
                    np.testing.assert_array_equal(f[k][...], model[k], err_msg=k)
                    # Slices that cross chunk boundaries.
                    np.testing.assert_array_equal(f[k][95:205, 45:160], model[k][95:205, 45:160])

        self.verify_twice(plain, mnt, verify)

    # -- numpy --

    def test_numpy_save_and_mmap_load(self):
        rng = np.random.default_rng(11)
        arrays = {
            "big.npy": rng.standard_normal((2048, 2048)).astype("f4"),  # 16 MiB
            "ints.npy": np.arange(1_000_003, dtype="<i8"),
            "rec.npy": np.array([(i, i * 0.5, b"n%d" % i) for i in range(5000)],
                                dtype=[("a", "<i4"), ("b", "<f8"), ("c", "S8")]),
            "empty.npy": np.zeros((0, 3)),
        }
        patched = {}
        plain, mnt = self.dirs("numpy")
        for d in (plain, mnt):
            for n, a in arrays.items():
                np.save(os.path.join(d, n), a)
            np.savez(os.path.join(d, "bundle.npz"), **{n[:-4]: a for n, a in arrays.items()})
            # Modify through a writable memory map, then flush.
            mm = np.load(os.path.join(d, "ints.npy"), mmap_mode="r+")
            mm[::1000] = -1
            mm[-5:] = 77
            mm.flush()
            del mm
        patched = arrays["ints.npy"].copy()
        patched[::1000] = -1
        patched[-5:] = 77
        expect = dict(arrays, **{"ints.npy": patched})

        def verify(d):
            for n, a in expect.items():
                got = np.load(os.path.join(d, n), mmap_mode="r")
                self.assertEqual(got.dtype, a.dtype, n)
                self.assertTrue(np.array_equal(got, a), n)
                if a.size:
                    self.assertIsInstance(got, np.memmap, n)
                    self.assertTrue(np.array_equal(got[-3:], a[-3:]), n)
                del got
            with np.load(os.path.join(d, "bundle.npz")) as z:
                for n, a in arrays.items():
                    self.assertTrue(np.array_equal(z[n[:-4]], a), n)

        self.verify_twice(plain, mnt, verify)

    # -- the orbax finalize pattern --

    def test_orbax_finalize_pattern(self):
        def files_for(step):
            rng = np.random.default_rng(step)
            out = {"_CHECKPOINT_METADATA": b'{"step": %d}' % step}
            for p in range(40):
                base = "state/params.layer_%02d" % p
                out[base + "/.zarray"] = b'{"chunks": [4], "shape": [8]}'
                out[base + "/0"] = rng.bytes(1000 + p * 37)
                out[base + "/1"] = rng.bytes(5000 + p)
            out["state/_METADATA"] = rng.bytes(300)
            out["state/d/manifest.ocdbt"] = rng.bytes(70000)
            return out

        def fsync_dir(path):
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        def save(root, step):
            tmp = os.path.join(root, "step_%d.orbax-checkpoint-tmp-%d" % (step, 1700000000 + step))
            os.mkdir(tmp)
            dirs = set()
            for rel, data in files_for(step).items():
                p = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                dirs.add(os.path.dirname(p))
                with open(p, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            for d in sorted(dirs, key=len, reverse=True):
                fsync_dir(d)
            fsync_dir(tmp)
            os.rename(tmp, os.path.join(root, "step_%d" % step))
            fsync_dir(root)

        plain, mnt = self.dirs("orbax")
        for d in (plain, mnt):
            save(d, 1)
            save(d, 2)
            shutil.rmtree(os.path.join(d, "step_1"))
            save(d, 3)

        def verify(d):
            self.assertEqual(sorted(os.listdir(d)), ["step_2", "step_3"])
            for step in (2, 3):
                for rel, data in files_for(step).items():
                    self.assertEqual(lib.read_file(os.path.join(d, "step_%d" % step, rel)), data,
                                     "step_%d/%s" % (step, rel))

        self.verify_twice(plain, mnt, verify)

    # -- tar and rsync --

    def make_source_tree(self, src):
        rng = np.random.default_rng(5)
        os.makedirs(os.path.join(src, "a", "b", "c"))
        os.makedirs(os.path.join(src, "empty_dir"))
        sizes = [0, 1, 100, 4095, 4096, 4097, 65536, MiB + 3, 5 * MiB + 17]
        for i, n in enumerate(sizes):
            lib.write_file(os.path.join(src, "a", "size_%d" % n), rng.bytes(n))
        for i in range(300):
            lib.write_file(os.path.join(src, "a", "b", "small_%03d" % i), rng.bytes(i * 13))
        lib.write_file(os.path.join(src, "a", "b", "c", "deep"), b"deep file\n")
        os.chmod(os.path.join(src, "a", "size_100"), 0o600)
        os.chmod(os.path.join(src, "a", "size_1"), 0o755)
        os.chmod(os.path.join(src, "a", "b", "c"), 0o700)
        os.symlink("a/size_100", os.path.join(src, "link_rel"))
        os.symlink("/nonexistent/target", os.path.join(src, "link_dangling"))
        os.link(os.path.join(src, "a", "size_4096"), os.path.join(src, "hardlink_4096"))
        os.setxattr(os.path.join(src, "a", "size_4097"), "user.origin", b"rsync-X")
        os.chown(os.path.join(src, "a", "size_65536"), 1234, 5678)
        for dirpath, dirnames, filenames in os.walk(src):
            for n in filenames + dirnames:
                os.utime(os.path.join(dirpath, n), ns=(1_600_000_000_123_456_789,
                                                       1_600_000_001_987_654_321),
                         follow_symlinks=False)

    def run_cmd(self, *args, **kw):
        p = subprocess.run(list(args), capture_output=True, text=True, timeout=300, **kw)
        self.assertEqual(p.returncode, 0, "%s failed:\n%s%s" % (" ".join(args), p.stdout,
                                                                p.stderr))
        return p.stdout

    def test_tar_in_and_out(self):
        src = os.path.join(self.tmp, "tar_src")
        self.make_source_tree(src)
        plain, mnt = self.dirs("tar")
        for d in (plain, mnt):  # the archive itself lives on the mount too
            self.run_cmd("tar", *TAR_PAX, "-C", src, "-cf", os.path.join(d, "tree.tar"), ".")
        for d in (plain, mnt):
            os.mkdir(os.path.join(d, "x"))
            self.run_cmd("tar", "-C", os.path.join(d, "x"), "-xpf", os.path.join(d, "tree.tar"))

        def verify(d):
            self.run_cmd("diff", "-r", "--no-dereference", src, os.path.join(d, "x"))
            out = os.path.join(self.tmp, "tar_out")
            shutil.rmtree(out, ignore_errors=True)
            os.mkdir(out)
            tar = subprocess.Popen(["tar", *TAR_PAX, "-C", os.path.join(d, "x"), "-cf", "-", "."],
                                   stdout=subprocess.PIPE)
            self.run_cmd("tar", "-C", out, "-xpf", "-", stdin=tar.stdout)
            tar.stdout.close()
            self.assertEqual(tar.wait(), 0)
            self.run_cmd("diff", "-r", "--no-dereference", src, out)
            st = os.lstat(os.path.join(d, "x", "a", "size_100"))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
            self.assertEqual(st.st_mtime_ns, 1_600_000_001_987_654_321)
            self.assertEqual(os.stat(os.path.join(d, "x", "hardlink_4096")).st_nlink, 2)

        self.verify_twice(plain, mnt, verify)

    def test_rsync_in_and_out(self):
        src = os.path.join(self.tmp, "rsync_src")
        self.make_source_tree(src)
        plain, mnt = self.dirs("rsync")
        for d in (plain, mnt):
            self.run_cmd("rsync", "-aHX", src + "/", os.path.join(d, "r") + "/")

        def verify(d):
            r = os.path.join(d, "r")
            self.run_cmd("diff", "-r", "--no-dereference", src, r)
            # Nothing left to transfer: sizes, times, modes, owners, links, xattrs agree.
            self.assertEqual(self.run_cmd("rsync", "-aHXni", src + "/", r + "/"), "")
            self.assertEqual(os.getxattr(os.path.join(r, "a", "size_4097"), "user.origin"),
                             b"rsync-X")
            st = os.stat(os.path.join(r, "a", "size_65536"))
            self.assertEqual((st.st_uid, st.st_gid), (1234, 5678))
            back = os.path.join(self.tmp, "rsync_back")
            shutil.rmtree(back, ignore_errors=True)
            self.run_cmd("rsync", "-aHX", r + "/", back + "/")
            self.run_cmd("diff", "-r", "--no-dereference", src, back)
            self.assertEqual(self.run_cmd("rsync", "-aHXni", src + "/", back + "/"), "")

        self.verify_twice(plain, mnt, verify)
        # An incremental rsync into the mount: change a few files, sync again.
        lib.write_file(os.path.join(src, "a", "size_1"), b"Z")
        lib.write_file(os.path.join(src, "a", "b", "small_010"), b"changed" * 1000)
        os.unlink(os.path.join(src, "a", "b", "small_011"))
        self.run_cmd("rsync", "-aHX", "--delete", src + "/", os.path.join(mnt, "r") + "/")
        self.run_cmd("diff", "-r", "--no-dereference", src, os.path.join(mnt, "r"))
        self.assertEqual(self.run_cmd("rsync", "-aHXni", "--delete", src + "/",
                                      os.path.join(mnt, "r") + "/"), "")


if __name__ == "__main__":
    harness.require_fuse(root=True)
    harness.set_deadline(280)
    unittest.main(verbosity=2)
