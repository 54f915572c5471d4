#!/usr/bin/env bash
# Runs engine_bench with repetitions and prints the median of every workload
# for ckptfs and for plain files, and the ratio ckptfs/plain of their
# throughputs (1.00 = as fast as the filesystem underneath; >1 = faster).
#
# Usage: bench/run_engine_bench.sh [BUILD_DIR] [REPETITIONS] [engine_bench args...]
#   BUILD_DIR    a CMake build with -DCKPTFS_BUILD_BENCH=ON (default: build)
#   REPETITIONS  3 to 5 is enough for medians (default: 3)
# Environment: CKPTFS_BENCH_DIR, CKPTFS_BENCH_DROP, CKPTFS_BENCH_LARGE_MIB,
# CKPTFS_BENCH_SMALL_FILES (see bench/engine_bench.cc).
# Example: bench/run_engine_bench.sh build 5 --benchmark_filter=large
set -euo pipefail

build=${1:-build}
reps=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
bin="$build/bench/engine_bench"
if [[ ! -x "$bin" ]]; then
  echo "no $bin: build with -DCKPTFS_BUILD_BENCH=ON first (ninja -C $build engine_bench)" >&2
  exit 2
fi

json=$(mktemp /tmp/engine_bench.XXXXXX.json)
trap 'rm -f "$json"' EXIT
"$bin" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
  --benchmark_out="$json" --benchmark_out_format=json "$@" >&2

python3 - "$json" <<'PY'
import json, sys

data = json.load(open(sys.argv[1]))
ctx = data.get("context", {})
# workload -> {"ckptfs": run, "plain": run} of the median aggregates.
# With one repetition there are no aggregates: use the single runs.
want = "aggregate" if any(b.get("run_type") == "aggregate" for b in data["benchmarks"]) \
    else "iteration"
rows = {}
for b in data["benchmarks"]:
    if b.get("run_type") != want or b.get("error_occurred"):
        continue
    if want == "aggregate" and b.get("aggregate_name") != "median":
        continue
    workload, system = b["run_name"].split("/")[:2]
    rows.setdefault(workload, {})[system] = b
errors = [b["name"] + ": " + b.get("error_message", "")
          for b in data["benchmarks"] if b.get("error_occurred")]

def mbps(b):
    return b.get("bytes_per_second", 0) / 2**20 if b else 0.0

def fps(b):
    return b.get("files_per_second", 0) if b else 0.0

print(f"engine_bench {'medians' if want == 'aggregate' else 'single runs'} of {ctx.get('executable', '')}, "
      f"cache drop: {ctx.get('cache_drop', '?')}, dir: {ctx.get('bench_dir', '?')}")
hdr = f"{'workload':<18}{'ckptfs MiB/s':>14}{'plain MiB/s':>14}{'ratio':>8}" \
      f"{'ckptfs files/s':>16}{'plain files/s':>15}{'ckptfs ms':>11}{'plain ms':>10}"
print(hdr)
print("-" * len(hdr))
for workload, r in rows.items():
    c, p = r.get("ckptfs"), r.get("plain")
    ratio = mbps(c) / mbps(p) if c and p and mbps(p) else float("nan")
    files = fps(c) or fps(p)
    fc = f"{fps(c):>16.0f}" if files else f"{'':>16}"
    fp = f"{fps(p):>15.0f}" if files else f"{'':>15}"
    tc = c["real_time"] if c else float("nan")
    tp = p["real_time"] if p else float("nan")
    print(f"{workload:<18}{mbps(c):>14.1f}{mbps(p):>14.1f}{ratio:>8.2f}{fc}{fp}"
          f"{tc:>11.0f}{tp:>10.0f}")
for workload, r in rows.items():
    c = r.get("ckptfs")
    if c and "index_mib" in c:
        print(f"{workload}: {c['real_time']:.0f} ms for a backup of the index of "
              f"{c['files']:.0f} files ({c['index_mib']:.1f} MiB); the backup's own bytes "
              f"(not shared with the index by links): {c['backup_own_kib']:.1f} KiB")
for e in errors:
    print("error:", e)
PY
