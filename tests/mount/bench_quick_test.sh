#!/usr/bin/env bash
# bench/mount_bench.py --quick end to end: every workload runs against a real
# mount and a plain directory, workloads 1, 2, 3 (torch) and 10 also against
# the FUSE floor ($CKPTFS_FUSE_FLOOR, bench/'s passthrough_hp), and the
# outputs exist and parse: results.json (complete, a summary for every
# workload, the floor's figures), results.md (a section per workload, the
# floor's column), coalescing.png and scaling.png (PNG images that load), and
# --report-only rebuilds the same results.md from the JSON. One repetition:
# this checks that every part runs and reports, not the figures.
set -euo pipefail
source "$(dirname "$0")/ckptfs_mount_lib.sh"  # exits 77 (skipped) without /dev/fuse
ckptfs_require_root  # drop_caches
floor=${CKPTFS_FUSE_FLOOR:-}
[ -x "$floor" ] || ckptfs_fail "no passthrough_hp at '$floor' (CKPTFS_FUSE_FLOOR): ninja passthrough_hp"

repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(ckptfs_test_tmpdir)
work=$tmp/work
out=$tmp/out

start=$SECONDS
/usr/bin/python3 "$repo/bench/mount_bench.py" --quick --reps 1 --ckptfs "$CKPTFS_BIN" \
  --fuse-floor "$floor" --work "$work" --out "$out" >"$tmp/bench.log" 2>&1 || {
  tail -40 "$tmp/bench.log"
  ckptfs_fail "mount_bench.py --quick failed"
}
echo "mount_bench.py --quick took $((SECONDS - start)) s"
for mnt in "$work/mnt" "$work/mnt-floor"; do
  if ckptfs_is_mounted "$mnt"; then ckptfs_fail "the benchmark left a mount behind at $mnt"; fi
done

/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image

out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
assert r["env"]["completed"] is True, "results.json: run not completed"
assert r["env"]["quick"] is True
S = r["summary"]
def positive(d, key):
    v = d[key]
    assert v and v["median"] > 0 and v["n"] == r["env"]["reps"], (key, v)
for who in ("ckptfs", "plain"):
    for phase in ("write", "cold_read", "warm_read"):
        positive(S["big"], "%s_%s_MBps" % (who, phase))
    positive(S["layout"], who + "_restore_files_per_s")
    for phase in ("torch-save", "torch-load", "zarr-write", "zarr-read"):
        positive(S["frameworks"], "%s_%s_MBps" % (who, phase))
    for n in r["scaling"]["writers"]:
        positive(S["scaling"], "%s_%d_MBps" % (who, n))
    for piece in r["pieces"]["pieces"]:
        positive(S["pieces"], "%s_%d_MBps" % (who, piece))
    positive(S["cloud"], who + "_files_per_s")
for key in ("create_requests_per_file", "restore_requests_per_file", "restore_warm_files_per_s",
            "warmup_s"):
    positive(S["layout"], "ckptfs_" + key)
positive(S["big"], "dd_write_MBps")
for phase in ("write", "cold_read", "mmap_read"):  # the FUSE floor
    positive(S["big"], "floor_%s_MBps" % phase)
for key in ("create_files_per_s", "restore_files_per_s"):
    positive(S["layout"], "floor_" + key)
for phase in ("torch-save", "torch-load"):
    positive(S["frameworks"], "floor_%s_MBps" % phase)
for v in ("plain", "ckptfs", "ckptfs-nocompact", "floor"):
    positive(S["steps"], v + "_MBps")
for v in ("ckptfs", "ckptfs-nocompact"):
    positive(S["steps"], v + "_space_ratio")
positive(S["big"], "write_peak_rss_MiB")
for phase in ("cold_read", "mmap_read"):  # one 512 MiB piece in a quick run
    positive(S["big"], phase + "_cpu_piece_median")
    positive(S["big"], phase + "_cpu_piece_max")
assert S["layout"]["plain_backing_files"]["median"] == r["layout"]["dirs"] * 5
# Segments and the index's files, with its two backups (table files linked).
assert 0 < S["layout"]["ckptfs_backing_files"]["median"] <= 64, S["layout"]["ckptfs_backing_files"]
for label in [s["label"] for s in r["sweep"]["settings"]] + ["plain"]:
    positive(S["sweep"][label], "restore_s")

md = open(os.path.join(out, "results.md")).read()
for n, title in ((1, "Big file"), (2, "Per-parameter layout"), (3, "Real frameworks"),
                 (4, "Coalescing sweep"), (5, "Scaling"), (6, "Disk limit"),
                 (7, "Daemon resources"), (8, "Small writes"), (9, "Cloud-disk profile"),
                 (10, "Keep the last step")):
    assert ("## %d. %s" % (n, title)) in md, "results.md lacks section %d" % n
assert "n/a" not in md.split("## 1.")[1].split("## 2.")[0], "big-file table has gaps"
for n, ratio in ((1, "ckptfs/floor"), (2, "ckptfs/floor"), (3, "ckptfs/floor"),
                 (10, "defaults/floor")):
    section = md.split("## %d." % n)[1].split("## ")[0]
    assert "| FUSE floor |" in section and ("| %s |" % ratio) in section, \
        "results.md section %d lacks the FUSE floor's column" % n

for png in ("coalescing.png", "scaling.png"):
    path = os.path.join(out, png)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", png + " is not a PNG"
    img = matplotlib.image.imread(path)
    assert img.shape[0] > 100 and img.shape[1] > 100, (png, img.shape)
print("outputs parse:", ", ".join(sorted(os.listdir(out))))
PY

cp "$out/results.md" "$tmp/first.md"
/usr/bin/python3 "$repo/bench/mount_bench.py" --report-only "$out" >/dev/null
cmp "$tmp/first.md" "$out/results.md" || ckptfs_fail "--report-only wrote a different results.md"
echo "PASS"
