//! `envgen experiments list | describe`

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the bundled experiments and their presets.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show an experiment's resolved science config, its hash and parameter count.
    Describe {
        experiment: String,
        #[arg(long)]
        preset: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn execute(_cmd: Command) -> Result<i32> {
    Err(not_yet("experiments", "issue #6 (experiment engine)"))
}
