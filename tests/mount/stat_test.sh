#!/usr/bin/env bash
# `ckptfs stat` on a mountpoint and on the unmounted store: both report the
# same namespace counts and logical bytes; stat on a mounted store's directory
# refuses with a message that points at the mountpoint. The default form is a
# summary of at most 25 lines (the mount's rows only on a mount, requests per
# file of a save and a restore made here), `--all` prints every field of the
# JSON and `--json` the JSON. Deleting files frees the segment files they
# filled.
set -euo pipefail
source "$(dirname "$0")/ckptfs_mount_lib.sh"  # exits 77 (skipped) without /dev/fuse

tmp=$(ckptfs_test_tmpdir)
store=$tmp/store
mnt=$tmp/mnt

expect_eq() {  # WHAT ACTUAL EXPECTED
  [[ $2 == "$3" ]] || ckptfs_fail "$1: got '$2', expected '$3'"
}

# JSON_FILE KEY.PATH -> the value, with Python's json module.
json_get() {
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v = v[k]
print(json.dumps(v))' "$1" "$2"
}

# SUMMARY_FILE WHERE mounted|store: at most 25 lines, each row present,
# and the mount's rows only on a mount.
check_summary() {
  local lines row
  lines=$(wc -l <"$1")
  ((lines <= 25)) || ckptfs_fail "$2 summary has $lines lines: $(cat "$1")"
  for row in store contents segments "live / dead" index compaction; do
    grep -Eq "^$row: +[^ ]" "$1" || ckptfs_fail "$2 summary lacks '$row': $(cat "$1")"
  done
  grep -Eq '^live / dead: +[0-9.]+ [KMGT]?i?B live, [0-9.]+ [KMGT]?i?B dead \([0-9]+% dead\)$' "$1" ||
    ckptfs_fail "$2 summary: unclear live / dead: $(cat "$1")"
  local mount_rows=(mount options background read written requests "last save" "last restore"
                    passthrough)
  for row in "${mount_rows[@]}"; do
    if [[ $3 == mounted ]]; then
      grep -Eq "^$row: +[^ ]" "$1" || ckptfs_fail "$2 summary lacks '$row': $(cat "$1")"
    elif grep -Eq "^$row:" "$1"; then
      ckptfs_fail "$2 summary of a store that is not mounted has '$row': $(cat "$1")"
    fi
  done
  if [[ $3 == mounted ]]; then
    grep -Eq '^read: +[0-9]+\.[0-9] MB/s average since mount' "$1" ||
      ckptfs_fail "$2 summary: no read rate: $(cat "$1")"
    grep -Eq '^written: +[0-9]+\.[0-9] MB/s average since mount' "$1" ||
      ckptfs_fail "$2 summary: no write rate: $(cat "$1")"
    grep -Eq '^passthrough: +(yes|no: .+)' "$1" ||
      ckptfs_fail "$2 summary: unclear passthrough: $(cat "$1")"
  fi
}

# JSON_FILE ALL_FILE: every field of the JSON has its line in the --all form.
check_all() {
  python3 -c 'import json, sys
def leaves(v, prefix):
    if not isinstance(v, dict):
        yield prefix
        return
    for k, x in v.items():
        yield from leaves(x, prefix + "." + k if prefix else k)
keys = {l.split(":", 1)[0] for l in open(sys.argv[2])}
missing = [k for k in leaves(json.load(open(sys.argv[1])), "") if k not in keys]
sys.exit("--all lacks " + ", ".join(missing) if missing else 0)' "$1" "$2" ||
    ckptfs_fail "--all is not every field: $(cat "$2")"
}

ckptfs_test_mount "$store" "$mnt"

# A fresh store holds just its root directory.
"$CKPTFS_BIN" stat "$mnt" --json >"$tmp/empty.json"
root_dirs=$(json_get "$tmp/empty.json" namespace.directories)
root_files=$(json_get "$tmp/empty.json" namespace.files)

# 3 directories and 5 files of known sizes (two inline-sized, three in segments).
mkdir -p "$mnt/d1/d2" "$mnt/d3"
head -c 100 /dev/urandom >"$mnt/f1"
head -c 4000 /dev/urandom >"$mnt/d1/f2"
head -c $((1 << 20)) /dev/urandom >"$mnt/d1/d2/f3"
head -c $((3 << 20)) /dev/urandom >"$mnt/d3/f4"
truncate -s $((8 << 20)) "$mnt/f5"  # sparse: logical bytes, no segment bytes
expected_bytes=$((100 + 4000 + (1 << 20) + (3 << 20) + (8 << 20)))
sync

