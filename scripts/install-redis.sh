#!/usr/bin/env bash
# Installs redis-server and redis-benchmark (Debian package `redis-server`, which brings
# `redis-tools`) for tests/interpose_redis.rs, and prints the path of `redis-server`.
# Safe to run again: does nothing when it is already there. Exit status 0 and a path on stdout
# on success; non-zero with a reason on stderr otherwise (the test then reports itself skipped).
set -euo pipefail
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  "$(dirname "$0")/apt-install.sh" install-redis redis-server
fi
command -v redis-server
