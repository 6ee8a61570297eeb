//! Starting runs somewhere other than this process: a Slurm job (or job
//! array) or a Docker container. The submitting envgen prepares the run
//! directory; the launched envgen trains into it. The experiments never
//! know where they run.

pub mod auto;
pub mod docker;
pub mod docker_job;
pub mod ranks;
pub mod slurm;
pub mod slurm_job;

use std::path::{Path, PathBuf};

use envgen_experiments::engine::{rundir, Manifest, Status, Summary};
use serde_json::{json, Map};

use crate::error::Result;

/// How one launched run ended, as its run directory records it.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub summary: Summary,
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
    let manifest_path = dir.join("manifest.json");
    if let Ok(mut manifest) = rundir::read_json::<Manifest>(&manifest_path) {
        manifest.finished_at = Some(rundir::now_rfc3339());
        rundir::write_json(&manifest_path, &manifest)?;
    }
    Ok(summary)
}

/// The training state of `checkpoints/latest`, if the run has one.
fn last_checkpoint_state(dir: &Path) -> Option<serde_json::Value> {
    let root = dir.join("checkpoints");
    let latest = std::fs::read_to_string(root.join("latest")).ok()?;
    rundir::read_json(&root.join(latest.trim()).join("state.json")).ok()
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
        130
    } else {
        0
    }
}
