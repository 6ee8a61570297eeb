//! How an rft run ends when it does not run to the last stage, and the
//! summary it ends with: `interrupted` (a stop request: `--resume`
//! continues) or `failed` (a training stage diverged: issue #40, it was
//! reported as interrupted). `super::recipe` ends every model's run here.

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::engine::rundir::{Status, Summary};
use crate::engine::{self, RunControl};

/// The run's end when a training stage did not complete: `failed` with the
/// stage's reason (`diverged: …`, exit 1) when the stage failed, so a NaN
/// checkpoint or lr 1e30 is never "interrupted, resume with --resume"
/// (issue #40); interrupted otherwise. `stage` None: the stage's summary
/// could not be read (a stop before it began).
pub(crate) fn stage_ended(
    control: &RunControl,
    started: Instant,
    steps_done: u64,
    stage: Option<&Summary>,
) -> anyhow::Result<Summary> {
    match stage {
        Some(stage) if stage.status == Status::Failed => {
            let why = stage
                .metrics
                .get("error")
                .cloned()
                .unwrap_or_else(|| json!("a training stage failed"));
            let metrics = Map::from_iter([("error".to_string(), why)]);
            finish(control, started, steps_done, Status::Failed, metrics)
        }
        _ => interrupted(control, started, steps_done),
    }
}

/// Stop after a finished step or stage; `--resume` continues from there.
pub(crate) fn interrupted(
    control: &RunControl,
    started: Instant,
    steps_done: u64,
) -> anyhow::Result<Summary> {
    finish(
        control,
        started,
        steps_done,
        Status::Interrupted,
        Map::new(),
    )
}

pub(crate) fn finish(
    control: &RunControl,
    started: Instant,
    steps_done: u64,
    status: Status,
    metrics: Map<String, Value>,
) -> anyhow::Result<Summary> {
    // Wall time of this session plus the stages' earlier sessions is what a
    // user waited; the stages' own summaries hold their training time.
    let summary = Summary {
        status,
        wall_s: started.elapsed().as_secs_f64(),
        steps_done,
        metrics,
    };
    engine::rundir::finish_run(&control.run_dir, &summary)?;
    Ok(summary)
}
