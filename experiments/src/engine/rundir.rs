//! The run directory: `config.toml`, `manifest.json`, `metrics.jsonl`,
//! `summary.json`, `checkpoints/` (see docs/cli.md, "envgen experiments, run").

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::UserError;
use crate::fsutil::write_atomic;

/// Hardware knobs: they change speed, never the science.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The hardware profile (env/profiles.toml) these knobs came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub micro_batch: usize,
    pub grad_accum: usize,
    pub precision: String,
    pub backend: String,
    pub device: String,
    /// CPU threads for tensor work (the rayon pool) in the process that
    /// trains; absent in manifests written before envgen recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
}

/// `manifest.json`. The environment part (envgen_version, git_revision,
/// image, where, host) is supplied by the caller as JSON and flattened in,
/// so this crate never probes the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub run_id: String,
    pub experiment: String,
    pub preset: Option<String>,
    pub config_hash: String,
    pub profile: Profile,
    pub started_at: String,
    pub finished_at: Option<String>,
    #[serde(flatten)]
    pub environment: serde_json::Map<String, serde_json::Value>,
}

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

/// Create `out/<run_id>` (suffixing `-2`, `-3`… if taken) and return it.
pub fn create_run_dir(out: &Path, run_id: &str) -> anyhow::Result<(String, PathBuf)> {
    std::fs::create_dir_all(out).map_err(|e| {
        UserError::environment(format!("cannot create {}: {e}", out.display()))
            .with_fix("pass a writable directory with --out")
    })?;
    for n in 1.. {
        let id = if n == 1 {
            run_id.to_string()
        } else {
            format!("{run_id}-{n}")
        };
        let dir = out.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(
                    UserError::environment(format!("cannot create {}: {e}", dir.display())).into(),
                )
            }
        }
    }
    unreachable!("the loop returns")
}

/// End a run: write `summary.json` and stamp `manifest.json`'s `finished_at`
/// (every experiment's loop calls this once, whatever the status).
pub fn finish_run(run_dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    write_json(&run_dir.join("summary.json"), summary)?;
    let manifest_path = run_dir.join("manifest.json");
    if let Ok(mut manifest) = read_json::<Manifest>(&manifest_path) {
        manifest.finished_at = Some(now_rfc3339());
        write_json(&manifest_path, &manifest)?;
    }
    Ok(())
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

/// Appends one JSON object per line to `metrics.jsonl`.
pub struct MetricsLog {
    file: std::fs::File,
}

impl MetricsLog {
    /// Open for appending; on resume, drop lines past `keep_through_step`
    /// (written after the checkpoint we resume from).
    pub fn open(path: &Path, keep_through_step: Option<u64>) -> anyhow::Result<Self> {
        if let Some(last) = keep_through_step {
            let text = std::fs::read_to_string(path).unwrap_or_default();
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
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self { file })
    }

    pub fn write(&mut self, record: &serde_json::Value) -> anyhow::Result<()> {
        writeln!(self.file, "{record}")?;
        Ok(())
    }
}
