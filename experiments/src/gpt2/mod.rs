//! The GPT-2 experiment: config, presets, the training task, Hugging Face
//! weight interop and sampling.

pub mod adapter;
pub mod batch;
pub mod hf;
pub mod lora;
pub mod model;

use std::ops::Range;
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::{ElementConversion, TensorData};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::backend;
use crate::data::{self, DataConfig, TokenData};
use crate::engine::{self, OptimConfig, RunControl, Summary, Task, TrainConfig};
use crate::error::UserError;
use crate::experiment::{self, Experiment, ExperimentInfo, TypedExperiment};
pub use batch::{sample_batch, BatchSampleOptions};
pub use model::{Gpt2, ModelConfig};

pub const EXPERIMENT: &str = "gpt2";

/// The science config of a GPT-2 run (`config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpt2Config {
    pub model: ModelConfig,
    pub data: DataConfig,
    pub train: TrainConfig,
    pub optim: OptimConfig,
    /// Start from these weights (HF GPT-2 safetensors layout) instead of random init.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from: Option<PathBuf>,
}

/// Presets bundled into the binary: (name, TOML text).
pub const PRESETS: &[(&str, &str)] = &[
    ("tiny", include_str!("../../presets/gpt2/tiny.toml")),
    (
        "bench-cpu",
        include_str!("../../presets/gpt2/bench-cpu.toml"),
    ),
    (
        "shakespeare-char",
        include_str!("../../presets/gpt2/shakespeare-char.toml"),
    ),
    (
        "gpt2-124m",
        include_str!("../../presets/gpt2/gpt2-124m.toml"),
    ),
];

pub const DEFAULT_PRESET: &str = "tiny";

pub fn preset_text(name: &str) -> anyhow::Result<&'static str> {
    (&GPT2 as &dyn Experiment).preset_text(name)
}

/// `gpt2` in the experiment registry.
pub struct Gpt2Experiment;
pub static GPT2: Gpt2Experiment = Gpt2Experiment;

impl TypedExperiment for Gpt2Experiment {
    type Config = Gpt2Config;
    const INFO: ExperimentInfo = ExperimentInfo {
        name: EXPERIMENT,
        description:
            "GPT-2 (nanoGPT-style) language model: tiny CPU run up to the 124M reproduction",
        presets: PRESETS,
        default_preset: DEFAULT_PRESET,
    };
    fn validate(&self, config: &Gpt2Config, origin: &str) -> anyhow::Result<()> {
        Ok(config.model.validate(origin)?)
    }
    fn batch_size(&self, config: &Gpt2Config) -> usize {
        config.train.batch_size
    }
    fn parameters(&self, config: &Gpt2Config) -> Option<u64> {
        Some(config.model.num_params() as u64)
    }
    fn run_typed(
        &self,
        config: &Gpt2Config,
        control: &RunControl,
        backend: backend::Resolved,
    ) -> anyhow::Result<Summary> {
        let task = Gpt2Task::new(config.clone())?;
        engine::train_on(&task, control, backend)
    }
    fn data_parallel(&self) -> bool {
        true
    }
    fn line(&self, summary: &Summary) -> String {
        let m = &summary.metrics;
        format!(
            "{:?} after {} steps in {:.1} s: train loss {}, val loss {} (initial {}), {} tokens/s",
            summary.status,
            summary.steps_done,
            summary.wall_s,
            experiment::fmt_metric(m.get("final_train_loss")),
            experiment::fmt_metric(m.get("final_val_loss")),
            experiment::fmt_metric(m.get("initial_val_loss")),
            experiment::fmt_metric(m.get("tokens_per_s")),
        )
    }
}

/// The training task: model config + loaded tokens.
pub struct Gpt2Task {
    pub config: Gpt2Config,
    pub data: TokenData,
}

impl Gpt2Task {
    pub fn new(config: Gpt2Config) -> anyhow::Result<Self> {
        let data = data::load(&config.data)?;
        if data.vocab_size > config.model.vocab_size {
            return Err(UserError::usage(format!(
                "model.vocab_size {} is smaller than the tokenizer's vocabulary {}",
                config.model.vocab_size, data.vocab_size
            ))
            .with_fix(format!("--set model.vocab_size={}", data.vocab_size))
            .into());
        }
        let need = config.model.block_size + 2;
        if data.train.len() < need || data.val.len() < need {
            return Err(UserError::usage(format!(
                "data: train ({}) or val ({}) tokens are fewer than block_size + 2 = {need}",
                data.train.len(),
                data.val.len()
            ))
            .with_fix("use more data or a smaller model.block_size")
            .into());
        }
        Ok(Self { config, data })
    }

    /// A seed that depends on (train.seed, step, row) only.
    fn mixed_seed(&self, step: u64, row: usize) -> u64 {
        engine::row_seed(self.config.train.seed, step, row)
    }

    /// Row `row` of the global batch of `step`: a window start drawn from a
    /// generator seeded by (seed, step, row) only.
    fn window_start(&self, step: u64, row: usize) -> usize {
        let mut rng = StdRng::seed_from_u64(self.mixed_seed(step, row));
        rng.random_range(0..self.data.train.len() - self.config.model.block_size - 1)
    }

