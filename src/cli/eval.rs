//! `envgen eval gpt2 --checkpoint PATH`: score a finished GPT-2 (a run
//! directory, or a Hugging Face directory such as OpenAI's `gpt2`) on
//! validation shards and/or HellaSwag, without training.

use std::path::PathBuf;

use envgen_experiments::backend::Cpu;
use envgen_experiments::gpt2::eval::{self, EvalRequest};

use crate::error::{Result, UserError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The experiment (only `gpt2` has evaluations).
    pub experiment: String,
    /// A run (its id or any unique part of it under --runs-dir, or its
    /// directory), or a Hugging Face GPT-2 directory (config.json +
    /// model.safetensors).
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub runs_dir: super::runs::RunsDir,
    /// HellaSwag's hellaswag_val.jsonl (see docs/experiments/gpt2.md).
    #[arg(long)]
    pub hellaswag: Option<PathBuf>,
    /// Score only the first N HellaSwag items.
    #[arg(long = "hellaswag-items")]
    pub hellaswag_items: Option<usize>,
    /// Validation shards: an llm.c .bin or build-nanogpt .npy file, a
    /// directory of *_val_* shards, or a glob.
    #[arg(long)]
    pub val: Option<PathBuf>,
    /// Windows of block_size tokens for the validation loss.
    #[arg(long = "val-windows", default_value_t = 20)]
    pub val_windows: usize,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(args: Args) -> Result<i32> {
    if args.experiment != "gpt2" {
        return Err(UserError::usage(format!(
            "`envgen eval {}`: only gpt2 has evaluations",
            args.experiment
        ))
        .with_fix("run `envgen eval gpt2 --checkpoint RUN_DIR --hellaswag FILE`")
        .into());
    }
    if args.hellaswag.is_none() && args.val.is_none() {
        return Err(UserError::usage(
            "nothing to evaluate: give --hellaswag FILE and/or --val SHARDS",
        )
        .with_fix("e.g. envgen eval gpt2 --checkpoint RUN_DIR --hellaswag hellaswag_val.jsonl")
        .into());
    }
    let path = if envgen_experiments::gpt2::hf::is_pretrained_dir(&args.checkpoint) {
        args.checkpoint.clone()
    } else {
        crate::runs::store::resolve(&args.checkpoint, &args.runs_dir.dir)?
    };
    let device = Default::default();
    let checkpoint = eval::load::<Cpu>(&path, &device)?;
    let request = EvalRequest {
        val: args.val,
        val_windows: args.val_windows,
        hellaswag: args.hellaswag,
        hellaswag_items: args.hellaswag_items,
    };
    let mut metrics = eval::evaluate(&checkpoint, &request, &device)?;
    metrics.insert("checkpoint".into(), path.display().to_string().into());
    if args.json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&metrics)?);
    } else {
        for (key, value) in &metrics {
            crate::output::outln!("{key:<20} {value}");
        }
    }
    Ok(0)
}
