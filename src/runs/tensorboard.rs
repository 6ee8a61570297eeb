//! `envgen runs export --tensorboard DIR RUN…`: each run's metrics as
//! TensorBoard event files under `DIR/<run_id>/`, written by the same
//! converter as a run's live event file (`envgen_experiments::engine::tensorboard`),
//! so runs from before the event files existed, and several runs, open in
//! one TensorBoard; `DIR` itself gets the HParams experiment of the runs
//! (their config keys, their final metrics).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use envgen_experiments::engine::tensorboard;

use super::store::RunDir;
use crate::error::{Result, UserError};

/// Export every run; the event files written, in order.
pub fn export(runs: &[RunDir], out: &Path) -> Result<Vec<PathBuf>> {
    let mut seen = BTreeSet::new();
    for run in runs {
        let id = run.run_id();
        // The id names a folder under DIR: a plain name, once.
        if Path::new(&id).file_name() != Some(id.as_ref()) {
            return Err(UserError::usage(format!(
                "{}: run_id {id:?} is not a plain folder name",
                run.path.join("manifest.json").display()
            ))
            .with_fix("restore the manifest.json that `envgen run` wrote")
            .into());
        }
        let target = out.join(&id);
        if target.canonicalize().ok() == run.path.canonicalize().ok() && target.exists() {
            return Err(UserError::usage(format!(
                "{} is the run directory itself (its events are in it already)",
                target.display()
            ))
            .with_fix(
                "export into another folder, or open the runs' folder in TensorBoard as it is",
            )
            .into());
        }
        if !seen.insert(id.clone()) {
            return Err(UserError::usage(format!(
                "two runs given have the run id {id}; their events would share {}",
                out.join(&id).display()
            ))
            .with_fix("give each run once, or export them into different folders")
            .into());
        }
    }
    let mut files = Vec::new();
    for run in runs {
        files.push(tensorboard::export(&run.path, &out.join(run.run_id()))?);
    }
    let run_dirs: Vec<&Path> = runs.iter().map(|r| r.path.as_path()).collect();
    files.push(tensorboard::write_experiment(out, &run_dirs)?);
    Ok(files)
}
