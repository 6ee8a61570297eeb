//! LoRA (Hu et al. 2021, "Low-Rank Adaptation of Large Language Models"),
//! shared by both model families: the `[finetune.lora]` table
//! ([`LoraConfig`]: rank, alpha, targets), the target names of each family
//! ([`Target`], [`Family`]) and the adapter on one linear layer
//! ([`adapter`]). Attaching, merging and saving adapters across a model is
//! each family's own: `crate::gpt2::lora` (the byte-level GPT) and
//! `crate::llama::lora` (Llama-family checkpoints).
//!
//! Written by hand because Burn 0.21 has no LoRA: the burn-core and burn-nn
//! 0.21.0 sources contain no adapter module (`Module::apply_lora` appears
//! only in burn 0.22 pre-releases).

pub mod adapter;

use serde::{Deserialize, Serialize};

pub use adapter::LoraAdapter;

use crate::error::UserError;

/// The `[finetune.lora]` table of an RFT config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// r, the inner dimension of A·B.
    #[serde(default = "default_rank")]
    pub rank: usize,
    /// The update A·B is scaled by alpha / rank.
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// The linear layers of every block that get an adapter. Read on its
    /// own (without knowing the family) the default is the GPT's all four;
    /// an rft config fills in its family's default ([`LoraTable::resolve`]).
    #[serde(default = "gpt_all_linear")]
    pub targets: Vec<Target>,
}

fn default_rank() -> usize {
    8
}

/// 4 × the default rank (HW3 uses alpha ≈ 4–5 × r).
fn default_alpha() -> f64 {
    32.0
}

fn gpt_all_linear() -> Vec<Target> {
    Family::Gpt.default_targets().to_vec()
}

impl Default for LoraConfig {
    /// The GPT's defaults (what `mode = "lora"` alone meant before Llama
    /// checkpoints had LoRA: GPT configs keep their config_hash).
    fn default() -> Self {
        Self::defaults_for(Family::Gpt)
    }
}

/// `[finetune.lora]` as written: `targets` may be left out, and then the
/// default depends on the model family, which only the whole rft config
/// knows (`crate::rft::config`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraTable {
    #[serde(default = "default_rank")]
    rank: usize,
    #[serde(default = "default_alpha")]
    alpha: f64,
    #[serde(default)]
    targets: Option<Targets>,
}

/// `targets` as written: layer names, or `"all-linear"`, PEFT's name for
/// every linear layer of every block (the output head left out), which
/// HW3 adapts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Targets {
    Layers(Vec<Target>),
    Named(String),
}

/// The one named set of targets.
pub const ALL_LINEAR: &str = "all-linear";

impl LoraTable {
    /// The table with the defaults of `family` filled in; `"all-linear"`
    /// becomes the family's layer list (config.toml records the list).
    pub fn resolve(self, family: Family) -> Result<LoraConfig, String> {
        let targets = match self.targets {
            None => family.default_targets().to_vec(),
            Some(Targets::Layers(layers)) => layers,
            Some(Targets::Named(name)) if name == ALL_LINEAR => family.targets().to_vec(),
            Some(Targets::Named(name)) => {
                return Err(format!(
                    "finetune.lora.targets = \"{name}\" is no set of layers.{}write \"{ALL_LINEAR}\" or a list of layer names: {}",
                    crate::engine::config::FIX_MARKER,
                    family.names()
                ))
            }
        };
        Ok(LoraConfig {
            rank: self.rank,
            alpha: self.alpha,
            targets,
        })
    }
}

/// Which model the adapters go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// The byte-level GPT (`crate::gpt2`).
    Gpt,
    /// A Llama-family checkpoint (`crate::llama`, `model.init`).
    Llama,
}

impl Family {
    /// Every layer of a block that may get an adapter.
    pub fn targets(self) -> &'static [Target] {
        match self {
            Family::Gpt => &Target::GPT,
            Family::Llama => &Target::LLAMA,
        }
    }

    /// The targets when `targets` is left out: all four linear layers of a
    /// GPT block (HW3's `all-linear`); a Llama's attention projections
    /// (the LoRA paper's choice, and PEFT's for Llama: q and v there; we
    /// take all four, which costs little more at rank 8).
    pub fn default_targets(self) -> &'static [Target] {
        match self {
            Family::Gpt => &Target::GPT,
            Family::Llama => &Target::LLAMA[..4],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Family::Gpt => "the GPT (byte-level, or a GPT-2 checkpoint)",
            Family::Llama => "a Llama-family checkpoint (model.init)",
        }
    }

    /// The family's target names, quoted, for messages.
    fn names(self) -> String {
        let quoted: Vec<String> = self
            .targets()
            .iter()
            .map(|t| format!("\"{}\"", t.name()))
            .collect();
        quoted.join(", ")
    }
}

