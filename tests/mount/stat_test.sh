#!/usr/bin/env bash
# `ckptfs stat` on a mountpoint and on the unmounted store: both report the
# same namespace counts and logical bytes; stat on a mounted store's directory
# refuses with a message that points at the mountpoint. Deleting files frees
# the segment files they filled.
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
# The human form shows the same figures.
"$CKPTFS_BIN" stat "$mnt" >"$tmp/mounted.txt"
grep -Eq '^namespace\.files: +'$((root_files + 5))'$' "$tmp/mounted.txt" ||
  ckptfs_fail "human stat lacks namespace.files: $(cat "$tmp/mounted.txt")"

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

ckptfs_test_umount "$mnt"

# The unmounted store gives the same numbers.
"$CKPTFS_BIN" stat "$store" --json >"$tmp/store.json"
check "$tmp/store.json" "unmounted"
expect_eq "mounted flag" "$(json_get "$tmp/store.json" mounted)" false
for key in storage.segments storage.live_bytes storage.dead_bytes storage.segment_file_bytes; do
  expect_eq "$key mounted vs unmounted" "$(json_get "$tmp/store.json" $key)" \
    "$(json_get "$tmp/mounted.json" $key)"
done
"$CKPTFS_BIN" stat "$store" >"$tmp/store.txt" || ckptfs_fail "human stat of the store failed"
grep -Eq '^namespace\.logical_bytes: +.*\('"$expected_bytes"'\)$' "$tmp/store.txt" ||
  ckptfs_fail "human stat lacks logical_bytes: $(cat "$tmp/store.txt")"

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

# Neither a store nor a mount.
if "$CKPTFS_BIN" stat "$tmp" 2>"$tmp/neither.err"; then ckptfs_fail "stat of $tmp succeeded"; fi
grep -q "neither a ckptfs store nor a ckptfs mount" "$tmp/neither.err" ||
  ckptfs_fail "unclear error: $(cat "$tmp/neither.err")"

echo "PASS"
