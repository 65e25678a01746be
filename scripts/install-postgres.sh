#!/usr/bin/env bash
# Installs the PostgreSQL server (Debian package `postgresql`) for the tests of
# tests/async-bridge (tokio-postgres from weft tasks), and prints the folder that holds its
# `initdb`, `pg_ctl` and `postgres`. Safe to run again: does nothing when it is already there.
# Exit status 0 and the folder on stdout on success; non-zero with a reason on stderr
# otherwise (the tests then report themselves skipped).
set -euo pipefail
find_bin() {
  local dir
  if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return 0
  fi
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}
if ! find_bin >/dev/null; then
  "$(dirname "$0")/apt-install.sh" install-postgres postgresql
fi
if ! find_bin; then
  echo "install-postgres: postgresql installed, but no initdb and pg_ctl found" >&2
  exit 1
fi
