#!/usr/bin/env bash
# Runs a command beside a private PostgreSQL cluster of its own: made with
# initdb under a new temporary directory, listening on a unix socket there
# only (no TCP port), stopped and removed when the command ends, however it
# ends. The machine's own clusters are not touched. As root, the cluster
# runs as the postgres user (PostgreSQL refuses to run as root).
#
# The command gets:
#   CKPTFS_TEST_PG          the cluster's libpq URI (database postgres, user ckptfs)
#   CKPTFS_TEST_PG_DATA     its data directory
#   CKPTFS_TEST_PG_CTL      "pg_ctl" with the user to run it as, to stop or
#                           restart the server (fault tests)
#   CKPTFS_TEST_META        with --meta: the same URI, which makes the
#                           engine's tests keep their stores' index there
# Usage: scripts/with-postgres.sh [--meta] COMMAND [ARG...]
set -euo pipefail
as_meta=false
if [ "${1:-}" = "--meta" ]; then
  as_meta=true
  shift
fi

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  echo "with-postgres: no PostgreSQL server under /usr/lib/postgresql (run scripts/install-deps.sh)" >&2
  exit 1
fi

tmp=$(mktemp -d /tmp/ckptfs-pg.XXXXXX)
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$tmp"
  as_pg=(runuser -u postgres --)
fi
chmod 755 "$tmp"

stop() {
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 130' INT TERM

"${as_pg[@]}" "$bindir/initdb" -D "$tmp/data" -U ckptfs -A trust -E UTF8 --no-locale --no-sync \
  >"$tmp/initdb.log" 2>&1 || { cat "$tmp/initdb.log" >&2; exit 1; }
# Connections: every thread of every daemon of a test may hold one.
"${as_pg[@]}" "$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 \
  -o "-c listen_addresses='' -k $tmp -c max_connections=300 -c shared_buffers=128MB" \
  start >/dev/null || { cat "$tmp/server.log" >&2; exit 1; }

export CKPTFS_TEST_PG="postgresql:///postgres?host=$tmp&user=ckptfs"
export CKPTFS_TEST_PG_DATA="$tmp/data"
export CKPTFS_TEST_PG_CTL="${as_pg[*]} $bindir/pg_ctl"
if $as_meta; then export CKPTFS_TEST_META="$CKPTFS_TEST_PG"; fi
set +e
"$@"
rc=$?
exit $rc