    fn batch<B: Backend>(
        &self,
        tokens: &[u32],
        starts: &[usize],
        device: &B::Device,
    ) -> (Tensor<B, 2, Int>, Tensor<B, 2, Int>) {
        let t = self.config.model.block_size;
        let mut x = Vec::with_capacity(starts.len() * t);
        let mut y = Vec::with_capacity(starts.len() * t);
        for &s in starts {
            x.extend(tokens[s..s + t].iter().map(|&v| i64::from(v)));
            y.extend(tokens[s + 1..s + t + 1].iter().map(|&v| i64::from(v)));
        }
        let shape = [starts.len(), t];
        (
            Tensor::from_data(TensorData::new(x, shape), device),
            Tensor::from_data(TensorData::new(y, shape), device),
        )
    }
}

impl<B: FusedAutodiffBackend> Task<B> for Gpt2Task {
    type Model = Gpt2<B>;

    fn train_config(&self) -> &TrainConfig {
        &self.config.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.config.optim
    }

    fn init_model(&self, device: &B::Device) -> anyhow::Result<Gpt2<B>> {
        self.config
            .model
            .init_from::<B>(self.config.init_from.as_deref(), device)
    }

    fn loss(
        &self,
        model: &Gpt2<B>,
        step: u64,
        rows: Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 1> {
        if self.config.model.dropout > 0.0 {
            // Dropout masks come from the backend's generator: reseed it from
            // (seed, step, first row) so a resumed run draws the same masks.
            // Masks still depend on how the batch is split into micro-batches.
            B::seed(device, self.mixed_seed(step, rows.start) ^ 0xD50_0D50);
        }
        let starts: Vec<usize> = rows.map(|r| self.window_start(step, r)).collect();
        let (x, y) = self.batch::<B>(&self.data.train, &starts, device);
        model.loss(x, y)
    }

    fn evaluate(
        &self,
        model: &<Gpt2<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        // Fixed, evenly spaced windows over the validation split: the same
        // tokens at every evaluation, whatever the micro-batch (which only
        // sets how many windows go through the model at once).
        let t = self.config.model.block_size;
        let rows = (self.config.train.eval_batches * self.config.train.batch_size).max(1);
        let span = self.data.val.len() - t - 1;
        let starts: Vec<usize> = (0..rows).map(|i| i * span / rows).collect();
        let mut total = 0.0;
        for chunk in starts.chunks(micro_batch.max(1)) {
            let (x, y) = self.batch::<B::InnerBackend>(&self.data.val, chunk, device);
            let loss: f64 = model.loss(x, y).into_scalar().elem();
            total += loss * chunk.len() as f64;
        }
        total / rows as f64
    }

    fn units_per_row(&self) -> (usize, &'static str) {
        (self.config.model.block_size, "tokens")
    }

    fn summary_extras(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "entropy_bound_nats_per_token".into(),
            json!(self.data.entropy_nats_per_token),
        );
        m.insert("parameters".into(), json!(self.config.model.num_params()));
        // Provenance: which data files (and which bytes) this run saw.
        m.insert("data_files".into(), json!(self.data.files));
        m
    }

    fn finish(&self, model: &Gpt2<B>, run_dir: &Path) -> anyhow::Result<()> {
        hf::save(model, &run_dir.join("model.safetensors"))
    }
}

/// How to sample: `temperature` 0 = greedy; `top_k` None = full vocabulary.
#[derive(Debug, Clone, Copy)]
pub struct SampleOptions {
    pub tokens: usize,
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub seed: u64,
}

/// Temperature/top-k sampling from a trained model; returns the new tokens.
pub fn sample<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    prompt: &[u32],
    opts: SampleOptions,
    device: &B::Device,
) -> Vec<u32> {
    let SampleOptions {
        tokens,
        temperature,
        top_k,
        seed,
    } = opts;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out: Vec<u32> = prompt.to_vec();
    if out.is_empty() {
        out.push(0);
    }
    for _ in 0..tokens {
        let start = out.len().saturating_sub(cfg.block_size);
        let ctx: Vec<i64> = out[start..].iter().map(|&t| i64::from(t)).collect();
        let n = ctx.len();
        let idx = Tensor::<B, 2, Int>::from_data(TensorData::new(ctx, [1, n]), device);
        let logits = model
            .forward(idx)
            .slice([0..1, n - 1..n])
            .reshape([cfg.vocab_size]);
        let logits: Vec<f32> = logits
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap_or_default();
        out.push(pick(&logits, temperature, top_k, &mut rng));
    }
    out[prompt.len().min(out.len())..].to_vec()
}

fn pick(logits: &[f32], temperature: f32, top_k: Option<usize>, rng: &mut StdRng) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if temperature <= 0.0 {
        return order[0] as u32;
    }
    order.truncate(top_k.unwrap_or(logits.len()).max(1));
    let max = logits[order[0]];
    let weights: Vec<f64> = order
        .iter()
        .map(|&i| f64::from((logits[i] - max) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.random::<f64>() * total;
    for (&i, w) in order.iter().zip(&weights) {
        if u < *w {
            return i as u32;
        }
        u -= w;
    }
    order[order.len() - 1] as u32
}
