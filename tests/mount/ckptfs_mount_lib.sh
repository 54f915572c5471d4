# Real mounts for the bash tests, through the mount harness
# (ckptfs_harness.py, which also serves the Python and C++ tests). Source
# this file from bash:
#
#   source "$(dirname "$0")/ckptfs_mount_lib.sh"   # exits 77 (skip) without /dev/fuse
#   ckptfs_require_root                            # optional: exits 77 unless root
#   tmp=$(ckptfs_test_tmpdir)
#   ckptfs_test_mount "$tmp/store" "$tmp/mnt" [opt,opt...]
#   ...
#   ckptfs_test_umount "$tmp/mnt"      # optional: cleanup also unmounts
#
# The binary comes from $CKPTFS_BIN. Sourcing starts a harness session for
# this shell: an EXIT trap unmounts every mount made here, fails the test on
# a sanitizer report from a daemon, and removes the temporary directories,
# whether the test passed, failed or was interrupted; the session's guardian
# does the same if the shell is killed, and enforces $CKPTFS_TEST_DEADLINE.

: "${CKPTFS_BIN:?set CKPTFS_BIN to the ckptfs binary}"

CKPTFS_HARNESS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ckptfs_harness.py

ckptfs_harness() {
  "${CKPTFS_TEST_PYTHON:-/usr/bin/python3}" "$CKPTFS_HARNESS" "$@"
}

# Prints a message and fails the test.
ckptfs_fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Exits 77 (skipped) unless this runs as root.
ckptfs_require_root() {
  ckptfs_harness check --root || exit $?
}

# Creates a temporary directory under /tmp that cleanup removes.
ckptfs_test_tmpdir() {
  ckptfs_harness tmpdir
}

# True when MNT is a mountpoint of a FUSE filesystem.
ckptfs_is_mounted() {
  ckptfs_harness is-mounted "$1"
}

# Mounts STORE on MNT with the built binary; MNT is created when missing.
# Fails the test when the mount does not come up.
ckptfs_test_mount() {
  ckptfs_harness mount "$1" "$2" "${3:-}" || ckptfs_fail "mount $1 on $2 failed"
}

# Unmounts MNT (`ckptfs umount`) and waits for the daemon to close the store;
# fails the test when MNT stays mounted or the daemon's sanitizer reported.
ckptfs_test_umount() {
  ckptfs_harness unmount "$1" || ckptfs_fail "unmount of $1 failed"
}

ckptfs_harness check || exit $?
CKPTFS_HARNESS_SESSION=$(ckptfs_harness session --owner $$) || ckptfs_fail "no harness session"
export CKPTFS_HARNESS_SESSION
# The test's exit status survives the cleanup, unless the cleanup found a
# problem (a sanitizer report, a mount that would not go away).
trap 'ckptfs_test_status=$?
      ckptfs_harness cleanup || { [[ $ckptfs_test_status != 0 ]] || ckptfs_test_status=1; }
      exit $ckptfs_test_status' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
