//! The library's error: what went wrong, and whether anything ran.

use std::fmt;

/// What kind of failure an [`Error`] is. The command line maps each to an
/// exit code (`Input` 2, `Run` 1, `Infeasible` 3, `Interrupted` 130); the
/// Python package to `blis.InputError` or `blis.RunError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input (a command-line value, run file, trace, plugin library):
    /// nothing ran.
    Input,
    /// The run failed while running (a plugin panicked or returned something
    /// invalid, an output file could not be written, the run was cancelled).
    Run,
    /// The user interrupted a command that records as it goes; what it had
    /// recorded was kept.
    Interrupted,
    /// A search ran and found nothing that meets the user's constraints
    /// (`blis plan`: no fleet in the space meets the SLOs); what it tried
    /// was written.
    Infeasible,
}

/// A failed load or simulation: its kind and a one-paragraph message naming
/// the file, key or line and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    /// Bad input: nothing ran.
    pub fn input(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Input,
            message: message.into(),
        }
    }

    /// A failure while running.
    pub fn run(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Run,
            message: message.into(),
        }
    }

    /// An interrupt that ended a command after it kept what it had.
    pub fn interrupted(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Interrupted,
            message: message.into(),
        }
    }

    /// A search that found no answer.
    pub fn infeasible(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Infeasible,
            message: message.into(),
        }
    }

    /// True for bad input.
    pub fn is_input(&self) -> bool {
        self.kind == ErrorKind::Input
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
