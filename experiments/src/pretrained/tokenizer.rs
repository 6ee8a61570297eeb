//! A checkpoint's tokenizer: its `tokenizer.json` through Hugging Face's
//! `tokenizers` crate (the same Rust code `transformers`' fast tokenizers
//! run), or, for a GPT-2 directory without one, envgen's built-in GPT-2 BPE.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::data;
use crate::error::UserError;

pub const FILE: &str = "tokenizer.json";

#[derive(Clone)]
pub enum HfTokenizer {
    Json {
        inner: Box<tokenizers::Tokenizer>,
        path: PathBuf,
    },
    /// A GPT-2 directory without tokenizer.json: r50k_base, compiled in.
    Gpt2(data::Tokenizer),
}

impl fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HfTokenizer::Json { path, .. } => write!(f, "HfTokenizer({})", path.display()),
            HfTokenizer::Gpt2(_) => write!(f, "HfTokenizer(gpt2 built in)"),
        }
    }
}

impl HfTokenizer {
    /// `DIR/tokenizer.json` (required unless `gpt2_fallback`).
    pub fn load(dir: &Path, gpt2_fallback: bool) -> anyhow::Result<Self> {
        let path = dir.join(FILE);
        if !path.exists() {
            if gpt2_fallback {
                return Ok(HfTokenizer::Gpt2(data::Tokenizer::gpt2()));
            }
            return Err(UserError::usage(format!("{} has no {FILE}", dir.display()))
                .with_fix("copy the checkpoint's tokenizer.json into the directory (tokenizer.save_pretrained writes it)")
                .into());
        }
        let bytes = crate::fsutil::read_user_file(dir, &path, crate::fsutil::limit::TOKENIZER)?;
        let inner = guarded(&path, || tokenizers::Tokenizer::from_bytes(&bytes))?.map_err(|e| {
            UserError::usage(format!("{}: not a tokenizers file: {e}", path.display()))
                .with_fix("give the tokenizer.json the checkpoint was published with")
        })?;
        Ok(HfTokenizer::Json {
            inner: Box::new(inner),
            path,
        })
    }

    /// Token ids of `text`, with the special tokens the tokenizer's
    /// post-processor adds (a BOS for Llama's), as transformers'
    /// `tokenizer(text)` does.
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        self.encode_with(text, true)
    }

    /// Token ids of `text` alone, without the special tokens a
    /// post-processor adds: for text that continues a prompt, and for a
    /// rendered chat, whose template writes them itself (transformers'
    /// `apply_chat_template` tokenizes with `add_special_tokens=False`).
    pub fn encode_plain(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        self.encode_with(text, false)
    }

    fn encode_with(&self, text: &str, add_special_tokens: bool) -> anyhow::Result<Vec<u32>> {
        match self {
            HfTokenizer::Json { inner, path } => {
                Ok(guarded(path, || inner.encode(text, add_special_tokens))?
                    .map_err(|e| {
                        UserError::usage(format!("{}: cannot encode {text:?}: {e}", path.display()))
                    })?
                    .get_ids()
                    .to_vec())
            }
            HfTokenizer::Gpt2(t) => Ok(t.encode(text)),
        }
    }

    /// Text of `ids` without special tokens (`skip_special_tokens=True`);
    /// ids the vocabulary does not hold decode to nothing rather than fail.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            HfTokenizer::Json { inner, path } => guarded(path, || inner.decode(ids, true))
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            HfTokenizer::Gpt2(t) => t.decode(ids),
        }
    }

    /// The id of a token string (`</s>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            HfTokenizer::Json { inner, .. } => inner.token_to_id(token),
            HfTokenizer::Gpt2(_) => (token == "<|endoftext|>").then_some(data::tokenizer::GPT2_EOT),
        }
    }
}

/// `f`, with a panic inside the tokenizers crate (or the onig regex engine
/// under it) turned into a usage error naming the file (issue #40: a
/// TemplateProcessing naming an undefined special token, a pre-tokenizer
/// regex onig gives up on). The tokenizer is a user's file, and a bad one
/// must be exit 2 with its name, not a crash.
fn guarded<T>(path: &Path, f: impl FnOnce() -> T) -> anyhow::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        UserError::usage(format!(
            "{}: the tokenizers library failed on this file ({})",
            path.display(),
            why.lines().next().unwrap_or_default()
        ))
        .with_fix("give the tokenizer.json the checkpoint was published with")
        .into()
    })
}
