//! `envgen run`'s flags as plain values, as the CLI parsed them: what
//! [`request`](super::request()) checks together.
//! Kept apart from the request so that what reads flags (a user command's
//! spec, the request) does not import what checks them.

use std::path::PathBuf;

use envgen_experiments::backend::BackendChoice;
use envgen_experiments::engine::Precision;

use crate::runs::launch_flags::LaunchFlags;

/// `--where`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Where {
    Auto,
    Native,
    Docker,
    Slurm,
}

/// `envgen run`'s flags as plain values (the CLI's job: parse them).
#[derive(Debug, Clone)]
pub struct RunFlags {
    /// The experiment's name; `command` for a user command.
    pub experiment: String,
    /// `-- CMD ARGS…`: a user command instead of an experiment (issue #25).
    pub command: Vec<String>,
    /// `--nproc-per-node N`: the command under torchrun, N processes.
    pub nproc_per_node: Option<u32>,
    /// `--tensorboard-dir DIR`: the command's event files, imported at its end.
    pub tensorboard_dir: Option<PathBuf>,
    pub preset: Option<String>,
    pub config: Option<PathBuf>,
    pub overrides: Vec<String>,
    pub place: Where,
    pub backend: BackendChoice,
    pub micro_batch: Option<usize>,
    /// `--gen-batch N`: rows per generation call (rft).
    pub gen_batch: Option<usize>,
    pub threads: Option<u16>,
    pub precision: Option<Precision>,
    pub profile: Option<String>,
    pub out: PathBuf,
    pub resume: Option<PathBuf>,
    pub sweep: Option<String>,
    pub detach: bool,
    pub launch: LaunchFlags,
    pub stop_after: Option<u64>,
    pub launched: bool,
    pub from_run: Option<PathBuf>,
    /// Progress bars (off with --json).
    pub progress: bool,
}
