//! Whether a run that has no final summary still trains. A run writes its
//! summary when it ends, however it ends — unless it could not: kill -9, a
//! lost Docker daemon, a Slurm job that vanished. Such a run is `lost`, a
//! state derived here for `runs list`/`show` (never written into the run:
//! `runs cancel` does that). Each place is asked in its own terms, by its
//! [`RunLife`](super::life::RunLife) (`launch::liveness_of` picks it): the
//! run's lock (`runs::lock`) for this machine's runs, the daemon for the
//! container, Slurm for the job. When the place cannot be asked (the
//! daemon or the controller does not answer), the answer is `unknown`,
//! never `lost`. Here: the answer's type, the daemon connection shared by
//! many runs ([`Checker`]) and what a lock alone says ([`by_lock`]).

use std::path::Path;

use bollard::Docker as Daemon;
use envgen_experiments::engine::{rundir, Status, Summary};

use crate::runs::lock::{self, LockState};

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
}

/// What the lock of a run that trained on a machine (not in a container
/// or a job) says once no process holds it.
pub fn by_lock(lock: LockState) -> Liveness {
    match lock {
        LockState::Held(Some(h)) => Liveness::Running(format!("{h} holds its lock")),
        LockState::Held(None) => Liveness::Running("an envgen holds its lock".into()),
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
    }
}
