//! Errors: one user-facing type (re-exported from the experiments crate, the
//! lowest layer) and the rendering of an error chain for the terminal.

pub use envgen_experiments::error::{exit_code_of, io_fix_of, ErrorKind, UserError};

/// Shorthand for the `Result` every command returns.
pub type Result<T, E = anyhow::Error> = std::result::Result<T, E>;

/// Render an error and its causes on one screen: the headline first, then
/// each distinct cause on its own line; an I/O error without a `UserError`
/// (a full disk, a read-only directory…) gets its fix from `io_fix_of`.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str("\n  caused by: ");
            out.push_str(&text);
        }
    }
    if let Some(fix) = io_fix_of(err) {
        out.push_str("\n  fix: ");
        out.push_str(fix);
    }
    out
}

/// Print `error: …` (the [`render`]ing of `err`) on stderr, its labels
/// (`error:`, `fix:`, `caused by:`) coloured when stderr is a terminal
/// and colour is wanted: anstream drops the colour for a pipe, a file,
/// `NO_COLOR`, `TERM=dumb`, and keeps it for `CLICOLOR_FORCE`.
pub fn eprint_error(err: &anyhow::Error) {
    use std::io::Write as _;
    let text = with_styled_labels(&format!("error: {}", render(err)));
    // Best effort: a closed stderr must not turn an error into a panic.
    let _ = writeln!(anstream::stderr(), "{text}");
}

/// `text` with ANSI styles around the labels at the start of its lines:
/// `error:` bold red, `fix:` bold green, `caused by:` bold (clap's colours
/// for its own `error:` and tips). The text itself is left as it is.
pub fn with_styled_labels(text: &str) -> String {
    let bold = anstyle::Style::new().bold();
    let labels = [
        (
            "error:",
            bold.fg_color(Some(anstyle::AnsiColor::Red.into())),
        ),
        (
            "fix:",
            bold.fg_color(Some(anstyle::AnsiColor::Green.into())),
        ),
        ("caused by:", bold),
    ];
    let mut out = String::with_capacity(text.len() + 32);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let rest = line.trim_start();
        let indent = &line[..line.len() - rest.len()];
        match labels.iter().find(|(label, _)| rest.starts_with(label)) {
            Some((label, style)) => {
                out.push_str(indent);
                out.push_str(&format!("{style}{label}{style:#}"));
                out.push_str(&rest[label.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_labels_are_styled_and_the_text_kept() {
        let text =
            "error: no such preset \"tiny\"\n  caused by: reading x\n  fix: use --preset small";
        let styled = with_styled_labels(text);
        assert!(
            styled.contains("\u{1b}[1m\u{1b}[31merror:\u{1b}[0m no such preset"),
            "{styled:?}"
        );
        assert!(
            styled.contains("  \u{1b}[1m\u{1b}[32mfix:\u{1b}[0m use --preset small"),
            "{styled:?}"
        );
        assert!(
            styled.contains("  \u{1b}[1mcaused by:\u{1b}[0m reading x"),
            "{styled:?}"
        );
        // Without the escapes it is the text that was given.
        let mut plain = Vec::new();
        let mut stripped = anstream::StripStream::new(&mut plain);
        std::io::Write::write_all(&mut stripped, styled.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(plain).unwrap(), text);
    }
}
