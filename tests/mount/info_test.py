#!/usr/bin/python3
"""`ckptfs info` and `ckptfs verify` on a real mount.

info: for a file it must list exactly the extents of the mount's
"user.ckptfs.extents" attribute (read here page by page) and, for a
directory, the counts and sizes a walk of the tree finds; the store must
then pass fsck, so that the extents info shows are the ones fsck checked.
verify: exit 0 on an intact tree; after one byte of one record is changed
in its segment file, exit 4 naming that file and byte range (and fsck finds
the same damage); the same for one byte of a file's data file (a file
written past data_file_min, 64 MiB by default); exit 8 with one line
where nothing can be checked.
Needs CKPTFS_BIN.
"""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

MiB = 1 << 20
BIN = os.environ.get("CKPTFS_BIN")


def xattr_extents(path):
    """Every extent of the attribute, following its pages."""
    name, out = "user.ckptfs.extents", []
    while True:
        page = json.loads(os.getxattr(path, name))
        out += page["extents"]
        if page["next"] is None:
            return page, out
        name = "user.ckptfs.extents.%d" % page["next"]


def info(*paths):
    r = subprocess.run([BIN, "info", "--json"] + list(paths), capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


class InfoTest(lib.MountAndPlainTestCase):
    # Each pwrite below reaches the store as its own WRITE, so that a file
    # has many extents.
    mount_options = ("no_writeback_cache",)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        root = cls.m.path("tree")
        os.makedirs(os.path.join(root, "sub", "deeper"))
        cls.files = {
            "small": b"tiny",
            "sub/pieces": os.urandom(3 * MiB + 123),
            "sub/deeper/zeros": bytes(2 * MiB),
        }
        for rel, data in cls.files.items():
            fd = os.open(os.path.join(root, rel), os.O_CREAT | os.O_WRONLY, 0o644)
            # Back to front: no piece extends the one before, so each is an extent.
            for i in reversed(range(0, len(data), 65536)):
                os.pwrite(fd, data[i:i + 65536], i)
            os.close(fd)
        with open(os.path.join(root, "sparse"), "wb") as f:
            f.seek(5 * MiB)
            f.write(b"end")
        os.symlink("small", os.path.join(root, "link"))
        os.mkfifo(os.path.join(root, "fifo"))
        cls.root = root

    def test_file_extents_are_the_attribute_extents(self):
        for rel in list(self.files) + ["sparse"]:
            path = os.path.join(self.root, rel)
            rc, out, err = info(path)
            self.assertEqual(rc, 0, err)
            [j] = json.loads(out)
            page, extents = xattr_extents(path)
            self.assertEqual(j["type"], "file")
            self.assertEqual(j["ino"], os.stat(path).st_ino)
            self.assertEqual(j["size"], os.stat(path).st_size)
            self.assertEqual(len(j["extents"]), len(extents), rel)
            for mine, theirs in zip(j["extents"], extents):
                self.assertEqual(mine["file_offset"], theirs["file_offset"])
                self.assertEqual(mine["length"], theirs["length"])
                if "inline" in theirs:
                    self.assertTrue(mine["inline"])
                    continue
                for key in ("segment_id", "record_offset", "payload_checksum", "skip"):
                    self.assertEqual(mine[key], theirs[key], key)
                self.assertEqual(mine["stored_len"], theirs["record_stored_len"])
                self.assertEqual(mine["raw_len"], theirs["record_raw_len"])
                self.assertEqual(mine["segment"], os.path.join(
                    page["segments_dir"], "%08d.seg" % theirs["segment_id"]))
                self.assertTrue(os.path.getsize(mine["segment"]) >=
                                mine["record_offset"] + mine["stored_len"])
        [small] = json.loads(info(os.path.join(self.root, "small"))[1])
        self.assertTrue(small["inline"])
        self.assertEqual(small["stored_bytes"], 4)
        [pieces] = json.loads(info(os.path.join(self.root, "sub/pieces"))[1])
        self.assertGreater(len(pieces["extents"]), 40)
        self.assertEqual(sum(e["length"] for e in pieces["extents"]), 3 * MiB + 123)
        [sparse] = json.loads(info(os.path.join(self.root, "sparse"))[1])
        self.assertEqual(sparse["size"], 5 * MiB + 3)
        self.assertEqual(sum(e["length"] for e in sparse["extents"]), 3)

    def test_directory_counts_what_a_walk_finds(self):
        rc, out, err = info(self.root, os.path.join(self.root, "sub"))
        self.assertEqual(rc, 0, err)
        whole, sub = json.loads(out)
        self.assertEqual(whole["type"], "directory")
        self.assertEqual((whole["files"], whole["directories"], whole["symlinks"], whole["other"]),
                         (4, 3, 1, 1))
        sizes = sum(len(d) for d in self.files.values()) + 5 * MiB + 3
        self.assertEqual(whole["logical_bytes"], sizes)
        per_file = [json.loads(info(os.path.join(self.root, rel))[1])[0]
                    for rel in list(self.files) + ["sparse"]]
        self.assertEqual(whole["stored_bytes"], sum(f["stored_bytes"] for f in per_file))
        self.assertEqual(whole["extents"], sum(len(f["extents"]) for f in per_file))
        self.assertEqual(whole["inline_files"], sum(1 for f in per_file if f["inline"]))
        self.assertEqual((sub["files"], sub["directories"]), (2, 2))

    def test_text_output_names_the_segment(self):
        r = subprocess.run([BIN, "info", os.path.join(self.root, "sub/pieces")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(".seg @", r.stdout)
        self.assertIn("more extent(s)", r.stdout)

    def test_bad_paths_get_one_line_errors(self):
        plain_file = os.path.join(self.plain, "f")
        lib.write_file(plain_file, b"x")
        for path, words in ((plain_file, "is not on a ckptfs mount"),
                            (self.m.path("missing"), "No such file or directory"),
                            (os.path.join(self.root, "fifo"), "neither a regular file")):
            r = subprocess.run([BIN, "info", path], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, path)
            self.assertIn(words, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_zz_fsck_agrees(self):
        """After unmount the store is clean: fsck checked the extents info showed."""
        [before] = json.loads(info(os.path.join(self.root, "sub/pieces"))[1])
        store = self.m.store
        self.m.unmount()
        r = subprocess.run([BIN, "fsck", store], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.m.mount()
        [after] = json.loads(info(os.path.join(self.root, "sub/pieces"))[1])
        self.assertEqual(before["extents"], after["extents"])


def verify(*args):
    return subprocess.run([BIN, "verify"] + list(args), capture_output=True, text=True)


def flip_byte(path, at):
    """Inverts the byte at `at` of `path`; returns what it was."""
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(1)
        f.seek(at)
        f.write(bytes([old[0] ^ 0xFF]))
    return old


class VerifyTest(lib.MountAndPlainTestCase):

    def one_damage(self, r, victim, e):
        """The one damage line of verify's result `r`, checked to name
        `victim` and the byte range of its extent `e`."""
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        damaged = [l for l in r.stderr.splitlines() if l.startswith("ckptfs: verify: ")]
        self.assertEqual(len(damaged), 1, r.stderr)
        self.assertIn("%s bytes [%d, %d)" % (victim, e["file_offset"],
                                              e["file_offset"] + e["length"]), damaged[0])
        return damaged[0]

    def test_intact_then_damaged(self):
        root = self.m.path("ckpt")
        os.makedirs(os.path.join(root, "shards"))
        blobs = {"shards/%d.bin" % i: os.urandom(MiB + 1000 * i) for i in range(4)}
        blobs["meta.json"] = b'{"step": 1}'
        for rel, data in blobs.items():
            lib.write_file(os.path.join(root, rel), data)
        r = verify(root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("5 files", r.stdout)
        self.assertIn("every checksum matches", r.stdout)
        r = verify("--json", root)
        j = json.loads(r.stdout)
        self.assertEqual((j["files"], j["damage"], j["error"], j["exit_status"]), (5, [], None, 0))
        stored = sum(e["record_stored_len"] for rel in blobs
                     for e in xattr_extents(os.path.join(root, rel))[1] if "inline" not in e)
        self.assertGreaterEqual(j["bytes"], stored)

        # One byte of the second record of shard 2, changed on disk.
        victim = os.path.join(root, "shards/2.bin")
        page, extents = xattr_extents(victim)
        e = [x for x in extents if "inline" not in x][1]
        seg = os.path.join(page["segments_dir"], "%08d.seg" % e["segment_id"])
        at = e["record_offset"] + 48 + 100  # past the record header
        old = flip_byte(seg, at)
        damaged = self.one_damage(verify(root), victim, e)
        self.assertIn("checksum", damaged)
        self.assertEqual(verify(os.path.join(root, "shards/1.bin")).returncode, 0)
        j = json.loads(verify("--json", victim).stdout)
        self.assertEqual((len(j["damage"]), j["exit_status"]), (1, 4))
        # fsck finds the same record damaged.
        store = self.m.store
        self.m.unmount()
        try:
            r = subprocess.run([BIN, "fsck", store], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn(str(e["record_offset"]), r.stdout + r.stderr)
        finally:
            with open(seg, "r+b") as f:  # repaired, so that the store is clean again
                f.seek(at)
                f.write(old)
            self.m.mount()
        self.assertEqual(verify(root).returncode, 0)

    def test_data_file_intact_then_damaged(self):
        root = self.m.path("big")
        os.makedirs(root)
        victim = os.path.join(root, "weights.bin")
        size = 70 * MiB  # past data_file_min: the file moves to a data file
        lib.write_file(victim, os.urandom(size))
        page, extents = xattr_extents(victim)
        self.assertEqual(page["ino"], os.stat(victim).st_ino)
        data_file = os.path.join(page["data_dir"], "%08d.dat" % page["ino"])
        self.assertTrue(os.path.exists(data_file), page)
        blocks = [x for x in extents if x.get("data_file")]
        self.assertTrue(blocks, extents[:3])
        for x in blocks:
            self.assertEqual(x["block_offset"] + x["skip"], x["file_offset"])
        self.assertEqual(sum(x["length"] for x in extents), size)
        # info shows the data file and the blocks the attribute lists.
        rc, out, err = info(victim)
        self.assertEqual(rc, 0, err)
        [j] = json.loads(out)
        self.assertEqual(j["data_file"], data_file)
        self.assertEqual(j["data_file_bytes"], sum(x["length"] for x in blocks))
        self.assertFalse(j["inline"])
        self.assertEqual(j["stored_bytes"], size)
        mine = [x for x in j["extents"] if x.get("data_file")]
        self.assertEqual([(x["file_offset"], x["block_offset"], x["block_len"], x["checksum"])
                          for x in mine],
                         [(x["file_offset"], x["block_offset"], x["block_len"], x["checksum"])
                          for x in blocks])
        r = subprocess.run([BIN, "info", victim], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(data_file, r.stdout)
        self.assertIn("data file block @", r.stdout)

        r = verify(root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("%d data-file blocks" % len({x["block_offset"] for x in blocks}), r.stdout)
        j = json.loads(verify("--json", root).stdout)
        self.assertEqual((j["damage"], j["exit_status"]), ([], 0))
        self.assertGreaterEqual(j["bytes"], sum(x["block_len"] for x in blocks))

        # One byte of the block that holds file byte 66 MiB, changed on disk
        # with the store unmounted.
        e = [x for x in blocks if x["file_offset"] <= 66 * MiB < x["file_offset"] + x["length"]][0]
        at = e["block_offset"] + e["skip"] + 100
        store = self.m.store
        self.m.unmount()
        try:
            old = flip_byte(data_file, at)
        finally:
            self.m.mount()
        try:
            damaged = self.one_damage(verify(root), victim, e)
            self.assertIn(data_file, damaged)
            self.assertIn("data file bytes [%d, %d): checksum mismatch"
                          % (e["block_offset"], e["block_offset"] + e["block_len"]), damaged)
            j = json.loads(verify("--json", victim).stdout)
            self.assertEqual((len(j["damage"]), j["exit_status"]), (1, 4))
            # fsck finds the block damaged too.
            self.m.unmount()
            r = subprocess.run([BIN, "fsck", store], capture_output=True, text=True)
            self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
            self.assertIn("bad_payload_checksum", r.stdout + r.stderr)
            self.assertIn("%08d.dat" % page["ino"], r.stdout + r.stderr)
        finally:
            if self.m.pid is not None:
                self.m.unmount()
            with open(data_file, "r+b") as f:  # repaired, so that the store is clean again
                f.seek(at)
                f.write(old)
            self.m.mount()
        self.assertEqual(verify(root).returncode, 0)

    def test_nothing_to_check_is_an_operational_error(self):
        plain_file = os.path.join(self.plain, "f")
        lib.write_file(plain_file, b"x")
        for path, words in ((plain_file, "is not on a ckptfs mount"),
                            (self.m.path("missing"), "No such file or directory")):
            r = verify(path)
            self.assertEqual(r.returncode, 8, path)
            self.assertIn(words, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
