//! Which model an rft run trains, decided once from `[model]`: the
//! byte-level GPT from scratch (no `init`), a GPT-2 checkpoint (an `hf:`
//! directory whose config.json says `model_type` "gpt2"), or a Llama-family
//! checkpoint (any other `hf:` directory, or `random:NAME`). Everything
//! that depends on the family before a run starts (the checkpoint's files,
//! LoRA's targets and bounds, chat prompts, parameter counts) asks this
//! enum; the run itself takes the family's `super::family::ModelFamily`.
//! This module is below `super::config` (its checks take plain values):
//! the config reads it, never the run paths.

use std::path::{Path, PathBuf};

use super::family::gpt2;
use super::pretrained::{self, count_parameters, llama_config, Init, RftModel};
use super::task::Split;
use crate::error::UserError;
use crate::gpt2::ModelConfig;
use crate::lora::{Family, LoraConfig};
use crate::pretrained::{chat, ChatTemplate};

/// The model path of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelPath {
    /// The byte-level GPT of `[model]`'s sizes, trained from a fresh init.
    Scratch,
    /// A GPT-2 checkpoint: the GPT's code with the checkpoint's sizes and tokenizer.
    Gpt2(PathBuf),
    /// A Llama-family checkpoint (`crate::llama`), or one envgen makes.
    Llama(Init),
}

impl ModelPath {
    /// The path `model` names; an error for an `init` envgen cannot read.
    pub fn of(model: &RftModel) -> anyhow::Result<Self> {
        Ok(match model.checkpoint()? {
            None => ModelPath::Scratch,
            Some(Init::Hf(dir)) if gpt2::is_gpt2(&dir) => ModelPath::Gpt2(dir),
            Some(init) => ModelPath::Llama(init),
        })
    }

    /// The layer names LoRA adapts: a GPT-2 checkpoint runs on the GPT's
    /// code, its targets too. An unreadable `init` counts as Llama's.
    pub fn lora_family(model: &RftModel) -> Family {
        match Self::of(model) {
            Ok(ModelPath::Scratch | ModelPath::Gpt2(_)) => Family::Gpt,
            Ok(ModelPath::Llama(_)) | Err(_) => Family::Llama,
        }
    }

    /// The checkpoint's files, before any run directory exists (exit 2).
    pub fn check_checkpoint(&self) -> anyhow::Result<()> {
        match self {
            ModelPath::Gpt2(dir) => gpt2::check_dir(dir).map(drop),
            ModelPath::Llama(Init::Hf(dir)) => pretrained::check_dir(dir).map(drop),
            ModelPath::Scratch | ModelPath::Llama(Init::Random(_)) => Ok(()),
        }
    }

    /// The sizes of the GPT this run trains: `[model]`'s from scratch, the
    /// checkpoint's config.json for GPT-2; None for a Llama-family one.
    pub fn gpt_sizes(&self, model: &RftModel) -> anyhow::Result<Option<ModelConfig>> {
        match self {
            ModelPath::Scratch => Ok(Some(model.gpt.clone())),
            ModelPath::Gpt2(dir) => gpt2::sizes(dir).map(Some),
            ModelPath::Llama(_) => Ok(None),
        }
    }

    /// `lora` against the model's layers and shapes (`sizes`: the GPT's,
    /// from [`ModelPath::gpt_sizes`]).
    pub fn check_lora(&self, lora: &LoraConfig, sizes: Option<&ModelConfig>) -> anyhow::Result<()> {
        let key = "finetune.lora";
        match (self, sizes) {
            (ModelPath::Llama(init), _) => match llama_config(init) {
                Some(cfg) => crate::llama::lora::validate(lora, &cfg, key)?,
                // The rank's bound needs the checkpoint's shapes; one that
                // cannot be read was refused by check_checkpoint.
                None => lora.check(Family::Llama, key, usize::MAX)?,
            },
            (_, Some(sizes)) => lora.validate(sizes, key)?,
            (_, None) => {}
        }
        Ok(())
    }

    /// A checkpoint's context against the worked answers of `split` and
    /// each prompt plus `max_completion` tokens, in its own tokens: a
    /// GPT-2 one's here, before the run; a Llama one's when the run starts
    /// (`super::family::llama`). The byte-level GPT's sizes are `[model]`'s,
    /// checked with the config.
    pub fn check_context(
        &self,
        split: &dyn Fn() -> anyhow::Result<Split>,
        max_completion: usize,
    ) -> anyhow::Result<()> {
        match self {
            ModelPath::Gpt2(dir) => gpt2::check_context(dir, &split()?, max_completion),
            ModelPath::Scratch | ModelPath::Llama(_) => Ok(()),
        }
    }

    /// Parameters of the model the run starts from, when readable.
    pub fn parameters(&self, model: &RftModel) -> Option<u64> {
        match self {
            ModelPath::Scratch => Some(model.num_params() as u64),
            ModelPath::Gpt2(dir) => gpt2::sizes(dir).ok().map(|s| s.num_params() as u64),
            ModelPath::Llama(init) => llama_config(init).map(|c| count_parameters(&c)),
        }
    }

    /// The chat template `task.prompt_format = "chat"` renders questions
    /// with: a Llama-family checkpoint's own, required (exit 2 otherwise).
    pub fn chat_template(&self) -> anyhow::Result<ChatTemplate> {
        match self {
            ModelPath::Scratch => Err(UserError::usage(
                "task.prompt_format = \"chat\" needs a pretrained checkpoint's chat template; the byte-level GPT (no model.init) reads plain text",
            )
            .with_fix("--set task.prompt_format=plain, or set model.init = \"hf:DIR\" to an instruct checkpoint")
            .into()),
            ModelPath::Llama(Init::Random(name)) => Err(UserError::usage(format!(
                "task.prompt_format = \"chat\": model.init = \"random:{name}\" has no chat template"
            ))
            .with_fix("--set task.prompt_format=plain, or give an instruct checkpoint with --set model.init=hf:DIR")
            .into()),
            // The GPT-2 path tokenizes plain prompts (`rft::tokens`); chat
            // would be ignored there, so it is refused.
            ModelPath::Gpt2(dir) => Err(UserError::usage(format!(
                "task.prompt_format = \"chat\": {} is a GPT-2 checkpoint, which rft prompts with plain text; chat prompts are for Llama-family checkpoints",
                dir.display()
            ))
            .with_fix("--set task.prompt_format=plain")
            .into()),
            ModelPath::Llama(Init::Hf(dir)) => template_of(dir),
        }
    }
}

/// The chat template of the checkpoint in `dir`, required.
pub(crate) fn template_of(dir: &Path) -> anyhow::Result<ChatTemplate> {
    ChatTemplate::load(dir)?.ok_or_else(|| {
        UserError::usage(format!(
            "task.prompt_format = \"chat\": {} has no chat template (looked for {} and for `chat_template` in {})",
            dir.display(),
            dir.join(chat::TEMPLATE_FILE).display(),
            dir.join(chat::CONFIG_FILE).display()
        ))
        .with_fix("give the instruct checkpoint (its tokenizer_config.json carries the template), or --set task.prompt_format=plain for a base model")
        .into()
    })
}
