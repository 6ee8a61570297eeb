//! `envgen image …`

use std::path::PathBuf;

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the image profiles in containers/.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Render a profile's Dockerfile, Apptainer definition and charliecloud recipe.
    Render {
        profile: String,
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Build a profile through the Docker Engine API.
    Build {
        profile: String,
        #[arg(long, value_name = "REF")]
        base: Option<String>,
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        /// Build even if the profile is not locked or has drifted from the lock.
        #[arg(long)]
        unlocked: bool,
        #[arg(long)]
        json: bool,
    },
    /// Resolve bases to digests and write containers/envgen.lock.
    Lock { profile: Option<String> },
    /// Recompute the lock and name every drifted entry (exit 1 on drift).
    Verify { profile: Option<String> },
    /// Export a built profile for HPC.
    Export {
        profile: String,
        #[arg(short = 'o', long = "out", value_name = "FILE")]
        out: PathBuf,
        #[arg(long, value_enum, default_value = "docker-archive")]
        format: ExportFormat,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    DockerArchive,
    Charliecloud,
    ApptainerDef,
}

pub fn execute(_cmd: Command) -> Result<i32> {
    Err(not_yet("image", "issue #7 (pinned container images)"))
}
