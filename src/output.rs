//! Standard output that a closed pipe does not crash.
//!
//! `println!` panics when stdout is gone (`envgen runs list --json | true`
//! exited 101 with a panic message). Every command prints through [`outln!`]
//! and [`out!`] instead: once the reader has gone, further output is dropped
//! and the command goes on to its normal end and exit code (a training run
//! whose `| head` closed still finishes and writes its summary). Output is
//! still flushed line by line, as `println!` does on a terminal.
//! `tests/it/tree/layering.rs` keeps `println!` out of `src/`.

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

/// `text` with every control character (ESC, CR, newline, C1 codes…)
/// written as its Rust escape (`\u{1b}`, `\n`): for user-derived strings
/// (metric keys, run ids, paths, argv) printed to a terminal or written to
/// a report, so a metric key holding an escape sequence cannot rewrite the
/// screen (issue #40). Everything else is kept as it is.
pub fn escape_control(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

// `-q/--quiet`'s one switch lives in the experiments crate (its progress
// bars and kernel-cache lines obey it too); the CLI's informational lines
// print through `crate::output::notice!`.
pub(crate) use envgen_experiments::notice;
pub use envgen_experiments::notice::{quiet, set_quiet};

// Re-exported so that callers name them by path, `crate::output::outln!`,
// like any other item of a module (and the layering check sees the module).
pub(crate) use out;
pub(crate) use outln;

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated: every control character of C0, DEL and C1, anywhere in a
    /// string, comes out as printable text; other text is untouched.
    #[test]
    fn every_control_character_is_escaped() {
        let controls = (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32);
        for c in controls {
            for text in [format!("{c}"), format!("loss{c}[2J"), format!("a{c}b{c}")] {
                let escaped = escape_control(&text);
                assert!(
                    !escaped.chars().any(char::is_control),
                    "{text:?} -> {escaped:?}"
                );
                assert!(escaped.contains('\\'), "{text:?} -> {escaped:?}");
            }
        }
        for plain in ["loss", "val_perplexity", "ü→✓", ""] {
            assert!(matches!(
                escape_control(plain),
                std::borrow::Cow::Borrowed(_)
            ));
        }
    }
}
