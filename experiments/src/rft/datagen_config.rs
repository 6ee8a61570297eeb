//! The `[datagen]` table: how many paths to sample, with which temperature,
//! top-k and top-p,
//! and which right paths to keep (`check_reasoning`, `distinct`,
//! `max_kept_per_question`). `super::datagen` applies it.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::equations::equation_key;
use crate::error::UserError;
use crate::sampling::Sampling;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DatagenTable")]
pub struct DatagenConfig {
    /// Completions sampled per question (HW3 starter: 10; RFT paper: 100).
    pub oversample: usize,
    /// HW3 starter: 0.6; RFT paper: 0.7.
    pub temperature: f32,
    /// Top-k after the temperature, as transformers' sampling: its default
    /// 50 (`generate(do_sample=True, temperature=0.7)`); 0 = off.
    pub top_k: usize,
    /// Nucleus after top-k; 1 = off (transformers' default).
    pub top_p: f32,
    /// Distinct correct completions kept per question (HW3 keeps 1; the RFT
    /// paper keeps every distinct one).
    pub max_kept_per_question: usize,
    /// Seed of the sampler's random draws.
    #[serde(default)]
    pub seed: u64,
    /// Also require the worked computation to be the question's (operand,
    /// operation and factor, e.g. "so 2.5 * 1000"): a right answer reached
    /// through a wrong line is then not kept. Off = HW3's answer-only rule.
    #[serde(default)]
    pub check_reasoning: bool,
    /// Also require every equation of the path (`a op b = c`) to compute,
    /// as Yuan et al. 2023 §4 check theirs (`super::equations`): a right
    /// answer after a wrong intermediate step is not kept. Unwritten when
    /// off, so configs from before keep their config_hash.
    #[serde(default, skip_serializing_if = "is_false")]
    pub check_equations: bool,
    /// When two kept paths are the same ([`Distinct`]); the paper's
    /// equation lists unless said.
    #[serde(default)]
    pub distinct: Distinct,
}

fn is_false(flag: &bool) -> bool {
    !*flag
}

/// `datagen.distinct`: two right paths of a question are the same when
/// their `equations` lists are (normalised: Yuan et al. 2023 §4, the
/// default), or when their `text` is (whitespace collapsed, cut after the
/// answer: what envgen did before).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distinct {
    #[default]
    Equations,
    Text,
}

impl Distinct {
    /// What two kept paths of one question are compared by.
    pub fn key(self, normalized_completion: &str) -> String {
        match self {
            Distinct::Equations => equation_key(normalized_completion),
            Distinct::Text => normalized_completion.to_string(),
        }
    }
}

/// The `[datagen]` table as written: [`DatagenConfig`] plus the keys it no
/// longer has, refused with their replacement.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DatagenTable {
    oversample: usize,
    temperature: f32,
    #[serde(default = "default_top_k")]
    top_k: usize,
    #[serde(default = "default_top_p")]
    top_p: f32,
    /// Before issue #23 the generation batch was science (in config_hash).
    #[serde(default)]
    batch_questions: Option<IgnoredAny>,
    max_kept_per_question: usize,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    check_reasoning: bool,
    #[serde(default)]
    check_equations: bool,
    #[serde(default)]
    distinct: Distinct,
}

fn default_top_k() -> usize {
    crate::sampling::TRANSFORMERS_TOP_K
}

fn default_top_p() -> f32 {
    1.0
}

/// Why `datagen.batch_questions` is refused, and what to do instead (after
/// [`crate::engine::config::FIX_MARKER`], which makes it the error's fix).
pub const BATCH_QUESTIONS_GONE: &str = "datagen.batch_questions is no longer a config key: \
the generation batch is a hardware knob (samples no longer depend on it, and it is not in \
config_hash). Fix: delete the batch_questions line and pass `envgen run rft --gen-batch N` \
(N = rows per call = the old batch_questions x oversample); for a run directory from before, \
copy its config.toml without the line and start a new run with `envgen run rft --config COPY`";

impl TryFrom<DatagenTable> for DatagenConfig {
    type Error = String;
    fn try_from(table: DatagenTable) -> Result<Self, String> {
        if table.batch_questions.is_some() {
            return Err(BATCH_QUESTIONS_GONE.to_string());
        }
        Ok(Self {
            oversample: table.oversample,
            temperature: table.temperature,
            top_k: table.top_k,
            top_p: table.top_p,
            max_kept_per_question: table.max_kept_per_question,
            seed: table.seed,
            check_reasoning: table.check_reasoning,
            check_equations: table.check_equations,
            distinct: table.distinct,
        })
    }
}

impl Default for DatagenConfig {
    fn default() -> Self {
        Self {
            oversample: 16,
            temperature: 0.7,
            top_k: default_top_k(),
            top_p: default_top_p(),
            max_kept_per_question: 1,
            seed: 0,
            check_reasoning: false,
            check_equations: false,
            distinct: Distinct::Equations,
        }
    }
}

impl DatagenConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        for (key, value) in [
            ("oversample", self.oversample),
            ("max_kept_per_question", self.max_kept_per_question),
        ] {
            if value == 0 {
                return Err(UserError::usage(format!("rft datagen: {key} = 0"))
                    .with_fix(format!("set {key} to 1 or more"))
                    .into());
            }
        }
        if let Some((key, value, fix)) = self.sampling().problem() {
            return Err(UserError::usage(format!("rft datagen: {key} = {value}"))
                .with_fix(fix)
                .into());
        }
        Ok(())
    }

    /// How stage (b) draws its completions.
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
        }
    }
}
