//! STAND-IN for the data module (another helper writes the real one; it
//! replaces this file at merge). Same public API, minimal behaviour: only
//! `source = "generated"` with the byte tokenizer.
//!
//! The generated corpus is words drawn uniformly and independently from a
//! fixed word list, each followed by a space. Word boundaries are recoverable,
//! so the entropy rate per byte is ln(#words) / E[bytes per word].

use std::path::PathBuf;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::UserError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataSource {
    Generated,
    Llmc,
    Nanogpt,
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TokenizerKind {
    #[default]
    Byte,
    Char,
    Gpt2,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub source: DataSource,
    #[serde(default)]
    pub path: Option<PathBuf>,
    #[serde(default)]
    pub val_path: Option<PathBuf>,
    #[serde(default)]
    pub tokenizer: TokenizerKind,
    #[serde(default)]
    pub corpus_bytes: Option<usize>,
    #[serde(default)]
    pub val_fraction: Option<f64>,
    #[serde(default)]
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DataFile {
    pub path: PathBuf,
    pub sha256: String,
    pub tokens: usize,
}

/// Byte-level tokenizer (the stand-in knows no other).
#[derive(Debug, Clone)]
pub struct Tokenizer;

impl Tokenizer {
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }
    pub fn decode(&self, tokens: &[u32]) -> String {
        let bytes: Vec<u8> = tokens.iter().map(|&t| t.min(255) as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

pub struct TokenData {
    pub train: Vec<u32>,
    pub val: Vec<u32>,
    pub vocab_size: usize,
    pub tokenizer: Tokenizer,
    pub entropy_nats_per_token: Option<f64>,
    pub files: Vec<DataFile>,
}

const WORDS: [&str; 16] = [
    "the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "sun", "in",
    "sky", "by",
];

pub fn load(cfg: &DataConfig) -> anyhow::Result<TokenData> {
    if cfg.source != DataSource::Generated || cfg.tokenizer != TokenizerKind::Byte {
        return Err(UserError::usage(format!(
            "data.source {:?} with tokenizer {:?} is not available in this build",
            cfg.source, cfg.tokenizer
        ))
        .with_fix("use data.source = \"generated\" with the byte tokenizer")
        .into());
    }
    let total = cfg.corpus_bytes.unwrap_or(200_000);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut bytes = Vec::with_capacity(total + 8);
    while bytes.len() < total {
        bytes.extend_from_slice(WORDS[rng.random_range(0..WORDS.len())].as_bytes());
        bytes.push(b' ');
    }
    bytes.truncate(total);
    let tokens: Vec<u32> = bytes.into_iter().map(u32::from).collect();
    let val_len = ((tokens.len() as f64) * cfg.val_fraction.unwrap_or(0.1)) as usize;
    let split = tokens.len() - val_len;
    let mean_bytes_per_word =
        WORDS.iter().map(|w| w.len() as f64 + 1.0).sum::<f64>() / WORDS.len() as f64;
    Ok(TokenData {
        train: tokens[..split].to_vec(),
        val: tokens[split..].to_vec(),
        vocab_size: 256,
        tokenizer: Tokenizer,
        entropy_nats_per_token: Some((WORDS.len() as f64).ln() / mean_bytes_per_word),
        files: Vec::new(),
    })
}
