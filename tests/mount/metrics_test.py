#!/usr/bin/python3
"""What an operator watches: MNT/.ckptfs/metrics and `ckptfs stat --watch`.

The metrics file must parse with the Prometheus client's own parser
(Debian's python3-prometheus-client), name every family ckptfs_*, give each
a HELP and a TYPE, agree with the stats file, and its counters must move
with the traffic. `ckptfs stat --watch`, drawn in a tmux pane while a writer
runs, must show moving, non-zero write rates, and stop cleanly on SIGINT.
Needs CKPTFS_BIN (and tmux for the drawn test).
"""

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_testlib as lib  # noqa: E402

MiB = 1 << 20


class MetricsTest(lib.MountAndPlainTestCase):

    def read_metrics(self):
        with open(self.m.path(".ckptfs", "metrics"), "r") as f:
            text = f.read()
        families = list(text_string_to_metric_families(text))
        samples = {}
        for fam in families:
            for s in fam.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return text, families, samples

    @staticmethod
    def value(samples, name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    def test_parses_with_help_and_type_for_every_family(self):
        text, families, samples = self.read_metrics()
        self.assertGreater(len(families), 20, text)
        helps = {l.split()[2] for l in text.splitlines() if l.startswith("# HELP ")}
        types = {l.split()[2]: l.split()[3] for l in text.splitlines() if l.startswith("# TYPE ")}
        for fam in families:
            self.assertTrue(fam.name.startswith("ckptfs_"), fam.name)
            self.assertTrue(fam.documentation, fam.name)
            self.assertIn(fam.type, ("counter", "gauge"), fam.name)
        # The parser strips _total from counter families; the file names them with it.
        for name, kind in types.items():
            self.assertIn(name, helps)
            self.assertEqual(name.endswith("_total"), kind == "counter", name)
        self.assertEqual(self.value(samples, "ckptfs_info", version=self.version()[0],
                                    libfuse=self.version()[1]), 1.0)

    def version(self):
        stats = self.m.stats()
        out = subprocess.run([os.environ["CKPTFS_BIN"], "--version"], capture_output=True,
                             text=True, check=True).stdout.split("\n")[0]
        return out.split()[1], stats["fs"]["libfuse"]

    def test_counters_move_with_the_traffic_and_agree_with_stats(self):
        d = self.m.path("traffic")
        _, _, before = self.read_metrics()
        os.mkdir(d)
        blobs = [os.urandom(MiB) for _ in range(3)]
        for i, b in enumerate(blobs):
            lib.write_file(os.path.join(d, "f%d" % i), b)
        for i, b in enumerate(blobs):
            self.assertEqual(lib.read_file(os.path.join(d, "f%d" % i)), b)
        _, _, after = self.read_metrics()

        def moved(name, **labels):
            return self.value(after, name, **labels) - self.value(before, name, **labels)

        self.assertGreaterEqual(moved("ckptfs_write_bytes_total"), 3 * MiB)
        self.assertGreaterEqual(moved("ckptfs_fuse_write_bytes_total"), 3 * MiB)
        self.assertEqual(moved("ckptfs_files_created_total"), 3)
        self.assertEqual(moved("ckptfs_requests_by_kind_total", kind="mknods"), 3)
        self.assertEqual(moved("ckptfs_requests_by_kind_total", kind="mkdirs"), 1)
        self.assertGreater(moved("ckptfs_requests_total"), 3)
        self.assertEqual(moved("ckptfs_files"), 3)
        self.assertEqual(moved("ckptfs_directories"), 1)
        self.assertEqual(moved("ckptfs_logical_bytes"), 3 * MiB)
        # A quiet mount: the namespace and storage gauges equal the stats file's.
        stats = self.m.stats()
        _, _, now = self.read_metrics()
        self.assertEqual(self.value(now, "ckptfs_files"), stats["namespace"]["files"])
        self.assertEqual(self.value(now, "ckptfs_logical_bytes"),
                         stats["namespace"]["logical_bytes"])
        self.assertEqual(self.value(now, "ckptfs_segment_file_bytes"),
                         stats["storage"]["segment_file_bytes"])
        self.assertEqual(self.value(now, "ckptfs_write_bytes_total"),
                         stats["engine"]["write_bytes"])
        self.assertEqual(self.value(now, "ckptfs_reclaimable_bytes"),
                         stats["storage"]["reclaimable_bytes"])
        self.assertEqual(self.value(now, "ckptfs_background_compaction_threshold_dead_bytes"),
                         stats["background_compaction"]["threshold_dead_bytes"])
        # The daemon's memory, beside the bound for its options (which
        # counts the inodes the kernel holds: a few more or less between the
        # two reads).
        self.assertAlmostEqual(self.value(now, "ckptfs_memory_bound_bytes"),
                               stats["memory"]["bound_bytes"], delta=64 << 10)
        resident = self.value(now, "ckptfs_memory_resident_bytes")
        self.assertGreater(resident, 4 * MiB)
        self.assertLess(resident, stats["memory"]["bound_bytes"])

    def test_listed_and_read_only(self):
        self.assertIn("metrics", os.listdir(self.m.path(".ckptfs")))
        with self.assertRaises(OSError) as cm:
            with open(self.m.path(".ckptfs", "metrics"), "w") as f:
                f.write("x")
        self.assertIn(cm.exception.errno, (errno.EACCES, errno.EPERM), cm.exception)


class Writer:
    """Writes 1 MiB files into DIR until stopped."""

    def __init__(self, d):
        self.d = d
        self.stop = threading.Event()
        self.n = 0
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        blob = os.urandom(MiB)
        while not self.stop.is_set():
            lib.write_file(os.path.join(self.d, "w%d" % (self.n % 64)), blob)
            self.n += 1

    def __enter__(self):
        os.makedirs(self.d, exist_ok=True)
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()


WRITTEN = re.compile(r"written ([0-9.]+) MB/s")
# A bound against hanging, not a measure.
WAIT_S = 60


class WatchTest(lib.MountAndPlainTestCase):

    def test_watch_in_a_terminal_shows_moving_rates(self):
        if shutil.which("tmux") is None:
            self.skipTest("no tmux")
        session = "ckptfs-watch-%d" % os.getpid()
        cmd = "%s stat --watch --interval 0.5 %s" % (os.environ["CKPTFS_BIN"], self.m.mnt)
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "20",
                        cmd], check=True)
        try:
            screens = []
            with Writer(self.m.path("watched")):
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline and len(set(screens)) < 3:
                    time.sleep(0.5)
                    pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                          capture_output=True, text=True).stdout
                    m = WRITTEN.search(pane)
                    if m and float(m.group(1)) > 0:
                        screens.append(pane)
            self.assertGreaterEqual(len(set(screens)), 3, "no moving write rate:\n%s" %
                                    "\n---\n".join(screens[-3:]))
            last = screens[-1]
            for label in ("requests", "read", "written", "backing", "cache", "dead"):
                self.assertIn(label, last)
            self.assertRegex(last, r"writes [0-9]+")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)

    def test_watch_without_a_terminal_prints_lines_and_stops_on_sigint(self):
        p = subprocess.Popen([os.environ["CKPTFS_BIN"], "stat", "--watch", "--interval", "0.2",
                              self.m.mnt], stdout=subprocess.PIPE, text=True)
        lines = []
        try:
            with Writer(self.m.path("piped")):
                # A line per interval: read until two have come and one shows
                # the writer (the watch prints and flushes each interval).
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    line = p.stdout.readline()
                    if not line:
                        break
                    lines.append(line.rstrip("\n"))
                    m = WRITTEN.search(line)
                    if len(lines) >= 2 and m and float(m.group(1)) > 0:
                        break
        finally:
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=WAIT_S)
        self.assertEqual(p.returncode, 0)
        lines += out.splitlines()
        self.assertGreaterEqual(len(lines), 2, lines)
        self.assertFalse(any("\x1b" in l for l in lines), lines)
        self.assertTrue(any(float(m.group(1)) > 0 for m in map(WRITTEN.search, lines) if m),
                        lines)

    def test_watch_refuses_what_is_not_a_mount(self):
        r = subprocess.run([os.environ["CKPTFS_BIN"], "stat", "--watch", self.plain],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("is not a ckptfs mount", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
