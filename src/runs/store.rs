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
        let text = envgen_experiments::engine::run_files::read_metrics_text(&path)?;
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
/// `manifest.json`), else a run id as `runs list` prints it under
/// `runs_dir` — the whole id, else the one id that starts with the name,
/// else the one id that contains it (`runs show 1126-2`). A name that
/// matches nothing or several runs is a usage error naming the candidates.
/// Every command that names a run comes here.
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
    let ids: Vec<&str> = candidates
        .iter()
        .map(|d| d.file_name().and_then(|n| n.to_str()).unwrap_or(""))
        .collect();
    match match_run_id(id, &ids) {
        IdMatch::One(i) => Ok(candidates[i].clone()),
        IdMatch::None if as_path.exists() => Err(not_a_run_dir(&as_path)),
        IdMatch::None => {
            let hint = crate::suggest::did_you_mean(id, ids.iter().copied())
                .map(|d| format!("{d} "))
                .unwrap_or_default();
            Err(UserError::usage(format!(
                "no run `{id}`: not a run directory, and no run id under {} starts with or contains it",
                runs_dir.display()
            ))
            .with_fix(format!(
                "{hint}`envgen runs list --runs-dir {}` prints the ids; or pass the run directory's path (or set ENVGEN_RUNS_DIR)",
                runs_dir.display()
            ))
            .into())
        }
        IdMatch::Several { how, matches } => {
            let names: Vec<&str> = matches.iter().take(5).map(|&i| ids[i]).collect();
            let more = matches.len().saturating_sub(names.len());
            Err(UserError::usage(format!(
                "`{id}` names {} runs under {} (their ids {how} it): {}{}",
                matches.len(),
                runs_dir.display(),
                names.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ))
            .with_fix("give more of the run id, up to one run")
            .into())
        }
    }
}

/// Which of `ids` a typed name picks.
#[derive(Debug, PartialEq)]
enum IdMatch {
    One(usize),
    None,
    /// `how`: "start with" or "contain".
    Several {
        how: &'static str,
        matches: Vec<usize>,
    },
}

/// The whole id first, then a unique prefix, then a unique substring. A
/// prefix shared by several ids is ambiguous even when one of them also
/// contains the name elsewhere: the earlier rule decides.
fn match_run_id(typed: &str, ids: &[&str]) -> IdMatch {
    if let Some(i) = ids.iter().position(|id| *id == typed) {
        return IdMatch::One(i);
    }
    let rules: [(&'static str, fn(&str, &str) -> bool); 2] = [
        ("start with", |id, typed| id.starts_with(typed)),
        ("contain", |id, typed| id.contains(typed)),
    ];
    for (how, rule) in rules {
        let matches: Vec<usize> = (0..ids.len()).filter(|&i| rule(ids[i], typed)).collect();
        match matches.as_slice() {
            [] => continue,
            [one] => return IdMatch::One(*one),
            _ => return IdMatch::Several { how, matches },
        }
    }
    IdMatch::None
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
            "hrm-sudoku-20261127-1-cccc",
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
        // Any unique part of an id: the date and counter, the random tail.
        assert_eq!(
            resolve(Path::new("1126-2"), &runs).unwrap(),
            runs.join("gpt2-tiny-20261126-2-bbbb")
        );
        assert_eq!(
            resolve(Path::new("cccc"), &runs).unwrap(),
            runs.join("hrm-sudoku-20261127-1-cccc")
        );
    }

    #[test]
    fn a_whole_id_wins_over_a_prefix_and_a_prefix_over_a_substring() {
        let ids = ["gpt2", "gpt2-b", "x-gpt2-c", "rft-tiny"];
        assert_eq!(match_run_id("gpt2", &ids), IdMatch::One(0));
        // `rft` starts one id; no other rule is asked.
        assert_eq!(match_run_id("rft", &ids), IdMatch::One(3));
        // `gpt2-` starts one id and is inside another: the prefix decides.
        assert_eq!(match_run_id("gpt2-", &ids), IdMatch::One(1));
        assert_eq!(match_run_id("-c", &ids), IdMatch::One(2));
        assert_eq!(
            match_run_id("tiny", &["a-tiny-1", "b-tiny-2"]),
            IdMatch::Several {
                how: "contain",
                matches: vec![0, 1]
            }
        );
        assert_eq!(match_run_id("zzz", &ids), IdMatch::None);
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
            several.contains("names 2 runs")
                && several.contains("gpt2-a, gpt2-b")
                && several.contains("start with"),
            "{several}"
        );
        let none = message("hrm");
        assert!(
            none.contains("no run `hrm`") && none.contains("--runs-dir"),
            "{none}"
        );
        // A substring shared by several ids is ambiguous too.
        let root2 = make_runs(&["gpt2-x-1126", "hrm-y-1126"]);
        let err = resolve(Path::new("1126"), &root2.path().join("runs")).unwrap_err();
        let text = crate::error::render(&err);
        assert!(
            text.contains("names 2 runs") && text.contains("contain it"),
            "{text}"
        );
        // A typo of a whole id is pointed at it.
        assert!(message("gpt2-c").contains("did you mean gpt2-a, gpt2-b?"));
        // A directory without a manifest is not a run, even by prefix.
        assert!(message("gpt2-notes").contains("no run `gpt2-notes`"));
        // Paths are not looked up as ids.
        assert!(message("../gpt2-a").contains("not a run directory"));
    }
}
