//! `envgen sample RUN_DIR --prompt …`: generate text from a trained GPT-2 run.

use std::path::PathBuf;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data;
use envgen_experiments::engine;
use envgen_experiments::gpt2::{self, hf, Gpt2Config};

use crate::error::{Result, UserError};

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
    let config_path = args.run.join("config.toml");
    let text = std::fs::read_to_string(&config_path).map_err(|e| {
        UserError::usage(format!("cannot read {}: {e}", config_path.display()))
            .with_fix("pass a run directory written by `envgen run gpt2`")
    })?;
    let config: Gpt2Config = engine::load(&text, &config_path.display().to_string(), &[])?.science;
    let weights = args.run.join("model.safetensors");
    if !weights.is_file() {
        return Err(UserError::usage(format!(
            "{} has no model.safetensors (the run did not finish)",
            args.run.display()
        ))
        .with_fix("resume it with `envgen run gpt2 --resume RUN_DIR` first")
        .into());
    }
    let device = Default::default();
    let model = hf::load(config.model.init::<Cpu>(&device), &weights)?;
    let tokenizer = data::load(&config.data)?.tokenizer;
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
        },
        &device,
    );
    println!("{}{}", args.prompt, tokenizer.decode(&out));
    Ok(0)
}
