#!/usr/bin/env bash
# Installs the `wrk` HTTP load generator (Debian package `wrk`) for bench/http-compare.sh and
# prints its path. Safe to run again: does nothing when it is already there. Exit status 0 and
# a path on stdout on success; non-zero with a reason on stderr otherwise (the bench then says
# why it cannot run).
set -euo pipefail
if ! command -v wrk >/dev/null; then
  "$(dirname "$0")/apt-install.sh" install-wrk wrk
fi
command -v wrk