/// A linear layer of a block, named by its path inside the block (the GPT's
/// as in `crate::gpt2::model`, a Llama's as in transformers' checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    #[serde(rename = "attn.c_attn")]
    AttnQkv,
    #[serde(rename = "attn.c_proj")]
    AttnProj,
    #[serde(rename = "mlp.c_fc")]
    MlpFc,
    #[serde(rename = "mlp.c_proj")]
    MlpProj,
    #[serde(rename = "self_attn.q_proj")]
    QProj,
    #[serde(rename = "self_attn.k_proj")]
    KProj,
    #[serde(rename = "self_attn.v_proj")]
    VProj,
    #[serde(rename = "self_attn.o_proj")]
    OProj,
    #[serde(rename = "mlp.gate_proj")]
    GateProj,
    #[serde(rename = "mlp.up_proj")]
    UpProj,
    #[serde(rename = "mlp.down_proj")]
    DownProj,
}

impl Target {
    /// A GPT block's linear layers.
    pub const GPT: [Target; 4] = [
        Target::AttnQkv,
        Target::AttnProj,
        Target::MlpFc,
        Target::MlpProj,
    ];

    /// A Llama layer's linear layers, the attention projections first.
    pub const LLAMA: [Target; 7] = [
        Target::QProj,
        Target::KProj,
        Target::VProj,
        Target::OProj,
        Target::GateProj,
        Target::UpProj,
        Target::DownProj,
    ];

    /// The path inside a block, as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            Target::AttnQkv => "attn.c_attn",
            Target::AttnProj => "attn.c_proj",
            Target::MlpFc => "mlp.c_fc",
            Target::MlpProj => "mlp.c_proj",
            Target::QProj => "self_attn.q_proj",
            Target::KProj => "self_attn.k_proj",
            Target::VProj => "self_attn.v_proj",
            Target::OProj => "self_attn.o_proj",
            Target::GateProj => "mlp.gate_proj",
            Target::UpProj => "mlp.up_proj",
            Target::DownProj => "mlp.down_proj",
        }
    }

    pub fn family(self) -> Family {
        if Target::GPT.contains(&self) {
            Family::Gpt
        } else {
            Family::Llama
        }
    }
}

impl LoraConfig {
    /// The defaults of `family` (rank 8, alpha 32, its default targets).
    pub fn defaults_for(family: Family) -> Self {
        Self {
            rank: default_rank(),
            alpha: default_alpha(),
            targets: family.default_targets().to_vec(),
        }
    }

    /// alpha / rank, the factor of the update.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// The checks both families share; `key` is the table's path
    /// (`finetune.lora`) and `max_rank` min(d_in, d_out) over the targeted
    /// layers of this model.
    pub fn check(&self, family: Family, key: &str, max_rank: usize) -> Result<(), UserError> {
        if self.targets.is_empty() {
            return Err(
                UserError::usage(format!("{key}.targets = []")).with_fix(format!(
                    "name at least one of {} (or leave targets out: {})",
                    family.names(),
                    default_names(family)
                )),
            );
        }
        if let Some(foreign) = self.targets.iter().find(|t| t.family() != family) {
            return Err(UserError::usage(format!(
                "{key}.targets: \"{}\" is a layer of {}, but this run fine-tunes {}",
                foreign.name(),
                foreign.family().describe(),
                family.describe()
            ))
            .with_fix(format!(
                "name layers of {}: {} (or leave targets out: {})",
                family.describe(),
                family.names(),
                default_names(family)
            )));
        }
        if self.rank == 0 || self.rank > max_rank {
            return Err(UserError::usage(format!(
                "{key}.rank = {}: a rank must lie in 1..=min(d_in, d_out) = {max_rank} for the targeted layers",
                self.rank
            ))
            .with_fix(format!("set {key}.rank to 1..={max_rank} (8 is common)")));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(UserError::usage(format!(
                "{key}.alpha = {}: the update is scaled by alpha / rank, so alpha must be > 0",
                self.alpha
            ))
            .with_fix(format!(
                "set {key}.alpha to e.g. {} (4 × rank)",
                4 * self.rank
            )));
        }
        Ok(())
    }
}

fn default_names(family: Family) -> String {
    match family {
        Family::Gpt => "all four".to_string(),
        Family::Llama => "the attention projections q, k, v, o".to_string(),
    }
}
