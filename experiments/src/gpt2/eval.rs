//! Evaluating a finished model outside training (`envgen eval gpt2`): a
//! run directory or a Hugging Face GPT-2 directory (OpenAI's checkpoint
//! among them), scored on validation shards and/or HellaSwag.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::tensor::{ElementConversion, TensorData};
use envgen_kernels::FusedBackend;
use serde_json::{json, Map, Value};

use super::{hellaswag, hf, Gpt2, Gpt2Config, ModelConfig, ValSample};
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
    /// Which windows of `block_size` tokens, and how many at most.
    pub val_sample: ValSample,
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

/// Windows scored at once by `envgen eval` (every window has the same
/// number of targets, so the mean of the batches' means, weighted by their
/// windows, is the mean over all targets whatever this is).
const EVAL_BATCH: usize = 8;

/// Mean next-token loss over the windows `sample` picks (at most `rows`)
/// and how many windows that was.
pub fn val_loss<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    tokens: &Tokens,
    sample: ValSample,
    rows: usize,
    device: &B::Device,
) -> anyhow::Result<(f64, usize)> {
    let t = cfg.block_size;
    let starts = sample.windows(tokens, t, rows);
    if tokens.window_count(t + 1) == 0 || starts.is_empty() {
        return Err(UserError::usage(format!(
            "the validation shards hold no window of block_size + 1 = {} tokens",
            t + 1
        ))
        .with_fix("give bigger validation shards")
        .into());
    }
    let mut total = 0.0;
    for chunk in starts.chunks(EVAL_BATCH) {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for &(segment, start) in chunk {
            let w = tokens.window(segment, start, t + 1);
            x.extend(w[..t].iter().map(|&v| i64::from(v)));
            y.extend(w[1..].iter().map(|&v| i64::from(v)));
        }
        let n = chunk.len();
        let x = Tensor::<B, 2, Int>::from_data(TensorData::new(x, [n, t]), device);
        let y = Tensor::<B, 2, Int>::from_data(TensorData::new(y, [n, t]), device);
        let loss: f64 = model.loss(x, y).into_scalar().elem();
        total += loss * n as f64;
    }
    Ok((total / starts.len() as f64, starts.len()))
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
        let block = checkpoint.model_cfg.block_size;
        let (loss, windows) = val_loss(
            &checkpoint.model,
            &checkpoint.model_cfg,
            &tokens,
            request.val_sample,
            request.val_windows,
            device,
        )?;
        m.insert("val_loss".into(), json!(loss));
        m.insert("val_windows".into(), json!(windows));
        m.insert("val_tokens".into(), json!(windows * block));
        m.insert(
            "val_sample".into(),
            json!(request.val_sample.describe(windows, block, tokens.len())),
        );
    }
    if let Some(path) = &request.hellaswag {
        let items = hellaswag::load(path, request.hellaswag_items)?;
        let score = hellaswag::score(
            &checkpoint.model,
            &checkpoint.model_cfg,
            &checkpoint.tokenizer,
            &items,
            &engine::EvalShare::alone(),
            device,
        )?;
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
