#!/usr/bin/env bash
# Runs a throw-away PostgreSQL server for tests, as a non-root user (the server refuses root):
#   postgres-server.sh start DIR PORT   initdb into DIR/data (user `weft`, trust auth, no
#                                        fsync), listen on 127.0.0.1:PORT (socket in DIR), wait
#                                        until it accepts connections
#   postgres-server.sh stop DIR          stop it at once and remove DIR
# As root the server runs as the `postgres` user the Debian package creates. Needs
# scripts/install-postgres.sh first. Exit status 0 on success; non-zero with the server's log
# on stderr otherwise.
set -euo pipefail
cmd=$1
dir=$2
bin=$("$(dirname "$0")/install-postgres.sh")
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}
case "$cmd" in
  start)
    port=$3
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown postgres: "$dir"
    fi
    as_owner "$bin/initdb" -D "$dir/data" -U weft -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
      start >/dev/null; then
      cat "$dir/server.log" >&2
      exit 1
    fi
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *)
    echo "postgres-server: unknown command $cmd (start DIR PORT | stop DIR)" >&2
    exit 2
    ;;
esac
