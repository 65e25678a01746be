#!/usr/bin/env bash
# Installs what runs linux/arm64 Go binaries on an x86_64 host, for weft-gostack's apply tests
# (tools/gostack/tests/apply.rs runs the arm64 copies it patches when these are present, and
# says "skipped" otherwise): Debian's `qemu-user` (qemu-aarch64) and `libc6-arm64-cross` (the
# loader PIE builds ask for, under /usr/aarch64-linux-gnu). Prints the qemu-aarch64 path. Safe
# to run again: does nothing when both are there. Exit status 0 on success; non-zero with a
# reason on stderr otherwise.
set -euo pipefail
loader=/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1
if ! command -v qemu-aarch64 >/dev/null || [ ! -e "$loader" ]; then
  "$(dirname "$0")/apt-install.sh" install-qemu-arm64 qemu-user libc6-arm64-cross
fi
command -v qemu-aarch64
