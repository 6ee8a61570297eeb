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
            return Err(not_a_run_dir(&dir));
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

    /// The science config (`config.toml`) as JSON, when it is there and parses.
    pub fn science_config(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.path.join("config.toml")).ok()?;
        let config: toml::Value = toml::from_str(&text).ok()?;
        serde_json::to_value(config).ok()
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

/// The run directory a user named: a path to one (or to its
/// `manifest.json`), else a run id as `runs list` prints it, or a prefix of
/// exactly one, under `runs_dir`. A name that matches nothing or several
/// runs is a usage error naming the candidates.
pub fn resolve(name: &Path, runs_dir: &Path) -> Result<PathBuf> {
    let as_path = if name.file_name().is_some_and(|n| n == "manifest.json") {
        name.parent().unwrap_or(Path::new(".")).to_path_buf()
    } else {
        name.to_path_buf()
    };
    if as_path.join("manifest.json").is_file() {
        return Ok(as_path);
    }
    // Only a bare name is looked up as an id: `runs/x` or `../x` stay paths,
    // and a name never walks out of `runs_dir`.
    let id = match name.to_str() {
        Some(id) if !id.is_empty() && !id.contains('/') && id != "." && id != ".." => id,
        _ => return Err(not_a_run_dir(&as_path)),
    };
    let candidates = run_dirs(runs_dir);
    if let Some(exact) = candidates
        .iter()
        .find(|d| d.file_name().is_some_and(|n| n == id))
    {
        return Ok(exact.clone());
    }
    let matches: Vec<&PathBuf> = candidates
        .iter()
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(id))
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] if as_path.exists() => Err(not_a_run_dir(&as_path)),
        [] => Err(UserError::usage(format!(
            "no run `{id}`: not a run directory, and no run id under {} starts with it",
            runs_dir.display()
        ))
        .with_fix(format!(
            "`envgen runs list --runs-dir {}` prints the ids; or pass the run directory's path (or set ENVGEN_RUNS_DIR)",
            runs_dir.display()
        ))
        .into()),
        several => {
            let names: Vec<String> = several
                .iter()
                .take(5)
                .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            let more = several.len().saturating_sub(names.len());
            Err(UserError::usage(format!(
                "`{id}` names {} runs under {}: {}{}",
                several.len(),
                runs_dir.display(),
                names.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ))
            .with_fix("give more of the run id, up to one run")
            .into())
        }
    }
}

/// The run directories directly under `runs_dir` (those with a
/// `manifest.json`), sorted by name; none when it does not exist.
pub fn run_dirs(runs_dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(runs_dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("manifest.json").is_file());
    dirs.sort();
    dirs
}

fn not_a_run_dir(dir: &Path) -> anyhow::Error {
    UserError::usage(format!(
        "{} is not a run directory: no manifest.json in it",
        dir.display()
    ))
    .with_fix("pass a run id or a directory made by `envgen run` (see `envgen runs list`)")
    .into()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn make_runs(ids: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for id in ids {
            let dir = root.path().join("runs").join(id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("manifest.json"), "{}").unwrap();
        }
        // Not a run: no manifest.
        std::fs::create_dir_all(root.path().join("runs/gpt2-notes")).unwrap();
        root
    }

    #[test]
    fn a_run_is_named_by_path_id_or_unique_prefix() {
        let root = make_runs(&[
            "gpt2-tiny-20261126-1-aaaa",
            "gpt2-tiny-20261126-2-bbbb",
            "rft-tiny-1",
        ]);
        let runs = root.path().join("runs");
        let full = runs.join("rft-tiny-1");
        assert_eq!(resolve(&full, Path::new("elsewhere")).unwrap(), full);
        assert_eq!(
            resolve(&full.join("manifest.json"), Path::new("x")).unwrap(),
            full
        );
        assert_eq!(resolve(Path::new("rft-tiny-1"), &runs).unwrap(), full);
        assert_eq!(resolve(Path::new("rft"), &runs).unwrap(), full);
        assert_eq!(
            resolve(Path::new("gpt2-tiny-20261126-2"), &runs).unwrap(),
            runs.join("gpt2-tiny-20261126-2-bbbb")
        );
    }

    #[test]
    fn an_ambiguous_or_unknown_name_is_a_usage_error_naming_why() {
        let root = make_runs(&["gpt2-a", "gpt2-b"]);
        let runs = root.path().join("runs");
        let message = |name: &str| {
            let err = resolve(Path::new(name), &runs).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{err:#}");
            crate::error::render(&err)
        };
        let several = message("gpt2");
        assert!(
            several.contains("names 2 runs") && several.contains("gpt2-a, gpt2-b"),
            "{several}"
        );
        let none = message("hrm");
        assert!(
            none.contains("no run `hrm`") && none.contains("--runs-dir"),
            "{none}"
        );
        // A directory without a manifest is not a run, even by prefix.
        assert!(message("gpt2-notes").contains("no run `gpt2-notes`"));
        // Paths are not looked up as ids.
        assert!(message("../gpt2-a").contains("not a run directory"));
    }
}
