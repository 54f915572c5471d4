#!/usr/bin/python3
"""The lifecycle of a checkpoint store on a real mount: write steps, delete
the old ones ("keep the last N"), get their space back.

Four steps of 8 shards x 16 MiB of random bytes are written through the
mount, the first three deleted; every step is smaller than a segment (1 GiB
by default), so all of them sit in the segment still being written. Then
the space must come back, to at most 1.3 x the live data:
  - online: `ckptfs compact MOUNT`, after a `--dry-run` that predicts it;
  - offline: `ckptfs compact STORE` on the unmounted store, likewise;
  - by itself: with `-o compact_dead=64M`, background compaction, within
    30 s of idle.
The surviving step reads back byte for byte, and fsck finds the store clean
after the unmount. A mount right after umount(8) of the same store waits
for the daemon to close it, and succeeds. Needs CKPTFS_BIN.
"""

import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402

MiB = 1 << 20
STEPS, SHARDS, SHARD_BYTES = 4, 8, 16 * MiB
LIVE = SHARDS * SHARD_BYTES  # the one step that is kept
BIN = os.environ.get("CKPTFS_BIN")


def write_steps(mnt):
    """Writes the steps; returns {path relative to mnt: sha256} of the last."""
    kept = {}
    for step in range(STEPS):
        d = os.path.join(mnt, "step%d" % step)
        os.mkdir(d)
        for shard in range(SHARDS):
            data = os.urandom(SHARD_BYTES)
            rel = "step%d/shard%d.bin" % (step, shard)
            lib.write_file(os.path.join(mnt, rel), data)
            if step == STEPS - 1:
                kept[rel] = lib.sha256(data)
    return kept


def delete_old_steps(mnt):
    for step in range(STEPS - 1):
        d = os.path.join(mnt, "step%d" % step)
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)


