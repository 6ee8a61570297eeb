//! `envgen eval gpt2 --checkpoint PATH`: score a finished GPT-2 (a run
//! directory, or a Hugging Face directory such as OpenAI's `gpt2`) on
//! validation shards and/or HellaSwag, without training.

use std::path::PathBuf;

use envgen_experiments::backend::Cpu;
use envgen_experiments::gpt2::eval::{self, EvalRequest};
use envgen_experiments::gpt2::val_sample::{ValSample, REFERENCE_TOKENS};

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
    /// Score the first N validation tokens, in windows of block_size
    /// tiling the split from its start (default: build-nanogpt's sample,
    /// the first 10,485,760 tokens; fewer if the split is shorter).
    #[arg(long = "val-tokens", value_name = "N", conflicts_with = "val_windows")]
    pub val_tokens: Option<usize>,
    /// Instead, score N windows of block_size spread evenly over the whole
    /// split (a quicker estimate, not comparable with the reference).
    #[arg(long = "val-windows", value_name = "N")]
    pub val_windows: Option<usize>,
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
    let (val_sample, val_windows) = match (args.val_tokens, args.val_windows) {
        (_, Some(windows)) => (ValSample::Spread, windows.max(1)),
        (tokens, None) => {
            let tokens = tokens.unwrap_or(REFERENCE_TOKENS);
            let block = checkpoint.model_cfg.block_size;
            (ValSample::First, tokens.div_ceil(block).max(1))
        }
    };
    let request = EvalRequest {
        val: args.val,
        val_sample,
        val_windows,
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
