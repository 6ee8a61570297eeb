//! `envgen export hf RUN_DIR`: a finished GPT-2 run as a Hugging Face model
//! directory (config.json + model.safetensors) that
//! `GPT2LMHeadModel.from_pretrained` loads; a byte-level run's also gets its
//! tokenizer.json, so `envgen sample --model hf:DIR` reads it with the
//! run's tokens (it fell back to GPT-2's BPE, whose ids the 256-row
//! embedding cannot take; issue #40).

use std::path::PathBuf;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data::TokenizerKind;
use envgen_experiments::gpt2::{eval, hf};

use crate::error::Result;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a GPT-2 run's final weights as a Hugging Face model directory.
    Hf {
        /// The finished GPT-2 run directory.
        run: PathBuf,
        /// Where to write (default RUN_DIR/hf).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Hf { run, out } => {
            let device = Default::default();
            let config = eval::run_config(&run)?;
            let model = hf::load(config.model.init::<Cpu>(&device), &eval::run_weights(&run)?)?;
            let out = out.unwrap_or_else(|| run.join("hf"));
            hf::save_pretrained(&model, &config.model, &out)?;
            if config.data.tokenizer == TokenizerKind::Byte {
                envgen_experiments::rft::pretrained::write_byte_tokenizer(&out)?;
            }
            crate::output::outln!("{}", out.display());
            Ok(0)
        }
    }
}
