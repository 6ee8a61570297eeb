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

/// The error for a subcommand whose feature has not landed yet: exit 2,
/// naming the issue that delivers it.
pub fn not_yet(command: &str, feature: &str) -> anyhow::Error {
    UserError::usage(format!(
        "`envgen {command}` is not implemented yet: it arrives with {feature}"
    ))
    .with_fix("see the open issues; until then use the commands listed in README.md")
    .into()
}
