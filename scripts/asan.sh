#!/usr/bin/env bash
# weft's test suite under AddressSanitizer (nightly Rust, -Zsanitizer=address).
#
# Not part of CI: ASan slows the tests 3-10x, and a few assert loose timing bounds (an idle
# runtime's CPU, a placed task's start). Run it after changing unsafe code, stacks or the
# park/wake protocol; about 4 minutes on the 2-core machine.
#
# Leak checking is off: some tests leak on purpose (chan_drops forgets drop-counted values,
# monitor_reports leaves a runtime whose only worker it deadlocked). Memory errors (use after
# free, overflows, use after return) still fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "asan: skipped: no nightly toolchain (rustup toolchain install nightly)"
  exit 0
fi
target=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address"
export CARGO_TARGET_DIR=target/asan ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# The idle-CPU test measures before 10,000 tasks have parked at ASan's speed.
cargo +nightly test -p weft --target "$target" -- --skip idle_workers_sleep_with_parked_tasks
