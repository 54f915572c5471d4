#!/usr/bin/env bash
# The main job, end to end: install what is missing, build, mount a fresh
# store, save and restore a real PyTorch checkpoint and a per-parameter zarr
# checkpoint through the mount, show the figures, unmount.
# Usage: scripts/demo.sh [WORKDIR]     (default: /tmp/ckptfs-demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/ckptfs-demo}
bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$root/build" ckptfs >/dev/null
bin="$root/build/tools/ckptfs"

rm -rf "$work"
mkdir -p "$work/mnt"
cleanup() { fusermount3 -u "$work/mnt" 2>/dev/null || fusermount3 -uz "$work/mnt" 2>/dev/null || true; }
trap cleanup EXIT

"$bin" mount "$work/store" "$work/mnt"
echo "mounted store $work/store on $work/mnt"
/usr/bin/python3 - "$work/mnt" <<'PY'
import os, sys, time
import numpy as np, torch, zarr
mnt = sys.argv[1]
torch.manual_seed(0)
state = {f"layer{i}.weight": torch.randn(256, 256) for i in range(300)}
state.update({f"layer{i}.bias": torch.randn(256).to(torch.bfloat16) for i in range(300)})
t = time.time(); torch.save(state, f"{mnt}/model.pt"); os.sync(); ts = time.time() - t
t = time.time(); back = torch.load(f"{mnt}/model.pt"); tl = time.time() - t
assert all(torch.equal(state[k], back[k]) for k in state), "torch round trip differs"
size = os.path.getsize(f"{mnt}/model.pt")
print(f"torch.save {size/2**20:.1f} MiB in {ts:.2f}s, torch.load in {tl:.2f}s: identical")
root = zarr.open_group(f"{mnt}/orbax_step_1", mode="w")
arrays = {f"param_{i}": np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) for i in range(500)}
t = time.time()
for k, v in arrays.items():
    root.create_dataset(k, data=v, chunks=(32, 32))
tz = time.time() - t
g = zarr.open_group(f"{mnt}/orbax_step_1", mode="r")
assert all(np.array_equal(g[k][:], v) for k, v in arrays.items()), "zarr round trip differs"
print(f"zarr per-parameter layout: {len(arrays)} arrays ({len(arrays)*5} files) in {tz:.2f}s: identical")
PY
echo
"$bin" stat "$work/mnt"
echo
echo "files in the store directory: $(find "$work/store" -type f | wc -l)"
"$bin" umount "$work/mnt"
trap - EXIT
echo "unmounted; store kept in $work/store"
