//! `envgen runs list | show | compare | report | cancel`

use std::path::PathBuf;

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List run directories.
    List {
        #[arg(long, value_name = "DIR", default_value = "runs")]
        out: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Explain one run: config, profile, status, final metrics.
    Show {
        run: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Same science config? What differs in profile, image, host; metric deltas.
    Compare {
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Write a Markdown + HTML report with loss curves and throughput plots.
    Report {
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Cancel a Slurm run (scancel) and mark it interrupted.
    Cancel { run: PathBuf },
}

pub fn execute(_cmd: Command) -> Result<i32> {
    Err(not_yet(
        "runs",
        "issue #5 (run anywhere) and #6 (experiment engine)",
    ))
}
