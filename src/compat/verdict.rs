//! Pure: (host, image | wheel | precision) → verdicts with stable reason codes.

use serde::{Deserialize, Serialize};

use super::{ImageFacts, KnowledgeBase};
use crate::host::Host;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Tf32,
    Bf16,
    Fp16,
    Fp8,
}

/// One finding, with a stable code from CONTRACT.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub code: String,
    pub status: Status,
    pub message: String,
    pub fix: String,
}

/// The verdict for one GPU × one subject (image, wheel or precision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The image reference, or "pytorch:2.6.0+cu124", or "precision:fp8".
    pub image: String,
    pub gpu_index: Option<u32>,
    /// The worst of the reasons (`fail` > `warn` > `ok`).
    pub status: Status,
    pub reasons: Vec<Reason>,
}

/// What to check against the host.
#[derive(Debug, Clone, Default)]
pub struct CheckRequest {
    pub images: Vec<ImageFacts>,
    pub pytorch: Option<String>,
    pub precision: Option<Precision>,
}

/// Every verdict for `host` × `request`.
pub fn evaluate(_kb: &KnowledgeBase, _host: &Host, _request: &CheckRequest) -> Vec<Verdict> {
    Vec::new()
}
