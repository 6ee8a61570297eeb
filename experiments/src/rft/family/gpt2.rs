//! A GPT-2 checkpoint (`model.init = "hf:DIR"`, config.json `model_type`
//! "gpt2"): what is checked before a run starts, the checkpoint's
//! tokenizer, and the final model written back as a GPT-2 directory. The
//! checkpoint loads into the GPT the from-scratch path trains
//! (`gpt2::Gpt2`), so its run is that path's model code (`super::gpt`)
//! with these sizes and this tokenizer.

use std::path::Path;

use envgen_kernels::FusedBackend;
use serde_json::Value;

use crate::error::UserError;
use crate::gpt2::{hf, ModelConfig};
use crate::pretrained::{self, HfTokenizer};
use crate::rft::eval::load_model;
use crate::rft::files::{check_files, copy_files};
use crate::rft::pretrained::named;
use crate::rft::task::Split;
use crate::rft::tokens::RftTokenizer;

/// Files of the base directory besides the weights that the exported
/// directory keeps: the config (its token ids, its context) and every
/// tokenizer file transformers or envgen may read.
pub(crate) const COMPANIONS: [&str; 7] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
];

/// Whether `dir` holds a GPT-2 checkpoint (a readable config.json saying so).
pub fn is_gpt2(dir: &Path) -> bool {
    pretrained::model_type(dir).is_ok_and(|kind| kind == "gpt2")
}

/// The sizes config.json gives the GPT, as a `model.init` error.
pub fn sizes(dir: &Path) -> anyhow::Result<ModelConfig> {
    hf::config_of(dir).map_err(named)
}

/// `dir` is a GPT-2 checkpoint envgen fine-tunes: a config.json envgen's
/// GPT computes, safetensors weights, and a tokenizer whose ids the
/// embedding holds (exit 2 otherwise). Its sizes.
pub fn check_dir(dir: &Path) -> anyhow::Result<ModelConfig> {
    let sizes = sizes(dir)?;
    // What the run reads and copies into RUN/hf/, by the rule for files of
    // a user directory, before a run directory exists (issue #40).
    let weights = ["model.safetensors"];
    for names in [&COMPANIONS[..], &weights[..]] {
        check_files(dir, names).map_err(named)?;
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

/// Every worked answer of `split`, and every prompt followed by
/// `max_completion` tokens, fits the context (n_positions) of the GPT-2
/// checkpoint in `dir`, in its own tokens.
pub fn check_context(dir: &Path, split: &Split, max_completion: usize) -> anyhow::Result<()> {
    let sizes = check_dir(dir)?;
    let mut tokens = tokenizer(dir, &sizes)?;
    // Measured whole: `tokenize` cuts examples at the context checked here.
    if let RftTokenizer::Hf { context, .. } = &mut tokens {
        *context = usize::MAX;
    }
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

/// `hf_dir` as a GPT-2 directory of the weights at `weights`:
/// transformers' names, and the base's config.json and tokenizer files.
pub(crate) fn save_pretrained<B: FusedBackend>(
    weights: &Path,
    sizes: &ModelConfig,
    base: &Path,
    hf_dir: &Path,
    device: &B::Device,
) -> anyhow::Result<()> {
    let model = load_model::<B>(sizes, weights, device)?;
    hf::save_pretrained(&model, sizes, hf_dir)?;
    // The base's config.json replaces the one save_pretrained writes: same
    // sizes, and the checkpoint's own token ids and settings.
    copy_files(base, &COMPANIONS, hf_dir)
}
