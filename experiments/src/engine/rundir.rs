//! The run directory: `config.toml`, `manifest.json`, `metrics.jsonl`,
//! `events.out.tfevents.*.envgen` (its TensorBoard mirror), `summary.json`, `checkpoints/` (see
//! docs/cli.md, "envgen experiments, run").
//! `manifest.json` is envgen's (`runs::manifest`); the experiments write
//! the rest.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::run_files::{read_metrics_text, refuse_symlink, stamped};
use super::tensorboard::EventsFile;
use crate::error::UserError;
use crate::fsutil::write_atomic;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Running,
    Completed,
    Failed,
    Interrupted,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub status: Status,
    pub wall_s: f64,
    pub steps_done: u64,
    pub metrics: serde_json::Map<String, serde_json::Value>,
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A fresh run id: `<experiment>-<preset>-<UTC time>-<first 8 of hash>`.
pub fn new_run_id(experiment: &str, preset: Option<&str>, config_hash: &str) -> String {
    let now = time::OffsetDateTime::now_utc();
    let stamp = format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let short = config_hash
        .trim_start_matches("sha256:")
        .get(..8)
        .unwrap_or("");
    format!(
        "{experiment}-{}-{stamp}-{short}",
        preset.unwrap_or("config")
    )
}

/// End a run: write `summary.json` (every experiment's loop calls this
/// once, whatever the status; envgen stamps the manifest's `finished_at`).
pub fn finish_run(run_dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    write_json(&run_dir.join("summary.json"), summary)
}

pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UserError::usage(format!("cannot read {}: {e}", path.display()))
            .with_fix("give a run directory written by `envgen run`")
    })?;
    serde_json::from_str(&text).map_err(|e| {
        UserError::usage(format!("{}: not a valid run file: {e}", path.display()))
            .with_fix("give a run directory written by `envgen run`")
            .into()
    })
}

/// What of an existing `metrics.jsonl` a run keeps when it (re)starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    Nothing,
    ThroughStep(u64),
}

/// Appends one JSON object per line to `metrics.jsonl`, and its scalars
/// to the run's TensorBoard event file (in the run directory, rebuilt from the kept lines
/// when the log opens, so a resumed run shows no step twice).
pub struct MetricsLog {
    file: std::fs::File,
    tb: EventsFile,
    /// For errors: a full disk mid-run names the file it could not grow.
    path: std::path::PathBuf,
}

impl MetricsLog {
    /// Open for appending; on resume, drop lines past `keep_through_step`
    /// (written after the checkpoint we resume from).
    /// A symlink in its place is refused: a run directory may have been
    /// written by someone else, and the log must not read or grow the file
    /// the link points at.
    pub fn open(path: &Path, keep_through_step: Option<u64>) -> anyhow::Result<Self> {
        Self::open_keeping(path, keep_through_step.map(Keep::ThroughStep))
    }

    /// Open for a run that starts at step 0: lines an earlier attempt
    /// wrote before it was killed (before its first checkpoint) are dropped,
    /// so no step is logged twice.
    pub fn fresh(path: &Path) -> anyhow::Result<Self> {
        Self::open_keeping(path, Some(Keep::Nothing))
    }

    fn open_keeping(path: &Path, keep: Option<Keep>) -> anyhow::Result<Self> {
        refuse_symlink(path, "metrics file", "metrics.jsonl")?;
        if keep == Some(Keep::Nothing) && path.exists() {
            write_atomic(path, b"")?;
        }
        if let Some(Keep::ThroughStep(last)) = keep {
            let text = read_metrics_text(path)?;
            let kept: String = text
                .lines()
                .filter(|line| {
                    serde_json::from_str::<serde_json::Value>(line)
                        .ok()
                        .and_then(|v| v.get("step").and_then(|s| s.as_u64()))
                        .is_some_and(|s| s <= last)
                })
                .map(|line| format!("{line}\n"))
                .collect();
            write_atomic(path, kept.as_bytes())?;
        }
        // O_NOFOLLOW: a link planted after the check above is refused too.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Self {
            file,
            tb: EventsFile::open(path)?,
            path: path.to_path_buf(),
        })
    }

    /// Append `record` (an object gets its `time`, unless it has one).
    pub fn write(&mut self, record: &serde_json::Value) -> anyhow::Result<()> {
        let record = stamped(record);
        // One write per line: the GPU sampler appends its lines to the same
        // file, and a line written in pieces could be split by one of them.
        self.file
            .write_all(format!("{record}\n").as_bytes())
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.tb.catch_up(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_log_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("someone-elses");
        std::fs::write(&other, "{\"step\": 1, \"secret\": true}\n").unwrap();
        let path = dir.path().join("metrics.jsonl");
        std::os::unix::fs::symlink(&other, &path).unwrap();
        for keep in [None, Some(5)] {
            let err = MetricsLog::open(&path, keep).err().expect("refused");
            assert_eq!(crate::error::exit_code_of(&err), 2);
        }
        assert_eq!(
            std::fs::read_to_string(&other).unwrap(),
            "{\"step\": 1, \"secret\": true}\n"
        );
        std::fs::remove_file(&path).unwrap();
        for _ in 0..2 {
            // A fresh start drops what a killed attempt logged before it.
            let mut log = MetricsLog::fresh(&path).unwrap();
            log.write(&serde_json::json!({"step": 0})).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(line["step"], 0, "{text}");
        // Stamped with when it was logged (issue #42).
        let logged = line["time"].as_f64().expect("a time");
        let now = super::super::run_files::unix_now();
        assert!((now - 60.0..=now).contains(&logged), "{text}");
        let mut log = MetricsLog::open(&path, Some(0)).unwrap();
        log.write(&serde_json::json!({"step": 1})).unwrap();
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_resume_refuses_metrics_that_are_not_utf8_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        let mut bytes = b"{\"step\":1}\n{\"step\":2}\n".to_vec();
        bytes.extend_from_slice(b"\xff\xfe{\"step\":3}\n");
        std::fs::write(&path, &bytes).unwrap();
        let err = MetricsLog::open(&path, Some(2)).err().expect("refused");
        assert_eq!(crate::error::exit_code_of(&err), 2, "{err:#}");
        let text = err.to_string();
        assert!(text.contains("metrics.jsonl line 3"), "{text}");
        assert!(text.contains("fix:"), "{text}");
        // Nothing was dropped.
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