check() {  # JSON_FILE WHERE
  expect_eq "$2 files" "$(json_get "$1" namespace.files)" $((root_files + 5))
  expect_eq "$2 directories" "$(json_get "$1" namespace.directories)" $((root_dirs + 3))
  expect_eq "$2 symlinks" "$(json_get "$1" namespace.symlinks)" 0
  expect_eq "$2 logical_bytes" "$(json_get "$1" namespace.logical_bytes)" "$expected_bytes"
  local live seg idx
  live=$(json_get "$1" storage.live_bytes)
  seg=$(json_get "$1" storage.segment_file_bytes)
  idx=$(json_get "$1" storage.index_bytes)
  ((live >= (4 << 20))) || ckptfs_fail "$2 live_bytes $live < 4 MiB"
  ((seg >= live)) || ckptfs_fail "$2 segment_file_bytes $seg < live_bytes $live (no compression)"
  ((idx > 0)) || ckptfs_fail "$2 index_bytes is 0"
  json_get "$1" storage.compression_ratio >/dev/null || ckptfs_fail "$2 has no compression_ratio"
}

"$CKPTFS_BIN" stat "$mnt" --json >"$tmp/mounted.json"
check "$tmp/mounted.json" "mounted"
# The human forms show the same figures: --all every field, the default
# a summary.
"$CKPTFS_BIN" stat --all "$mnt" >"$tmp/mounted.all"
grep -Eq '^namespace\.files: +'$((root_files + 5))'$' "$tmp/mounted.all" ||
  ckptfs_fail "stat --all lacks namespace.files: $(cat "$tmp/mounted.all")"
"$CKPTFS_BIN" stat "$mnt" >"$tmp/mounted.txt"
check_summary "$tmp/mounted.txt" mounted mounted
grep -Eq "^contents: +$((root_files + 5)) files, $((root_dirs + 3)) directories; 12\.0 MiB logical$" \
  "$tmp/mounted.txt" || ckptfs_fail "summary: wrong contents: $(cat "$tmp/mounted.txt")"
grep -Eq "^store: +$store$" "$tmp/mounted.txt" || ckptfs_fail "summary: no store: $(cat "$tmp/mounted.txt")"
grep -Eq "^mount: +$mnt \(pid [0-9]+, up " "$tmp/mounted.txt" ||
  ckptfs_fail "summary: no mount: $(cat "$tmp/mounted.txt")"
# The daemon's memory beside its bound, the bound as the stats give it.
bound=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory"]["bound_bytes"])' \
  "$tmp/mounted.json")
((bound > 256 * 1024 * 1024)) || ckptfs_fail "memory bound $bound is too small to be the defaults'"
bound_mib=$(/usr/bin/python3 -c 'import sys; print("%.1f" % (int(sys.argv[1]) / 2**20))' "$bound")
grep -Eq "^memory: +[0-9.]+ [KM]iB resident; at most $bound_mib MiB with these options$" \
  "$tmp/mounted.txt" || ckptfs_fail "summary: no memory line: $(cat "$tmp/mounted.txt")"
(($(wc -l <"$tmp/mounted.all") > $(wc -l <"$tmp/mounted.txt"))) ||
  ckptfs_fail "--all is no longer than the summary"

# stat on the store directory while it is mounted: a clear refusal.
if "$CKPTFS_BIN" stat "$store" --json >"$tmp/busy.out" 2>"$tmp/busy.err"; then
  ckptfs_fail "stat of a mounted store succeeded"
fi
grep -q "is mounted by" "$tmp/busy.err" || ckptfs_fail "unclear error: $(cat "$tmp/busy.err")"
grep -q "run ckptfs stat on the mountpoint" "$tmp/busy.err" ||
  ckptfs_fail "error does not point at the mountpoint: $(cat "$tmp/busy.err")"

# Online compaction shows up as last_compaction.
"$CKPTFS_BIN" compact --dry-run "$mnt" >/dev/null
"$CKPTFS_BIN" stat "$mnt" --json >"$tmp/compacted.json"
expect_eq "last_compaction.dry_run" "$(json_get "$tmp/compacted.json" last_compaction.dry_run)" true
"$CKPTFS_BIN" stat "$mnt" >"$tmp/compacted.txt"
grep -Eq '^last compaction: +dry run: would rewrite [0-9]+ segments?, reclaim ' "$tmp/compacted.txt" ||
  ckptfs_fail "summary: no last compaction: $(cat "$tmp/compacted.txt")"

ckptfs_test_umount "$mnt"

# The unmounted store gives the same numbers.
"$CKPTFS_BIN" stat "$store" --json >"$tmp/store.json"
check "$tmp/store.json" "unmounted"
expect_eq "mounted flag" "$(json_get "$tmp/store.json" mounted)" false
for key in storage.segments storage.live_bytes storage.dead_bytes storage.segment_file_bytes; do
  expect_eq "$key mounted vs unmounted" "$(json_get "$tmp/store.json" $key)" \
    "$(json_get "$tmp/mounted.json" $key)"
done
"$CKPTFS_BIN" stat --all "$store" >"$tmp/store.all" || ckptfs_fail "stat --all of the store failed"
grep -Eq '^namespace\.logical_bytes: +.*\('"$expected_bytes"'\)$' "$tmp/store.all" ||
  ckptfs_fail "stat --all lacks logical_bytes: $(cat "$tmp/store.all")"
