//! `model.init = "hf:DIR"` naming a GPT-2 checkpoint (config.json
//! `model_type` "gpt2"): what is checked before a run starts, and which
//! path runs it. A GPT-2 checkpoint loads into the GPT that the from-scratch
//! path trains (`gpt2::Gpt2`), so its run is that path's task and sampler
//! with the checkpoint's sizes and tokenizer (`super::gpt2_run`); every
//! other checkpoint goes to `super::llama_run`.

use std::path::{Path, PathBuf};

use envgen_kernels::FusedAutodiffBackend;
use serde_json::Value;

use super::config::{Init, RftConfig, RftModel};
use super::pretrained::named;
use super::tokens::RftTokenizer;
use crate::engine::rundir::Summary;
use crate::engine::RunControl;
use crate::error::UserError;
use crate::gpt2::{hf, ModelConfig};
use crate::pretrained::{self, HfTokenizer};

/// Whether `dir` holds a GPT-2 checkpoint (a readable config.json saying so).
pub fn is_gpt2(dir: &Path) -> bool {
    pretrained::model_type(dir).is_ok_and(|kind| kind == "gpt2")
}

/// The GPT-2 checkpoint `model.init` names, if it names one.
pub fn gpt2_dir(model: &RftModel) -> Option<PathBuf> {
    match model.checkpoint() {
        Ok(Some(Init::Hf(dir))) if is_gpt2(&dir) => Some(dir),
        _ => None,
    }
}

/// The sizes of the GPT this run trains: `[model]`'s without `init`, the
/// checkpoint's config.json for a GPT-2 `init`; None for a Llama-family one.
pub fn gpt_sizes(model: &RftModel) -> anyhow::Result<Option<ModelConfig>> {
    if model.init.is_none() {
        return Ok(Some(model.gpt.clone()));
    }
    gpt2_dir(model)
        .map(|dir| hf::config_of(&dir).map_err(named))
        .transpose()
}

/// `dir` is a GPT-2 checkpoint envgen fine-tunes: a config.json envgen's
/// GPT computes, safetensors weights, and a tokenizer whose ids the
/// embedding holds (exit 2 otherwise). Its sizes.
pub fn check_dir(dir: &Path) -> anyhow::Result<ModelConfig> {
    let sizes = hf::config_of(dir).map_err(named)?;
    // What the run reads and copies into RUN/hf/, by the rule for files of
    // a user directory, before a run directory exists (issue #40).
    let weights = ["model.safetensors"];
    for names in [&super::gpt2_run::COMPANIONS[..], &weights[..]] {
        super::llama_task::check_files(dir, names).map_err(named)?;
    }
    if !dir.join("model.safetensors").is_file() {
        return Err(named(
            UserError::usage(format!(
                "{} has config.json but no model.safetensors",
                dir.display()
            ))
            .with_fix("save the model with save_pretrained (safetensors is its default), or convert pytorch_model.bin to safetensors")
            .into(),
        ));
    }
    tokenizer(dir, &sizes)?;
    Ok(sizes)
}

/// The checkpoint's tokenizer for the GPT path: its tokenizer.json (or, as
/// `envgen sample` reads GPT-2 directories, GPT-2's own BPE when it has
/// none), its end-of-sequence ids, and its context.
pub fn tokenizer(dir: &Path, sizes: &ModelConfig) -> anyhow::Result<RftTokenizer> {
    let tokenizer = HfTokenizer::load(dir, true).map_err(named)?;
    let vocabulary = match &tokenizer {
        HfTokenizer::Json { inner, .. } => inner.get_vocab_size(true),
        HfTokenizer::Gpt2(t) => t.vocab_size(),
    };
    // A token id past the embedding has no row: refuse the pair up front.
    if vocabulary > sizes.vocab_size {
        return Err(UserError::usage(format!(
            "model.init: {}: the tokenizer has {vocabulary} tokens but config.json's vocab_size is {}",
            dir.display(),
            sizes.vocab_size
        ))
        .with_fix("give the directory the tokenizer the checkpoint was trained with")
        .into());
    }
    Ok(RftTokenizer::Hf {
        tokenizer,
        eos: eos_ids(dir)?,
        context: sizes.block_size,
    })
}

/// config.json's `eos_token_id` (one id, a list, or none).
fn eos_ids(dir: &Path) -> anyhow::Result<Vec<u32>> {
    let path = dir.join("config.json");
    let doc = crate::llama::config::read_json(&path)?;
    let one = |v: &Value| v.as_u64().and_then(|x| u32::try_from(x).ok());
    let ids = match &doc["eos_token_id"] {
        Value::Null => Some(Vec::new()),
        Value::Array(items) => items.iter().map(one).collect(),
        v => one(v).map(|id| vec![id]),
    };
    ids.ok_or_else(|| {
        UserError::usage(format!(
            "model.init: {}: `eos_token_id` is {}, expected a token id or a list of them",
            path.display(),
            doc["eos_token_id"]
        ))
        .with_fix("fix config.json (GPT-2's is 50256)")
        .into()
    })
}

/// With a GPT-2 `init`: every worked answer, and every prompt followed by
/// `task.max_completion_tokens`, fits the checkpoint's context (its
/// n_positions), in its own tokens. Ok for every other config.
pub fn check_context(config: &RftConfig) -> anyhow::Result<()> {
    let Some(dir) = gpt2_dir(&config.model) else {
        return Ok(());
    };
    let sizes = check_dir(&dir)?;
    let mut tokens = tokenizer(&dir, &sizes)?;
    // Measured whole: `tokenize` cuts examples at the context checked here.
    if let RftTokenizer::Hf { context, .. } = &mut tokens {
        *context = usize::MAX;
    }
    let split = config.split()?;
    let (mut prompt, mut example) = (0, 0);
    for q in split.train.iter().chain(&split.validation) {
        prompt = prompt.max(tokens.encode_prompt(&q.prompt())?.len());
        example = example.max(
            tokens
                .tokenize(&q.prompt(), &q.training_text())?
                .tokens
                .len(),
        );
    }
    let context = sizes.block_size;
    let where_ = format!("model.init: {}: n_positions = {context}", dir.display());
    if example > context {
        return Err(UserError::usage(format!(
            "{where_} is shorter than the longest worked answer ({example} tokens with its prompt)"
        ))
        .with_fix("use a checkpoint with a longer context (n_positions)")
        .into());
    }
    let max_completion = config.task.max_completion_tokens;
    if prompt + max_completion > context {
        return Err(UserError::usage(format!(
            "{where_} is shorter than the longest prompt ({prompt} tokens) plus task.max_completion_tokens = {max_completion}"
        ))
        .with_fix(format!(
            "--set task.max_completion_tokens={} (or less), or use a checkpoint with a longer context",
            context - prompt
        ))
        .into());
    }
    Ok(())
}

/// Parameters of the checkpoint `config` starts from, when readable.
pub(crate) fn parameters_of(config: &RftConfig) -> Option<u64> {
    match gpt2_dir(&config.model) {
        Some(dir) => hf::config_of(&dir).ok().map(|s| s.num_params() as u64),
        None => super::llama_run::parameters_of(config),
    }
}

/// Run (or resume) a pretrained-checkpoint run: GPT-2 on the GPT path,
/// everything else on the Llama one.
pub fn run<B: FusedAutodiffBackend>(
    config: &RftConfig,
    init: &Init,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    match init {
        Init::Hf(dir) if is_gpt2(dir) => super::gpt2_run::run::<B>(config, dir, control, device),
        _ => super::llama_run::run::<B>(config, init, control, device),
    }
}
