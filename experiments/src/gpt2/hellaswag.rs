//! HellaSwag (Zellers et al. 2019, https://rowanzellers.com/hellaswag/),
//! scored the way build-nanogpt's `hellaswag.py` and llm.c's
//! `dev/data/hellaswag.py` do
//! (https://github.com/karpathy/build-nanogpt/blob/master/hellaswag.py):
//! each of the four endings is appended to the context (" " + ending, GPT-2
//! BPE), the model's cross-entropy is summed over the ending's tokens only,
//! and the prediction is the ending with the lowest total loss (`acc`) or
//! the lowest mean loss per token (`acc_norm`, the number GPT-2 papers and
//! llm.c report: 124M ≈ 0.294 for OpenAI's checkpoint).
//!
//! The input is the public validation file `hellaswag_val.jsonl` (10,042
//! lines), one JSON object per line with at least `ctx`, `endings` (four
//! strings) and `label` (0–3). A row longer than the model's block keeps
//! its last `block_size` tokens (only tiny models meet this).
//!
//! During training every rank scores its share of the items (groups of
//! [`ITEMS_PER_FORWARD`], dealt round-robin) inside the run's autocast
//! scope, i.e. in the run's precision, and the counts are summed.

use std::io::BufRead;
use std::path::Path;

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::TensorData;
use envgen_kernels::FusedBackend;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::model::{Gpt2, ModelConfig};
use crate::data::Tokenizer;
use crate::engine::EvalShare;
use crate::error::UserError;

/// One multiple-choice item.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Item {
    pub ctx: String,
    pub endings: Vec<String>,
    pub label: usize,
}

/// Accuracy over the items scored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub items: usize,
    /// Correct by the lowest summed completion loss.
    pub correct: usize,
    /// Correct by the lowest mean completion loss per token.
    pub correct_norm: usize,
}

impl Score {
    pub fn acc(&self) -> f64 {
        self.correct as f64 / self.items.max(1) as f64
    }
    pub fn acc_norm(&self) -> f64 {
        self.correct_norm as f64 / self.items.max(1) as f64
    }
    /// `hellaswag_acc`, `hellaswag_acc_norm`, `hellaswag_items`.
    pub fn insert_into(&self, m: &mut Map<String, Value>) {
        m.insert("hellaswag_acc".into(), json!(self.acc()));
        m.insert("hellaswag_acc_norm".into(), json!(self.acc_norm()));
        m.insert("hellaswag_items".into(), json!(self.items));
    }
}

