//! A Slurm run after it was submitted: whether its job still runs, and
//! cancelling it (`runs list`, `runs cancel`).

use std::path::Path;

use envgen_experiments::engine::Summary;

use super::cancel;
use super::sbatch as slurm;
use crate::error::Result;
use crate::launch::life::RunLife;
use crate::launch::liveness::{Checker, Liveness};
use crate::runs::lock::LockState;
use crate::runs::manifest::Manifest;

/// A Slurm run's life: Slurm is asked about its job.
pub struct SlurmLife;

impl RunLife for SlurmLife {
    fn liveness(&self, _: &mut Checker, _: &Path, manifest: &Manifest, _: LockState) -> Liveness {
        job_liveness(manifest)
    }

    fn stop(&self, _: &mut Checker, dir: &Path, manifest: &Manifest) -> Result<Summary> {
        Ok(cancel(dir, manifest)?.summary)
    }
}

fn job_liveness(manifest: &Manifest) -> Liveness {
    let Some(record) = &manifest.environment.slurm else {
        return Liveness::Lost("it was never submitted (no Slurm job in its manifest)".into());
    };
    let job = &record.job;
    let state = match slurm::state(job) {
        Ok(state) => state,
        Err(e) => return Liveness::Unknown(format!("cannot ask Slurm about job {job}: {e:#}")),
    };
    match state.tasks.first() {
        Some((_, word)) if state.finished() => {
            Liveness::Lost(format!("Slurm job {job} ended {word} without a summary"))
        }
        Some((_, word)) => Liveness::Running(format!("Slurm job {job} is {word}")),
        None if slurm::controller_answers() => {
            Liveness::Lost(format!("Slurm job {job} is not known to Slurm any more"))
        }
        None => Liveness::Unknown(format!(
            "Slurm does not answer (`scontrol ping` fails): cannot ask about job {job}"
        )),
    }
}
