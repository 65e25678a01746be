//! SIGQUIT, like Go: the grouped task dump on stderr, then exit with status 2 (or go on).
//!
//! Owns: the process's SIGQUIT registration and the thread that waits for it, and the action
//! taken (`ACTION`).
//!
//! Invariants:
//! 1. The signal handler does only what is async-signal-safe: `signal-hook` writes a byte to a
//!    pipe. The dump is taken by the `weft-sigquit` thread reading that pipe, a plain thread
//!    that blocks while the workers answer (debug/mod.rs invariant 1).
//! 2. Installed once per process; later runtimes only change the action.
//!
//! May call: `debug::dump`. Called by: users, and `RuntimeBuilder::build` through the
//! observers the crate root wires into the seam (lib.rs `observers`).
//!
//! Why exit by default: it is what Go does (`GOTRACEBACK` only changes how much it prints), so
//! a stuck service killed with `kill -QUIT` leaves its story on stderr and goes away as
//! before. `WEFT_SIGQUIT=continue` keeps it running (a dump on demand), `off` leaves SIGQUIT
//! to its default (a core dump).

use std::io::{self, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::observe::sigquit::SigquitAction;

/// The action the `weft-sigquit` thread takes (invariant 2).
static ACTION: AtomicU8 = AtomicU8::new(0);
/// Set once the thread runs.
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Makes SIGQUIT print the task dump and then do what `action` says (invariant 2: the
/// handler is installed once; later calls change the action). `Off` before the first
/// install installs nothing; after it, SIGQUIT is ignored (the handler cannot be removed).
///
/// # Errors
/// When the signal or the thread cannot be set up.
pub fn install_sigquit(action: SigquitAction) -> io::Result<()> {
    ACTION.store(action.to_u8(), Ordering::Relaxed);
    if action == SigquitAction::Off || INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut result = Ok(());
    INSTALLED.get_or_init(|| {
        result = start_thread();
    });
    result
}

fn start_thread() -> io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGQUIT])?;
    std::thread::Builder::new()
        .name("weft-sigquit".into())
        .spawn(move || {
            for _ in signals.forever() {
                let action = SigquitAction::from_u8(ACTION.load(Ordering::Relaxed));
                if action == SigquitAction::Off {
                    continue;
                }
                let dump = super::dump();
                let text = match action {
                    SigquitAction::FullDumpAndExit => dump.full(),
                    _ => dump.grouped(),
                };
                let mut stderr = io::stderr().lock();
                let _ = writeln!(stderr, "SIGQUIT: quit");
                let _ = stderr.write_all(text.as_bytes());
                let _ = stderr.flush();
                drop(stderr);
                if action != SigquitAction::DumpAndContinue {
                    std::process::exit(2);
                }
            }
        })?;
    Ok(())
}
