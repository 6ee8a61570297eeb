//! `envgen rerun MANIFEST_OR_RUN_DIR`

use std::path::PathBuf;

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run directory or its manifest.json.
    pub source: PathBuf,
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub out: PathBuf,
}

pub fn execute(_args: Args) -> Result<i32> {
    Err(not_yet("rerun", "issue #5 (run anywhere)"))
}
