#!/usr/bin/env bash
# The main job, end to end, in at most 40 lines: installs what is missing,
# builds, mounts a fresh store, saves and restores a PyTorch checkpoint and a
# per-parameter zarr tree on ckptfs and on a plain directory beside it, checks
# the bytes, and prints the times side by side (scripts/demo.py).
#
# Usage: scripts/demo.sh [WORKDIR]      (default: /tmp/ckptfs-demo; run as root)
#   CKPTFS_DEMO_BIN=PATH   use this built ckptfs: no install, no build
#   CKPTFS_DEMO_MIB=N      the torch state dict's size in MiB (default 256)
#   CKPTFS_DEMO_ARRAYS=N   the zarr tree's arrays, 5 files each (default 1000)
#
# WORKDIR is emptied first; it must be missing, empty or an earlier demo's.
# Install and build output go to WORKDIR/install.log and WORKDIR/build.log. At
# the end the store stays in WORKDIR/store and the plain copies are removed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(realpath -m "${1:-/tmp/ckptfs-demo}")

fail() {
  echo "ckptfs demo: $*" >&2
  exit 1
}

# step LABEL LOG COMMAND...: runs COMMAND with its output in LOG; one line.
step() {
  local label=$1 log=$2
  shift 2
  printf '%s... ' "$label"
  if "$@" >"$log" 2>&1; then
    echo "done"
  else
    echo failed
    fail "$label failed; see $log"
  fi
}

build() {
  cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    ninja -C "$root/build" ckptfs
}

if [ -d "$work" ] && [ -n "$(ls -A "$work")" ] && [ ! -e "$work/.ckptfs-demo" ]; then
  fail "$work is not empty and not an earlier demo's directory; name another"
fi
# Not across mounts: a store left mounted there stays whole.
rm -rf --one-file-system "$work" 2>/dev/null || fail "cannot empty $work: is something mounted there?"
mkdir -p "$work"
touch "$work/.ckptfs-demo"

if [ -n "${CKPTFS_DEMO_BIN:-}" ]; then
  bin=$(realpath -m "$CKPTFS_DEMO_BIN")
  [ -x "$bin" ] || fail "CKPTFS_DEMO_BIN=$CKPTFS_DEMO_BIN is not an executable"
  echo "using ckptfs binary $bin (CKPTFS_DEMO_BIN): no install, no build"
else
  step "installing dependencies" "$work/install.log" bash "$root/scripts/install-deps.sh"
  step "building ckptfs" "$work/build.log" build
  bin=$root/build/tools/ckptfs
fi

exec /usr/bin/python3 "$root/scripts/demo.py" --bin "$bin" \
  --mib "${CKPTFS_DEMO_MIB:-256}" --arrays "${CKPTFS_DEMO_ARRAYS:-1000}" "$work"