def compact(path, *args):
    r = subprocess.run([BIN, "compact"] + list(args) + [path], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def printed_bytes(text, word):
    """The size printed after `word` ("reclaim about 384.0 MiB"), in bytes."""
    m = re.search(word + r" (?:about )?([0-9.]+) (B|KiB|MiB|GiB)", text)
    if m is None:
        raise AssertionError("no '%s SIZE' in %r" % (word, text))
    return float(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": 1 << 30}[m.group(2)]


def printed_segments(text):
    m = re.search(r"rewr(?:ote|ite) (\d+) segments(?: \(([0-9,]+)\))?", text)
    if m is None:
        raise AssertionError("no segment count in %r" % text)
    return int(m.group(1)), m.group(2) or ""


class LifecycleTest(unittest.TestCase):

    def setUp(self):
        self.tmp = harness.make_tmpdir()
        self.store = os.path.join(self.tmp, "store")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.m = None

    def tearDown(self):
        if self.m is not None and self.m.pid is not None:
            self.m.unmount()

    def mount(self, options):
        self.m = harness.Mount(self.store, self.mnt, options)
        self.m.mount()

    def fill_and_delete(self):
        """Writes the steps, deletes all but the last; returns its checksums."""
        kept = write_steps(self.mnt)
        delete_old_steps(self.mnt)
        self.assertGreater(lib.segment_bytes(self.store), 3.5 * LIVE,
                           "the deleted steps' bytes are still in the segments")
        return kept

    def check_kept(self, root, kept):
        self.assertEqual(sorted(os.listdir(root)), ["step%d" % (STEPS - 1)])
        for rel, digest in kept.items():
            self.assertEqual(lib.file_sha256(os.path.join(root, rel)), digest, rel)

    def check_space(self):
        got = lib.segment_bytes(self.store)
        self.assertLessEqual(got, 1.3 * LIVE, "segments hold %d bytes for %d live" % (got, LIVE))

    def unmount_and_fsck(self):
        self.m.unmount()
        r = subprocess.run([BIN, "fsck", self.store], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_online_compaction_gives_the_space_back(self):
        # No background compaction: the dry run and the run see the same store.
        self.mount(["compact_dead=0"])
        kept = self.fill_and_delete()
        before = lib.segment_bytes(self.store)

        rc, out, err = compact(self.mnt, "--dry-run", "--json")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(err, "")  # quiet when not on a terminal
        dry = self.m.stats()["last_compaction"]
        self.assertTrue(dry["dry_run"])
        self.assertGreaterEqual(dry["segments_rewritten"], 1, out)
        printed = json.loads(out)  # --json: what the stats file recorded
        for key in ("dry_run", "segments_rewritten", "bytes_reclaimed", "bytes_copied",
                    "segments"):
            self.assertEqual(printed[key], dry[key], key)
        self.assertEqual(len(printed["kept"]), len(dry["kept"]))

        rc, out, err = compact(self.mnt)
        self.assertEqual(rc, 0, out + err)
        real = self.m.stats()["last_compaction"]
        self.assertFalse(real["dry_run"])
        # The dry run predicted it: the same segments, the same bytes up to
        # the record headers (64 bytes per record of at most 1 MiB).
        headers = 64 * (2 * LIVE // MiB)
        self.assertEqual(real["segments"], dry["segments"], (out, real, dry))
        self.assertEqual(real["segments_rewritten"], dry["segments_rewritten"])
        self.assertLessEqual(abs(real["bytes_copied"] - dry["bytes_copied"]), headers)
        self.assertLessEqual(abs(real["bytes_reclaimed"] - dry["bytes_reclaimed"]), headers)
        self.assertLessEqual(abs(before - lib.segment_bytes(self.store) - real["bytes_reclaimed"]),
                             headers)
        self.assertIn("rewrote %d segments" % real["segments_rewritten"], out)
        self.check_space()
        self.check_kept(self.mnt, kept)
        # A second run leaves the new segment and says why.
        rc, out, err = compact(self.mnt)
        self.assertEqual(rc, 0, out + err)
        again = self.m.stats()["last_compaction"]
        self.assertEqual(again["segments_rewritten"], 0)
        self.assertEqual([k["reason"] for k in again["kept"]], ["nothing_dead"])
        self.assertIn("kept: segment %d: " % again["kept"][0]["segment"], out)
        self.unmount_and_fsck()
        self.mount(["compact_dead=0"])
        self.check_kept(self.mnt, kept)

    def test_offline_compaction_gives_the_space_back(self):
        self.mount(["compact_dead=0"])
        kept = self.fill_and_delete()
        self.m.unmount()
        before = lib.segment_bytes(self.store)

        rc, dry_out, err = compact(self.store, "--dry-run")
        self.assertEqual(rc, 0, dry_out + err)
        self.assertEqual(lib.segment_bytes(self.store), before)
        rc, out, err = compact(self.store)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(printed_segments(out), printed_segments(dry_out))
        reclaimed = before - lib.segment_bytes(self.store)
        # Printed to 0.1 of a unit; the dry run leaves out the record headers.
        slack = 0.06 * MiB + 64 * (2 * LIVE // MiB)
        self.assertLessEqual(abs(printed_bytes(out, "reclaimed") - reclaimed), slack, out)
        self.assertLessEqual(abs(printed_bytes(dry_out, "reclaim") - reclaimed), slack, dry_out)
        self.assertLessEqual(abs(printed_bytes(out, "copied") - printed_bytes(dry_out, "copy")),
                             slack)
        self.check_space()
        r = subprocess.run([BIN, "fsck", self.store], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.mount(["compact_dead=0"])
        self.check_kept(self.mnt, kept)
        self.unmount_and_fsck()

    def test_background_compaction_gives_the_space_back_by_itself(self):
        self.mount(["compact_dead=64M"])
        kept = self.fill_and_delete()
        # Bounded wait: background compaction looks every second and copies at
        # compact_rate (64M/s by default).
        # The files go before the compaction reports itself: wait for both.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            last = self.m.stats().get("last_compaction")
            if lib.segment_bytes(self.store) <= 1.3 * LIVE and last and last["segments_rewritten"]:
                break
            time.sleep(0.5)
        self.check_space()
        last = self.m.stats()["last_compaction"]
        self.assertFalse(last["dry_run"])
        self.assertGreaterEqual(last["segments_rewritten"], 1)
        self.check_kept(self.mnt, kept)
        self.unmount_and_fsck()


class UmountThenMountTest(unittest.TestCase):
    """umount(8) returns before the daemon has closed its store; a mount of
    the same store right after it (scripts, systemd, test harnesses) waits
    for that and succeeds, with every byte there. Ten rounds of: write
    20 MiB, umount, mount at once."""

    def test_mount_right_after_umount(self):
        if os.geteuid() != 0:
            self.skipTest("umount(8) of a FUSE mount needs root")
        tmp = harness.make_tmpdir()
        m = harness.Mount(os.path.join(tmp, "store"), os.path.join(tmp, "mnt"))
        m.mount()
        written = {}
        try:
            for i in range(10):
                data = os.urandom(20 * MiB)
                lib.write_file(m.path("f%d" % i), data)
                written["f%d" % i] = lib.sha256(data)
                r = subprocess.run(["umount", m.mnt], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                m.mount()  # raises with ckptfs mount's message when it fails
            got = {n: lib.file_sha256(m.path(n)) for n in written}
            self.assertEqual(got, written)
        finally:
            m.unmount()


if __name__ == "__main__":
    harness.require_fuse(root=False)
    harness.set_deadline(280)
    unittest.main()
