#!/usr/bin/env bash
# Fetches the source of libfuse 3.17 (Debian source package fuse3, from
# trixie) into DEPS/fuse3/, where CMake builds it (cmake/libfuse.cmake).
# Bookworm's libfuse3-dev is 3.14, which cannot negotiate what the kernel
# offers since (FUSE_HANDLE_KILLPRIV_V2, passthrough).
#
# The machine's own apt configuration is read, never changed: the deb-src
# line uses the URI of the Debian archive that the machine's apt sources
# already name, with suite trixie, in a sources list, state and cache of our
# own under DEPS/fuse3/apt/. apt checks the archive's signature (the
# debian-archive-keyring package holds the trixie keys) and the files'
# hashes against the signed index; dpkg-source checks them against the .dsc
# when it unpacks (Debian's patches applied).
#
# Idempotent: once DEPS/fuse3/source/ is unpacked, it does nothing and uses
# no network. Fails with one line on stderr when the source cannot be had.
#
# Usage: scripts/fetch-libfuse.sh [DEPS]   (default: $CKPTFS_DEPS_DIR, else
#                                           .deps/ in the checkout)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${1:-${CKPTFS_DEPS_DIR:-$root/.deps}}
version_glob="3.17.2-*"  # the Debian revision follows the archive
suite=trixie
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

top="$deps/fuse3"
if [ -f "$top/source/meson.build" ] && [ -f "$top/VERSION" ]; then
  exit 0
fi

fail() {
  echo "ckptfs: cannot fetch the libfuse $version_glob source (fuse3 from $suite): $*" >&2
  exit 1
}

# The first URI that the machine's apt sources give for Debian's main archive
# (the entry whose suite is this release's codename), in deb822 (*.sources)
# or one-line (*.list) form.
archive_uri() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || return 1
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: stanzas separated by blank lines; fields URIs: and Suites:.
    awk -v want="$codename" '
      function flush() {
        if (uris != "" && types ~ /(^| )deb( |$)/) {
          n = split(suites, s, " ")
          for (i = 1; i <= n; i++) if (s[i] == want) { split(uris, u, " "); print u[1]; found = 1; exit }
        }
        uris = ""; suites = ""; types = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "uris:"   { $1 = ""; uris = $0; sub(/^ +/, "", uris) }
      tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
      tolower($1) == "types:"  { $1 = ""; types = $0; sub(/^ +/, "", types) }
      END { if (!found) flush() }' "$f" | head -1
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [options] URI SUITE COMPONENT...
    awk -v want="$codename" '
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == want) { print $i; exit }
      }' "$f"
  done
}

uri=$(archive_uri | head -1)
[ -n "$uri" ] || fail "no Debian archive for this release in /etc/apt/sources.list{,.d}"
[ -f "$keyring" ] || fail "$keyring is missing (package debian-archive-keyring)"
command -v dpkg-source >/dev/null || fail "dpkg-source is missing (package dpkg-dev)"

apt_dir="$top/apt"
mkdir -p "$apt_dir/etc/sources.list.d" "$apt_dir/etc/preferences.d" \
  "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$top/download"
printf 'deb-src [signed-by=%s] %s %s main\n' "$keyring" "$uri" "$suite" >"$apt_dir/etc/sources.list"
# Everything apt reads or writes for this, except the machine's apt.conf.d
# (proxies and the like still apply); no binary indexes, no translations.
apt_opts=(
  -o "Dir::Etc::sourcelist=$apt_dir/etc/sources.list"
  -o "Dir::Etc::sourceparts=$apt_dir/etc/sources.list.d"
  -o "Dir::Etc::preferencesparts=$apt_dir/etc/preferences.d"
  -o "Dir::Etc::preferences=$apt_dir/etc/preferences"
  -o "Dir::State=$apt_dir/state"
  -o "Dir::State::status=/dev/null"
  -o "Dir::Cache=$apt_dir/cache"
  -o "Acquire::Languages=none"
  -o "APT::Sandbox::User=root"
  -o "APT::Update::Post-Invoke-Success::="
)

echo "ckptfs: fetching the fuse3 $version_glob source from $uri ($suite)"
# --error-on=any: a download or signature failure is an error, not a warning.
apt-get "${apt_opts[@]}" -q update --error-on=any >"$top/apt-update.log" 2>&1 ||
  fail "apt-get update of $uri $suite failed (no network? see $top/apt-update.log)"
# The newest 3.17.2 Debian revision the archive has.
version=$(apt-cache "${apt_opts[@]}" showsrc fuse3 2>/dev/null |
  sed -n 's/^Version: //p' | grep -x '3\.17\.2-.*' | sort -V | tail -1 || true)
[ -n "$version" ] || fail "the archive's $suite Sources have no fuse3 $version_glob"
(cd "$top/download" && apt-get "${apt_opts[@]}" -q source --download-only "fuse3=$version") \
  >"$top/apt-source.log" 2>&1 || fail "apt-get source failed (see $top/apt-source.log)"
dsc=$(ls "$top/download"/fuse3_"${version#*:}".dsc 2>/dev/null | head -1)
[ -n "$dsc" ] || fail "apt-get source left no .dsc in $top/download"
rm -rf "$top/source.tmp"
dpkg-source --no-copy -x "$dsc" "$top/source.tmp" >"$top/dpkg-source.log" 2>&1 ||
  fail "dpkg-source -x $dsc failed (see $top/dpkg-source.log)"
[ -f "$top/source.tmp/meson.build" ] || fail "$dsc unpacked without meson.build"
rm -rf "$top/source"
mv "$top/source.tmp" "$top/source"
echo "$version" >"$top/VERSION"
rm -rf "$apt_dir/state/lists" "$apt_dir/cache"  # the archive's indexes: not needed again
echo "ckptfs: libfuse source fuse3 $version in $top/source"
