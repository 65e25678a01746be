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
//! May call: `debug::dump`. Called by: `RuntimeBuilder::build`.
//!
//! Why exit by default: it is what Go does (`GOTRACEBACK` only changes how much it prints), so
//! a stuck service killed with `kill -QUIT` leaves its story on stderr and goes away as
//! before. `WEFT_SIGQUIT=continue` keeps it running (a dump on demand), `off` leaves SIGQUIT
//! to its default (a core dump).

use std::io::{self, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// What a weft program does on SIGQUIT (`RuntimeBuilder::sigquit`, `WEFT_SIGQUIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SigquitAction {
    /// Print the grouped dump to stderr, then exit with status 2, as Go does (`exit`).
    #[default]
    DumpAndExit,
    /// Print the grouped dump and go on running (`continue`).
    DumpAndContinue,
    /// Print every task with its own backtrace (Go's `GOTRACEBACK=all` layout), then exit
    /// with status 2 (`full`).
    FullDumpAndExit,
    /// Leave SIGQUIT alone (`off`): weft installs nothing.
    Off,
}

impl SigquitAction {
    /// `WEFT_SIGQUIT`'s value: `exit`, `continue`, `full` or `off`.
    pub fn parse(value: &str) -> Option<SigquitAction> {
        match value.trim() {
            "exit" => Some(SigquitAction::DumpAndExit),
            "continue" => Some(SigquitAction::DumpAndContinue),
            "full" => Some(SigquitAction::FullDumpAndExit),
            "off" => Some(SigquitAction::Off),
            _ => None,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            SigquitAction::DumpAndExit => 0,
            SigquitAction::DumpAndContinue => 1,
            SigquitAction::FullDumpAndExit => 2,
            SigquitAction::Off => 3,
        }
    }

    fn from_u8(value: u8) -> SigquitAction {
        match value {
            0 => SigquitAction::DumpAndExit,
            1 => SigquitAction::DumpAndContinue,
            2 => SigquitAction::FullDumpAndExit,
            _ => SigquitAction::Off,
        }
    }
}

/// The action the `weft-sigquit` thread takes (invariant 2).
static ACTION: AtomicU8 = AtomicU8::new(0);
/// Set once the thread runs.
static INSTALLED: OnceLock<()> = OnceLock::new();

/// The action for a runtime built with `configured`: `WEFT_SIGQUIT` wins when it is set (an
/// operator can change a deployed binary), else the builder's choice, else the default.
///
/// # Errors
/// An unknown `WEFT_SIGQUIT` value.
pub(crate) fn action_from_env(configured: Option<SigquitAction>) -> io::Result<SigquitAction> {
    match std::env::var("WEFT_SIGQUIT") {
        Ok(value) => SigquitAction::parse(&value).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("weft: WEFT_SIGQUIT={value:?} is not one of exit, continue, full, off"),
            )
        }),
        Err(_) => Ok(configured.unwrap_or_default()),
    }
}

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

#[cfg(test)]
mod tests {
    use super::SigquitAction;

    #[test]
    fn weft_sigquit_values_name_each_action() {
        assert_eq!(
            SigquitAction::parse("exit"),
            Some(SigquitAction::DumpAndExit)
        );
        assert_eq!(
            SigquitAction::parse(" continue "),
            Some(SigquitAction::DumpAndContinue)
        );
        assert_eq!(
            SigquitAction::parse("full"),
            Some(SigquitAction::FullDumpAndExit)
        );
        assert_eq!(SigquitAction::parse("off"), Some(SigquitAction::Off));
        assert_eq!(SigquitAction::parse("2"), None);
        for action in [
            SigquitAction::DumpAndExit,
            SigquitAction::DumpAndContinue,
            SigquitAction::FullDumpAndExit,
            SigquitAction::Off,
        ] {
            assert_eq!(SigquitAction::from_u8(action.to_u8()), action);
        }
    }
}
