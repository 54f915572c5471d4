#!/usr/bin/python3
"""Sealed trees on a mount: `ckptfs seal PATH` and the "user.ckptfs.seal"
attribute make a tree immutable: every change fails with EROFS (an
in-place write(2) taken into the kernel's write-back cache fails at its
close, and its bytes go), reads, copies and removal stay allowed, the seal
outlives a remount, and the kernel keeps a sealed tree's names and
attributes however short the mount's timeouts. The same tests run with
passthrough, where opens are answered. The mount options seal_renamed and
seal_marker seal a step when orbax renames it into place or when
torch.distributed.checkpoint's .metadata arrives. Needs CKPTFS_BIN.
"""

import errno
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

SEAL = "user.ckptfs.seal"


def ckptfs(*args):
    return subprocess.run([harness.ckptfs_bin()] + list(args), capture_output=True, text=True)


class SealTest(lib.MountAndPlainTestCase):
    # Short timeouts: what the kernel keeps of an unsealed tree, it asks
    # for again after 0.2 s.
    mount_options = ("attr_timeout=0.2", "entry_timeout=0.2", "negative_timeout=0.2")

    def make_step(self, name, params=3):
        """A step of a per-parameter checkpoint; returns {relative path: bytes}."""
        files = {}
        for p in range(params):
            param = os.path.join(name, "params.w%d" % p)
            os.makedirs(self.m.path(param))
            files[os.path.join(param, ".zarray")] = b'{"chunks":[64],"zarray":%d}' % p
            for c in range(3):
                files[os.path.join(param, str(c))] = os.urandom(1000 + 4000 * c)
        files[os.path.join(name, "big.pt")] = os.urandom(3 << 20)
        for rel, data in files.items():
            lib.write_file(self.m.path(rel), data)
        os.symlink("params.w0", self.m.path(name, "latest"))
        return files

    def check_reads(self, files):
        for rel, data in files.items():
            self.assertEqual(lib.read_file(self.m.path(rel)), data, rel)

    def expect_erofs(self, fn, *args):
        with self.assertRaises(OSError, msg="%s%r" % (fn.__name__, args)) as cm:
            fn(*args)
        self.assertEqual(cm.exception.errno, errno.EROFS,
                         "%s%r: %s" % (fn.__name__, args, cm.exception))

    def test_the_command_seals_and_every_change_fails_with_erofs(self):
        files = self.make_step("step_1")
        before = self.m.stats()["namespace"]
        r = ckptfs("seal", self.m.path("step_1"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "sealed %s\n" % self.m.path("step_1"))
        for rel in ("step_1", "step_1/params.w1", "step_1/params.w1/2", "step_1/big.pt"):
            self.assertEqual(os.getxattr(self.m.path(rel), SEAL), b"1", rel)
        os.mkdir(self.m.path("other"))
        with self.assertRaises(OSError) as cm:
            os.getxattr(self.m.path("other"), SEAL)
        self.assertEqual(cm.exception.errno, errno.ENODATA)

        d = self.m.path("step_1")
        f = self.m.path("step_1", "params.w1", "2")
        self.expect_erofs(lib.write_file, f, b"new")  # O_TRUNC
        self.expect_erofs(os.truncate, f, 10)
        self.expect_erofs(os.chmod, f, 0o600)
        self.expect_erofs(os.chmod, d, 0o700)
        self.expect_erofs(os.chown, f, 65534, 65534)
        self.expect_erofs(os.utime, f, (1, 1))
        self.expect_erofs(os.setxattr, f, "user.note", b"x")
        self.expect_erofs(os.removexattr, d, SEAL)
        self.expect_erofs(lib.write_file, os.path.join(d, "trainer_state.json"), b"{}")
        self.expect_erofs(os.mkdir, os.path.join(d, "more"))
        self.expect_erofs(os.symlink, "big.pt", os.path.join(d, "alias"))
        self.expect_erofs(os.link, f, self.m.path("other", "hard"))
        self.expect_erofs(os.rename, f, os.path.join(d, "params.w1", "9"))
        self.expect_erofs(os.rename, f, self.m.path("other", "2"))
        lib.write_file(self.m.path("other", "x"), b"x")
        self.expect_erofs(os.rename, self.m.path("other", "x"), os.path.join(d, "x"))
        # Nothing changed, and the tree reads as it was written.
        self.check_reads(files)
        self.assertEqual(os.stat(f).st_mode & 0o777, 0o644)
        self.assertEqual(sorted(os.listdir(d)), ["big.pt", "latest", "params.w0", "params.w1",
                                                 "params.w2"])
        self.assertEqual(os.readlink(os.path.join(d, "latest")), "params.w0")
        # Copies of it read it all.
        shutil.copytree(d, os.path.join(self.plain, "copy"), symlinks=True)
        for rel, data in files.items():
            self.assertEqual(lib.read_file(os.path.join(self.plain, "copy", rel[len("step_1/"):])),
                             data, rel)
        with tarfile.open(os.path.join(self.plain, "step.tar"), "w") as t:
            t.add(d, arcname="step_1")

        # `ckptfs info` shows what is sealed.
        r = ckptfs("info", "--json", self.m.path(), d, f)
        self.assertEqual(r.returncode, 0, r.stderr)
        top, step, file_ = json.loads(r.stdout)
        self.assertFalse(top["sealed"])
        self.assertIn("step_1", top["sealed_trees"])
        self.assertTrue(step["sealed"])
        self.assertEqual(step["sealed_trees"], [])
        self.assertTrue(file_["sealed"])
        self.assertIn("step_1", ckptfs("info", self.m.path()).stdout)
        # And `ckptfs stat` counts the sealed trees.
        after = self.m.stats()["namespace"]
        self.assertEqual(after["sealed_trees"] - before["sealed_trees"], 1)
        # step_1, its parameters' directories and files, big.pt, latest
        self.assertEqual(after["sealed_inodes"] - before["sealed_inodes"], 1 + 3 * 5 + 2)
        self.assertRegex(ckptfs("stat", self.m.path()).stdout,
                         r"; %d sealed trees? \(%d inodes\)" % (after["sealed_trees"],
                                                                after["sealed_inodes"]))

    def test_an_in_place_write_fails_at_close_and_its_bytes_go(self):
        files = self.make_step("step_2")
        os.setxattr(self.m.path("step_2"), SEAL, b"1")  # as a framework's callback would
        f = self.m.path("step_2", "params.w0", "1")
        with self.assertRaises(OSError) as cm:
            with open(f, "r+b") as out:  # no O_TRUNC
                out.write(b"overwritten")
                out.flush()
                os.fsync(out.fileno())
        self.assertIn(cm.exception.errno, (errno.EROFS, errno.EIO), cm.exception)
        # The kernel's cached pages went with the refused bytes.
        deadline = time.monotonic() + 10
        while lib.read_file(f) != files["step_2/params.w0/1"] and time.monotonic() < deadline:
            time.sleep(0.05)
        self.check_reads(files)

    def test_removal_and_a_rename_of_the_root_stay_allowed(self):
        files = self.make_step("step_3")
        self.assertEqual(ckptfs("seal", self.m.path("step_3")).returncode, 0)
        os.rename(self.m.path("step_3"), self.m.path("step_3.old"))
        self.check_reads({k.replace("step_3", "step_3.old", 1): v for k, v in files.items()})
        shutil.rmtree(self.m.path("step_3.old"))
        self.assertFalse(os.path.exists(self.m.path("step_3.old")))
        # A sealed file where its directory is not sealed may be replaced.
        lib.write_file(self.m.path("weights"), b"old")
        self.assertEqual(ckptfs("seal", self.m.path("weights")).returncode, 0)
        lib.write_file(self.m.path("weights.tmp"), b"new")
        os.rename(self.m.path("weights.tmp"), self.m.path("weights"))
        self.assertEqual(lib.read_file(self.m.path("weights")), b"new")

    def test_the_kernel_keeps_a_sealed_tree(self):
        params = 20
        sealed = self.make_step("step_4", params)
        unsealed = self.make_step("step_5", params)
        os.setxattr(self.m.path("step_4"), SEAL, b"")
        # What a walk asks of the daemon about names, attributes and
        # listings (the kernel may list with or without attributes).
        kinds = ("lookups", "getattrs", "readdirs", "readdirpluses")

        def asked_during(fn):
            """Those requests while `fn` runs, and while the stats file is
            read once (a control file: never cached)."""
            before = self.m.stats()["fs"]["ops"]
            fn()
            after = self.m.stats()["fs"]["ops"]
            return sum(after[k] - before[k] for k in kinds)

        def walk(root):
            for dirpath, dirnames, filenames in os.walk(self.m.path(root)):
                for n in dirnames + filenames:
                    os.lstat(os.path.join(dirpath, n))

        def asked(root):
            """What a walk of `root` asks once the timeouts ran out (walked
            twice first: what the kernel learned before the seal came
            with the short ones)."""
            for _ in range(2):
                walk(root)
                time.sleep(0.5)
            return asked_during(lambda: walk(root))

        stats_alone = [asked_during(lambda: None) for _ in range(3)]
        # Each of the unsealed tree's 21 directories is listed again.
        self.assertGreaterEqual(asked("step_5"), min(stats_alone) + params + 1)
        # Only the name of the sealed tree's root (in a directory that is
        # not sealed) and the mount root's attributes are asked again.
        self.assertLessEqual(asked("step_4"), max(stats_alone) + 2)
        self.check_reads(sealed)

    def test_the_seal_outlives_a_remount(self):
        files = self.make_step("step_6")
        self.assertEqual(ckptfs("seal", self.m.path("step_6")).returncode, 0)
        self.m.remount()
        self.assertEqual(os.getxattr(self.m.path("step_6", "big.pt"), SEAL), b"1")
        self.expect_erofs(lib.write_file, self.m.path("step_6", "big.pt"), b"x")
        self.check_reads(files)

    def test_verify_and_warmup_read_a_sealed_tree(self):
        files = self.make_step("step_7")
        self.assertEqual(ckptfs("seal", self.m.path("step_7")).returncode, 0)
        for cmd in (["verify", "--json"], ["warmup", "--json"]):
            r = ckptfs(*cmd, self.m.path("step_7"))
            self.assertEqual(r.returncode, 0, " ".join(cmd) + ": " + r.stdout + r.stderr)
            out = json.loads(r.stdout)
            self.assertEqual(out["files"], len(files), out)
            self.assertEqual(out.get("damage", []), [], out)
        # Neither changed the tree.
        self.assertEqual(os.getxattr(self.m.path("step_7", "big.pt"), SEAL), b"1")
        self.check_reads(files)

    def test_the_command_says_what_it_cannot_seal(self):
        r = ckptfs("seal", self.plain)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ckptfs: seal %s: not on a ckptfs mount\n" % self.plain)
        self.assertEqual(os.listxattr(self.plain), [])
        missing = self.m.path("no_such_step")
        r = ckptfs("seal", missing)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ckptfs: seal %s: No such file or directory\n" % missing)


class PassthroughSealTest(SealTest):
    """Opens are answered: a write open of a sealed file fails at once."""
    mount_options = SealTest.mount_options + ("passthrough",)

    @classmethod
    def setUpClass(cls):
        harness.require_fuse(root=True)
        super().setUpClass()

    def test_an_in_place_write_fails_at_close_and_its_bytes_go(self):
        files = self.make_step("step_2")
        os.setxattr(self.m.path("step_2"), SEAL, b"1")
        f = self.m.path("step_2", "params.w0", "1")
        self.expect_erofs(open, f, "r+b")
        self.check_reads(files)


class AutoSealTest(lib.MountAndPlainTestCase):
    """seal_renamed and seal_marker: what seals a step by itself."""
    mount_options = ("seal_renamed=*.orbax-checkpoint-tmp-*", "seal_marker=.metadata")

    def sealed(self, *parts):
        try:
            return os.getxattr(self.m.path(*parts), SEAL) == b"1"
        except OSError as e:
            self.assertEqual(e.errno, errno.ENODATA)
            return False

    def test_the_orbax_flow_seals_the_step_it_renames(self):
        tmp = "step_7.orbax-checkpoint-tmp-1700000000"
        os.makedirs(self.m.path(tmp, "params.w"))
        lib.write_file(self.m.path(tmp, "params.w", "0"), b"chunk")
        lib.write_file(self.m.path(tmp, "_CHECKPOINT_METADATA"), b"{}")
        self.assertFalse(self.sealed(tmp))
        os.rename(self.m.path(tmp), self.m.path("step_7"))
        self.assertTrue(self.sealed("step_7"))
        self.assertTrue(self.sealed("step_7", "params.w", "0"))
        self.assertEqual(lib.read_file(self.m.path("step_7", "params.w", "0")), b"chunk")
        # What training code writes into a committed step fails: why the
        # option is off unless asked for.
        with self.assertRaises(OSError) as cm:
            lib.write_file(self.m.path("step_7", "trainer_state.json"), b"{}")
        self.assertEqual(cm.exception.errno, errno.EROFS)
        # Other renames seal nothing.
        os.mkdir(self.m.path("scratch.tmp"))
        os.rename(self.m.path("scratch.tmp"), self.m.path("scratch"))
        self.assertFalse(self.sealed("scratch"))
        lib.write_file(self.m.path("scratch", "notes.orbax-checkpoint-tmp-1"), b"x")
        os.rename(self.m.path("scratch", "notes.orbax-checkpoint-tmp-1"), self.m.path("scratch", "n"))
        self.assertFalse(self.sealed("scratch"))

    def test_a_marker_renamed_into_place_seals_its_directory(self):
        # torch.distributed.checkpoint: every rank's files, then the
        # coordinator's .metadata, written aside and renamed.
        os.mkdir(self.m.path("dcp_3"))
        for r in range(3):
            lib.write_file(self.m.path("dcp_3", "__%d_0.distcp" % r), os.urandom(5000))
        lib.write_file(self.m.path("dcp_3", ".metadata.tmp"), b"meta", fsync=True)
        self.assertFalse(self.sealed("dcp_3"))
        os.rename(self.m.path("dcp_3", ".metadata.tmp"), self.m.path("dcp_3", ".metadata"))
        self.assertTrue(self.sealed("dcp_3"))
        self.assertTrue(self.sealed("dcp_3", "__1_0.distcp"))
        # A directory named like the marker seals nothing.
        os.mkdir(self.m.path("d"))
        os.mkdir(self.m.path("d", "x"))
        os.rename(self.m.path("d", "x"), self.m.path("d", ".metadata"))
        self.assertFalse(self.sealed("d"))


class PassthroughAutoSealTest(AutoSealTest):
    """Opens are answered: a marker written in place seals at its close."""
    mount_options = AutoSealTest.mount_options + ("passthrough",)

    @classmethod
    def setUpClass(cls):
        harness.require_fuse(root=True)
        super().setUpClass()

    def test_a_marker_closed_seals_its_directory(self):
        os.mkdir(self.m.path("dcp_4"))
        lib.write_file(self.m.path("dcp_4", "__0_0.distcp"), os.urandom(5000))
        with open(self.m.path("dcp_4", ".metadata"), "wb") as f:
            f.write(b"meta")
            self.assertFalse(self.sealed("dcp_4"))
        # RELEASE follows close(2) without its caller waiting for it.
        deadline = time.monotonic() + 10
        while not self.sealed("dcp_4") and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(self.sealed("dcp_4"))
        self.assertTrue(self.sealed("dcp_4", "__0_0.distcp"))


if __name__ == "__main__":
    unittest.main()
