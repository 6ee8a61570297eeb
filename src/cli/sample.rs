//! `envgen sample RUN_DIR --prompt …`: generate text from a trained GPT-2 run.

use std::path::PathBuf;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data;
use envgen_experiments::gpt2::{self, eval, hf, Gpt2Config};

use crate::error::Result;

#[derive(Debug, clap::Args)]
pub struct Args {
    pub run: PathBuf,
    #[arg(long, default_value = "")]
    pub prompt: String,
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    #[arg(long = "top-k")]
    pub top_k: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn execute(args: Args) -> Result<i32> {
    let config: Gpt2Config = eval::run_config(&args.run)?;
    let weights = eval::run_weights(&args.run)?;
    let device = Default::default();
    let model = hf::load(config.model.init::<Cpu>(&device), &weights)?;
    // The tokenizer alone: never the training set (shards can be terabytes).
    let tokenizer = data::tokenizer_of(&config.data)?;
    let prompt = tokenizer.encode(&args.prompt);
    let out = gpt2::sample(
        &model,
        &config.model,
        &prompt,
        gpt2::SampleOptions {
            tokens: args.tokens,
            temperature: args.temperature,
            top_k: args.top_k,
            seed: args.seed,
            // The embedding's padding rows (GPT-2: 50,257 → 50,304) are
            // never sampled.
            vocab_limit: Some(tokenizer.vocab_size()),
        },
        &device,
    );
    crate::output::outln!("{}{}", args.prompt, tokenizer.decode(&out));
    Ok(0)
}
