#!/usr/bin/env bash
# Mounts a fresh store and drives it with ordinary tools: cp, cat, dd, mkdir,
# mv, rm, ln -s; checks the control files, the error messages of bad mounts,
# and that every byte survives unmount and remount.
set -euo pipefail
source "$(dirname "$0")/ckptfs_mount_lib.sh"  # exits 77 (skipped) without /dev/fuse

tmp=$(ckptfs_test_tmpdir)
store=$tmp/store
mnt=$tmp/mnt
src=$tmp/src

expect_eq() {  # WHAT ACTUAL EXPECTED
  [[ $2 == "$3" ]] || ckptfs_fail "$1: got '$2', expected '$3'"
}

# ---- Source data, on the ordinary filesystem. ----
mkdir -p "$src/deep/a/b/c" "$src/many"
head -c $((5 << 20)) /dev/urandom >"$src/big.bin"          # spans records
head -c $((3 << 20)) /dev/urandom >"$src/direct.bin"       # for O_DIRECT
head -c 1000 /dev/urandom >"$src/small.bin"                 # inline-sized
printf 'hello ckptfs\n' >"$src/deep/a/b/c/leaf.txt"
for i in $(seq 1 200); do echo "file $i" >"$src/many/f$i"; done

# ---- Mount a fresh store. ----
ckptfs_test_mount "$store" "$mnt"
[[ -f $store/FORMAT ]] || ckptfs_fail "the store has no FORMAT file after mount"

# cp, cat, dd.
cp -r "$src/deep" "$src/many" "$src/big.bin" "$src/small.bin" "$mnt/"
cat "$src/small.bin" >"$mnt/catted.bin"
dd if="$src/direct.bin" of="$mnt/direct.bin" bs=1M oflag=direct status=none
dd if="$mnt/direct.bin" of="$tmp/direct.back" bs=1M iflag=direct status=none
cmp "$src/direct.bin" "$tmp/direct.back" || ckptfs_fail "O_DIRECT round trip differs"
cmp "$src/big.bin" "$mnt/big.bin" || ckptfs_fail "big.bin differs after cp"
cmp "$src/small.bin" "$mnt/catted.bin" || ckptfs_fail "catted.bin differs"
dd if=/dev/zero of="$mnt/sparse.bin" bs=4096 count=1 seek=1000 status=none
expect_eq "sparse size" "$(stat -c %s "$mnt/sparse.bin")" $((1001 * 4096))
echo "appended" >>"$mnt/deep/a/b/c/leaf.txt"
expect_eq "append" "$(tail -n 1 "$mnt/deep/a/b/c/leaf.txt")" "appended"
printf 'hello ckptfs\nappended\n' >"$src/deep/a/b/c/leaf.txt"

# mkdir, mv, rm, ln -s.
mkdir "$mnt/newdir"
mkdir -p "$mnt/x/y/z"
mv "$mnt/catted.bin" "$mnt/newdir/moved.bin"
[[ ! -e $mnt/catted.bin ]] || ckptfs_fail "mv left the source name"
cmp "$src/small.bin" "$mnt/newdir/moved.bin" || ckptfs_fail "moved file differs"
mv "$mnt/x" "$mnt/newdir/x"
[[ -d $mnt/newdir/x/y/z ]] || ckptfs_fail "moved directory lost its subtree"
echo doomed >"$mnt/doomed"
rm "$mnt/doomed"
[[ ! -e $mnt/doomed ]] || ckptfs_fail "rm did not remove"
echo reborn >"$mnt/doomed"  # the name is usable again right away (no stale negative entry)
expect_eq "recreated" "$(cat "$mnt/doomed")" "reborn"
rm -r "$mnt/newdir/x"
ln -s big.bin "$mnt/link"
expect_eq "readlink" "$(readlink "$mnt/link")" "big.bin"
cmp "$src/big.bin" "$mnt/link" || ckptfs_fail "reading through the symlink differs"
expect_eq "many entries" "$(ls "$mnt/many" | wc -l)" 200

