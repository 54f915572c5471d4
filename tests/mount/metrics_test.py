#!/usr/bin/python3
"""MNT/.ckptfs/metrics: the stats file's numbers in the Prometheus text format.

The file must parse with the Prometheus client's own parser (Debian's
python3-prometheus-client), name every family ckptfs_*, give each a HELP and
a TYPE, agree with the stats file, and its counters must move with the
traffic. Needs CKPTFS_BIN.
"""

import errno
import os
import subprocess
import sys
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

    def test_listed_and_read_only(self):
        self.assertIn("metrics", os.listdir(self.m.path(".ckptfs")))
        with self.assertRaises(OSError) as cm:
            with open(self.m.path(".ckptfs", "metrics"), "w") as f:
                f.write("x")
        self.assertIn(cm.exception.errno, (errno.EACCES, errno.EPERM), cm.exception)


if __name__ == "__main__":
    unittest.main()
