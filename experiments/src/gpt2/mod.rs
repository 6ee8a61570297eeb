//! The GPT-2 experiment: config, presets, the training task, Hugging Face
//! weight interop and sampling.

pub mod eval;
pub mod export;
pub mod generate;
pub mod hellaswag;
pub mod hf;
pub mod lora;
pub mod model;
pub mod val_sample;

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
use crate::data::{self, Batches, DataConfig, DataOrder, TokenData};
use crate::engine::{self, EvalShare, OptimConfig, RunControl, Summary, Task, TrainConfig};
use crate::error::UserError;
use crate::experiment::{self, Experiment, ExperimentInfo, TypedExperiment};
use crate::sampling::{self, Sampling};
pub use generate::{sample_batch, sample_rows, sample_rows_until, BatchSampleOptions};
pub use model::{Gpt2, ModelConfig};
pub use val_sample::ValSample;

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
    /// Evaluations beside the validation loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<EvalConfig>,
}

/// `[eval]`: benchmarks run at every evaluation (and in `envgen eval gpt2`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// HellaSwag's `hellaswag_val.jsonl` (see docs/experiments/gpt2.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hellaswag: Option<PathBuf>,
    /// Score only the first N items (all 10,042 by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hellaswag_items: Option<usize>,
    /// Which validation windows the loss is measured on (`gpt2/val_sample.rs`):
    /// "spread" (default) or "first" (build-nanogpt's).
    #[serde(default, skip_serializing_if = "ValSample::is_spread")]
    pub val_sample: ValSample,
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
        headline_metric: "final_val_loss",
    };
    fn validate(&self, config: &Gpt2Config, origin: &str) -> anyhow::Result<()> {
        config.train.validate(origin, "train")?;
        config.optim.validate(origin, "optim")?;
        config.model.validate(origin)?;
        let mut parts = config.model.memory_parts();
        // Evaluation lists its window starts (eval_batches × batch_size) up
        // front (issue #40: train.eval_batches = 1e12 aborted).
        parts.push(engine::budget::Part::data(
            "train.eval_batches",
            config.train.eval_batches,
            config.train.eval_batches as f64 * config.train.batch_size as f64 * 16.0,
        ));
        if config.data.source == data::DataSource::Generated {
            // The corpus text and its u32 tokens, both in memory.
            let bytes = config
                .data
                .corpus_bytes
                .unwrap_or(data::corpus::DEFAULT_CORPUS_BYTES);
            parts.push(engine::budget::Part::data(
                "data.corpus_bytes",
                bytes,
                bytes as f64 * 5.0,
            ));
        }
        engine::budget::check(origin, &parts)?;
        // ~6 FLOPs per parameter per token (forward and backward).
        let tokens = config.train.batch_size as f64 * config.model.block_size as f64;
        let flops = 6.0 * config.model.num_params() as f64 * tokens;
        engine::budget::warn_if_slow(origin, "train.batch_size", config.train.batch_size, flops);
        Ok(())
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
    /// The global batches of a `sequential` / `shuffled` order (None: `random`).
    pub batches: Option<Batches>,
    /// HellaSwag items to score at every evaluation.
    pub hellaswag: Option<Vec<hellaswag::Item>>,
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
        let window = config.model.block_size + 1;
        if data.train.window_count(window) == 0 || data.val.window_count(window) == 0 {
            return Err(UserError::usage(format!(
                "data: no train ({} tokens) or val ({} tokens) shard holds block_size + 2 = {} tokens",
                data.train.len(),
                data.val.len(),
                window + 1
            ))
            .with_fix("use more data or a smaller model.block_size")
            .into());
        }
        let names = || {
            let names: Vec<String> = data
                .files
                .iter()
                .map(|f| f.path.display().to_string())
                .collect();
            names.join(", ")
        };
        let batches = match config.data.order() {
            DataOrder::Random => None,
            order => Some(Batches::new(
                &data.train,
                config.train.batch_size,
                config.model.block_size,
                (order == DataOrder::Shuffled).then_some(config.train.seed),
                &names(),
            )?),
        };
        let hellaswag = match config.eval.as_ref().and_then(|e| e.hellaswag.as_ref()) {
            Some(path) => {
                let limit = config.eval.as_ref().and_then(|e| e.hellaswag_items);
                Some(hellaswag::load(path, limit)?)
            }
            None => None,
        };
        Ok(Self {
            config,
            data,
            batches,
            hellaswag,
        })
    }

    /// `[eval] val_sample` (spread when there is no `[eval]`).
    fn val_sample(&self) -> ValSample {
        self.config
            .eval
            .as_ref()
            .map(|e| e.val_sample)
            .unwrap_or_default()
    }

    /// A seed that depends on (train.seed, step, row) only.
    fn mixed_seed(&self, step: u64, row: usize) -> u64 {
        engine::row_seed(self.config.train.seed, step, row)
    }

    /// The `block_size + 1` tokens row `row` of the global batch of `step`
    /// trains on: the data order's position, or (`random`) a window drawn
    /// from a generator seeded by (seed, step, row) only.
    fn train_window(&self, step: u64, row: usize) -> Vec<u32> {
        let len = self.config.model.block_size + 1;
        let (segment, start) = match &self.batches {
            Some(batches) => {
                let p = batches.position(step, row);
                (p.segment, p.start)
            }
            None => {
                let mut rng = StdRng::seed_from_u64(self.mixed_seed(step, row));
                let index = rng.random_range(0..self.data.train.window_count(len));
                self.data.train.window_start(index, len).unwrap_or((0, 0))
            }
        };
        self.data.train.window(segment, start, len)
    }

    fn batch<B: Backend>(
        &self,
        windows: &[Vec<u32>],
        device: &B::Device,
    ) -> (Tensor<B, 2, Int>, Tensor<B, 2, Int>) {
        let t = self.config.model.block_size;
        let mut x = Vec::with_capacity(windows.len() * t);
        let mut y = Vec::with_capacity(windows.len() * t);
        for w in windows {
            x.extend(w[..t].iter().map(|&v| i64::from(v)));
            y.extend(w[1..t + 1].iter().map(|&v| i64::from(v)));
        }
        let shape = [windows.len(), t];
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
        let windows: Vec<Vec<u32>> = rows.map(|r| self.train_window(step, r)).collect();
        let (x, y) = self.batch::<B>(&windows, device);
        model.loss(x, y)
    }

    fn evaluate(
        &self,
        model: &<Gpt2<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        // The same windows at every evaluation, whatever the micro-batch
        // (which only sets how many go through the model at once); which
        // ones is `[eval] val_sample`.
        let block = self.config.model.block_size;
        let rows = (self.config.train.eval_batches * self.config.train.batch_size).max(1);
        let starts = self.val_sample().windows(&self.data.val, block, rows);
        let mut total = 0.0;
        for chunk in starts.chunks(micro_batch.max(1)) {
            let windows: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&(segment, start)| self.data.val.window(segment, start, block + 1))
                .collect();
            let (x, y) = self.batch::<B::InnerBackend>(&windows, device);
            let loss: f64 = model.loss(x, y).into_scalar().elem();
            total += loss * chunk.len() as f64;
        }
        total / starts.len().max(1) as f64
    }

    fn units_per_row(&self) -> (usize, &'static str) {
        (self.config.model.block_size, "tokens")
    }

    fn step_extras(&self, step: u64) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(batches) = &self.batches {
            // The epoch boundary and the shard in use, in every record.
            let p = batches.position(step, 0);
            m.insert("epoch".into(), json!(p.epoch));
            m.insert("shard".into(), json!(p.segment));
        }
        m
    }

    fn eval_extras(
        &self,
        model: &<Gpt2<B> as AutodiffModule<B>>::InnerModule,
        _micro_batch: usize,
        share: &EvalShare,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> anyhow::Result<Map<String, Value>> {
        let mut m = Map::new();
        if let Some(items) = &self.hellaswag {
            let score = hellaswag::score(
                model,
                &self.config.model,
                &self.data.tokenizer,
                items,
                share,
                device,
            )?;
            score.insert_into(&mut m);
        }
        Ok(m)
    }

    fn summary_extras(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "entropy_bound_nats_per_token".into(),
            json!(self.data.entropy_nats_per_token),
        );
        m.insert("parameters".into(), json!(self.config.model.num_params()));
        m.insert("data_order".into(), json!(self.config.data.order().name()));
        let block = self.config.model.block_size;
        let rows = self.config.train.eval_batches * self.config.train.batch_size;
        let windows = self.val_sample().windows(&self.data.val, block, rows).len();
        m.insert(
            "val_sample".into(),
            json!(self
                .val_sample()
                .describe(windows, block, self.data.val.len())),
        );
        if let Some(batches) = &self.batches {
            m.insert("train_batches_per_epoch".into(), json!(batches.per_epoch()));
        }
        // Provenance: which data files (and which bytes) this run saw.
        m.insert("data_files".into(), json!(self.data.files));
        m
    }

    fn finish(&self, model: &Gpt2<B>, run_dir: &Path) -> anyhow::Result<()> {
        hf::save(model, &run_dir.join("model.safetensors"))
    }
}

