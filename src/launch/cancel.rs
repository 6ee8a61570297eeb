//! `envgen runs cancel RUN`: stop a run that has not ended, wherever it
//! is, the way Ctrl-C would (it checkpoints and writes an `interrupted`
//! summary), and end a lost one for good. A run that ended is refused.

use std::path::Path;

use envgen_experiments::engine::{Status, Summary};

use super::launcher::{last_checkpoint_state, mark_ended, RunOutcome};
use super::liveness::{final_summary, Checker, Liveness};
use crate::error::{Result, UserError};
use crate::runs::manifest;

/// What `runs cancel` did.
pub struct Cancelled {
    pub outcome: RunOutcome,
    /// What was stopped, or why the run was lost.
    pub what: String,
}

pub fn cancel(dir: &Path) -> Result<Cancelled> {
    let manifest = manifest::read(dir)?;
    if let Some(summary) = final_summary(dir) {
        return Err(UserError::usage(format!(
            "{} already ended ({})",
            dir.display(),
            serde_json::to_value(summary.status)?
                .as_str()
                .unwrap_or("?")
        ))
        .with_fix("only a pending, running or lost run can be cancelled")
        .into());
    }
    let mut checker = Checker::default();
    let liveness = super::liveness_of(&mut checker, dir, &manifest);
    let life = super::life_of(manifest.environment.place);
    let (summary, what) = match liveness {
        Liveness::Unknown(why) => {
            return Err(UserError::environment(format!(
                "cannot tell whether {} still runs: {why}",
                dir.display()
            ))
            .with_fix("start the Docker daemon (or reach the Slurm controller) and cancel again")
            .into())
        }
        Liveness::Lost(why) => {
            life.clear_lost(&mut checker, dir, &manifest);
            (end_lost(dir, &why)?, why)
        }
        Liveness::Running(what) => (life.stop(&mut checker, dir, &manifest)?, what),
    };
    Ok(Cancelled {
        outcome: RunOutcome {
            run_dir: dir.to_path_buf(),
            summary,
        },
        what,
    })
}

/// A lost run ends `interrupted` when it has a checkpoint to resume from,
/// else `failed` (what its place left behind was cleared first).
fn end_lost(dir: &Path, why: &str) -> Result<Summary> {
    let status = if last_checkpoint_state(dir).is_some() {
        Status::Interrupted
    } else {
        Status::Failed
    };
    mark_ended(
        dir,
        status,
        &format!("lost: {why} (ended by `envgen runs cancel`)"),
    )
}
