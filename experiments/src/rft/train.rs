//! Training on completions: the engine [`Task`] both training stages run
//! (pretraining on reference reasoning, fine-tuning on kept samples).

use std::ops::Range;
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::{ElementConversion, TensorData};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::config::*;
use super::eval::*;
use super::task::Split;
use crate::data::Tokenizer;
use crate::engine::{self, OptimConfig, Task, TrainConfig};
use crate::gpt2::lora::{self, LoraConfig};
use crate::gpt2::{hf, Gpt2, ModelConfig};

/// A tokenized training example: the bytes of prompt + completion and where
/// the completion starts.
#[derive(Debug, Clone)]
pub(crate) struct Tokenized {
    pub(crate) tokens: Vec<u32>,
    pub(crate) completion_start: usize,
}

pub(crate) fn tokenize(prompt: &str, text: &str) -> Tokenized {
    let tokenizer = Tokenizer::byte();
    Tokenized {
        tokens: tokenizer.encode(text),
        completion_start: tokenizer.encode(prompt).len(),
    }
}

/// The engine task of stages (a) and (c).
pub struct RftTrainTask {
    pub(crate) model: ModelConfig,
    pub(crate) stage: StageConfig,
    pub(crate) train: Vec<Tokenized>,
    pub(crate) validation: Vec<Tokenized>,
    /// Start from these weights (stage c, and every stage from a GPT-2
    /// checkpoint) instead of a fresh init (stage a from scratch).
    pub(crate) init_from: Option<PathBuf>,
    /// Train LoRA adapters on frozen weights: stage (c) with
    /// `finetune.mode = "lora"`.
    pub(crate) lora: Option<LoraConfig>,
}

impl RftTrainTask {
    pub(crate) fn new(
        config: &RftConfig,
        stage: &StageConfig,
        train: Vec<Tokenized>,
        split: &Split,
        init_from: Option<PathBuf>,
    ) -> Self {
        let validation = split
            .validation
            .iter()
            .map(|q| tokenize(&q.prompt(), &q.training_text()))
            .collect();
        // Stage (c) is the one that starts from (a)'s weights.
        let lora = init_from.as_ref().and(config.finetune.adapters());
        Self {
            model: config.model.gpt.clone(),
            stage: stage.clone(),
            train,
            validation,
            init_from,
            lora,
        }
    }

    /// Stage (a)'s task: supervised training on the worked answers of the
    /// first `task.worked_questions` training questions, from a fresh init.
    /// (Also the recovery fine-tune of a pruned rft model, `quant::prune`.)
    pub fn reference(config: &RftConfig, split: &Split) -> Self {
        let reference = split.train[..config.worked_questions()]
            .iter()
            .map(|q| tokenize(&q.prompt(), &q.training_text()))
            .collect();
        Self::new(config, &config.pretrain, reference, split, None)
    }

    /// Example of row `row` of the batch of `step`: a pure function of
    /// (seed, step, row), as the engine requires.
    fn example_index(&self, step: u64, row: usize) -> usize {
        example_index(self.stage.train.seed, step, row, self.train.len())
    }
}

/// The training example of row `row` of the batch of `step`, out of
/// `count`: a pure function of (seed, step, row), as the engine requires.
/// Both model families' RFT tasks draw their batches with it.
pub(crate) fn example_index(seed: u64, step: u64, row: usize, count: usize) -> usize {
    // splitmix64 finalizer: spreads the mixed bits before the modulo.
    let mut z = engine::row_seed(seed, step, row);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % count.max(1) as u64) as usize
}

/// Mean per-example `loss` over `validation` in micro-batches (each
/// batch's loss is a mean over its rows): the held-out loss both model
/// families' RFT tasks report.
pub(crate) fn mean_validation_loss<T>(
    validation: &[T],
    micro_batch: usize,
    mut loss: impl FnMut(&[&T]) -> f64,
) -> f64 {
    let mut total = 0.0;
    let mut rows = 0usize;
    for chunk in validation.chunks(micro_batch.max(1)) {
        let batch: Vec<&T> = chunk.iter().collect();
        total += loss(&batch) * chunk.len() as f64;
        rows += chunk.len();
    }
    total / rows.max(1) as f64
}

/// Mean cross-entropy over the completion tokens of `examples` (prompt and
/// padding positions carry weight 0).
pub(crate) fn completion_loss<B: FusedBackend>(
    model: &Gpt2<B>,
    examples: &[&Tokenized],
    device: &B::Device,
) -> Tensor<B, 1> {
    let t = examples
        .iter()
        .map(|e| e.tokens.len() - 1)
        .max()
        .unwrap_or(1)
        .max(1);
    let b = examples.len();
    let (mut x, mut y, mut w) = (
        Vec::with_capacity(b * t),
        Vec::with_capacity(b * t),
        Vec::with_capacity(b * t),
    );
    for e in examples {
        for i in 0..t {
            let inside = i + 1 < e.tokens.len();
            x.push(e.tokens.get(i).map_or(0, |&v| i64::from(v)));
            y.push(if inside {
                i64::from(e.tokens[i + 1])
            } else {
                0
            });
            w.push(if inside && i + 1 >= e.completion_start {
                1.0f32
            } else {
                0.0
            });
        }
    }
    let count: f32 = w.iter().sum::<f32>().max(1.0);
    let x = Tensor::<B, 2, Int>::from_data(TensorData::new(x, [b, t]), device);
    let y = Tensor::<B, 2, Int>::from_data(TensorData::new(y, [b, t]), device);
    let w = Tensor::<B, 1>::from_data(TensorData::new(w, [b * t]), device);
    (model.token_losses(x, y) * w).sum() / count
}

impl<B: FusedAutodiffBackend> Task<B> for RftTrainTask {
    type Model = Gpt2<B>;

    fn train_config(&self) -> &TrainConfig {
        &self.stage.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.stage.optim
    }

    fn init_model(&self, device: &B::Device) -> anyhow::Result<Gpt2<B>> {
        let model = self
            .model
            .init_from::<B>(self.init_from.as_deref(), device)?;
        // The same adapted structure on a fresh start and on resume: the
        // engine then loads a checkpoint's weights and adapters by path.
        Ok(match &self.lora {
            Some(lora) => lora.attach(model, device),
            None => model,
        })
    }

    fn loss(
        &self,
        model: &Gpt2<B>,
        step: u64,
        rows: Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 1> {
        let batch: Vec<&Tokenized> = rows
            .map(|r| &self.train[self.example_index(step, r)])
            .collect();
        completion_loss(model, &batch, device)
    }

    fn evaluate(
        &self,
        model: &<Gpt2<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        // Completion loss on the held-out reference answers (a fixed set).
        mean_validation_loss(&self.validation, micro_batch, |batch| {
            completion_loss(model, batch, device).into_scalar().elem()
        })
    }

    fn units_per_row(&self) -> (usize, &'static str) {
        (1, "samples")
    }

    /// Writes `model.safetensors`, a plain GPT (adapters merged), and in
    /// LoRA mode the adapters alone to `adapter.safetensors`.
    fn finish(&self, model: &Gpt2<B>, run_dir: &Path) -> anyhow::Result<()> {
        if self.lora.is_some() {
            lora::save_adapters(model, &run_dir.join(ADAPTER_FILE))?;
        }
        hf::save(&lora::merge(model.clone()), &run_dir.join(MODEL_FILE))
    }
}
