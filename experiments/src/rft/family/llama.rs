//! A pretrained Llama-family checkpoint as a [`ModelFamily`]
//! (`model.init = "hf:DIR"` of model_type llama or qwen2, or
//! `"random:tiny-llama"`, which envgen writes first): the checkpoint's
//! tokenizer and, with `task.prompt_format = "chat"`, its chat template
//! (`crate::rft::prompt::Prompter`), the task and sampler of
//! [`super::llama_task`], and the final model exported as a Hugging Face
//! directory.
//!
//! ```text
//! RUN_DIR/
//!   model.safetensors   the last round's weights (transformers' names)
//!   hf/                 the same as a Hugging Face directory (config.json, tokenizer.json;
//!                       with LoRA the last stage's adapters in PEFT's layout in hf/adapter/)
//!   stages/base/        (random:NAME only) the random-init checkpoint envgen made
//!   stages/prompt.json  how questions reach the model (task.prompt_format), ids of the first
//! ```

use std::path::{Path, PathBuf};

use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::llama_task::{copy_companions, LlamaRftTask, LlamaSampler};
use super::ModelFamily;
use crate::engine::rundir::{write_json, Summary};
use crate::engine::RunControl;
use crate::error::UserError;
use crate::llama;
use crate::lora::LoraConfig;
use crate::pretrained::HfTokenizer;
use crate::rft::base::{record_base, BaseRecord};
use crate::rft::completion::Tokenized;
use crate::rft::config::{Init, RftConfig, StageConfig};
use crate::rft::datagen::Sampler;
use crate::rft::pretrained::{self, count_parameters};
use crate::rft::prompt::Prompter;
use crate::rft::recipe::{self, Session};

/// The Llama-family checkpoint of one run.
pub(crate) struct Llama<'a> {
    prompter: Prompter<'a>,
    cfg: llama::LlamaConfig,
    /// The base checkpoint's directory: every training stage starts from it.
    base: PathBuf,
    max_new_tokens: usize,
}

/// Run (or resume) every stage from the checkpoint `init` names.
pub fn run<B: FusedAutodiffBackend>(
    config: &RftConfig,
    init: &Init,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    let session = Session::open(config, control)?;
    let base = base_checkpoint(config, init, &session.stages)?;
    let tokenizer = HfTokenizer::load(&base.dir, false)?;
    let cfg = llama::config::read(&base.dir)?;
    let prompter = Prompter::new(&tokenizer, &base.dir, &config.task)?;
    if let Some(first) = session.split.train.first() {
        let record = prompter.record(first, &cfg.eos_token_ids)?;
        write_json(&session.stages.join("prompt.json"), &record)?;
    }
    let family = Llama {
        prompter,
        cfg,
        base: base.dir.clone(),
        max_new_tokens: config.task.max_completion_tokens,
    };
    recipe::run::<B, _>(session, &family, Some(&base), device)
}

/// The base checkpoint's directory, made first for `random:`, and its
/// record; a resumed run refuses a directory whose content changed.
fn base_checkpoint(config: &RftConfig, init: &Init, stages: &Path) -> anyhow::Result<BaseRecord> {
    let dir = match init {
        Init::Hf(dir) => dir.clone(),
        Init::Random(name) => {
            let dir = stages.join("base");
            if !dir.join(llama::hf::SINGLE).is_file() {
                pretrained::write_random(name, config.sft_stage().train.seed, &dir)?;
            }
            dir
        }
    };
    pretrained::check_dir(&dir)?;
    record_base(
        config.model.init.as_deref().unwrap_or_default(),
        &dir,
        stages,
    )
}

