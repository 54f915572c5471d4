# Helpers for tests that mount ckptfs for real. Source this file from bash:
#
#   source "$(dirname "$0")/ckptfs_mount_lib.sh"
#   tmp=$(ckptfs_test_tmpdir)
#   ckptfs_test_mount "$tmp/store" "$tmp/mnt" [opt,opt...]
#   ...
#   ckptfs_test_umount "$tmp/mnt"      # optional: cleanup also unmounts
#
# The binary comes from $CKPTFS_BIN. An EXIT trap unmounts every mount made
# here (fusermount3 -u, then -z if busy), waits for the daemons to finish
# closing their stores, and removes the temporary directories, whether the
# test passed, failed or was interrupted. Nothing is left mounted.

: "${CKPTFS_BIN:?set CKPTFS_BIN to the ckptfs binary}"

CKPTFS_TEST_MOUNTS=()  # mountpoints made by ckptfs_test_mount
CKPTFS_TEST_TMPDIRS=()  # directories made by ckptfs_test_tmpdir

# Prints a message and fails the test.
ckptfs_fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Creates a temporary directory under /tmp that cleanup removes.
ckptfs_test_tmpdir() {
  local d
  d=$(mktemp -d /tmp/ckptfs-test.XXXXXX) || return 1
  CKPTFS_TEST_TMPDIRS+=("$d")
  # Called in $(...) the array change is lost; remember the path in a file too.
  echo "$d" >>"${CKPTFS_TEST_STATE:-/dev/null}"
  echo "$d"
}

# True when MNT is a mountpoint of a FUSE filesystem.
ckptfs_is_mounted() {
  local mnt
  mnt=$(realpath -m "$1" 2>/dev/null) || mnt=$1
  awk -v m="$mnt" '$2 == m && $3 ~ /^fuse/ { found = 1 } END { exit !found }' /proc/mounts
}

# The pid of the daemon serving MNT (from its stats file), or nothing.
ckptfs_daemon_pid() {
  sed -n 's/^ *"pid": *\([0-9][0-9]*\).*/\1/p' "$1/.ckptfs/stats" 2>/dev/null | head -n 1
}

# Waits up to $2 seconds (default 60) for process $1 to exit (or turn zombie).
ckptfs_wait_pid() {
  local pid=$1 limit=${2:-60} i state
  for ((i = 0; i < limit * 10; i++)); do
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 0
    [[ -z $state || $state == Z ]] && return 0
    sleep 0.1
  done
  return 1
}

# Mounts STORE on MNT with the built binary; MNT is created when missing.
# Fails the test when the mount does not come up.
ckptfs_test_mount() {
  local store=$1 mnt=$2 opts=${3:-}
  mkdir -p "$mnt"
  local args=(mount)
  [[ -n $opts ]] && args+=(-o "$opts")
  "$CKPTFS_BIN" "${args[@]}" "$store" "$mnt" || ckptfs_fail "mount $store on $mnt failed"
  CKPTFS_TEST_MOUNTS+=("$mnt")
  ckptfs_is_mounted "$mnt" || ckptfs_fail "$mnt is not mounted after ckptfs mount returned"
}

# Unmounts MNT through `ckptfs umount` (which waits for the daemon to close
# the store).
ckptfs_test_umount() {
  "$CKPTFS_BIN" umount "$1" || ckptfs_fail "umount $1 failed"
  ckptfs_is_mounted "$1" && ckptfs_fail "$1 is still mounted after umount"
  return 0
}

# Unmounts whatever is still mounted and removes temporary directories.
ckptfs_test_cleanup() {
  local mnt pid
  set +e
  for mnt in "${CKPTFS_TEST_MOUNTS[@]}"; do
    ckptfs_is_mounted "$mnt" || continue
    pid=$(ckptfs_daemon_pid "$mnt")
    if ! fusermount3 -u "$mnt" 2>/dev/null; then
      echo "cleanup: $mnt busy, unmounting lazily" >&2
      fusermount3 -u -z "$mnt"
    fi
    if [[ -n $pid ]] && ! ckptfs_wait_pid "$pid" 30; then
      echo "cleanup: daemon $pid did not exit; terminating it" >&2
      kill -TERM "$pid" 2>/dev/null
      ckptfs_wait_pid "$pid" 10 || kill -KILL "$pid" 2>/dev/null
    fi
  done
  local d dirs=("${CKPTFS_TEST_TMPDIRS[@]}")
  if [[ -n ${CKPTFS_TEST_STATE:-} && -f $CKPTFS_TEST_STATE ]]; then
    mapfile -t -O "${#dirs[@]}" dirs <"$CKPTFS_TEST_STATE"
    rm -f "$CKPTFS_TEST_STATE"
  fi
  for d in "${dirs[@]}"; do
    # Never delete through a mount that is somehow still there.
    if awk -v d="$d/" 'index($2 "/", d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
      echo "cleanup: keeping $d: something is still mounted under it" >&2
      continue
    fi
    rm -rf "$d"
  done
}

CKPTFS_TEST_STATE=$(mktemp /tmp/ckptfs-test-state.XXXXXX)
# The test's exit status survives the cleanup.
trap 'ckptfs_test_status=$?; ckptfs_test_cleanup; exit $ckptfs_test_status' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
