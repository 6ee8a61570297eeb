//! Whether a run that has no final summary still trains. A run writes its
//! summary when it ends, however it ends — unless it could not: kill -9, a
//! lost Docker daemon, a Slurm job that vanished. Such a run is `lost`, a
//! state derived here for `runs list`/`show` (never written into the run:
//! `runs cancel` does that). Each place is asked in its own terms: the
//! run's lock (`runs::lock`) for this machine's runs, the daemon for the
//! container, Slurm for the job. When the place cannot be asked (the
//! daemon or the controller does not answer), the answer is `unknown`,
//! never `lost`.

use std::path::Path;

use bollard::Docker as Daemon;
use envgen_experiments::engine::{rundir, Status, Summary};

use super::docker::container_name;
use super::slurm::sbatch;
use crate::image::daemon::container;
use crate::runs::lock::{self, LockState};
use crate::runs::manifest::Manifest;

/// What is known about a run without a final summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Something trains it (or is about to): what.
    Running(String),
    /// Nothing does any more, and it left no summary: why.
    Lost(String),
    /// Cannot tell: why.
    Unknown(String),
}

impl Liveness {
    /// The word `runs list` shows for it.
    pub fn status(&self) -> &'static str {
        match self {
            Liveness::Running(_) => "running",
            Liveness::Lost(_) => "lost",
            Liveness::Unknown(_) => "unknown",
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Liveness::Running(s) | Liveness::Lost(s) | Liveness::Unknown(s) => s,
        }
    }
}

/// The run's summary if it ended (a summary that says `running` is none).
pub fn final_summary(dir: &Path) -> Option<Summary> {
    rundir::read_json::<Summary>(&dir.join("summary.json"))
        .ok()
        .filter(|s| s.status != Status::Running)
}

/// Asks the places; connects to the Docker daemon once for many runs.
#[derive(Default)]
pub struct Checker {
    docker: Option<std::result::Result<(tokio::runtime::Runtime, Daemon), String>>,
}

impl Checker {
    /// Whether the run in `dir` (which has no final summary) still trains.
    pub fn check(&mut self, dir: &Path, manifest: &Manifest) -> Liveness {
        let lock = lock::lock_state(dir);
        if let LockState::Held(holder) = &lock {
            // The trainer itself (natively, in the container or on the node).
            return Liveness::Running(match holder {
                Some(h) => format!("{h} holds its lock"),
                None => "an envgen holds its lock".into(),
            });
        }
        match manifest.environment.place.as_str() {
            "docker" => self.docker_run(dir, manifest),
            "slurm" => slurm_run(manifest),
            _ => match lock {
                LockState::Held(_) => unreachable!("answered above"),
                LockState::Free(Some(h)) => Liveness::Lost(format!(
                    "process {} on host {} is gone without a summary",
                    h.pid, h.host
                )),
                LockState::Free(None) => {
                    Liveness::Lost("the envgen that trained it is gone without a summary".into())
                }
                LockState::Never => Liveness::Lost(format!(
                    "no envgen trains it ({} was never taken) and it has no summary",
                    lock::LOCK_FILE
                )),
                LockState::Unknown(why) => Liveness::Unknown(why),
            },
        }
    }

    /// The daemon (connected on first use), or why it cannot be reached.
    pub fn daemon(&mut self) -> std::result::Result<(&tokio::runtime::Runtime, &Daemon), String> {
        let connected = self.docker.get_or_insert_with(|| {
            let runtime = crate::image::daemon::runtime().map_err(|e| format!("{e:#}"))?;
            let daemon = runtime
                .block_on(crate::image::daemon::connect())
                .map_err(|e| format!("{e:#}"))?;
            Ok((runtime, daemon))
        });
        match connected {
            Ok((runtime, daemon)) => Ok((&*runtime, &*daemon)),
            Err(why) => Err(why.clone()),
        }
    }

    fn docker_run(&mut self, dir: &Path, manifest: &Manifest) -> Liveness {
        let name = container_of(dir, manifest);
        let (runtime, daemon) = match self.daemon() {
            Ok(connected) => connected,
            Err(why) => {
                return Liveness::Unknown(format!(
                    "cannot ask whether container {name} still runs: {why}"
                ))
            }
        };
        match runtime.block_on(container::present(daemon, &name)) {
            Ok(None) if manifest.environment.docker.is_none() => {
                Liveness::Lost(format!("container {name} was never started"))
            }
            Ok(None) => Liveness::Lost(format!("container {name} no longer exists")),
            // Starting: its envgen has not taken the lock yet.
            Ok(Some(c)) if c.running => Liveness::Running(format!("container {name} runs")),
            Ok(Some(c)) => Liveness::Lost(format!(
                "container {name} is {} (exit code {}) without a summary",
                c.status,
                c.exit_code.map_or("?".into(), |c| c.to_string())
            )),
            Err(e) => Liveness::Unknown(format!(
                "cannot ask whether container {name} still runs: {e:#}"
            )),
        }
    }
}

/// The container a Docker run trains in (as recorded, else as it would be named).
pub fn container_of(dir: &Path, manifest: &Manifest) -> String {
    manifest
        .environment
        .docker
        .as_ref()
        .map(|d| d.container.clone())
        .unwrap_or_else(|| container_name(dir))
}

fn slurm_run(manifest: &Manifest) -> Liveness {
    let Some(record) = &manifest.environment.slurm else {
        return Liveness::Lost("it was never submitted (no Slurm job in its manifest)".into());
    };
    let job = &record.job;
    let state = match sbatch::state(job) {
        Ok(state) => state,
        Err(e) => return Liveness::Unknown(format!("cannot ask Slurm about job {job}: {e:#}")),
    };
    match state.tasks.first() {
        Some((_, word)) if state.finished() => {
            Liveness::Lost(format!("Slurm job {job} ended {word} without a summary"))
        }
        Some((_, word)) => Liveness::Running(format!("Slurm job {job} is {word}")),
        None if sbatch::controller_answers() => {
            Liveness::Lost(format!("Slurm job {job} is not known to Slurm any more"))
        }
        None => Liveness::Unknown(format!(
            "Slurm does not answer (`scontrol ping` fails): cannot ask about job {job}"
        )),
    }
}
