//! Evaluating a finished model outside training (`envgen eval gpt2`): a
//! run directory or a Hugging Face GPT-2 directory (OpenAI's checkpoint
//! among them), scored on validation shards and/or HellaSwag.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::tensor::{ElementConversion, TensorData};
use envgen_kernels::FusedBackend;
use serde_json::{json, Map, Value};

use super::{hellaswag, hf, Gpt2, Gpt2Config, ModelConfig};
use crate::data::{shards, Tokenizer, Tokens};
use crate::engine;
use crate::error::UserError;

/// A model ready to evaluate, with the tokenizer it reads text with.
pub struct Checkpoint<B: Backend> {
    pub model_cfg: ModelConfig,
    pub model: Gpt2<B>,
    pub tokenizer: Tokenizer,
    /// The run's science config (None for a Hugging Face directory).
    pub run_config: Option<Gpt2Config>,
}

/// The science config of a run directory (`config.toml`).
pub fn run_config(run: &Path) -> anyhow::Result<Gpt2Config> {
    let path = run.join("config.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UserError::usage(format!("cannot read {}: {e}", path.display())).with_fix(
            "pass a run directory written by `envgen run gpt2`, or a Hugging Face GPT-2 directory",
        )
    })?;
    Ok(engine::load(&text, &path.display().to_string(), &[])?.science)
}

/// The final weights of a run directory (`model.safetensors`).
pub fn run_weights(run: &Path) -> anyhow::Result<PathBuf> {
    let weights = run.join("model.safetensors");
    if !weights.is_file() {
        return Err(UserError::usage(format!(
            "{} has no model.safetensors (the run did not finish)",
            run.display()
        ))
        .with_fix("resume it with `envgen run gpt2 --resume RUN_DIR` first")
        .into());
    }
    Ok(weights)
}

/// Load a run directory or a Hugging Face GPT-2 directory.
pub fn load<B: Backend>(path: &Path, device: &B::Device) -> anyhow::Result<Checkpoint<B>> {
    if hf::is_pretrained_dir(path) {
        let (model_cfg, model) = hf::load_pretrained::<B>(path, device)?;
        let tokenizer = Tokenizer::gpt2();
        if model_cfg.vocab_size < tokenizer.vocab_size() {
            return Err(UserError::usage(format!(
                "{}: vocab_size {} is smaller than GPT-2's tokenizer ({}), which Hugging Face directories are read with",
                path.display(),
                model_cfg.vocab_size,
                tokenizer.vocab_size()
            ))
            .with_fix("evaluate the run directory the model came from instead (its config.toml names its tokenizer)")
            .into());
        }
        return Ok(Checkpoint {
            model_cfg,
            model,
            tokenizer,
            run_config: None,
        });
    }
    let config = run_config(path)?;
    let model = hf::load(config.model.init::<B>(device), &run_weights(path)?)?;
    Ok(Checkpoint {
        model_cfg: config.model.clone(),
        model,
        tokenizer: crate::data::tokenizer_of(&config.data)?,
        run_config: Some(config),
    })
}

/// What to evaluate.
#[derive(Debug, Clone, Default)]
pub struct EvalRequest {
    /// Validation shards (`.bin` llm.c or `.npy` build-nanogpt): a file, a
    /// directory (its `*_val_*` shards) or a glob.
    pub val: Option<PathBuf>,
    /// Windows of `block_size` tokens, evenly spaced over the shards.
    pub val_windows: usize,
    pub hellaswag: Option<PathBuf>,
    pub hellaswag_items: Option<usize>,
}

/// Logits `[tokens × vocab]` (flattened) of one token row.
pub fn logits<B: FusedBackend>(model: &Gpt2<B>, tokens: &[u32], device: &B::Device) -> Vec<f32> {
    let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
    let idx = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, tokens.len()]), device);
    model
        .forward(idx)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_default()
}

/// Mean next-token loss over `windows` evenly spaced windows of `tokens`.
pub fn val_loss<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    tokens: &Tokens,
    windows: usize,
    device: &B::Device,
) -> anyhow::Result<f64> {
    let len = cfg.block_size + 1;
    let span = tokens.window_count(len);
    if span == 0 {
        return Err(UserError::usage(format!(
            "the validation shards hold no window of block_size + 1 = {len} tokens"
        ))
        .with_fix("give bigger validation shards")
        .into());
    }
    let windows = windows.max(1);
    let mut total = 0.0;
    for i in 0..windows {
        let (segment, start) = tokens
            .window_start(i * span / windows, len)
            .unwrap_or((0, 0));
        let w = tokens.window(segment, start, len);
        let t = cfg.block_size;
        let x: Vec<i64> = w[..t].iter().map(|&v| i64::from(v)).collect();
        let y: Vec<i64> = w[1..].iter().map(|&v| i64::from(v)).collect();
        let x = Tensor::<B, 2, Int>::from_data(TensorData::new(x, [1, t]), device);
        let y = Tensor::<B, 2, Int>::from_data(TensorData::new(y, [1, t]), device);
        let loss: f64 = model.loss(x, y).into_scalar().elem();
        total += loss;
    }
    Ok(total / windows as f64)
}

/// Run the evaluations `request` names; the numbers as JSON fields.
pub fn evaluate<B: FusedBackend>(
    checkpoint: &Checkpoint<B>,
    request: &EvalRequest,
    device: &B::Device,
) -> anyhow::Result<Map<String, Value>> {
    let mut m = Map::new();
    m.insert(
        "parameters".into(),
        json!(checkpoint.model_cfg.num_params()),
    );
    if let Some(path) = &request.val {
        let tokens = Tokens::Mapped(open_val_shards(path)?);
        let loss = val_loss(
            &checkpoint.model,
            &checkpoint.model_cfg,
            &tokens,
            request.val_windows,
            device,
        )?;
        m.insert("val_loss".into(), json!(loss));
        m.insert("val_windows".into(), json!(request.val_windows.max(1)));
    }
    if let Some(path) = &request.hellaswag {
        let items = hellaswag::load(path, request.hellaswag_items)?;
        let score = hellaswag::score(
            &checkpoint.model,
            &checkpoint.model_cfg,
            &checkpoint.tokenizer,
            &items,
            device,
        );
        score.insert_into(&mut m);
    }
    Ok(m)
}

/// Validation shards named by a file, directory or glob: llm.c `.bin`, or
/// build-nanogpt `.npy` (by extension; a directory is searched for
/// `*_val_*.bin`, then `*_val_*.npy`).
fn open_val_shards(path: &Path) -> anyhow::Result<Vec<shards::MappedShard>> {
    let npy = (shards::ShardFormat::Npy, "npy");
    let bin = (shards::ShardFormat::Llmc, "bin");
    let (format, extension) = if path.is_dir() {
        if shards::shard_files(path, shards::Split::Val, "bin").is_ok() {
            bin
        } else {
            npy
        }
    } else if path.to_string_lossy().ends_with(".npy") {
        npy
    } else {
        bin
    };
    let files = shards::shard_files(path, shards::Split::Val, extension)?;
    shards::open_all(&files, format)
}
