//! What every place shares: the [`Launcher`] sequence's trait, how a run
//! ended ([`RunOutcome`], [`Launched`]), the summary of a run that could not
//! write its own ([`mark_ended`]) and the exit code of a set of runs. Kept
//! out of `mod.rs`, which picks the places, so that a place's file imports
//! this and nothing that imports it back.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use envgen_experiments::engine::{checkpoint, rundir, Status, Summary};
use serde_json::{json, Map};

use super::request::RunRequest;
use super::signals;
use crate::error::Result;
use crate::runs::manifest;

/// How one launched run ended, as its run directory records it.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub summary: Summary,
}

/// What [`run`](super::run) ended with.
#[derive(Debug)]
pub enum Launched {
    /// The runs ended; how each did.
    Ended(Vec<RunOutcome>),
    /// Submitted and left running (`--detach`): the job and its run directories.
    Detached { job: String, runs: Vec<PathBuf> },
    /// A rank other than 0 ended: rank 0 reports the run; this is only its exit status.
    RankEnded(Vec<RunOutcome>),
}

/// One place a run can go.
pub trait Launcher {
    /// What Ctrl-C does here, said when it comes.
    fn stop_message(&self) -> &'static str;
    /// Check what this place needs and make (or reopen) the run directories.
    fn prepare(&mut self, req: &RunRequest) -> Result<Vec<PathBuf>>;
    /// Start training them there; a job ID to give back with `--detach`.
    /// By default nothing: places whose runs train while envgen waits for
    /// them (this process, the ranks) start in `follow`.
    fn start(
        &mut self,
        _req: &RunRequest,
        _runs: &[PathBuf],
        _stop: &Arc<AtomicBool>,
    ) -> Result<Option<String>> {
        Ok(None)
    }
    /// Wait until they ended; `stop` set means stop them (they checkpoint first).
    fn follow(
        &mut self,
        req: &RunRequest,
        runs: &[PathBuf],
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<RunOutcome>>;
    /// Whether this process reports and records the runs (not a rank > 0).
    fn reports(&self) -> bool {
        true
    }
}

/// Write the summary of a run that ended without writing its own (killed,
/// cancelled before it started, container gone), keeping the steps and
/// losses of its last checkpoint so `--resume` continues from there.
pub fn mark_ended(dir: &Path, status: Status, why: &str) -> Result<Summary> {
    let checkpoint = last_checkpoint_state(dir);
    let mut metrics = Map::new();
    metrics.insert("reason".into(), json!(why));
    let steps_done = checkpoint
        .as_ref()
        .and_then(|s| s["step"].as_u64())
        .unwrap_or(0);
    let summary = Summary {
        status,
        wall_s: checkpoint
            .as_ref()
            .and_then(|s| s["wall_s"].as_f64())
            .unwrap_or(0.0),
        steps_done,
        metrics,
    };
    rundir::write_json(&dir.join("summary.json"), &summary)?;
    if manifest::read(dir).is_ok() {
        manifest::stamp_finished(dir)?;
    }
    Ok(summary)
}

/// The summary of a run whose training failed with `err`: its steps and
/// wall time are those of its last checkpoint (what a resume continues
/// from), not zero.
pub fn failed_summary(dir: &Path, err: &anyhow::Error) -> Summary {
    let mut summary = envgen_experiments::registry::failed_summary(err);
    if let Some(state) = last_checkpoint_state(dir) {
        summary.steps_done = state["step"].as_u64().unwrap_or(0);
        summary.wall_s = state["wall_s"].as_f64().unwrap_or(0.0);
    }
    summary
}

/// The training state of `checkpoints/latest`, if the run has one.
pub(crate) fn last_checkpoint_state(dir: &Path) -> Option<serde_json::Value> {
    let latest = checkpoint::latest(&dir.join(checkpoint::CHECKPOINTS)).ok()?;
    rundir::read_json(&latest.join("state.json")).ok()
}

/// The process exit code for a set of launched runs: 0 when all completed,
/// 130 when any was interrupted (and none failed), 1 when any failed.
pub fn exit_code(outcomes: &[RunOutcome]) -> i32 {
    let statuses: Vec<Status> = outcomes.iter().map(|o| o.summary.status).collect();
    if statuses
        .iter()
        .any(|s| matches!(s, Status::Failed | Status::Running))
    {
        1
    } else if statuses.contains(&Status::Interrupted) {
        signals::EXIT_INTERRUPTED
    } else {
        0
    }
}