/// How to sample: [`Sampling`] (greedy, or temperature, top-k, top-p as
/// transformers applies them).
#[derive(Debug, Clone, Copy)]
pub struct SampleOptions {
    pub tokens: usize,
    pub sampling: Sampling,
    pub seed: u64,
    /// Only ids below this are sampled: the tokenizer's vocabulary. GPT-2's
    /// embedding is padded (50,257 → 50,304); the padding rows were never a
    /// target, and they decode to nothing (None: every row).
    pub vocab_limit: Option<usize>,
}

/// Sampling from a trained model; returns the new tokens, or a failure
/// (`diverged: …`) when the model's logits are not numbers.
pub fn sample<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    prompt: &[u32],
    opts: SampleOptions,
    device: &B::Device,
) -> anyhow::Result<Vec<u32>> {
    let SampleOptions {
        tokens,
        sampling,
        seed,
        vocab_limit,
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
        let mut logits: Vec<f32> = logits
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap_or_default();
        logits.truncate(vocab_limit.unwrap_or(usize::MAX).max(1));
        crate::engine::health::finite_output(&logits, "the model")?;
        out.push(sampling::pick(&logits, &sampling, &mut rng));
    }
    Ok(out[prompt.len().min(out.len())..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;

    /// Padding rows past the tokenizer's vocabulary are never sampled, even
    /// when they hold the largest logits.
    #[test]
    fn sampling_never_emits_padding_ids() {
        let cfg = ModelConfig {
            n_layer: 1,
            n_head: 1,
            n_embd: 8,
            block_size: 16,
            vocab_size: 48,
            dropout: 0.0,
        };
        let device = Default::default();
        let model = cfg.init::<Cpu>(&device);
        // Make the padding rows 40..48 the most likely: a large tied
        // embedding row gives a large logit.
        let weights = hf::named_weights(&model);
        let mut tensors = std::collections::BTreeMap::new();
        for (name, shape, mut values) in weights {
            if name == "wte.weight" {
                for v in &mut values[40 * 8..] {
                    *v = 5.0;
                }
            }
            tensors.insert(name, (shape, values));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let named: Vec<_> = tensors.into_iter().map(|(n, (s, v))| (n, s, v)).collect();
        crate::fsutil::write_atomic(
            &path,
            &crate::engine::safetensors_io::to_bytes(&named).unwrap(),
        )
        .unwrap();
        let model = hf::load(cfg.init::<Cpu>(&device), &path).unwrap();
        let opts = |limit| SampleOptions {
            tokens: 12,
            sampling: Sampling {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
            },
            seed: 3,
            vocab_limit: limit,
        };
        let free = sample(&model, &cfg, &[1, 2], opts(None), &device).unwrap();
        assert!(
            free.iter().any(|&t| t >= 40),
            "the setup must favour padding: {free:?}"
        );
        let limited = sample(&model, &cfg, &[1, 2], opts(Some(40)), &device).unwrap();
        assert_eq!(limited.len(), 12);
        assert!(limited.iter().all(|&t| t < 40), "{limited:?}");
    }
}
