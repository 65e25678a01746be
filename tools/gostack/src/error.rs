//! Error type: every failure the tool reports is one line, `gostack: <file>: <problem>`.
//!
//! Parsers (`pclntab`, `binary`, `pprof`) know nothing about file names; they return a
//! [`Problem`] that says what is wrong with the bytes. The command layer attaches the
//! file the bytes came from and turns it into an [`Error`].

use std::fmt;

/// What is wrong with some input, without saying which file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem(String);

impl Problem {
    /// A problem described by `msg`; newlines are folded so the message stays one line.
    pub fn new(msg: impl Into<String>) -> Self {
        let msg: String = msg.into();
        Problem(one_line(&msg))
    }

    /// The description.
    pub fn message(&self) -> &str {
        &self.0
    }

    /// Attaches the file the problem was found in.
    pub fn in_file(self, file: impl fmt::Display) -> Error {
        Error {
            file: file.to_string(),
            problem: self.0,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Problem {}

/// A failure of the tool: renders as `gostack: <file>: <problem>` on one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gostack: {file}: {problem}")]
pub struct Error {
    /// The file the problem is about.
    pub file: String,
    /// What is wrong, one line.
    pub problem: String,
}

impl Error {
    /// An error about `file`.
    pub fn new(file: impl fmt::Display, problem: impl Into<String>) -> Self {
        Problem::new(problem).in_file(file)
    }
}

fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result of the parsers.
pub type ParseResult<T> = Result<T, Problem>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_one_line_with_file() {
        let e = Problem::new("bad\nthing\n").in_file("a.out");
        assert_eq!(e.to_string(), "gostack: a.out: bad; thing");
    }
}