# ---- Control files. ----
if ls -a "$mnt" | grep -qx '.ckptfs'; then ckptfs_fail "ls -a lists .ckptfs"; fi
[[ -d $mnt/.ckptfs ]] || ckptfs_fail ".ckptfs cannot be looked up"
grep -q '"engine"' "$mnt/.ckptfs/stats" || ckptfs_fail "stats has no engine section"
grep -q '"lookups"' "$mnt/.ckptfs/stats" || ckptfs_fail "stats has no request counts"
# Whole outputs first: grep -q stops reading at its match, which would end
# the writer with SIGPIPE under pipefail.
stat_text=$("$CKPTFS_BIN" stat "$mnt") || ckptfs_fail "ckptfs stat failed"
grep -q '^requests:' <<<"$stat_text" || ckptfs_fail "ckptfs stat output"
stat_text=$("$CKPTFS_BIN" stat --all "$mnt") || ckptfs_fail "ckptfs stat --all failed"
grep -q '^fs.ops.writes:' <<<"$stat_text" || ckptfs_fail "ckptfs stat --all output"
stat_json=$("$CKPTFS_BIN" stat --json "$mnt") || ckptfs_fail "ckptfs stat --json failed"
grep -q '"mountpoint"' <<<"$stat_json" || ckptfs_fail "ckptfs stat --json"
echo "coalesce_gap=0" >"$mnt/.ckptfs/config"
grep -qx 'coalesce_gap=0' "$mnt/.ckptfs/config" || ckptfs_fail "config did not change: $(cat "$mnt/.ckptfs/config")"
# A refused line fails the write, or (under the kernel's write-back cache)
# the close: coreutils' echo reports either; the config names the refusal.
if err=$(/bin/echo "no_such_key=1" 2>&1 >"$mnt/.ckptfs/config"); then
  ckptfs_fail "writing an unknown config key succeeded"
fi
grep -q "^# last refused: 'no_such_key=1': " "$mnt/.ckptfs/config" ||
  ckptfs_fail "the config does not name the refused line: $(cat "$mnt/.ckptfs/config")"
# One name per setting; older names still change it.
echo "cache_size=2M" >"$mnt/.ckptfs/config"
grep -qx 'cache_size=2097152' "$mnt/.ckptfs/config" || ckptfs_fail "cache_size did not change"
printf 'cache_bytes=1048576\ncompression_level=3\n' >"$mnt/.ckptfs/config"
grep -qx 'cache_size=1048576' "$mnt/.ckptfs/config" || ckptfs_fail "alias cache_bytes did not work"
grep -qx 'compression=3' "$mnt/.ckptfs/config" || ckptfs_fail "alias compression_level did not work"
if grep -q '^cache_bytes=\|^compression_level=' "$mnt/.ckptfs/config"; then
  ckptfs_fail "config shows older names: $(cat "$mnt/.ckptfs/config")"
fi
echo "compression=0" >"$mnt/.ckptfs/config"
if (/bin/echo "segment_size=4M" >"$mnt/.ckptfs/config") 2>/dev/null; then
  ckptfs_fail "a setting fixed while mounted changed"
fi
"$CKPTFS_BIN" mount --help >"$tmp/help.txt"
for opt in compact_dead=SIZE compact_rate=SIZE free_empty; do
  grep -q "^  $opt " "$tmp/help.txt" || ckptfs_fail "mount --help lacks $opt"
done
if (echo x >"$mnt/.ckptfs/stats") 2>/dev/null; then ckptfs_fail "stats is writable"; fi

# ---- Mount errors: one line on stderr, exit status 1, nothing harmed. ----
expect_mount_error() {  # WHAT PATTERN ARGS...
  local what=$1 pattern=$2 out rc=0
  shift 2
  out=$("$CKPTFS_BIN" mount "$@" 2>&1) || rc=$?
  expect_eq "$what: exit status" "$rc" 1
  expect_eq "$what: lines of output" "$(printf '%s\n' "$out" | wc -l)" 1
  [[ $out == *$pattern* ]] || ckptfs_fail "$what: message '$out' lacks '$pattern'"
  echo "ok: $what: $out"
}
mkdir -p "$tmp/mnt2" "$tmp/full" "$tmp/notastore"
echo x >"$tmp/full/file"
echo x >"$tmp/notastore/file"
expect_mount_error "second mount of the store" "ckptfs mount (pid" "$store" "$tmp/mnt2"
expect_mount_error "non-empty mountpoint" "is not empty" "$tmp/s2" "$tmp/full"
expect_mount_error "missing mountpoint" "does not exist" "$tmp/s2" "$tmp/nowhere"
expect_mount_error "not a store" "not a ckptfs store" "$tmp/notastore" "$tmp/mnt2"
expect_mount_error "unknown option" "unknown mount option 'bogus'" -o bogus=1 "$tmp/s2" "$tmp/mnt2"
expect_mount_error "malformed option" "'cache_size'" -o cache_size=lots "$tmp/s2" "$tmp/mnt2"
# A mistyped command is not taken for the mount(8) form (STORE MOUNTPOINT):
# no store named after it is made, nothing is mounted.
out=$(cd "$tmp" && "$CKPTFS_BIN" stats "$tmp/mnt2" 2>&1) && ckptfs_fail "ckptfs stats DIR succeeded"
expect_eq "mistyped command: lines of output" "$(printf '%s\n' "$out" | wc -l)" 1
[[ $out == *"unknown command 'stats'"* ]] || ckptfs_fail "mistyped command: message '$out'"
[[ ! -e $tmp/stats ]] || ckptfs_fail "mistyped command made a store $tmp/stats"
if mountpoint -q "$tmp/mnt2"; then ckptfs_fail "mistyped command mounted $tmp/mnt2"; fi
echo "ok: mistyped command: $out"
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  # Without /dev/fuse (hidden by a tmpfs in a private mount namespace).
  out=$(unshare -m sh -c 'mount -t tmpfs tmpfs /dev && exec "$0" mount "$1" "$2"' \
    "$CKPTFS_BIN" "$tmp/s2" "$tmp/mnt2" 2>&1) && ckptfs_fail "mount without /dev/fuse succeeded"
  [[ $out == *"/dev/fuse does not exist"* ]] || ckptfs_fail "no /dev/fuse: message '$out'"
  echo "ok: no /dev/fuse: $out"
