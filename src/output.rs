//! Standard output that a closed pipe does not crash.
//!
//! `println!` panics when stdout is gone (`envgen runs list --json | true`
//! exited 101 with a panic message). Every command prints through [`outln!`]
//! and [`out!`] instead: once the reader has gone, further output is dropped
//! and the command goes on to its normal end and exit code (a training run
//! whose `| head` closed still finishes and writes its summary). Output is
//! still flushed line by line, as `println!` does on a terminal.
//! `tests/it/layering.rs` keeps `println!` out of `src/`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout's reader has gone (or stdout failed): nothing more is written.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Write formatted text to stdout; a closed pipe or a failing stdout is
/// remembered and said once on stderr (a full disk under `> file`), never a panic.
pub fn write_stdout(args: std::fmt::Arguments) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        STDOUT_GONE.store(true, Ordering::Relaxed);
        if err.kind() != std::io::ErrorKind::BrokenPipe {
            // stderr may be gone too: this is best effort, never a panic.
            let _ = writeln!(
                std::io::stderr(),
                "envgen: writing to standard output failed ({err}); the rest of the output is dropped"
            );
        }
    }
}

/// `print!` that survives a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that survives a closed stdout.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

// Re-exported so that callers name them by path, `crate::output::outln!`,
// like any other item of a module (and the layering check sees the module).
pub(crate) use out;
pub(crate) use outln;
