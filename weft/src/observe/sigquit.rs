//! What a weft program does on SIGQUIT: the action a runtime's builder or `WEFT_SIGQUIT`
//! chooses. The signal's thread and the dump it prints are `debug`'s (debug/signal.rs),
//! installed at a runtime's build through the observers the crate root wires in (mod.rs).
//!
//! Owns: [`SigquitAction`] (re-exported by `weft::debug`).
//!
//! Invariants:
//! 1. `WEFT_SIGQUIT` wins over the builder's choice, which wins over the default
//!    ([`action_from_env`]).
//!
//! May call: nothing. Called by: `RuntimeBuilder` (sched/runtime.rs), debug/signal.rs.
//!
//! Why in the seam: the runtime's builder takes the action and reads `WEFT_SIGQUIT` as it
//! starts, below `debug`, which only carries it out.

use std::io;

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

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            SigquitAction::DumpAndExit => 0,
            SigquitAction::DumpAndContinue => 1,
            SigquitAction::FullDumpAndExit => 2,
            SigquitAction::Off => 3,
        }
    }

    pub(crate) fn from_u8(value: u8) -> SigquitAction {
        match value {
            0 => SigquitAction::DumpAndExit,
            1 => SigquitAction::DumpAndContinue,
            2 => SigquitAction::FullDumpAndExit,
            _ => SigquitAction::Off,
        }
    }
}

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