/// Read the first `limit` items (all when None) of a HellaSwag jsonl file.
pub fn load(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Item>> {
    let where_ = "download hellaswag_val.jsonl as docs/experiments/gpt2.md says and set eval.hellaswag to its path";
    let file = std::fs::File::open(path).map_err(|e| {
        UserError::usage(format!(
            "cannot open HellaSwag file {}: {e}",
            path.display()
        ))
        .with_fix(where_)
    })?;
    let mut items = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        if limit.is_some_and(|n| items.len() >= n) {
            break;
        }
        let line = line.map_err(|e| {
            UserError::usage(format!(
                "cannot read {} line {}: {e}",
                path.display(),
                i + 1
            ))
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let item: Item = serde_json::from_str(&line).map_err(|e| {
            UserError::usage(format!(
                "{} line {}: not a HellaSwag item: {e}",
                path.display(),
                i + 1
            ))
            .with_fix("each line must be a JSON object with ctx, endings (4 strings) and label (0-3), as in hellaswag_val.jsonl")
        })?;
        if item.endings.len() != 4 || item.label >= 4 {
            return Err(UserError::usage(format!(
                "{} line {}: {} endings and label {}, expected 4 endings and a label 0-3",
                path.display(),
                i + 1,
                item.endings.len(),
                item.label
            ))
            .with_fix(where_)
            .into());
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err(
            UserError::usage(format!("{} holds no HellaSwag items", path.display()))
                .with_fix(where_)
                .into(),
        );
    }
    Ok(items)
}

/// Token rows of one item: context + " " + ending, and where each
/// ending's tokens begin (the rows' targets from there on are scored).
pub fn render(item: &Item, tokenizer: &Tokenizer) -> Vec<(Vec<u32>, usize)> {
    let ctx = tokenizer.encode(&item.ctx);
    item.endings
        .iter()
        .map(|ending| {
            let mut row = ctx.clone();
            row.extend(tokenizer.encode(&format!(" {ending}")));
            (row, ctx.len())
        })
        .collect()
}

/// Summed and mean cross-entropy of each ending given its context.
pub fn ending_losses<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    rows: &[(Vec<u32>, usize)],
    device: &B::Device,
) -> Vec<(f64, f64)> {
    // Keep each row's last block_size tokens; the ending stays whole
    // unless the ending alone is longer than the block.
    let rows: Vec<(Vec<u32>, usize)> = rows
        .iter()
        .map(|(row, ending_at)| {
            let cut = row.len().saturating_sub(cfg.block_size);
            (row[cut..].to_vec(), ending_at.saturating_sub(cut).max(1))
        })
        .collect();
    let width = rows.iter().map(|(r, _)| r.len()).max().unwrap_or(1).max(2);
    let n = rows.len();
    let mut tokens = Vec::with_capacity(n * width);
    for (row, _) in &rows {
        tokens.extend(row.iter().map(|&t| i64::from(t)));
        tokens.extend(std::iter::repeat_n(0i64, width - row.len()));
    }
    let idx = Tensor::<B, 2, Int>::from_data(TensorData::new(tokens.clone(), [n, width]), device);
    let log_probs = log_softmax(model.forward(idx.clone()).slice([0..n, 0..width - 1]), 2);
    // Position p predicts token p + 1.
    let targets = idx.slice([0..n, 1..width]).reshape([n, width - 1, 1]);
    let picked: Vec<f32> = log_probs
        .gather(2, targets)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_default();
    rows.iter()
        .enumerate()
        .map(|(i, (row, ending_at))| {
            // (An empty row, possible only with a char vocabulary that lacks
            // every character, scores nothing rather than panicking.)
            let end = row.len().saturating_sub(1);
            let scored = (ending_at - 1).min(end)..end;
            let count = scored.len().max(1);
            let sum: f64 = scored
                .map(|p| -f64::from(picked[i * (width - 1) + p]))
                .sum();
            (sum, sum / count as f64)
        })
        .collect()
}

/// The index of the smallest value (the first on a tie, as argmin does).
fn argmin(values: impl Iterator<Item = f64>) -> usize {
    values
        .enumerate()
        .fold(
            (0, f64::INFINITY),
            |best, (i, v)| if v < best.1 { (i, v) } else { best },
        )
        .0
}

/// Items scored in one forward pass (their 4 rows each, padded to the
/// group's longest). Fixed, so a group's numbers are the same whatever the
/// micro-batch or the number of ranks: groups, not items, are dealt out.
pub const ITEMS_PER_FORWARD: usize = 4;

/// Score `items` with `model`: this rank's groups of items (`share`), and
/// every rank's counts summed, so each rank returns the whole score.
pub fn score<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    tokenizer: &Tokenizer,
    items: &[Item],
    share: &EvalShare,
    device: &B::Device,
) -> anyhow::Result<Score> {
    let mut mine = Score {
        items: 0,
        correct: 0,
        correct_norm: 0,
    };
    for (index, group) in items.chunks(ITEMS_PER_FORWARD).enumerate() {
        if !share.is_mine(index) {
            continue;
        }
        let rows: Vec<(Vec<u32>, usize)> = group
            .iter()
            .flat_map(|item| render(item, tokenizer))
            .collect();
        let losses = ending_losses(model, cfg, &rows, device);
        for (item, losses) in group.iter().zip(losses.chunks(4)) {
            mine.tally(losses, item.label);
        }
    }
    let counts = [mine.items, mine.correct, mine.correct_norm].map(|c| c as f64);
    let all = share.sum_counts(&counts)?;
    Ok(Score {
        items: all[0] as usize,
        correct: all[1] as usize,
        correct_norm: all[2] as usize,
    })
}

impl Score {
    /// Count one item from its endings' (summed, mean) losses.
    pub fn tally(&mut self, losses: &[(f64, f64)], label: usize) {
        self.items += 1;
        self.correct += usize::from(argmin(losses.iter().map(|l| l.0)) == label);
        self.correct_norm += usize::from(argmin(losses.iter().map(|l| l.1)) == label);
    }
}

#[cfg(test)]
#[path = "hellaswag_tests.rs"]
mod tests;
