//! Reading a run directory's own files safely: `metrics.jsonl` as text
//! (refused, naming the line, when it is not UTF-8) and the refusal of a
//! symbolic link where the run writes a file of its own. Both the metrics
//! log ([`super::rundir`]) and its TensorBoard mirror ([`super::tensorboard`])
//! stand on these, so they live below both. So does the `time` every
//! metrics line carries (unix seconds, [`TIME_KEY`]): the log stamps it,
//! the mirror plots each line at it.

use std::path::Path;

use anyhow::Context as _;

use crate::error::UserError;

/// The field of a metrics line that says when it was logged: unix seconds
/// as an f64. TensorBoard's wall-time axis is drawn from it, so a resumed
/// or exported run keeps the times its steps ran at.
pub const TIME_KEY: &str = "time";

/// Now, in unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `line` with its `time` field: the one it has, or now.
pub fn stamped(line: &serde_json::Value) -> std::borrow::Cow<'_, serde_json::Value> {
    match line {
        serde_json::Value::Object(fields) if !fields.contains_key(TIME_KEY) => {
            let mut fields = fields.clone();
            fields.insert(TIME_KEY.into(), serde_json::Value::from(unix_now()));
            std::borrow::Cow::Owned(serde_json::Value::Object(fields))
        }
        other => std::borrow::Cow::Borrowed(other),
    }
}

/// Refuse a symbolic link where the run's own `what` (a file or folder the
/// run writes anew as `name`) belongs.
pub(crate) fn refuse_symlink(path: &Path, what: &str, name: &str) -> anyhow::Result<()> {
    if path
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        return Err(UserError::usage(format!(
            "{} is a symbolic link, not the run's own {what}",
            path.display()
        ))
        .with_fix(format!(
            "remove the link (the run writes a new {name}), or start a new run"
        ))
        .into());
    }
    Ok(())
}

/// `metrics.jsonl` as text ("" when there is none), for a resume and for
/// `envgen runs`. A line that is not UTF-8 is refused, naming it (exit 2):
/// dropping it (and, with `read_to_string`, every other line) would lose
/// the run's history.
pub fn read_metrics_text(path: &Path) -> anyhow::Result<String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        UserError::usage(format!(
            "{} line {line}: not UTF-8 text, so not a metrics line envgen wrote",
            path.display()
        ))
        .with_fix("remove or repair that line, or restore the file")
        .into()
    })
}
