#!/usr/bin/env bash
# Installs redis-server and redis-benchmark (Debian package `redis-server`, which brings
# `redis-tools`) for tests/interpose_redis.rs, and prints the path of `redis-server`.
# Safe to run again: does nothing when it is already there. Exit status 0 and a path on stdout
# on success; non-zero with a reason on stderr otherwise (the test then reports itself skipped).
set -euo pipefail
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "install-redis: no apt-get on this machine" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "install-redis: apt-get needs root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends redis-server >&2
fi
command -v redis-server
