#!/usr/bin/python3
"""N threads each write one file of SIZE MiB into DIR (1 MiB os.write calls,
then os.fsync), as torch.distributed.checkpoint's ranks do, and report the
aggregate MB/s, when each fsync began and ended, and how many MiB the disk
under DIR's store took meanwhile (/proc/diskstats, sectors written).

  bench/concurrent_writers.py DIR [--writers 8] [--mib 256] [--disk-of PATH]
                              [--daemon-pid PID]

DIR is a ckptfs mount or a plain directory. The disk counted is the one
holding --disk-of (default DIR; for a mount, pass the store's directory).
With --daemon-pid the daemon's CPU seconds (/proc/PID/stat) are reported too.
The files are removed at the end.
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import disk_of, proc_cpu_s  # noqa: E402

MIB = 1 << 20


def sectors_written(disk):
    """Sectors written to `disk` ("MAJ:MIN") since boot."""
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if f"{fields[0]}:{fields[1]}" == disk:
                return int(fields[9])
    raise SystemExit(f"concurrent_writers: no disk {disk} in /proc/diskstats")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--mib", type=int, default=256, help="MiB per file")
    ap.add_argument("--disk-of", help="a path on the disk to count (default: DIR)")
    ap.add_argument("--daemon-pid", type=int)
    a = ap.parse_args()
    disk = disk_of(a.disk_of or a.dir)
    buf = os.urandom(MIB)
    spans = [None] * a.writers

    def write(k):
        fd = os.open(f"{a.dir}/writer{k}.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(a.mib):
            os.write(fd, buf)
        began = time.perf_counter() - t0
        os.fsync(fd)
        spans[k] = (began, time.perf_counter() - t0)
        os.close(fd)

    cpu0 = proc_cpu_s(a.daemon_pid) if a.daemon_pid else None
    s0 = sectors_written(disk)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=write, args=(k,)) for k in range(a.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    written = (sectors_written(disk) - s0) * 512 / MIB
    total = a.writers * a.mib * MIB
    line = (f"{a.writers} writers x {a.mib} MiB: {seconds:.2f} s, {total / seconds / 1e6:.0f} MB/s; "
            f"disk {disk} took {written:.0f} MiB")
    if cpu0 is not None:
        line += f"; daemon CPU {proc_cpu_s(a.daemon_pid) - cpu0:.2f} s"
    print(line)
    print("fsyncs (s):", " ".join(f"{b:.2f}-{e:.2f}" for b, e in sorted(spans)))
    for k in range(a.writers):
        os.unlink(f"{a.dir}/writer{k}.bin")


if __name__ == "__main__":
    main()
