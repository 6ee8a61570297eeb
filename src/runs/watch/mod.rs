//! `envgen runs watch`: follow a run directory as it grows — its
//! `metrics.jsonl` (and, for a multi-stage run, each `stages/**/
//! metrics.jsonl`), read a few new bytes at a time — until its
//! `summary.json` says how it ended, or until the place it trains at says
//! nothing trains it any more (`lost`). Where it trains is asked by the
//! caller (`Probe`): that is the launch layer's business, and reading the
//! directory is all this needs to work for native, Docker and Slurm runs.

mod layout;
mod options;
mod progress;
mod screen;
mod tail;
#[cfg(test)]
mod tests;
mod view;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use envgen_experiments::engine::rundir::{self, Status, Summary};
use serde_json::Value;

pub use options::{Mode, Options, Outcome};
use progress::{Plan, RunProgress};
use screen::Screen;
pub use tail::Tail;
pub use view::{State, View};

use super::store::RunDir;
use crate::error::Result;

/// Where the place that trains the run says it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Running(String),
    Lost(String),
    Unknown(String),
}

/// One metrics file and the stage it belongs to.
struct Source {
    /// `None` for the run's own `metrics.jsonl`; `round-1/finetune` for
    /// `stages/round-1/finetune/metrics.jsonl`.
    stage: Option<String>,
    tail: Tail,
    /// Steps of this stage, from `config.toml`.
    total: Option<u64>,
}

/// Follow `run` until it ends; what was seen goes to `out`.
pub fn watch(
    run: &RunDir,
    opts: &Options,
    out: &mut dyn Write,
    probe: &mut dyn FnMut() -> Probe,
) -> Result<Outcome> {
    let config = read_config(&run.path);
    let mut sources = vec![Source {
        stage: None,
        tail: Tail::new(&run.path.join("metrics.jsonl")),
        total: total_steps(&config, None),
    }];
    let mut view = View::new(&run.manifest.run_id, run.manifest.environment.place.name());
    view.enter_stage(None, sources[0].total);
    view.progress = Plan::of_config(&config).map(RunProgress::new);
    let mut screen = Screen::new(opts);
    let mut next_probe = Instant::now();
    // A first `lost` is asked again after `probe_every`: a run directory
    // exists a moment before its trainer takes the lock (or its container
    // starts), and that moment is not the end of the run.
    let mut lost_once = false;
    loop {
        read_sources(&run.path, &config, &mut sources, &mut view)?;
        if let Some(summary) = final_summary(&run.path) {
            // Rows written before the summary that this look missed.
            read_sources(&run.path, &config, &mut sources, &mut view)?;
            view.state = Some(ended(&summary));
            return screen.finish(&view, out, outcome_of(summary.status));
        }
        if Instant::now() >= next_probe {
            next_probe = Instant::now() + opts.probe_every;
            match probe() {
                Probe::Running(why) => {
                    lost_once = false;
                    view.state = Some(State::Running(Some(why)));
                }
                Probe::Unknown(why) => {
                    lost_once = false;
                    view.state = Some(State::Unknown(why));
                }
                Probe::Lost(why) if lost_once => {
                    // It may have ended between the summary's check and the question.
                    read_sources(&run.path, &config, &mut sources, &mut view)?;
                    if let Some(summary) = final_summary(&run.path) {
                        view.state = Some(ended(&summary));
                        return screen.finish(&view, out, outcome_of(summary.status));
                    }
                    view.state = Some(State::Lost(why));
                    return screen.finish(&view, out, Outcome::Lost);
                }
                Probe::Lost(_) => lost_once = true,
            }
        }
        if !screen.show(&view, out) {
            return Ok(Outcome::StdoutClosed);
        }
        std::thread::sleep(opts.interval);
    }
}

