#!/usr/bin/env bash
# The GPU checks in one command, for a machine with an NVIDIA GPU: builds
# ckptfs with CUDA under build-gpu/ (installing what is missing first), runs
# the GPU tests (gpu_device_test and the loader's tests; the mount tests need
# root and /dev/fuse), then gpu_load_bench on a fresh store: the loader
# directly into device memory, through the mount, the naive read +
# cudaMemcpy, the loader into host memory and the pinned host-to-device
# ceiling, cold (caches dropped before every run), and prints its figures.
# On a machine without a GPU it says so and exits 0.
#
# Usage: scripts/gpu-check.sh [SIZE]      (the bench file's size; default 4G)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
size=${1:-4G}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "ckptfs gpu-check: no GPU on this machine (nvidia-smi lists none): nothing to check"
  exit 0
fi
nvidia-smi -L

build=build-gpu
if ! [ -x "$build/gpu/gpu_load_bench" ]; then
  bash scripts/install-deps.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPTFS_CUDA=ON >/dev/null
fi
ninja -C "$build"

echo "=== GPU tests"
ctest --test-dir "$build" -R '^gpu' --output-on-failure

echo "=== gpu_load_bench, $size, cold"
work=$(mktemp -d /tmp/ckptfs-gpu-check.XXXXXX)
mkdir "$work/store" "$work/mnt"
cleanup() {
  "$build/tools/ckptfs" umount "$work/mnt" >/dev/null 2>&1 || fusermount3 -u "$work/mnt" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$build/tools/ckptfs" mount "$work/store" "$work/mnt"
drop=()
if [ "$(id -u)" -eq 0 ]; then drop=(--drop-caches); fi
"$build/gpu/gpu_load_bench" "$work/mnt" --size "$size" --reps 3 "${drop[@]}"