impl ModelFamily for Llama<'_> {
    type Task = LlamaRftTask;

    fn example(&self, question: &str, completion: &str) -> anyhow::Result<Tokenized> {
        self.prompter.example(question, completion)
    }

    /// Positions past `max_position_embeddings` have no rotary angle: the
    /// longest prompt plus `task.max_completion_tokens` must fit.
    fn check_examples(&self, sft: &[Tokenized], validation: &[Tokenized]) -> anyhow::Result<()> {
        let longest = sft.iter().chain(validation).map(Tokenized::len);
        let longest = longest.max().unwrap_or(0) + self.max_new_tokens;
        if longest > self.cfg.max_position_embeddings {
            return Err(UserError::usage(format!(
                "{}: max_position_embeddings = {} is shorter than the longest prompt plus task.max_completion_tokens ({longest} tokens)",
                self.base.display(),
                self.cfg.max_position_embeddings
            ))
            .with_fix("lower task.max_completion_tokens")
            .into());
        }
        Ok(())
    }

    /// RFT fine-tunes the base in every stage, never the previous round's weights.
    fn task(
        &self,
        stage: StageConfig,
        train: Vec<Tokenized>,
        validation: Vec<Tokenized>,
        init_from: Option<&Path>,
        lora: Option<LoraConfig>,
    ) -> LlamaRftTask {
        LlamaRftTask {
            base: init_from.unwrap_or(&self.base).to_path_buf(),
            stage,
            train,
            validation,
            lora,
        }
    }

    /// A finished stage's directory is a Hugging Face directory.
    fn weights(&self, stage_dir: &Path) -> PathBuf {
        stage_dir.to_path_buf()
    }

    fn sample<B: FusedBackend, R>(
        &self,
        weights: &Path,
        device: &B::Device,
        run: impl FnOnce(&mut dyn Sampler) -> R,
    ) -> anyhow::Result<(R, Option<anyhow::Error>)> {
        let model = llama::hf::load::<B>(weights, device)?;
        let mut sampler =
            LlamaSampler::new(&model, &self.prompter, self.max_new_tokens, device.clone());
        let out = run(&mut sampler);
        Ok((out, sampler.error.take()))
    }

    /// `RUN_DIR/model.safetensors` and `RUN_DIR/hf/`, the final model (with
    /// LoRA, the final stage's adapters in PEFT's layout in `hf/adapter/`).
    fn export<B: FusedBackend>(
        &self,
        stage_dir: &Path,
        run_dir: &Path,
        _device: &B::Device,
    ) -> anyhow::Result<()> {
        let hf = run_dir.join("hf");
        crate::fsutil::create_dir_all(&hf)?;
        copy_companions(stage_dir, &hf)?;
        let weights = stage_dir.join(llama::hf::SINGLE);
        let mut copies = vec![
            (weights.clone(), run_dir.join(llama::hf::SINGLE)),
            (weights, hf.join(llama::hf::SINGLE)),
        ];
        let adapters = stage_dir.join(llama::lora::ADAPTER_DIR);
        if adapters.is_dir() {
            let to = hf.join(llama::lora::ADAPTER_DIR);
            crate::fsutil::create_dir_all(&to)?;
            for name in [llama::lora::PEFT_WEIGHTS, llama::lora::PEFT_CONFIG] {
                copies.push((adapters.join(name), to.join(name)));
            }
        }
        for (from, to) in copies {
            std::fs::copy(&from, &to).map_err(|e| {
                anyhow::Error::new(e).context(format!(
                    "copying {} to {}",
                    from.display(),
                    to.display()
                ))
            })?;
        }
        Ok(())
    }

    fn parameters(&self) -> u64 {
        count_parameters(&self.cfg)
    }

    fn adapter_size(&self, lora: &LoraConfig, finetune_dir: &Path) -> anyhow::Result<(u64, u64)> {
        let file = finetune_dir
            .join(llama::lora::ADAPTER_DIR)
            .join(llama::lora::PEFT_WEIGHTS);
        let bytes = std::fs::metadata(&file)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?
            .len();
        Ok((llama::lora::num_params(lora, &self.cfg) as u64, bytes))
    }
}

#[cfg(test)]
#[path = "llama_lora_tests.rs"]
mod lora_tests;
