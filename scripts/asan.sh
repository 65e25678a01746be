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
# detect_stack_use_after_return=0: with it ASan moves locals to heap "fake frames", and the
# tests that check where a task's locals live (compaction, dumps, warm stacks) cannot hold.
export CARGO_TARGET_DIR=target/asan \
  ASAN_OPTIONS="detect_leaks=0:detect_stack_use_after_return=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# The idle-CPU test measures before 10,000 tasks have parked at ASan's speed.
# `--features asan`: corosensei tells ASan about every stack switch (without it ASan takes a
# task's stack for its thread's and its own reports crash).
cargo +nightly test -p weft --features asan --target "$target" --no-fail-fast -- \
  --skip idle_workers_sleep_with_parked_tasks
