//! What differs between the models rft trains, behind one trait
//! ([`ModelFamily`]): how a question and its completion become tokens,
//! the engine task of the training stages, the sampler of stages (b) and
//! (d), where a stage keeps its weights, the exported model and its sizes.
//! `super::recipe` owns everything else.
//!
//! * [`gpt`]: `gpt2::Gpt2`, the byte-level GPT from scratch and a GPT-2
//!   checkpoint alike (one model code; the tokenizer and the export are
//!   the checkpoint's data, [`gpt2`] reads and checks them);
//! * [`llama`]: a Llama-family checkpoint (`crate::llama`), its task and
//!   sampler in [`llama_task`], its prompts in `super::prompt`.
//!
//! The files are named for the family because each holds one family's
//! side of every stage; the stages themselves are `super::stages`.

use std::path::{Path, PathBuf};

use envgen_kernels::FusedBackend;

use super::completion::Tokenized;
use super::config::StageConfig;
use super::datagen::Sampler;
use crate::lora::LoraConfig;

pub mod gpt;
pub mod gpt2;
pub mod llama;
pub mod llama_task;

/// One model family's side of the recipe.
pub(crate) trait ModelFamily {
    /// The engine task of stages (a) and (c) (`engine::Task<B>` for every
    /// training backend).
    type Task;

    /// A training example: `question`'s prompt as generation sees it, then
    /// `completion` and the end of completion.
    fn example(&self, question: &str, completion: &str) -> anyhow::Result<Tokenized>;

    /// Before any stage runs: the SFT and validation examples fit the
    /// model (default: they do, checked with the config).
    fn check_examples(&self, _sft: &[Tokenized], _validation: &[Tokenized]) -> anyhow::Result<()> {
        Ok(())
    }

    /// The task that trains `train` under `stage` from the weights at
    /// `init_from` (None: a fresh init), with `lora` adapters on frozen
    /// weights when given, reporting its loss on `validation`.
    fn task(
        &self,
        stage: StageConfig,
        train: Vec<Tokenized>,
        validation: Vec<Tokenized>,
        init_from: Option<&Path>,
        lora: Option<LoraConfig>,
    ) -> Self::Task;

    /// Where the finished training stage in `stage_dir` keeps the weights
    /// [`ModelFamily::sample`] loads and [`ModelFamily::task`] starts from.
    fn weights(&self, stage_dir: &Path) -> PathBuf;

    /// Calls `run` with a sampler of the weights at `weights`: its result,
    /// and the sampler's first error (a sampler grades a failed row as
    /// unanswered and keeps the error for the caller).
    fn sample<B: FusedBackend, R>(
        &self,
        weights: &Path,
        device: &B::Device,
        run: impl FnOnce(&mut dyn Sampler) -> R,
    ) -> anyhow::Result<(R, Option<anyhow::Error>)>;

    /// `RUN_DIR/model.safetensors` (and what else the family writes) from
    /// the last training stage's directory.
    fn export<B: FusedBackend>(
        &self,
        stage_dir: &Path,
        run_dir: &Path,
        device: &B::Device,
    ) -> anyhow::Result<()>;

    /// Parameters of the model.
    fn parameters(&self) -> u64;

    /// Stage (c)'s trainable parameters with `lora`, and the bytes of the
    /// adapter file it wrote in `finetune_dir`.
    fn adapter_size(&self, lora: &LoraConfig, finetune_dir: &Path) -> anyhow::Result<(u64, u64)>;
}
