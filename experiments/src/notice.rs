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
        super::set_quiet(false);
        assert!(!super::quiet());
    }
}
