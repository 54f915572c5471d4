#!/usr/bin/env bash
# Installs the Debian packages ckptfs builds, tests and runs with, then
# fetches the libfuse 3.17 source (scripts/fetch-libfuse.sh: Debian's fuse3
# source package from trixie, through a private apt configuration) that the
# build compiles in. Idempotent: does nothing when everything is present
# (unless CI=true, which always refreshes the package lists first).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

PACKAGES=(
  build-essential clang cmake ninja-build pkg-config git
  meson dpkg-dev debian-archive-keyring
  fuse3 librocksdb-dev libzstd-dev libxxhash-dev libpq-dev postgresql-15
  libssl-dev librados-dev libradospp-dev libcurl4-openssl-dev libexpat1-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  python3 python3-numpy python3-torch python3-zarr python3-h5py python3-matplotlib
  python3-prometheus-client
  rsync tar diffutils procps tmux curl
  # The network-filesystem bed (tests/mount/netfs_bed.py): a private sshd
  # of the tests' own, one sshfs client per host.
  openssh-server openssh-client sshfs
  # The object-storage bed (tests/mount/ceph_bed.py): a one-node Ceph
  # cluster of the tests' own (a monitor, an OSD, radosgw; for CephFS, the
  # plain directory the benchmark compares with, a manager, an MDS and
  # ceph-fuse).
  ceph-mon ceph-osd radosgw ceph-common ceph-mgr ceph-mds ceph-fuse
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || [ "${CI:-}" = "true" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "ckptfs: installing ${#missing[@]} package(s): ${missing[*]:-none}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
fi
bash "$root/scripts/fetch-libfuse.sh"
