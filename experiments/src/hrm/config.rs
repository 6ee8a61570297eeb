//! HRM configuration: the model shape and the training hyper-parameters,
//! read from the presets in `experiments/presets/hrm-sudoku/*.toml`.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::error::UserError;

/// The shape of the Hierarchical Reasoning Model (see experiments.md §2a).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HrmConfig {
    pub hidden: usize,
    pub heads: usize,
    pub h_layers: usize,
    pub l_layers: usize,
    pub h_cycles: usize,
    pub l_cycles: usize,
    /// SwiGLU expansion; the inner width is derived by [`HrmConfig::intermediate`].
    pub expansion: f64,
    pub rope_theta: f64,
    /// Number of puzzle cells (81 for Sudoku).
    pub seq_len: usize,
    /// Positions taken by the puzzle embedding in front of the cells.
    pub puzzle_emb_len: usize,
    /// Rows of the puzzle-embedding table (Sudoku: 1, every puzzle has id 0).
    pub num_puzzle_ids: usize,
    pub vocab: usize,
    pub halt_max_steps: usize,
    pub halt_exploration_prob: f64,
    pub rms_norm_eps: f64,
}

/// Optimizer and schedule settings (experiments.md §2d).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HrmTrainConfig {
    pub lr: f64,
    pub lr_warmup_steps: usize,
    pub lr_min_ratio: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub puzzle_emb_lr: f64,
    pub puzzle_emb_weight_decay: f64,
    pub global_batch_size: usize,
    pub epochs: usize,
    /// Evaluate every this many epochs.
    pub eval_interval: usize,
    pub seed: u64,
}

/// One preset file: `[model]` and `[train]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HrmPreset {
    pub model: HrmConfig,
    pub train: HrmTrainConfig,
}

/// The presets shipped with envgen, by name.
pub const BUILTIN_PRESETS: &[(&str, &str)] = &[
    (
        "sudoku-extreme-1k",
        include_str!("../../presets/hrm-sudoku/sudoku-extreme-1k.toml"),
    ),
    ("tiny", include_str!("../../presets/hrm-sudoku/tiny.toml")),
];

impl HrmPreset {
    /// A preset shipped with envgen (`sudoku-extreme-1k`, `tiny`).
    pub fn builtin(name: &str) -> anyhow::Result<Self> {
        let Some((_, text)) = BUILTIN_PRESETS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = BUILTIN_PRESETS.iter().map(|(n, _)| *n).collect();
            return Err(UserError::usage(format!("unknown HRM preset `{name}`"))
                .with_fix(format!("use one of: {}", names.join(", ")))
                .into());
        };
        Self::parse(text, &format!("builtin preset {name}"))
    }

    /// Read a preset from a TOML file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            UserError::usage(format!("cannot read HRM preset {}: {e}", path.display()))
                .with_fix("pass an existing TOML file with [model] and [train] tables")
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parse and validate; `origin` names the source in error messages.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Self> {
        let preset: Self = toml::from_str(text).map_err(|e| {
            UserError::usage(format!("invalid HRM preset {origin}: {e}"))
                .with_fix("compare with experiments/presets/hrm-sudoku/tiny.toml")
        })?;
        preset.model.validate(origin)?;
        Ok(preset)
    }
}

impl HrmConfig {
    /// Check the relations between fields that serde cannot express.
    pub fn validate(&self, origin: &str) -> Result<(), UserError> {
        let bad = |field: &str, value: String, fix: &str| {
            Err(
                UserError::usage(format!("{origin}: model.{field} = {value} is invalid"))
                    .with_fix(fix.to_string()),
            )
        };
        if self.hidden == 0 || self.heads == 0 || self.hidden % self.heads != 0 {
            return bad(
                "heads",
                self.heads.to_string(),
                "hidden must be a positive multiple of heads",
            );
        }
        if self.head_dim() % 2 != 0 {
            return bad(
                "hidden",
                self.hidden.to_string(),
                "hidden/heads must be even for rotary position embeddings",
            );
        }
        for (field, value) in [
            ("h_layers", self.h_layers),
            ("l_layers", self.l_layers),
            ("h_cycles", self.h_cycles),
            ("l_cycles", self.l_cycles),
            ("halt_max_steps", self.halt_max_steps),
            ("seq_len", self.seq_len),
            ("num_puzzle_ids", self.num_puzzle_ids),
        ] {
            if value == 0 {
                return bad(field, "0".into(), "use a value of at least 1");
            }
        }
        if self.puzzle_emb_len == 0 {
            return bad(
                "puzzle_emb_len",
                "0".into(),
                "use 1: the Q-head reads position 0, the puzzle-embedding slot",
            );
        }
        if self.vocab < 3 {
            return bad(
                "vocab",
                self.vocab.to_string(),
                "Sudoku needs 11 (PAD, blank, 9 digits)",
            );
        }
        if !(0.0..=1.0).contains(&self.halt_exploration_prob) {
            return bad(
                "halt_exploration_prob",
                self.halt_exploration_prob.to_string(),
                "use a probability in [0, 1]",
            );
        }
        if self.expansion <= 0.0 || self.rope_theta <= 0.0 || self.rms_norm_eps <= 0.0 {
            return bad(
                "expansion/rope_theta/rms_norm_eps",
                format!(
                    "{}/{}/{}",
                    self.expansion, self.rope_theta, self.rms_norm_eps
                ),
                "all three must be positive",
            );
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// SwiGLU inner width: expansion·hidden·2/3 rounded up to a multiple of
    /// 256, as in the reference (`_find_multiple`), e.g. 1536 for hidden 512.
    pub fn intermediate(&self) -> usize {
        let raw = (self.expansion * self.hidden as f64 * 2.0 / 3.0).round() as usize;
        raw.div_ceil(256) * 256
    }

    /// Positions the reasoning modules see: puzzle embedding + cells (82).
    pub fn total_seq_len(&self) -> usize {
        self.seq_len + self.puzzle_emb_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_paper_preset_has_paper_values() {
        let paper = HrmPreset::builtin("sudoku-extreme-1k").unwrap();
        assert_eq!(paper.model.intermediate(), 1536);
        assert_eq!(paper.model.total_seq_len(), 82);
        assert_eq!(paper.train.global_batch_size, 384);
        assert_eq!(paper.train.lr, 7e-5);
        let tiny = HrmPreset::builtin("tiny").unwrap();
        assert_eq!(tiny.model.intermediate(), 256);
        assert!(tiny.model.hidden < paper.model.hidden);
    }

    #[test]
    fn unknown_field_and_bad_values_are_usage_errors() {
        let text = include_str!("../../presets/hrm-sudoku/tiny.toml");
        let with_typo = text.replace("heads = 4", "heads = 4\nhedas = 4");
        let err = HrmPreset::parse(&with_typo, "t").unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2);
        assert!(err.to_string().contains("hedas"), "{err}");
        let odd = text.replace("heads = 4", "heads = 3");
        let err = HrmPreset::parse(&odd, "t").unwrap_err();
        assert!(err.to_string().contains("model.heads"), "{err}");
        let err = HrmPreset::builtin("nope").unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2);
    }
}
