//! The one switch for `envgen -q/--quiet`: informational stderr lines
//! ("run directory …", "kernel cache: …") and progress bars go through
//! here; errors, warnings and the output a command was asked for do not.
//!
//! Kept in the lowest crate so that the training loop's progress bars and
//! the kernel cache's lines obey the same switch as the CLI's. Child envgen
//! processes (native ranks) inherit it through `ENVGEN_QUIET`, which the
//! CLI reads as the flag's default.

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// The variable a child envgen reads `-q` from: native ranks inherit it,
/// and Docker containers and Slurm jobs are given it explicitly (they do
/// not see the launching shell's environment).
pub const QUIET_ENV: &str = "ENVGEN_QUIET";

/// `(ENVGEN_QUIET, "1")` under `--quiet`, for a container's or a job's
/// environment.
pub fn quiet_env() -> Option<(String, String)> {
    quiet().then(|| (QUIET_ENV.to_string(), "1".to_string()))
}

/// Turn informational output off (or on again) for the rest of the process.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `-q/--quiet` is on.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// `eprintln!` for an informational line: dropped under `--quiet`, and a
/// closed stderr is ignored rather than a panic.
#[macro_export]
macro_rules! notice {
    ($($arg:tt)*) => {
        if !$crate::notice::quiet() {
            use ::std::io::Write as _;
            let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_switch_reads_back_what_was_set() {
        super::set_quiet(true);
        assert!(super::quiet());
        // What Docker containers and Slurm jobs are given.
        assert_eq!(
            super::quiet_env(),
            Some(("ENVGEN_QUIET".to_string(), "1".to_string()))
        );
        super::set_quiet(false);
        assert!(!super::quiet());
        assert_eq!(super::quiet_env(), None);
    }
}
