#!/usr/bin/python3
"""The seal of a large tree on a shared store: one mount (its index in
PostgreSQL, docs/SHARED.md) saves a per-parameter tree of --dirs parameter
directories (a .zarray and four chunks of --chunk bytes each), syncs, and
seals it (the user.ckptfs.seal attribute). Prints the save's and the
seal's seconds, the seal's share of the save, its round trips to
PostgreSQL (the mount's engine.index_round_trips) and the snapshot's bytes
per file.

Run beside a PostgreSQL cluster, as root (mounting):
  scripts/with-postgres.sh /usr/bin/python3 bench/seal_bench.py --dirs 10000
It asserts nothing about speed.
"""

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from target import DEFAULT_CKPTFS  # noqa: E402
import ckptfs_harness as harness  # noqa: E402  (target.py put tests/mount on the path)

CHUNKS = (".zarray", "0.0", "0.1", "1.0", "1.1")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirs", type=int, default=10000, help="parameter directories (default 10000)")
    ap.add_argument("--chunk", type=int, default=1024, help="chunk file bytes (default 1024)")
    ap.add_argument("--ckptfs", default=DEFAULT_CKPTFS, help="the binary (default %(default)s)")
    a = ap.parse_args()
    meta = os.environ.get("CKPTFS_TEST_PG")
    if not meta:
        raise SystemExit("run beside PostgreSQL: scripts/with-postgres.sh /usr/bin/python3 %s"
                         % sys.argv[0])
    os.environ["CKPTFS_BIN"] = a.ckptfs
    harness.require_fuse(root=True)
    tmp = harness.make_tmpdir("ckptfs-seal-bench.")  # removed at exit
    store = os.path.join(tmp, "store")
    m = harness.Mount(store, os.path.join(tmp, "mnt"), ["host=h1", "meta=" + meta])
    m.mount()
    try:
        root = m.path("step_1")
        os.mkdir(root)
        data = os.urandom(a.chunk)
        t0 = time.monotonic()
        for i in range(a.dirs):
            d = os.path.join(root, "params.layer_%05d" % i)
            os.mkdir(d)
            for name in CHUNKS:
                with open(os.path.join(d, name), "wb") as f:
                    f.write(data)
        os.sync()
        save = time.monotonic() - t0
        trips = lambda: m.stats()["engine"]["index_round_trips"]  # noqa: E731
        r0 = trips()
        t0 = time.monotonic()
        os.setxattr(root, "user.ckptfs.seal", b"1")
        seal = time.monotonic() - t0
        asked = trips() - r0
        files = a.dirs * len(CHUNKS)
        snapshot = sum(os.path.getsize(p) for p in glob.glob(os.path.join(store, "snapshots", "*")))
        out = {"files": files, "save_s": round(save, 2), "seal_s": round(seal, 3),
               "seal_share_of_save": round(seal / save, 4), "seal_round_trips": asked,
               "snapshot_bytes_per_file": round(snapshot / files, 1)}
        print(json.dumps(out))
    finally:
        m.unmount()


if __name__ == "__main__":
    main()
