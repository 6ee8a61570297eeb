//! `envgen export hf RUN_DIR`: a finished GPT-2 run as a Hugging Face model
//! directory that `AutoModelForCausalLM`/`AutoTokenizer.from_pretrained`
//! load: the embedding cut to the tokenizer's vocabulary, the run's
//! tokenizer files and bos/eos (`gpt2::export`, issue #42; a byte-level
//! run's tokenizer.json came first, issue #40).

use std::path::PathBuf;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data;
use envgen_experiments::gpt2::{eval, export, hf};

use crate::error::Result;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a GPT-2 run's final weights as a Hugging Face model directory.
    Hf {
        /// The run's id (or any unique part of it) under --runs-dir, or its directory.
        run: PathBuf,
        #[command(flatten)]
        runs_dir: super::runs::RunsDir,
        /// Where to write (default RUN_DIR/hf).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Hf { run, runs_dir, out } => {
            let run = crate::runs::store::resolve(&run, &runs_dir.dir)?;
            let device = Default::default();
            let config = eval::run_config(&run)?;
            let tokenizer = data::tokenizer_of(&config.data)?;
            let model = hf::load(config.model.init::<Cpu>(&device), &eval::run_weights(&run)?)?;
            let out = out.unwrap_or_else(|| run.join("hf"));
            export::export_run(&model, &config.model, &tokenizer, &out)?;
            crate::output::outln!("{}", out.display());
            Ok(0)
        }
    }
}
