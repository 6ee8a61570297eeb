//! `envgen doctor`

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Image to check (catalog reference, envgen profile, or local Docker image); repeatable.
    #[arg(long = "image", value_name = "REF")]
    pub images: Vec<String>,
    /// Check a PyTorch wheel build, e.g. 2.6.0+cu124.
    #[arg(long, value_name = "VERSION")]
    pub pytorch: Option<String>,
    /// Check that every GPU has the hardware for this precision.
    #[arg(long, value_enum)]
    pub precision: Option<crate::compat::Precision>,
    /// Describe a GPU instead of probing (marketing name or SM); repeatable.
    #[arg(long = "assume-gpu", value_name = "NAME|SM")]
    pub assume_gpus: Vec<String>,
    /// Describe the driver version instead of probing, e.g. 535.261.03.
    #[arg(long, value_name = "VERSION")]
    pub assume_driver: Option<String>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(_args: Args) -> Result<i32> {
    Err(not_yet("doctor", "issue #2 (doctor)"))
}
