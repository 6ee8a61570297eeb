//! The error kinds every envgen command maps to an exit code.
//!
//! This lives in the lowest crate of the workspace so that both the
//! experiments (config errors) and the CLI (doctor, images, launch) report
//! through one type; the `envgen` crate re-exports it.

use std::fmt;

/// What went wrong, as far as the exit code is concerned (see docs/cli.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A check or an experiment failed: exit 1.
    Failed,
    /// Usage or input error (bad config, unknown name, bad value): exit 2.
    Usage,
    /// Environment error (daemon unreachable, tool missing, permission): exit 3.
    Environment,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Failed => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Environment => 3,
        }
    }
}

/// An error meant for the user: what is wrong, and how to fix it.
#[derive(Debug, Clone)]
pub struct UserError {
    pub kind: ErrorKind,
    pub message: String,
    pub fix: Option<String>,
}

impl UserError {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Usage,
            message: message.into(),
            fix: None,
        }
    }
    pub fn environment(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Environment,
            message: message.into(),
            fix: None,
        }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Failed,
            message: message.into(),
            fix: None,
        }
    }
    /// Attach the sentence that tells the user what to do about it.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n  fix: {fix}")?;
        }
        Ok(())
    }
}

impl std::error::Error for UserError {}

/// The exit code for any error: the first `UserError` in the chain decides;
/// anything else is an unexpected failure (exit 1).
pub fn exit_code_of(err: &anyhow::Error) -> i32 {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<UserError>())
        .map(|user| user.kind.exit_code())
        .unwrap_or(1)
}
