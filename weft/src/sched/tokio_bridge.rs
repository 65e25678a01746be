//! Which tokio runtime a weft runtime's tasks use: one handed over
//! (`RuntimeBuilder::tokio_handle`), or a multi-thread runtime weft starts at the first use and
//! shuts down with the weft runtime, or (`RuntimeBuilder::tokio_on_workers`) each worker's own
//! (sched/tokio_local.rs).
//!
//! Owns: [`TokioConfig`] (the builder's settings) and `Bridge` (in the weft runtime's shared
//! state, so every task of it finds it), and the process's fallback bridge for plain threads.
//!
//! Invariants:
//! 1. A bridge's handle never changes once read: the handed-over one, or the one of the
//!    runtime it started (once, under `OnceLock`).
//! 2. A runtime the bridge started is shut down with `shutdown_background` when the bridge
//!    drops — after the weft runtime's workers have stopped and its tasks were cancelled, so
//!    their futures were dropped while its reactor still ran. `shutdown_background` never
//!    blocks, so a weft runtime may be dropped from async code.
//!
//! May call: tokio (the crate). Called by: runtime.rs (builds it), `weft::tokio` (reads it,
//! through `current_tokio_bridge` and `fallback`).
//!
//! Why in the scheduler: a weft runtime owns its bridge and drops it after its workers
//! stopped (invariant 2); `weft::tokio`, one layer up, only uses it (lib.rs, "Layers").

use std::sync::OnceLock;

use ::tokio::runtime::Handle;

/// The `tokio` settings of a [`RuntimeBuilder`](crate::RuntimeBuilder).
#[derive(Clone, Default)]
pub(crate) struct TokioConfig {
    pub(crate) handle: Option<Handle>,
    pub(crate) threads: Option<usize>,
    pub(crate) on_workers: Option<bool>,
}

impl std::fmt::Debug for TokioConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioConfig")
            .field("handle", &self.handle.as_ref().map(|_| "handed over"))
            .field("threads", &self.threads)
            .field("on_workers", &self.on_workers)
            .finish()
    }
}

/// A weft runtime's way to tokio.
pub(crate) struct Bridge {
    threads: Option<usize>,
    /// Tasks use their worker's own runtime (sched/tokio_local.rs); never with a handle
    /// handed over.
    on_workers: bool,
    handle: OnceLock<Handle>,
    /// The runtime this bridge started, if it did (invariant 2).
    owned: OnceLock<Owned>,
}

/// A runtime started by a bridge; shut down without waiting when dropped (invariant 2).
struct Owned(Option<::tokio::runtime::Runtime>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Bridge {
    pub(crate) fn new(config: TokioConfig) -> Bridge {
        let handle = OnceLock::new();
        let on_workers = config.handle.is_none()
            && config.on_workers.unwrap_or_else(|| {
                std::env::var_os("WEFT_TOKIO_ON_WORKERS").is_some_and(|v| v == "1")
            });
        if let Some(given) = config.handle {
            let _ = handle.set(given);
        }
        Bridge {
            threads: config.threads,
            on_workers,
            handle,
            owned: OnceLock::new(),
        }
    }

    /// Whether tasks use their worker's own runtime instead of [`handle`](Self::handle)'s.
    pub(crate) fn on_workers(&self) -> bool {
        self.on_workers
    }

    /// The handle the bridge's tasks use; starts weft's own runtime on the first call when
    /// none was handed over (invariant 1).
    ///
    /// # Panics
    /// When that runtime cannot be started.
    pub(crate) fn handle(&self) -> &Handle {
        self.handle.get_or_init(|| {
            let threads = self.threads.unwrap_or_else(default_threads);
            let runtime = ::tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("weft-tokio")
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("weft: cannot start the background tokio runtime: {e}"));
            let handle = runtime.handle().clone();
            let _ = self.owned.set(Owned(Some(runtime)));
            handle
        })
    }
}

/// Threads of a runtime weft starts: one per core, at most 4 — with futures polled inline on
/// tasks, tokio's threads mostly wait on its reactor and timers and run what those futures
/// spawn (connection tasks, `spawn_future`).
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// The bridge of plain threads outside any tokio context (module doc).
pub(crate) fn fallback() -> &'static Bridge {
    static FALLBACK: OnceLock<Bridge> = OnceLock::new();
    FALLBACK.get_or_init(|| Bridge::new(TokioConfig::default()))
}