/// Read what every source has new, oldest-written file first, so that
/// the stage shown is the one written last. New stage directories are
/// picked up as they appear.
fn read_sources(
    dir: &Path,
    config: &toml::Value,
    sources: &mut Vec<Source>,
    view: &mut View,
) -> Result<()> {
    for (stage, path) in stage_files(dir) {
        if !sources.iter().any(|s| s.tail.path() == path) {
            let total = total_steps(config, Some(&stage));
            sources.push(Source {
                stage: Some(stage),
                tail: Tail::new(&path),
                total,
            });
        }
    }
    let modified = |s: &Source| {
        std::fs::metadata(s.tail.path())
            .and_then(|m| m.modified())
            .ok()
    };
    sources.sort_by_key(modified);
    for source in sources.iter_mut() {
        let lines = source.tail.read_new().map_err(|e| {
            anyhow::Error::new(e).context(format!("reading {}", source.tail.path().display()))
        })?;
        if lines.restarted && source.stage == view.stage {
            view.restart();
        }
        for row in &lines.rows {
            if row.get("gpu").is_some() {
                view.take(row);
                continue;
            }
            match (&source.stage, row.get("stage").and_then(Value::as_str)) {
                // A stage logged by the run itself (rft's datagen and
                // evaluations): named, the steps shown stay the last ones.
                (None, Some(name)) => {
                    view.stage = Some(match row.get("round").and_then(Value::as_u64) {
                        Some(round) => format!("{name} (round {round})"),
                        None => name.to_string(),
                    });
                    if let Some(progress) = &mut view.progress {
                        progress.take_run_row(name, row);
                    }
                }
                (stage, _) => {
                    view.enter_stage(stage.clone(), source.total);
                    if let (Some(progress), Some(stage)) = (&mut view.progress, stage) {
                        progress.take_stage_row(stage, row);
                    }
                }
            }
            view.take(row);
        }
    }
    Ok(())
}

/// `(stage, path)` of each `stages/**/metrics.jsonl` (rft's training stages).
fn stage_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let stages = dir.join("stages");
    if !stages.is_dir() {
        return Vec::new();
    }
    walkdir::WalkDir::new(&stages)
        .max_depth(3)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && e.file_name() == "metrics.jsonl")
        .filter_map(|e| {
            let parent = e.path().parent()?.strip_prefix(&stages).ok()?;
            Some((
                parent.to_string_lossy().into_owned(),
                e.path().to_path_buf(),
            ))
        })
        .collect()
}

/// `config.toml` as a TOML value (an empty table when it cannot be read:
/// the totals are then unknown, nothing else changes).
fn read_config(dir: &Path) -> toml::Value {
    std::fs::read_to_string(dir.join("config.toml"))
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .map_or(toml::Value::Table(toml::Table::new()), toml::Value::Table)
}

/// Steps of the run (`train.steps`) or of one of its stages: the stage
/// directory's last name is its config table (`pretrain.train.steps`,
/// `finetune.train.steps` for `round-2/finetune`).
fn total_steps(config: &toml::Value, stage: Option<&str>) -> Option<u64> {
    let table = match stage {
        None => config,
        Some(stage) => config.get(stage.rsplit('/').next()?)?,
    };
    let steps = table.get("train")?.get("steps")?.as_integer()?;
    u64::try_from(steps).ok()
}

/// The run's summary if it ended (one that says `running` is none).
fn final_summary(dir: &Path) -> Option<Summary> {
    rundir::read_json::<Summary>(&dir.join("summary.json"))
        .ok()
        .filter(|s| s.status != Status::Running)
}

fn outcome_of(status: Status) -> Outcome {
    match status {
        Status::Completed => Outcome::Completed,
        Status::Interrupted => Outcome::Interrupted,
        Status::Failed | Status::Running => Outcome::Failed,
    }
}

/// The status line of an ended run: `completed: 300 steps in 12s`, with
/// the reason a failed or interrupted run gives.
fn ended(summary: &Summary) -> State {
    let status = serde_json::to_value(summary.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let mut detail = format!(
        "{} steps in {}",
        summary.steps_done,
        view::duration(summary.wall_s)
    );
    for key in ["error", "reason"] {
        if let Some(why) = summary.metrics.get(key).and_then(Value::as_str) {
            detail += &format!(" ({why})");
        }
    }
    State::Ended { status, detail }
}
