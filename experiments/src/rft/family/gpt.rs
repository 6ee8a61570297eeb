//! The GPT (`gpt2::Gpt2`) as a [`ModelFamily`]: the byte-level GPT of
//! `[model]`'s sizes trained from scratch, or a GPT-2 checkpoint
//! (`model.init = "hf:DIR"`, checked and read by [`super::gpt2`]). One
//! model code serves both: the task is `crate::rft::train::RftTrainTask`
//! (full or LoRA fine-tuning), the sampler `crate::rft::eval::GptSampler`;
//! they differ in the sizes, the tokenizer (bytes or the checkpoint's,
//! `crate::rft::tokens::RftTokenizer`) and whether the export also writes
//! a GPT-2 directory.
//!
//! ```text
//! RUN_DIR/
//!   model.safetensors   the last round's weights (the GPT path's layout)
//!   hf/                 (GPT-2) the same as a Hugging Face GPT-2 directory (transformers loads it)
//! ```

use std::path::{Path, PathBuf};

use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::{gpt2, ModelFamily};
use crate::engine::rundir::Summary;
use crate::engine::RunControl;
use crate::gpt2::ModelConfig;
use crate::lora::LoraConfig;
use crate::rft::base::record_base;
use crate::rft::completion::Tokenized;
use crate::rft::config::{RftConfig, StageConfig};
use crate::rft::datagen::Sampler;
use crate::rft::eval::{load_model, GptSampler, ADAPTER_FILE, MODEL_FILE};
use crate::rft::recipe::{self, Session};
use crate::rft::task::{format_prompt, format_training_text};
use crate::rft::tokens::RftTokenizer;
use crate::rft::train::RftTrainTask;

/// The GPT of one run.
pub(crate) struct Gpt {
    sizes: ModelConfig,
    tokens: RftTokenizer,
    max_new_tokens: usize,
    /// The GPT-2 checkpoint the run started from, whose config.json and
    /// tokenizer files the exported `hf/` keeps; None from scratch.
    checkpoint: Option<PathBuf>,
}

/// Run (or resume) the byte-level GPT of `[model]` from scratch.
pub fn run_scratch<B: FusedAutodiffBackend>(
    config: &RftConfig,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    let session = Session::open(config, control)?;
    let family = Gpt {
        sizes: config.model.gpt.clone(),
        tokens: RftTokenizer::Bytes,
        max_new_tokens: config.task.max_completion_tokens,
        checkpoint: None,
    };
    recipe::run::<B, _>(session, &family, None, device)
}

/// Run (or resume) from the GPT-2 checkpoint in `dir`.
pub fn run_gpt2<B: FusedAutodiffBackend>(
    config: &RftConfig,
    dir: &Path,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    let session = Session::open(config, control)?;
    let init = config.model.init.clone().unwrap_or_default();
    let base = record_base(&init, dir, &session.stages)?;
    let sizes = gpt2::check_dir(&base.dir)?;
    let family = Gpt {
        tokens: gpt2::tokenizer(&base.dir, &sizes)?,
        sizes,
        max_new_tokens: config.task.max_completion_tokens,
        checkpoint: Some(base.dir.clone()),
    };
    recipe::run::<B, _>(session, &family, Some(&base), device)
}

impl ModelFamily for Gpt {
    type Task = RftTrainTask;

    fn example(&self, question: &str, completion: &str) -> anyhow::Result<Tokenized> {
        let text = format_training_text(question, completion);
        self.tokens.tokenize(&format_prompt(question), &text)
    }

    fn task(
        &self,
        stage: StageConfig,
        train: Vec<Tokenized>,
        validation: Vec<Tokenized>,
        init_from: Option<&Path>,
        lora: Option<LoraConfig>,
    ) -> RftTrainTask {
        RftTrainTask {
            model: self.sizes.clone(),
            stage,
            train,
            validation,
            init_from: init_from.map(Path::to_path_buf),
            lora,
        }
    }

    fn weights(&self, stage_dir: &Path) -> PathBuf {
        stage_dir.join(MODEL_FILE)
    }

    fn sample<B: FusedBackend, R>(
        &self,
        weights: &Path,
        device: &B::Device,
        run: impl FnOnce(&mut dyn Sampler) -> R,
    ) -> anyhow::Result<(R, Option<anyhow::Error>)> {
        let model = load_model::<B>(&self.sizes, weights, device)?;
        let mut sampler = GptSampler::new(&model, &self.sizes, self.max_new_tokens, device.clone())
            .with_tokenizer(&self.tokens);
        let out = run(&mut sampler);
        Ok((out, sampler.error.take()))
    }

    /// `RUN_DIR/model.safetensors`, and from a GPT-2 checkpoint `RUN_DIR/hf/`.
    fn export<B: FusedBackend>(
        &self,
        stage_dir: &Path,
        run_dir: &Path,
        device: &B::Device,
    ) -> anyhow::Result<()> {
        let weights = self.weights(stage_dir);
        let model = run_dir.join(MODEL_FILE);
        std::fs::copy(&weights, &model).map_err(|e| {
            anyhow::Error::new(e).context(format!(
                "copying {} to {}",
                weights.display(),
                model.display()
            ))
        })?;
        match &self.checkpoint {
            Some(base) => {
                gpt2::save_pretrained::<B>(&weights, &self.sizes, base, &run_dir.join("hf"), device)
            }
            None => Ok(()),
        }
    }

    fn parameters(&self) -> u64 {
        self.sizes.num_params() as u64
    }

    fn adapter_size(&self, lora: &LoraConfig, finetune_dir: &Path) -> anyhow::Result<(u64, u64)> {
        let bytes = std::fs::metadata(finetune_dir.join(ADAPTER_FILE))?.len();
        Ok((lora.num_params(&self.sizes) as u64, bytes))
    }
}
