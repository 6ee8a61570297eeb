//! `envgen sample RUN_DIR --prompt …`

use std::path::PathBuf;

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub run: PathBuf,
    #[arg(long, default_value = "")]
    pub prompt: String,
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    #[arg(long = "top-k")]
    pub top_k: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn execute(_args: Args) -> Result<i32> {
    Err(not_yet("sample", "issue #6 (GPT-2 reproduction)"))
}
