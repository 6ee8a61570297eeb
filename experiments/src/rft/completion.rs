//! A (prompt, completion) training example in token ids, and the batch the
//! completion-only loss is computed from. Both models' training tasks
//! (`super::train` for the GPT, `super::family::llama_task` for Llama)
//! draw and pad their batches here; they differ in the forward pass alone.

use std::ops::Range;

use burn::prelude::*;
use burn::tensor::TensorData;

use crate::engine;

/// A training example: the prompt's tokens as generation sees them, then
/// the completion's (its end included), and where the completion starts
/// (the loss covers the completion alone).
#[derive(Debug, Clone)]
pub(crate) struct Tokenized {
    pub(crate) tokens: Vec<u32>,
    pub(crate) completion_start: usize,
}

impl Tokenized {
    pub(crate) fn new(mut prompt: Vec<u32>, completion: Vec<u32>) -> Self {
        let completion_start = prompt.len();
        prompt.extend(completion);
        Self {
            tokens: prompt,
            completion_start,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    pub(crate) fn prompt_ids(&self) -> &[u32] {
        &self.tokens[..self.completion_start]
    }

    pub(crate) fn completion_ids(&self) -> &[u32] {
        &self.tokens[self.completion_start..]
    }

    /// The targets the loss covers: the next-token targets at positions
    /// `max(completion_start, 1) .. len` (the first token is nobody's
    /// target), as [`CompletionBatch`] weights them.
    pub(crate) fn loss_tokens(&self) -> usize {
        self.len().saturating_sub(self.completion_start.max(1))
    }
}

/// The completion targets of `examples` together: the units a
/// [`CompletionBatch`]'s mean is over (its `count`, before the guard
/// against an empty batch), and what `Task::loss_units` answers.
pub(crate) fn loss_units(examples: &[&Tokenized]) -> f64 {
    examples.iter().map(|e| e.loss_tokens()).sum::<usize>() as f64
}

/// `examples` right-padded into next-token inputs and targets (`[b, t]`)
/// with a weight per target (`[b * t]`): 1 on completion tokens, 0 on
/// prompt and padding positions.
pub(crate) struct CompletionBatch<B: Backend> {
    pub(crate) inputs: Tensor<B, 2, Int>,
    pub(crate) targets: Tensor<B, 2, Int>,
    weights: Tensor<B, 1>,
    /// Completion targets in the batch (at least 1).
    count: f32,
}

impl<B: Backend> CompletionBatch<B> {
    pub(crate) fn new(examples: &[&Tokenized], device: &B::Device) -> Self {
        let t = examples
            .iter()
            .map(|e| e.tokens.len().saturating_sub(1))
            .max()
            .unwrap_or(1)
            .max(1);
        let b = examples.len();
        let (mut x, mut y, mut w) = (
            Vec::with_capacity(b * t),
            Vec::with_capacity(b * t),
            Vec::with_capacity(b * t),
        );
        for e in examples {
            for i in 0..t {
                let inside = i + 1 < e.tokens.len();
                x.push(e.tokens.get(i).map_or(0, |&v| i64::from(v)));
                y.push(if inside {
                    i64::from(e.tokens[i + 1])
                } else {
                    0
                });
                w.push(if inside && i + 1 >= e.completion_start {
                    1.0f32
                } else {
                    0.0
                });
            }
        }
        Self {
            count: w.iter().sum::<f32>().max(1.0),
            inputs: Tensor::from_data(TensorData::new(x, [b, t]), device),
            targets: Tensor::from_data(TensorData::new(y, [b, t]), device),
            weights: Tensor::from_data(TensorData::new(w, [b * t]), device),
        }
    }

    /// The mean of `losses` (one per target, `[b * t]`) over the
    /// completion targets.
    pub(crate) fn mean(&self, losses: Tensor<B, 1>) -> Tensor<B, 1> {
        (losses * self.weights.clone()).sum() / self.count
    }
}

/// The rows `rows` of the batch of `step`, drawn from `train` by
/// [`example_index`]: the batch both models' tasks train on.
pub(crate) fn batch(
    train: &[Tokenized],
    seed: u64,
    step: u64,
    rows: Range<usize>,
) -> Vec<&Tokenized> {
    rows.map(|row| &train[example_index(seed, step, row, train.len())])
        .collect()
}

/// The training example of row `row` of the batch of `step`, out of
/// `count`: a pure function of (seed, step, row), as the engine requires.
pub(crate) fn example_index(seed: u64, step: u64, row: usize, count: usize) -> usize {
    // splitmix64 finalizer: spreads the mixed bits before the modulo.
    let mut z = engine::row_seed(seed, step, row);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % count.max(1) as u64) as usize
}

/// The mean of `loss` over every completion token of `validation`,
/// computed `micro_batch` examples at a time: each batch's mean (over its
/// tokens) weighted by its tokens, so that the micro-batch decides memory
/// use and not the number (issue #42: a mean of per-batch means weighted
/// by rows moved with it). The held-out loss both models' tasks report.
pub(crate) fn mean_validation_loss(
    validation: &[Tokenized],
    micro_batch: usize,
    mut loss: impl FnMut(&[&Tokenized]) -> f64,
) -> f64 {
    let mut total = 0.0;
    let mut tokens = 0.0;
    for chunk in validation.chunks(micro_batch.max(1)) {
        let batch: Vec<&Tokenized> = chunk.iter().collect();
        let units = loss_units(&batch);
        if units > 0.0 {
            total += loss(&batch) * units;
            tokens += units;
        }
    }
    total / tokens.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `loss_units` counts exactly the targets `CompletionBatch` weights
    /// (what its mean divides by): the engine's weights and the task's
    /// means speak of the same tokens, empty prompts and completions too.
    #[test]
    fn loss_units_are_the_batchs_weighted_targets() {
        let examples = [
            Tokenized::new(vec![1, 2, 3], vec![4, 5]),
            Tokenized::new(vec![], vec![6, 7, 8]),
            Tokenized::new(vec![9], vec![]),
            Tokenized::new(vec![1, 2], vec![3, 4, 5, 6, 7]),
        ];
        let refs: Vec<&Tokenized> = examples.iter().collect();
        let per_row: Vec<usize> = examples.iter().map(Tokenized::loss_tokens).collect();
        assert_eq!(per_row, [2, 2, 0, 5]);
        for rows in [&refs[..], &refs[..1], &refs[1..3], &refs[2..3]] {
            let batch = CompletionBatch::<crate::backend::Cpu>::new(rows, &Default::default());
            let weighted: f32 = batch.weights.clone().sum().into_scalar();
            assert_eq!(f64::from(weighted), loss_units(rows), "{rows:?}");
        }
    }
}
