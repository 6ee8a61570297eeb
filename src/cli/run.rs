//! `envgen run EXP`

use std::path::PathBuf;

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, rft or quantize.
    pub experiment: String,
    #[arg(long, conflicts_with = "config")]
    pub preset: Option<String>,
    /// A science config file (TOML) instead of a preset.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one config key, e.g. --set optim.lr=3e-4; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    #[arg(long = "where", value_enum, default_value = "native")]
    pub location: Where,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// Parent directory of run directories.
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub out: PathBuf,
    /// Continue an interrupted run from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Where {
    Auto,
    Native,
    Docker,
    Slurm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    Cpu,
    Cuda,
}

pub fn execute(_args: Args) -> Result<i32> {
    Err(not_yet("run", "issue #6 (experiment engine)"))
}