fi
# Unmount errors likewise: only a ckptfs mount is unmounted.
expect_umount_error() {  # WHAT PATTERN MOUNTPOINT
  local out rc=0
  out=$("$CKPTFS_BIN" umount "$3" 2>&1) || rc=$?
  expect_eq "$1: exit status" "$rc" 1
  expect_eq "$1: lines of output" "$(printf '%s\n' "$out" | wc -l)" 1
  [[ $out == *$2* ]] || ckptfs_fail "$1: message '$out' lacks '$2'"
  echo "ok: $1: $out"
}
expect_umount_error "unmount of a directory" "$tmp/mnt2 is not mounted" "$tmp/mnt2"
expect_umount_error "unmount of a missing path" "$tmp/nowhere does not exist" "$tmp/nowhere"
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  # Another filesystem stays mounted (a tmpfs in a private mount namespace,
  # gone with it).
  out=$(unshare -m sh -c 'mount -t tmpfs ckptfs-test "$1" && "$0" umount "$1"; echo "rc=$?";
        mountpoint -q "$1" && echo still-mounted' "$CKPTFS_BIN" "$tmp/mnt2" 2>&1)
  [[ $out == *"is a tmpfs mount (ckptfs-test), not a ckptfs one"*"rc=1"*still-mounted* ]] ||
    ckptfs_fail "unmount of a tmpfs: '$out'"
  echo "ok: unmount of a tmpfs refused"
fi
ckptfs_is_mounted "$tmp/mnt2" && ckptfs_fail "a failed mount left $tmp/mnt2 mounted"
[[ ! -e $tmp/s2 ]] || ckptfs_fail "a failed mount created a store"
[[ -f $tmp/notastore/file && ! -e $tmp/notastore/FORMAT ]] || ckptfs_fail "not-a-store was touched"

# ENOSPC reaches applications: a store that must keep more free space than
# any disk has refuses new data.
ckptfs_test_mount "$tmp/s3" "$tmp/mnt3" "min_free=1000T"
if err=$( (echo data >"$tmp/mnt3/file") 2>&1); then ckptfs_fail "write under min_free succeeded"; fi
[[ $err == *"No space left on device"* ]] || ckptfs_fail "ENOSPC expected, got '$err'"
echo "ok: ENOSPC: $err"
ckptfs_test_umount "$tmp/mnt3"

# A stale mount (its daemon killed) is unmounted by `ckptfs umount` too.
ckptfs_test_mount "$tmp/s4" "$tmp/mnt4"
pid=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' \
  "$tmp/mnt4/.ckptfs/stats")
kill -9 "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if err=$(ls "$tmp/mnt4" 2>&1); then ckptfs_fail "a mount without its daemon still lists"; fi
[[ $err == *"not connected"* ]] || ckptfs_fail "stale mount: '$err'"
"$CKPTFS_BIN" umount "$tmp/mnt4" || ckptfs_fail "ckptfs umount of a stale mount failed"
ckptfs_is_mounted "$tmp/mnt4" && ckptfs_fail "the stale mount stayed"
echo "ok: stale mount unmounted"

# ---- Unmount, remount, compare every byte. ----
ckptfs_test_umount "$mnt"
ckptfs_test_mount "$store" "$mnt"
for f in big.bin small.bin direct.bin deep/a/b/c/leaf.txt; do
  cmp "$src/$f" "$mnt/$f" || ckptfs_fail "$f differs after remount"
done
cmp "$src/small.bin" "$mnt/newdir/moved.bin" || ckptfs_fail "moved.bin differs after remount"
for i in $(seq 1 200); do
  cmp -s "$src/many/f$i" "$mnt/many/f$i" || ckptfs_fail "many/f$i differs after remount"
done
expect_eq "symlink after remount" "$(readlink "$mnt/link")" "big.bin"
expect_eq "doomed after remount" "$(cat "$mnt/doomed")" "reborn"
expect_eq "sparse after remount" "$(stat -c %s "$mnt/sparse.bin")" $((1001 * 4096))
grep -qx 'coalesce_gap=.*' "$mnt/.ckptfs/config" || ckptfs_fail "config unreadable after remount"
ckptfs_test_umount "$mnt"
echo "PASS: mount smoke test"
