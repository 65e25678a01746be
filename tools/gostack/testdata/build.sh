#!/usr/bin/env bash
# Rebuilds weft-gostack's checked-in fixtures from testdata/service with the pip-installed
# Go toolchain (scripts/install-go.sh): the fixture binaries (gzip-compressed), the
# prologue lines of `go tool objdump` for the frame-size tests, and CPU profiles of the
# fixture service under load with the true stack need it measured (service*.out).
# Standard library only: no module downloads. Takes about a minute.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
go=$("$root/scripts/install-go.sh")
export GOTOOLCHAIN=local GOPROXY=off GOFLAGS= CGO_ENABLED=0 GOOS=linux
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# -trimpath and -buildvcs=false: no paths or commit stamps, so the bytes depend only on
# the source and the toolchain.
build() { # build OUT GOARCH [go build flags...]
  local out=$1 arch=$2
  shift 2
  (cd "$here/service" && GOARCH=$arch "$go" build -trimpath -buildvcs=false "$@" -o "$tmp/$out" .)
  gzip -9 -n -c "$tmp/$out" >"$here/$out.gz"
}
build service.amd64 amd64 -ldflags=-w
build service.amd64.stripped amd64 -ldflags="-s -w"
build service.amd64.pie amd64 -buildmode=pie -ldflags=-w
build service.arm64 arm64 -ldflags=-w

# Each function's TEXT line and its first 12 instructions: enough to see the prologue.
for arch in amd64 arm64; do
  "$go" tool objdump "$tmp/service.$arch" |
    awk '/^TEXT /{n = 0; print; next} n < 12 {n++; gsub(/[ \t]+/, " "); print}' |
    gzip -9 -n >"$here/service.$arch.objdump.gz"
done

# Profiles: amd64 natively on x86_64; arm64 natively on aarch64 or under qemu-user
# (Debian's qemu-user package), which runs Go's profiler signals faithfully.
if [ "$(uname -m)" = x86_64 ]; then
  GODEBUG=adaptivestackstart=0 "$tmp/service.amd64" -duration 3s \
    -cpuprofile "$here/cpu.pprof" >"$here/service.out"
  cat "$here/service.out"
else
  echo "build.sh: not on x86_64: kept the old cpu.pprof and service.out" >&2
fi
arm64_run=()
if [ "$(uname -m)" = aarch64 ]; then
  arm64_run=(env)
elif command -v qemu-aarch64 >/dev/null; then
  arm64_run=(qemu-aarch64)
fi
if [ ${#arm64_run[@]} -gt 0 ]; then
  GODEBUG=adaptivestackstart=0 "${arm64_run[@]}" "$tmp/service.arm64" -duration 3s \
    -cpuprofile "$here/cpu.arm64.pprof" >"$here/service.arm64.out"
  cat "$here/service.arm64.out"
else
  echo "build.sh: no arm64 host or qemu-aarch64: kept the old cpu.arm64.pprof" >&2
fi
ls -l "$here"/*.gz "$here"/cpu.pprof
