//! The GPT's training on completions (`gpt2::Gpt2`, byte-level from scratch
//! or a GPT-2 checkpoint): the engine [`Task`] of stages (a) and (c).

use std::ops::Range;
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::ElementConversion;
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::completion::{batch, loss_units, mean_validation_loss, CompletionBatch, Tokenized};
use super::config::{RftConfig, StageConfig};
use super::eval::{ADAPTER_FILE, MODEL_FILE};
use super::task::Split;
use super::tokens::tokenize;
use crate::engine::{OptimConfig, Task, TrainConfig};
use crate::gpt2::lora::{self, LoraConfig};
use crate::gpt2::{hf, Gpt2, ModelConfig};

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
        Self::new(config, &config.sft_stage(), reference, split, None)
    }
}

/// Mean cross-entropy of the GPT over the completion tokens of `examples`
/// (prompt and padding positions carry weight 0).
pub(crate) fn completion_loss<B: FusedBackend>(
    model: &Gpt2<B>,
    examples: &[&Tokenized],
    device: &B::Device,
) -> Tensor<B, 1> {
    let batch = CompletionBatch::new(examples, device);
    batch.mean(model.token_losses(batch.inputs.clone(), batch.targets.clone()))
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
        let batch = batch(&self.train, self.stage.train.seed, step, rows);
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

    /// The completion tokens of the rows: what the loss is a mean over
    /// (prompts are masked and lengths vary, so rows carry different
    /// numbers).
    fn loss_units(&self, step: u64, rows: Range<usize>) -> f64 {
        loss_units(&batch(&self.train, self.stage.train.seed, step, rows))
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
