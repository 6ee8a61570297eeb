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

impl UserError {
    /// `message` (which names the path) and the I/O error, as the kind and
    /// with the fix [`io_class`] gives it; an error it does not know gets
    /// the caller's `fallback` kind and fix.
    pub fn from_io(
        message: impl Into<String>,
        err: &std::io::Error,
        fallback: (ErrorKind, &str),
    ) -> Self {
        let (kind, fix) = io_class(err).unwrap_or(fallback);
        Self {
            kind,
            message: format!("{}: {err}", message.into()),
            fix: Some(fix.to_string()),
        }
    }
}

/// What an I/O error means to the user, decided here once for every
/// command: its kind (the exit code) and the fix. The path is not here:
/// it comes from the context the writer or reader added (`writing PATH`).
/// `None` for errors this does not know (they stay unexpected, exit 1).
pub fn io_class(err: &std::io::Error) -> Option<(ErrorKind, &'static str)> {
    use ErrorKind::{Environment, Usage};
    let class = match err.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => (
            Environment,
            "no space left there: free space (or raise the quota), or choose another --out",
        ),
        Some(libc::EROFS) => (
            Environment,
            "that filesystem is read-only: choose a writable directory (--out)",
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => (
            Environment,
            "permission denied: make the path writable for this user, or choose another directory (--out)",
        ),
        Some(libc::EISDIR) => (
            Usage,
            "a directory is where a file must be: move it away, or choose another --out",
        ),
        Some(libc::ENOTDIR) | Some(libc::EEXIST) => (
            Usage,
            "something that is not a directory is in the way: move it away, or choose another --out",
        ),
        _ if err.kind() == std::io::ErrorKind::InvalidData => (
            Usage,
            "the file is not what envgen wrote (not UTF-8 text): restore or remove it",
        ),
        _ => return None,
    };
    Some(class)
}

/// The first I/O error in the chain, if [`io_class`] knows it.
fn io_class_of(err: &anyhow::Error) -> Option<(ErrorKind, &'static str)> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<std::io::Error>())
        .and_then(io_class)
}

/// The fix for an error without a `UserError` in its chain: the one for
/// its I/O error (see [`io_class`]), if any. `UserError`s carry their own.
pub fn io_fix_of(err: &anyhow::Error) -> Option<&'static str> {
    if err.chain().any(|cause| cause.is::<UserError>()) {
        return None;
    }
    io_class_of(err).map(|(_, fix)| fix)
}

/// The exit code for any error: the first `UserError` in the chain decides;
/// else an I/O error [`io_class`] knows (a full disk, a read-only
/// directory…); anything else is an unexpected failure (exit 1).
pub fn exit_code_of(err: &anyhow::Error) -> i32 {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<UserError>())
        .map(|user| user.kind)
        .or_else(|| io_class_of(err).map(|(kind, _)| kind))
        .map(ErrorKind::exit_code)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    fn os(code: i32) -> anyhow::Error {
        Err::<(), _>(std::io::Error::from_raw_os_error(code))
            .context("writing /x/metrics.jsonl")
            .unwrap_err()
    }

    #[test]
    fn io_errors_get_the_contracts_exit_code_and_a_fix() {
        for (code, exit) in [
            (libc::ENOSPC, 3),
            (libc::EDQUOT, 3),
            (libc::EROFS, 3),
            (libc::EACCES, 3),
            (libc::EPERM, 3),
            (libc::EISDIR, 2),
            (libc::ENOTDIR, 2),
            (libc::EEXIST, 2),
        ] {
            let err = os(code);
            assert_eq!(exit_code_of(&err), exit, "errno {code}");
            assert!(io_fix_of(&err).is_some(), "errno {code}");
        }
        let utf8 = std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8");
        assert_eq!(exit_code_of(&anyhow::Error::from(utf8)), 2);
        // Unknown ones stay unexpected; a UserError keeps its own kind.
        assert_eq!(exit_code_of(&os(libc::EIO)), 1);
        assert_eq!(io_fix_of(&os(libc::EIO)), None);
        let user = anyhow::Error::from(UserError::usage("bad")).context("reading /x");
        assert_eq!(exit_code_of(&user), 2);
        assert_eq!(io_fix_of(&user), None);
    }

    #[test]
    fn from_io_names_the_path_and_falls_back_to_the_callers_fix() {
        let full = UserError::from_io(
            "cannot create /x",
            &std::io::Error::from_raw_os_error(libc::ENOSPC),
            (ErrorKind::Environment, "pass another --out"),
        );
        assert_eq!(full.kind, ErrorKind::Environment);
        assert!(full.to_string().contains("cannot create /x: "), "{full}");
        assert!(full.fix.unwrap().contains("free space"));
        let other = UserError::from_io(
            "cannot create /x",
            &std::io::Error::from_raw_os_error(libc::EIO),
            (ErrorKind::Environment, "pass another --out"),
        );
        assert_eq!(other.kind, ErrorKind::Environment);
        assert_eq!(other.fix.as_deref(), Some("pass another --out"));
    }
}
