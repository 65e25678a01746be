#!/usr/bin/env bash
# Installs Debian packages with apt-get, for the install-*.sh scripts: `apt-install.sh NAME
# PACKAGE...`. Exit status 0 once they are installed; non-zero with a reason on stderr,
# prefixed `NAME:`, where apt-get is missing or needs root. Its output goes to stderr.
set -euo pipefail
name=$1
shift
if ! command -v apt-get >/dev/null; then
  echo "$name: no apt-get on this machine" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "$name: apt-get needs root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "$@" >&2