check_all "$tmp/store.json" "$tmp/store.all"
"$CKPTFS_BIN" stat "$store" >"$tmp/store.txt" || ckptfs_fail "human stat of the store failed"
check_summary "$tmp/store.txt" unmounted store
grep -Eq "^contents: +$((root_files + 5)) files, " "$tmp/store.txt" ||
  ckptfs_fail "summary of the store: wrong contents: $(cat "$tmp/store.txt")"

# Deleting files frees the segment files they filled, within seconds, without
# a compaction (free_empty, on by default); what is left reads back intact.
store2=$tmp/store2
mnt2=$tmp/mnt2
ckptfs_test_mount "$store2" "$mnt2" segment_size=4M
mkdir "$mnt2/step1" "$mnt2/step2"
for i in 1 2 3 4; do head -c $((4 << 20)) /dev/urandom >"$mnt2/step1/shard$i"; done
head -c $((4 << 20)) /dev/urandom >"$mnt2/step2/shard"
sum=$(md5sum <"$mnt2/step2/shard")
sync
before=$(du -sb "$store2/segments" | cut -f1)
rm -r "$mnt2/step1"
for ((i = 0; i < 100; i++)); do
  now=$(du -sb "$store2/segments" | cut -f1)
  ((now <= before - (12 << 20))) && break
  sleep 0.1
done
((now <= before - (12 << 20))) ||
  ckptfs_fail "segments hold $now bytes 10 s after deleting 16 MiB of $before"
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
[[ $(md5sum <"$mnt2/step2/shard") == "$sum" ]] || ckptfs_fail "step2 changed after freeing"
ckptfs_test_umount "$mnt2"
"$CKPTFS_BIN" fsck "$store2" >"$tmp/fsck2.out" || ckptfs_fail "fsck after freeing: $(cat "$tmp/fsck2.out")"

# A save (files created one after another) and a restore (the same files
# read back once their pages are dropped): the summary gives the FUSE
# requests per file of each; --all still prints every field and --json
# parses.
store3=$tmp/store3
mnt3=$tmp/mnt3
ckptfs_test_mount "$store3" "$mnt3"
mkdir "$mnt3/ckpt"
for i in $(seq 20); do head -c 10000 /dev/urandom >"$mnt3/ckpt/s$i"; done
python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$mnt3"/ckpt/s*
cat "$mnt3"/ckpt/s* >/dev/null
"$CKPTFS_BIN" stat "$mnt3" >"$tmp/run.txt"
check_summary "$tmp/run.txt" "after a save and a restore" mounted
grep -Eq '^last save: +[0-9]+\.[0-9] requests/file \(20 files created <1 s apart, over ' \
  "$tmp/run.txt" || ckptfs_fail "summary: no requests per file of the save: $(cat "$tmp/run.txt")"
grep -Eq '^last restore: +[0-9]+\.[0-9] requests/file \(20 files read from offset 0 <1 s apart' \
  "$tmp/run.txt" || ckptfs_fail "summary: no requests per file of the restore: $(cat "$tmp/run.txt")"
"$CKPTFS_BIN" stat --json "$mnt3" >"$tmp/run.json"
"$CKPTFS_BIN" stat --all "$mnt3" >"$tmp/run.all"
check_all "$tmp/run.json" "$tmp/run.all"
for key in fs.last_create.requests_per_file fs.last_restore.requests_per_file \
  fs.passthrough.in_use engine.read_bytes storage.reclaimable_bytes \
  background_compaction.threshold_dead_bytes uptime_s; do
  grep -q "^$key:" "$tmp/run.all" || ckptfs_fail "stat --all lacks $key"
  json_get "$tmp/run.json" "$key" >/dev/null || ckptfs_fail "stat --json lacks $key"
done
expect_eq "last_restore.files" "$(json_get "$tmp/run.json" fs.last_restore.files)" 20
if "$CKPTFS_BIN" stat --all --json "$mnt3" >/dev/null 2>&1; then
  ckptfs_fail "stat --all --json was accepted"
fi
ckptfs_test_umount "$mnt3"
"$CKPTFS_BIN" stat "$store3" >"$tmp/run-store.txt" || ckptfs_fail "human stat of store3 failed"
check_summary "$tmp/run-store.txt" "store3 unmounted" store
grep -Eq '^contents: +20 files, 2 directories; ' "$tmp/run-store.txt" ||
  ckptfs_fail "summary of store3: wrong contents: $(cat "$tmp/run-store.txt")"

# Neither a store nor a mount.
if "$CKPTFS_BIN" stat "$tmp" 2>"$tmp/neither.err"; then ckptfs_fail "stat of $tmp succeeded"; fi
grep -q "neither a ckptfs store nor a ckptfs mount" "$tmp/neither.err" ||
  ckptfs_fail "unclear error: $(cat "$tmp/neither.err")"

echo "PASS"
