#!/usr/bin/env bash
# Runs a command beside a private PostgreSQL cluster of its own: made with
# initdb under a new temporary directory, listening on a unix socket there
# only (no TCP port), stopped and removed when the command ends, however it
# ends. The machine's own clusters are not touched. As root, the cluster
# runs as the postgres user (PostgreSQL refuses to run as root).
#
# The command gets:
#   CKPTFS_TEST_PG          the cluster's libpq URI (database postgres, user ckptfs)
#   CKPTFS_TEST_PG_SERVER   a command that takes "stop", "kill" (a crash),
#                           "start" or "restart" and does that to the server
#                           (fault tests), waiting until it is done
#   CKPTFS_TEST_META        with --meta: the same URI, which makes the
#                           engine's tests keep their stores' index there
# With --tcp the cluster listens on 127.0.0.1 (a free port) instead, as a
# server on another machine is reached, and the URI names that address.
# Usage: scripts/with-postgres.sh [--tcp] [--meta] COMMAND [ARG...]
#        scripts/with-postgres.sh --server DIR stop|kill|start|restart
set -euo pipefail

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  echo "with-postgres: no PostgreSQL server under /usr/lib/postgresql (run scripts/install-deps.sh)" >&2
  exit 1
fi
as_pg=()
if [ "$(id -u)" -eq 0 ]; then as_pg=(runuser -u postgres --); fi

# server DIR stop|kill|start|restart (kill: an immediate stop, as a crash)
server() {
  local dir=$1 what=$2
  case "$what" in
    stop) "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null ;;
    # A crash of the server: what its log had not flushed is lost.
    kill) "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null ;;
    start | restart)
      # Connections: every thread of every daemon of a test may hold one.
      # $dir/listen: the TCP address of a --tcp cluster.
      local listen="-c listen_addresses=''"
      if [ -f "$dir/listen" ]; then listen="-c listen_addresses=127.0.0.1 -p $(cat "$dir/listen")"; fi
      "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -m fast \
        -o "$listen -k $dir -c max_connections=300 -c shared_buffers=128MB" \
        "$what" >/dev/null || { cat "$dir/server.log" >&2; return 1; } ;;
    *) echo "with-postgres: --server DIR stop|kill|start|restart" >&2; return 2 ;;
  esac
}

if [ "${1:-}" = "--server" ]; then
  server "$2" "$3"
  exit
fi

tcp=false
if [ "${1:-}" = "--tcp" ]; then
  tcp=true
  shift
fi
as_meta=false
if [ "${1:-}" = "--meta" ]; then
  as_meta=true
  shift
fi

tmp=$(mktemp -d /tmp/ckptfs-pg.XXXXXX)
if [ "$(id -u)" -eq 0 ]; then chown postgres: "$tmp"; fi
chmod 755 "$tmp"

stop() {
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 130' INT TERM

"${as_pg[@]}" "$bindir/initdb" -D "$tmp/data" -U ckptfs -A trust -E UTF8 --no-locale --no-sync \
  >"$tmp/initdb.log" 2>&1 || { cat "$tmp/initdb.log" >&2; exit 1; }
if $tcp; then
  # A port nothing listens on now (the kernel's pick for a socket bound to 0).
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    >"$tmp/listen"
fi
server "$tmp" start

if $tcp; then
  export CKPTFS_TEST_PG="postgresql://ckptfs@127.0.0.1:$(cat "$tmp/listen")/postgres"
else
  export CKPTFS_TEST_PG="postgresql:///postgres?host=$tmp&user=ckptfs"
fi
export CKPTFS_TEST_PG_SERVER="$(cd "$(dirname "$0")" && pwd)/with-postgres.sh --server $tmp"
if $as_meta; then export CKPTFS_TEST_META="$CKPTFS_TEST_PG"; fi
set +e
"$@"
rc=$?
exit $rc
