//! One run directory as written by envgen and the experiments: the typed
//! manifest (`runs::manifest`), `summary.json` and `metrics.jsonl` (free-form
//! per experiment, read as JSON values), `config.toml`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::manifest::{self, Manifest};
use crate::error::{Result, UserError};

#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
    pub manifest: Manifest,
    /// Absent while the run is still going (or when it crashed hard).
    pub summary: Option<Value>,
}

impl RunDir {
    /// Open a run directory, or the directory of a `manifest.json` path.
    pub fn open(path: &Path) -> Result<RunDir> {
        let dir = if path.file_name().is_some_and(|n| n == "manifest.json") {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        } else {
            path.to_path_buf()
        };
        let manifest_path = dir.join("manifest.json");
        if !manifest_path.is_file() {
            return Err(UserError::usage(format!(
                "{} is not a run directory: no manifest.json in it",
                dir.display()
            ))
            .with_fix("pass a directory made by `envgen run` (see `envgen runs list`)")
            .into());
        }
        let manifest = manifest::read(&dir)?;
        let summary_path = dir.join("summary.json");
        let summary = if summary_path.is_file() {
            Some(read_json(&summary_path)?)
        } else {
            None
        };
        Ok(RunDir {
            path: dir,
            manifest,
            summary,
        })
    }

    pub fn run_id(&self) -> String {
        self.manifest.run_id.clone()
    }

    pub fn config_hash(&self) -> Option<&str> {
        Some(self.manifest.config_hash.as_str())
    }

    pub fn status(&self) -> &str {
        self.summary
            .as_ref()
            .and_then(|s| s["status"].as_str())
            .unwrap_or("running")
    }

    /// Every logged step of `metrics.jsonl` (malformed lines are an error
    /// naming the line: a truncated last line from a killed run is skipped).
    pub fn metrics(&self) -> Result<Vec<Value>> {
        let path = self.path.join("metrics.jsonl");
        let text = envgen_experiments::engine::rundir::read_metrics_text(&path)?;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut rows = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str(line) {
                Ok(row) => rows.push(row),
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                Err(e) => {
                    return Err(UserError::usage(format!(
                        "{} line {}: not JSON ({e})",
                        path.display(),
                        i + 1
                    ))
                    .with_fix("remove or repair that line (envgen writes one JSON object per line)")
                    .into())
                }
            }
        }
        Ok(rows)
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        UserError::usage(format!("{}: not valid JSON ({e})", path.display()))
            .with_fix("the file was edited or truncated; re-run the experiment")
            .into()
    })
}
