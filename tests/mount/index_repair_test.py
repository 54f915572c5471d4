#!/usr/bin/python3
"""A damaged index: what `ckptfs fsck` says of it and what `fsck --repair`
gives back, byte for byte against what was written, with fsck(8)'s exit
codes (0 clean, 1 errors corrected, 4 errors left).

A store is written through a mount (directories of small files, as orbax
lays a checkpoint out, and a few larger ones) and unmounted; each test
damages a copy of it one way: CURRENT overwritten with garbage, the
MANIFEST's records garbled, one table file garbled, the log's tail garbled
(after a kill -9, which leaves the index's last writes in its log), the
whole index directory removed. A store keeps backups of its index
(STORE/backup/, taken at every clean unmount and once an hour when idle):
`fsck --repair --from-backup` restores the newest. Needs CKPTFS_BIN.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402

BIN = os.environ.get("CKPTFS_BIN")
EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED = 0, 1, 4


def garble(path, offset, length, seed=1):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(random.Random(seed).randbytes(length))


def fsck(store, *args):
    """(exit code, parsed --json report or None, stderr)."""
    r = subprocess.run([BIN, "fsck", "--json", *args, store], capture_output=True, text=True)
    report = json.loads(r.stdout) if r.stdout.strip() else None
    return r.returncode, report, r.stderr


def kill_mount(m):
    """Kills the daemon with SIGKILL: the index's last writes stay in its log."""
    pid = m.pid
    os.kill(pid, signal.SIGKILL)
    harness.wait_pid_gone(pid, 30)
    harness.fuse_unmount(m.mnt, lazy_only=True)
    harness.session().forget_mount(m.mnt)
    m.pid = None


def digest(data):
    return hashlib.sha256(data).hexdigest()


class IndexRepairTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.make_tmpdir()
        cls.sizes = {}
        cls.clean_store, cls.clean_sums = cls.write_store("clean", kill=False)
        cls.killed_store, cls.killed_sums = cls.write_store("killed", kill=True)

    @classmethod
    def write_store(cls, name, kill):
        """Writes a store through a mount; returns (store, {path: sha256}).
        With `kill` the daemon is killed with SIGKILL after the writes, so
        that the index's last writes are only in its log."""
        store = os.path.join(cls.tmp, name)
        m = harness.Mount(store, os.path.join(cls.tmp, name + ".mnt"))
        m.mount()
        rng = random.Random(name)
        sums = {}
        for d in range(4):
            os.mkdir(m.path("param_%d" % d))
            with open(m.path("param_%d" % d, ".zarray"), "w") as f:
                f.write('{"chunks": [%d]}' % d)
            sums["param_%d/.zarray" % d] = hashlib.sha256(b'{"chunks": [%d]}' % d).hexdigest()
            for i in range(40):
                data = rng.randbytes(rng.randrange(1, 300 << 10 if i % 10 == 0 else 40 << 10))
                rel = "param_%d/%d" % (d, i)
                with open(m.path(rel), "wb") as f:
                    f.write(data)
                sums[rel] = hashlib.sha256(data).hexdigest()
                cls.sizes[name, rel] = len(data)
        if kill:
            kill_mount(m)
        else:
            m.unmount()
        return store, sums

    def setUp(self):
        self.n = getattr(self, "n", 0)
        self.store = os.path.join(harness.make_tmpdir(), "store")

    def copy(self, store):
        shutil.copytree(store, self.store, symlinks=True)
        return os.path.join(self.store, "index")

    def read_back(self, sums, lost_found=None):
        """Mounts the store; returns {path: sha256 or None when missing}.
        With a `lost_found` dict, also fills it with {name: sha256} of the
        files under /lost+found."""
        m = harness.Mount(self.store, self.store + ".mnt")
        m.mount()
        try:
            got = {}
            for rel in sums:
                try:
                    with open(m.path(rel), "rb") as f:
                        got[rel] = digest(f.read())
                except FileNotFoundError:
                    got[rel] = None
            if lost_found is not None and os.path.isdir(m.path("lost+found")):
                for name in os.listdir(m.path("lost+found")):
                    with open(m.path("lost+found", name), "rb") as f:
                        lost_found[name] = digest(f.read())
            return got
        finally:
            m.unmount()

    def repair_gives_back_everything(self, sums):
        rc, report, err = fsck(self.store)
        self.assertEqual(rc, EXIT_UNCORRECTED, err)
        self.assertIn("the index does not open (ckptfs fsck --repair rebuilds it)", err)
        rc, report, err = fsck(self.store, "--repair")
        self.assertEqual(rc, EXIT_CORRECTED, (err, report))
        self.assertEqual(report["counts"].get("index_rebuilt"), 1, report)
        self.assertEqual(report["lost_files"], [])
        rc, report, err = fsck(self.store)
        self.assertEqual(rc, EXIT_CLEAN, (err, report))
        self.assertEqual(self.read_back(sums), sums)

    def test_current_overwritten(self):
        index = self.copy(self.clean_store)
        with open(os.path.join(index, "CURRENT"), "w") as f:
            f.write("garbage\n")
        self.repair_gives_back_everything(self.clean_sums)

    def test_manifest_garbled(self):
        index = self.copy(self.clean_store)
        manifest = [n for n in os.listdir(index) if n.startswith("MANIFEST-")]
        self.assertEqual(len(manifest), 1, os.listdir(index))
        garble(os.path.join(index, manifest[0]), 100, 300)
        self.repair_gives_back_everything(self.clean_sums)

    def test_manifest_garbled_after_kill(self):
        """The index's last writes only in its log, and its MANIFEST
        garbled: the rebuild replays the log into every column family."""
        index = self.copy(self.killed_store)
        manifest = [n for n in os.listdir(index) if n.startswith("MANIFEST-")]
        self.assertEqual(len(manifest), 1, os.listdir(index))
        garble(os.path.join(index, manifest[0]), 100, 300)
        self.repair_gives_back_everything(self.killed_sums)

    def test_table_file_garbled(self):
        """The largest table file (the extents, here) garbled: fsck puts the
        segment records no extent points to back where their files lost
        bytes, so every file comes back but those whose bytes lived in the
        lost table itself (files of up to 4 KiB, kept in the index), which
        are named; every other file reads back as written."""
        index = self.copy(self.clean_store)
        tables = sorted((os.path.getsize(os.path.join(index, n)), n)
                        for n in os.listdir(index) if n.endswith(".sst"))
        size, largest = tables[-1]
        garble(os.path.join(index, largest), size // 4, size // 2)
        rc, report, err = fsck(self.store)
        self.assertEqual(rc, EXIT_UNCORRECTED, err)
        rc, report, err = fsck(self.store, "--repair")
        self.assertEqual(rc, EXIT_CORRECTED, (err, report))
        rebuilt = [f for f in report["findings"] if f["kind"] == "index_rebuilt"]
        self.assertEqual(len(rebuilt), 1, report)
        self.assertIn(largest, rebuilt[0]["detail"])
        self.assertTrue(os.path.exists(os.path.join(index, "lost", largest)))
        self.assertIn("extents_recovered", report["counts"], report)
        lost = {p.lstrip("/") for p in report["lost_files"]}
        self.assertTrue(lost, report)
        for rel in lost:
            self.assertLessEqual(self.sizes.get(("clean", rel), 0), 4096, rel)
        self.assertEqual(fsck(self.store)[0], EXIT_CLEAN)
        got = self.read_back(self.clean_sums)
        for rel, digest in self.clean_sums.items():
            if rel not in lost:
                self.assertEqual(got[rel], digest, rel)
        harness.log("index repair: a garbled table lost the data of %d of %d files"
                    % (len(lost), len(self.clean_sums)))

    def test_log_tail_garbled(self):
        """The index's last writes were only in its log; its tail garbled:
        RocksDB replays the log up to the damage. Files whose entries were
        past it lose their names, and their bytes are kept under lost+found
        (but those of up to 4 KiB, which lived in the log); every file left
        reads back as written."""
        index = self.copy(self.killed_store)
        logs = [n for n in os.listdir(index) if n.endswith(".log") and
                os.path.getsize(os.path.join(index, n)) > 0]
        self.assertEqual(len(logs), 1, os.listdir(index))
        log = os.path.join(index, logs[0])
        size = os.path.getsize(log)
        garble(log, size - min(size // 10, 8192), min(size // 10, 8192))
        rc, report, err = fsck(self.store)
        self.assertEqual(rc, EXIT_UNCORRECTED, (err, report))
        damaged = [f for f in report["findings"] if f["kind"] == "index_rebuilt"]
        self.assertEqual(len(damaged), 1, report)
        self.assertIn("the index's log is damaged", damaged[0]["detail"])
        rc, report, err = fsck(self.store, "--repair")
        self.assertIn(rc, (EXIT_CLEAN, EXIT_CORRECTED), (err, report))
        self.assertEqual(fsck(self.store)[0], EXIT_CLEAN)
        found = {}
        got = self.read_back(self.killed_sums, found)
        # In the order written: what came after the damage is missing, or
        # empty (its name made it, its bytes did not); all before reads back.
        order = list(self.killed_sums)
        bad = [i for i, rel in enumerate(order) if got[rel] != self.killed_sums[rel]]
        self.assertTrue(bad, "nothing was lost with the log's tail")
        self.assertEqual(bad, list(range(bad[0], len(order))), "lost files are not the last ones")
        self.assertGreater(bad[0], len(order) // 2, bad)
        empty = digest(b"")
        for i in bad:
            rel = order[i]
            if self.sizes[("killed", rel)] <= 4096:
                self.assertIn(got[rel], (None, empty), rel)
            else:  # a file whose name was lost too; one whose write alone was lost is back
                self.assertIsNone(got[rel], rel)
                self.assertIn(self.killed_sums[rel], found.values(), rel)
        harness.log("index repair: a garbled log tail lost the last %d of %d files"
                    % (len(bad), len(order)))

    def test_index_removed(self):
        """Nothing to rebuild from: fsck says so, changes nothing and exits 4."""
        index = self.copy(self.clean_store)
        shutil.rmtree(index)
        os.mkdir(index)
        before = sorted(os.listdir(os.path.join(self.store, "segments")))
        for args in ((), ("--repair",)):
            rc, report, err = fsck(self.store, *args)
            self.assertEqual(rc, EXIT_UNCORRECTED, (args, err))
            self.assertIn("is gone", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertEqual(os.listdir(index), [])
        self.assertEqual(sorted(os.listdir(os.path.join(self.store, "segments"))), before)

    def test_index_and_backups_removed(self):
        """No index and no backup: --repair makes a new index and keeps every
        file whose bytes are in the segments under lost+found by inode
        number, byte for byte; files of up to 4 KiB lived in the index."""
        index = self.copy(self.clean_store)
        shutil.rmtree(index)
        shutil.rmtree(os.path.join(self.store, "backup"))
        rc, report, err = fsck(self.store)
        self.assertEqual(rc, EXIT_UNCORRECTED, err)
        self.assertIn("ckptfs fsck --repair makes a new one", err)
        rc, report, err = fsck(self.store, "--repair")
        self.assertEqual(rc, EXIT_CORRECTED, (err, report))
        self.assertEqual(report["counts"].get("index_rebuilt"), 1, report)
        rc, report2, err = fsck(self.store)
        self.assertEqual(rc, EXIT_CLEAN, (err, report2))
        found = {}
        self.read_back({}, found)
        want = {d for rel, d in self.clean_sums.items() if self.sizes.get(("clean", rel), 0) > 4096}
        self.assertEqual(report["counts"].get("file_recovered"), len(want), report["counts"])
        self.assertEqual(set(found.values()), want)
        self.assertTrue(all(name.isdigit() for name in found), sorted(found))
        # The store works on: a new file, a compaction, a clean check.
        m = harness.Mount(self.store, self.store + ".mnt")
        m.mount()
        with open(m.path("after"), "wb") as f:
            f.write(b"a" * 100000)
        m.unmount()
        self.assertEqual(subprocess.run([BIN, "compact", self.store], capture_output=True).returncode, 0)
        self.assertEqual(fsck(self.store)[0], EXIT_CLEAN)
        self.assertEqual(set(self.read_back({}, found).values()) | set(found.values()),
                         want)

    def test_index_removed_restored_from_backup(self):
        """The clean unmount took a backup: everything comes back."""
        index = self.copy(self.clean_store)
        self.assertEqual(len(os.listdir(os.path.join(self.store, "backup"))), 1)
        shutil.rmtree(index)
        rc, report, err = fsck(self.store, "--repair")
        self.assertEqual(rc, EXIT_UNCORRECTED, err)
        self.assertIn("ckptfs fsck --repair --from-backup restores its newest backup", err)
        rc, report, err = fsck(self.store, "--repair", "--from-backup")
        self.assertEqual(rc, EXIT_CORRECTED, (err, report))
        self.assertEqual(report["counts"].get("index_restored"), 1, report)
        self.assertEqual(report["lost_files"], [])
        self.assertEqual(fsck(self.store)[0], EXIT_CLEAN)
        self.assertEqual(self.read_back(self.clean_sums), self.clean_sums)

    def test_backup_restored_after_more_writes(self):
        """Files written after the newest backup are not in it: the restore
        gives back what the backup knew, keeps the damaged index aside, and
        keeps the newer files (records, a data file and an overwrite of it)
        under lost+found by inode number; what was appended to the files it
        knows comes back in place."""
        self.copy(self.clean_store)
        m = harness.Mount(self.store, self.store + ".mnt")
        m.mount()
        newer = {}
        for i in range(20):
            data = random.Random(i).randbytes(20000 + i)
            with open(m.path("param_0", "new_%d" % i), "wb") as f:
                f.write(data)
            newer["param_0/new_%d" % i] = digest(data)
        # A file large enough for a data file of its own, then overwritten
        # below its end (those bytes go to a segment, and are newer).
        big = bytearray(random.Random(99).randbytes(70 << 20))
        with open(m.path("param_0", "big"), "wb") as f:
            f.write(big)
        patch = random.Random(98).randbytes(100000)
        with open(m.path("param_0", "big"), "r+b") as f:
            f.seek(3 << 20)
            f.write(patch)
        big[3 << 20:(3 << 20) + len(patch)] = patch
        newer["param_0/big"] = digest(bytes(big))
        del big
        # A file the backup knows, appended to: its new bytes come back.
        appended = {}
        for rel in ("param_1/1", "param_2/10"):
            more = random.Random(rel).randbytes(50000)
            with open(m.path(rel), "ab") as f:
                f.write(more)
            with open(m.path(rel), "rb") as f:
                appended[rel] = digest(f.read())
        kill_mount(m)  # no clean unmount: no newer backup
        with open(os.path.join(self.store, "index", "CURRENT"), "w") as f:
            f.write("garbage\n")
        rc, report, err = fsck(self.store, "--repair", "--from-backup")
        self.assertEqual(rc, EXIT_CORRECTED, (err, report))
        restored = [f for f in report["findings"] if f["kind"] == "index_restored"]
        self.assertEqual(len(restored), 1, report)
        self.assertIn("index.replaced-", restored[0]["detail"])
        self.assertEqual(report["counts"].get("file_recovered"), len(newer), report["counts"])
        kept = [n for n in os.listdir(self.store) if n.startswith("index.replaced-")]
        self.assertEqual(len(kept), 1, os.listdir(self.store))
        self.assertEqual(fsck(self.store)[0], EXIT_CLEAN)
        found = {}
        got = self.read_back({**self.clean_sums, **newer}, found)
        for rel, want in {**self.clean_sums, **appended}.items():
            self.assertEqual(got[rel], appended.get(rel, want), rel)
        for rel in newer:
            self.assertIsNone(got[rel], rel)
        # Created after the backup: their names are gone, their bytes kept.
        self.assertEqual(sorted(found.values()), sorted(newer.values()))

    def test_repair_leaves_holes_alone(self):
        """Records a truncate or a punch left dead are never put back: on a
        healthy store fsck --repair finds nothing and the holes read as
        zeros."""
        self.copy(self.clean_store)
        m = harness.Mount(self.store, self.store + ".mnt")
        m.mount()
        path = m.path("param_2", "sparse")
        with open(path, "wb") as f:
            f.write(random.Random(7).randbytes(300 << 10))
            f.flush()
            os.fsync(f.fileno())
            f.truncate(0)
            f.truncate(300 << 10)
        m.unmount()
        rc, report, err = fsck(self.store, "--repair")
        self.assertEqual(rc, EXIT_CLEAN, (err, report))
        self.assertNotIn("extents_recovered", report["counts"])
        got = self.read_back({"param_2/sparse": None})
        self.assertEqual(got["param_2/sparse"], hashlib.sha256(bytes(300 << 10)).hexdigest())

    def test_backups_are_bounded(self):
        """A backup at every clean unmount; the newest two are kept."""
        self.copy(self.clean_store)
        for _ in range(3):
            time.sleep(1.1)  # backups are named by the second
            m = harness.Mount(self.store, self.store + ".mnt")
            m.mount()
            with open(m.path("param_1", "touched"), "ab") as f:
                f.write(b"x")
            m.unmount()
        self.assertEqual(len(os.listdir(os.path.join(self.store, "backup"))), 2)
        rc, report, err = fsck(self.store)
        self.assertEqual(rc, EXIT_CLEAN, (err, report))


if __name__ == "__main__":
    harness.require_fuse(root=False)
    harness.set_deadline(280)
    unittest.main()
