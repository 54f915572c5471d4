#!/usr/bin/env bash
# scripts/demo.sh with the built binary (CKPTFS_DEMO_BIN: no install, no
# build) and small checkpoints: it exits 0 in at most 40 lines, with the
# table's rows and ratios, the byte check, the file counts and the
# cloud-disk row (or the line saying why it was skipped), and leaves no
# mount, no throttle cgroup and no plain copy behind. Needs root
# (drop_caches); figures are not asserted.
set -euo pipefail
source "$(dirname "$0")/ckptfs_mount_lib.sh"  # exits 77 (skipped) without /dev/fuse
ckptfs_require_root

repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(ckptfs_test_tmpdir)
work=$tmp/work
out=$tmp/demo.out

start=$SECONDS
status=0
CKPTFS_DEMO_BIN=$CKPTFS_BIN CKPTFS_DEMO_MIB=32 CKPTFS_DEMO_ARRAYS=200 \
  bash "$repo/scripts/demo.sh" "$work" >"$out" 2>&1 || status=$?
cat "$out"
echo "---- demo.sh took $((SECONDS - start)) s, exit status $status"
[[ $status == 0 ]] || ckptfs_fail "demo.sh exited $status"

lines=$(wc -l <"$out")
((lines <= 40)) || ckptfs_fail "demo.sh printed $lines lines, more than 40"

# expect REGEX WHAT: a line of the output matches REGEX.
expect() {
  grep -Eq "$1" "$out" || ckptfs_fail "no $2 in the output (want a line matching /$1/)"
}
time='[0-9]+\.[0-9]{2} s'
row="+$time +$time +[0-9]+\.[0-9]{2}x$"
expect "^using ckptfs binary $CKPTFS_BIN " "line naming the binary"
expect "^workload +plain +ckptfs +ratio$" "table header with a ratio column"
expect "^torch\.save: [0-9]+ MiB .*$row" "torch.save row"
expect "^torch\.load, cold.*$row" "torch.load row"
expect "^zarr tree save: 200 arrays, 1,000 files.*$row" "zarr save row"
expect "^zarr tree restore, cold $row" "zarr restore row"
expect "^(zarr tree restore, cold, cloud-disk profile $row|skipped the cloud-disk profile row: .+)" \
  "cloud-disk row or skip line"
# Where there is a blkio throttle and a disk under the work directory, the row itself.
if [[ -e /sys/fs/cgroup/blkio/blkio.throttle.read_iops_device &&
  -e /sys/dev/block/$(stat -c '%Hd:%Ld' "$tmp") ]]; then
  expect "^zarr tree restore, cold, cloud-disk profile $row" "cloud-disk row (a blkio throttle is here)"
fi
expect "^identical: every tensor torch\.load returned, and all 1,001 files" "byte check"
expect "^files on disk: [0-9]+ in the store directory, 1,001 in the plain tree$" "file counts"
expect "^store kept in $work/store " "line naming the store"
if grep -q 'Traceback' "$out"; then ckptfs_fail "a Python traceback in the output"; fi

if grep -qF " $work/" /proc/self/mountinfo; then ckptfs_fail "demo.sh left a mount behind"; fi
[[ ! -e /sys/fs/cgroup/blkio/ckptfs-bench-cloud ]] || ckptfs_fail "demo.sh left its cgroup behind"
[[ ! -e $work/plain ]] || ckptfs_fail "demo.sh left the plain copies behind"
[[ -d $work/store ]] || ckptfs_fail "demo.sh did not keep the store"
echo "PASS"
