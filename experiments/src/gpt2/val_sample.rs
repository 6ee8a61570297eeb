//! Which validation windows a loss is measured on. A validation loss is a
//! mean over a sample of the split, and two numbers compare only when their
//! samples do: "spread" (envgen's default: `rows` windows evenly spaced over
//! the whole split, a cheap estimate of all of it) or "first" (windows that
//! tile the split from its first token, as build-nanogpt's validation
//! loader reads it: `val_loss_steps = 20` batches of B × T = 64 × 1024
//! tokens on each of 8 ranks, rank r starting at r·B·T and every rank
//! advancing by B·T·8, i.e. the first 20 · 8 · 64 · 1024 = 10,485,760
//! tokens in windows of 1,024, each predicting the next token;
//! https://github.com/karpathy/build-nanogpt/blob/master/train_gpt2.py,
//! `DataLoaderLite` and the `if step % 250 == 0` block).

use serde::{Deserialize, Serialize};

use crate::data::Tokens;

/// The first 10,485,760 validation tokens: build-nanogpt's sample, which
/// its published val loss of OpenAI's 124M checkpoint (3.2924) is on.
pub const REFERENCE_TOKENS: usize = 20 * 8 * 64 * 1024;

/// How validation windows are picked (`[eval] val_sample`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValSample {
    /// `rows` windows evenly spaced over every window start of the split.
    #[default]
    Spread,
    /// `rows` windows tiling each segment from its first token (stride
    /// `block_size`), segment after segment.
    First,
}

impl ValSample {
    /// For `skip_serializing_if`: the default is left out of config.toml,
    /// so configs written before the key existed keep their config_hash.
    pub fn is_spread(&self) -> bool {
        *self == ValSample::Spread
    }

    /// Where each of (up to) `rows` windows of `block + 1` tokens starts:
    /// (segment, start). "first" gives fewer when the split is shorter.
    pub fn windows(self, tokens: &Tokens, block: usize, rows: usize) -> Vec<(usize, usize)> {
        let len = block + 1;
        let rows = rows.max(1);
        match self {
            ValSample::Spread => {
                let span = tokens.window_count(len);
                (0..rows)
                    .map(|i| tokens.window_start(i * span / rows, len).unwrap_or((0, 0)))
                    .collect()
            }
            ValSample::First => tokens
                .segment_lens()
                .into_iter()
                .enumerate()
                .flat_map(|(segment, n)| {
                    // Window k reads tokens k·block … k·block + block (its
                    // last token is the last target), so a segment of n
                    // tokens holds (n − 1) / block of them.
                    let count = n.saturating_sub(1) / block.max(1);
                    (0..count).map(move |k| (segment, k * block))
                })
                .take(rows)
                .collect(),
        }
    }

    /// What the sample was, in words for the output: "the first 10485760
    /// tokens (10240 windows of 1024)".
    pub fn describe(self, windows: usize, block: usize, split_tokens: usize) -> String {
        let tokens = windows * block;
        match self {
            ValSample::Spread => format!(
                "{windows} windows of {block} tokens spread evenly over the split's {split_tokens} tokens"
            ),
            ValSample::First => format!(
                "the first {tokens} tokens of the split ({windows} windows of {block}){}",
                if tokens == REFERENCE_TOKENS {
                    ", build-nanogpt's validation sample"
                } else {
                    ""
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_tiles_each_segment_from_its_start() {
        let tokens = Tokens::Memory((0..41).collect());
        // 41 tokens hold (41 − 1) / 8 = 5 windows of 8 + 1 tokens.
        let windows = ValSample::First.windows(&tokens, 8, 100);
        assert_eq!(
            windows,
            vec![(0, 0), (0, 8), (0, 16), (0, 24), (0, 32)],
            "contiguous, stride block, the last target is token 40"
        );
        assert_eq!(ValSample::First.windows(&tokens, 8, 2).len(), 2);
    }

    #[test]
    fn spread_is_the_evenly_spaced_sample_training_always_used() {
        let tokens = Tokens::Memory((0..100).collect());
        // 100 − 9 = 91 starts; 4 rows at 0, 22, 45, 68.
        assert_eq!(
            ValSample::Spread.windows(&tokens, 8, 4),
            vec![(0, 0), (0, 22), (0, 45), (0, 68)]
        );
    }

    #[test]
    fn the_reference_sample_is_named() {
        let said = ValSample::First.describe(10240, 1024, 100_000_000);
        assert!(
            said.contains("10485760") && said.contains("build-nanogpt"),
            "{said}"
        );
        assert!(!ValSample::First
            .describe(2, 1024, 5000)
            .contains("build-nanogpt"));
    }
}
