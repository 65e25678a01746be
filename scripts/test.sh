#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run) and as a fresh machine runs it:
#   1. installs the Go toolchain the comparison tests use (tests that need it print
#      "skipped: <reason>" when it cannot be had);
#   2. every crate's unit, integration and doc tests (weft with its `tokio` feature, which
#      weft-bench turns on), among them the layering check (weft/tests/layering.rs: no
#      `crate::` path of weft/src names a layer above its own, weft/src/lib.rs "Layers") and
#      the stack layer built and tested on its own (weft/tests/stack_alone.rs);
#   3. the `interpose` feature's tests (weft/tests/interpose_*.rs, and the README's snippets
#      again) and the `log` feature's (weft/tests/monitor_log.rs);
#   4. the async bridge against real clients and servers (tests/async-bridge), optimized;
#   5. the loom model checks of weft's lock-free protocols (src/tests/loom_*.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! scripts/install-go.sh >/dev/null; then
  echo "test: no Go toolchain could be installed; Go-dependent tests will report themselves skipped"
fi

cargo test --workspace --exclude weft-async-tests

# The interposed libc calls (weft feature `interpose`, off by default), in their own test
# binaries: the feature replaces libc functions for the whole process.
cargo test -p weft --features interpose --test interpose_sleep --test interpose_net \
  --test interpose_ureq --test interpose_redis --test interpose_cancel
# The README's snippets (doc tests) with the features its "Blocking crates" and "Calling async
# code" snippets are about.
cargo test -p weft --features interpose,tokio --doc ReadmeDoctests

# The monitor's reports through the `log` crate (weft feature `log`, off by default).
cargo test -p weft --features log --test monitor_log

# The async bridge (weft features `tokio` and `futures`) with reqwest, tokio-postgres, tonic and
# hyper (tests/async-bridge, crate weft-async-tests: its heavy dependencies stay out of weft's
# own test builds). Built optimized: each test times a 5 ms ticker on the weft runtime under
# load. They install and start a PostgreSQL server through scripts/install-postgres.sh and
# scripts/postgres-server.sh, and print "skipped: <reason>" where it cannot be had.
cargo test --release -p weft-async-tests
# Again with a tokio runtime on each weft worker (RuntimeBuilder::tokio_on_workers).
WEFT_TOKIO_ON_WORKERS=1 cargo test --release -p weft-async-tests

LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p weft --lib --release loom
