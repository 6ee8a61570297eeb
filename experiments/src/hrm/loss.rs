//! HRM losses (stablemax cross-entropy + Q-learning BCE) and metrics.
//!
//! Normalization (as in the reference `models/losses.py`): the LM loss of a
//! sequence is the mean over its non-PAD tokens; sequences are **summed**
//! over the batch, and so are the two BCE terms. The training step divides
//! the total by the batch size before `backward()` (see `train.rs`).

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// The label that marks padding; such positions carry no loss.
pub const IGNORE_LABEL: i64 = 0;
/// The input value of a blank Sudoku cell.
pub const BLANK_INPUT: i64 = 1;

/// log stablemax over the last dim: s(x) = 1/(1−x) for x<0, x+1 otherwise;
/// log p_i = log s(x_i) − log Σ_j s(x_j).
///
/// Computed in f32: Burn 0.21's `Flex` CPU backend runs float ops in f32,
/// and a per-op cast to f64 is not supported under autodiff on every
/// backend, so the reference's float64 is not reproduced. Stablemax is
/// tame in f32 (no exponentials), so the difference is rounding only.
pub fn log_stablemax<B: Backend, const D: usize>(logits: Tensor<B, D>) -> Tensor<B, D> {
    // Both branches are evaluated on clamped inputs so neither produces an
    // inf whose zero gradient would turn into NaN: for x<0 the second term
    // is 0, for x≥0 the first is 1.
    let negative = logits.clone().clamp_max(0.0).neg().add_scalar(1.0).recip();
    let positive = logits.clamp_min(0.0);
    let s = negative + positive;
    let total = s.clone().sum_dim(D - 1);
    s.log() - total.log()
}

/// Per-token stablemax cross-entropy [B, T] and the valid-token mask [B, T]
/// (1.0 where the label is not PAD).
pub fn stablemax_cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let [batch, seq, _] = logits.dims();
    let mask = labels.clone().not_equal_elem(IGNORE_LABEL).float();
    // PAD labels index class 0; their loss is masked out below.
    let picked = log_stablemax(logits)
        .gather(2, labels.reshape([batch, seq, 1]))
        .reshape([batch, seq]);
    (picked.neg() * mask.clone(), mask)
}

/// Numerically stable binary cross-entropy with logits, summed:
/// max(x,0) − x·y + log(1 + e^{−|x|}).
pub fn bce_with_logits_sum<B: Backend>(
    logits: Tensor<B, 1>,
    targets: Tensor<B, 1>,
) -> Tensor<B, 1> {
    let softplus_tail = logits.clone().abs().neg().exp().add_scalar(1.0).log();
    (logits.clone().clamp_min(0.0) - logits * targets + softplus_tail).sum()
}

/// [B] bool-as-float: 1.0 where every non-PAD token is predicted right.
pub fn sequence_correct<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
) -> Tensor<B, 1> {
    let [batch, seq, _] = logits.dims();
    let predicted = logits.argmax(2).reshape([batch, seq]);
    let valid = labels.clone().not_equal_elem(IGNORE_LABEL);
    let wrong = predicted.not_equal(labels).bool_and(valid).int().sum_dim(1);
    wrong.equal_elem(0).float().reshape([batch])
}

/// The HRM loss of one segment and its parts (each a 1-element tensor).
#[derive(Debug, Clone)]
pub struct HrmLoss<B: Backend> {
    /// lm + 0.5·(q_halt + q_continue), summed over the batch.
    pub total: Tensor<B, 1>,
    pub lm: Tensor<B, 1>,
    pub q_halt: Tensor<B, 1>,
    /// Zero when no Q target was computed (eval, or halt_max_steps = 1).
    pub q_continue: Tensor<B, 1>,
}

/// Compute the loss; `target_q_continue` is the ACT bootstrap target (no grad).
pub fn hrm_loss<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    q_halt: Tensor<B, 1>,
    q_continue: Tensor<B, 1>,
    target_q_continue: Option<Tensor<B, 1>>,
) -> HrmLoss<B> {
    let correct = sequence_correct(logits.clone().detach(), labels.clone());
    let (per_token, mask) = stablemax_cross_entropy(logits, labels);
    let counts = mask.sum_dim(1).clamp_min(1.0);
    let lm = (per_token.sum_dim(1) / counts).sum();
    let halt = bce_with_logits_sum(q_halt, correct);
    let cont = match target_q_continue {
        Some(target) => bce_with_logits_sum(q_continue, target.detach()),
        None => q_continue.sum().mul_scalar(0.0),
    };
    HrmLoss {
        total: lm.clone() + (halt.clone() + cont.clone()).mul_scalar(0.5),
        lm,
        q_halt: halt,
        q_continue: cont,
    }
}

/// The Q-learning target for `q_continue`: σ(next q_halt) where this was
/// the last allowed step, else σ(max(next q_halt, next q_continue)).
pub fn q_continue_target<B: Backend>(
    next_q_halt: Tensor<B, 1>,
    next_q_continue: Tensor<B, 1>,
    is_last_step: Tensor<B, 1, burn::tensor::Bool>,
) -> Tensor<B, 1> {
    let best = next_q_halt.clone().max_pair(next_q_continue);
    sigmoid(best.mask_where(is_last_step, next_q_halt))
}

/// Puzzles whose every non-PAD cell is predicted right.
pub fn sequence_correct_count<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
) -> usize {
    sequence_correct(logits, labels)
        .sum()
        .into_scalar()
        .elem::<f64>()
        .round() as usize
}

/// Fraction of puzzles whose every non-PAD cell is predicted right.
pub fn exact_accuracy<B: Backend>(logits: Tensor<B, 3>, labels: Tensor<B, 2, Int>) -> f64 {
    let [batch, _, _] = logits.dims();
    sequence_correct_count(logits, labels) as f64 / batch.max(1) as f64
}

/// (right, total) over the cells that were blank in the input (input == 1).
pub fn blank_cell_hits<B: Backend>(
    logits: Tensor<B, 3>,
    inputs: Tensor<B, 2, Int>,
    labels: Tensor<B, 2, Int>,
) -> (usize, usize) {
    let [batch, seq, _] = logits.dims();
    let predicted = logits.argmax(2).reshape([batch, seq]);
    let blank = inputs.equal_elem(BLANK_INPUT);
    let hits = predicted.equal(labels).bool_and(blank.clone()).int().sum();
    let count = |t: Tensor<B, 1, Int>| t.into_scalar().elem::<i64>().max(0) as usize;
    (count(hits), count(blank.int().sum()))
}

/// Accuracy over the cells that were blank in the input (0 when none were).
pub fn blank_cell_accuracy<B: Backend>(
    logits: Tensor<B, 3>,
    inputs: Tensor<B, 2, Int>,
    labels: Tensor<B, 2, Int>,
) -> f64 {
    let (hits, blanks) = blank_cell_hits(logits, inputs, labels);
    if blanks == 0 {
        return 0.0;
    }
    hits as f64 / blanks as f64
}

/// Mean number of ACT segments in `steps`.
pub fn mean_steps(steps: &[usize]) -> f64 {
    if steps.is_empty() {
        return 0.0;
    }
    steps.iter().sum::<usize>() as f64 / steps.len() as f64
}

use burn::tensor::ElementConversion as _;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;
    use burn::tensor::TensorData;

    fn logits_from(values: Vec<f32>, shape: [usize; 3]) -> Tensor<Cpu, 3> {
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    #[test]
    fn stablemax_loss_matches_hand_computation() {
        // One sequence, two tokens, three classes; second token is PAD.
        let logits = logits_from(vec![-1.0, 0.0, 2.0, 5.0, 5.0, 5.0], [1, 2, 3]);
        let labels = Tensor::<Cpu, 2, Int>::from_data(
            TensorData::new(vec![2i64, 0], [1, 2]),
            &Default::default(),
        );
        let (per_token, mask) = stablemax_cross_entropy(logits.clone(), labels.clone());
        // s = [1/2, 1, 3], Σ = 4.5 → −log(3/4.5) = ln 1.5.
        let expected = (1.5f64).ln();
        let values: Vec<f32> = per_token.into_data().to_vec().unwrap();
        assert!((values[0] as f64 - expected).abs() < 1e-6, "{values:?}");
        assert_eq!(values[1], 0.0);
        assert_eq!(mask.into_data().to_vec::<f32>().unwrap(), vec![1.0, 0.0]);
        // Per-sequence mean over the single valid token → the same value.
        let q = Tensor::<Cpu, 1>::from_floats([0.0], &Default::default());
        let loss = hrm_loss(logits, labels, q.clone(), q, None);
        let lm: f32 = loss.lm.into_scalar();
        assert!((lm as f64 - expected).abs() < 1e-6);
        // Argmax of token 0 is class 2 = label → sequence correct → halt target 1:
        // BCE(0, 1) = ln 2; total = lm + 0.5·ln 2.
        let total: f32 = loss.total.into_scalar();
        assert!((total as f64 - expected - 0.5 * 2f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn bce_and_q_target_match_hand_values() {
        let device = Default::default();
        let x = Tensor::<Cpu, 1>::from_floats([2.0, -3.0], &device);
        let y = Tensor::<Cpu, 1>::from_floats([1.0, 0.0], &device);
        let got: f32 = bce_with_logits_sum(x, y).into_scalar();
        let want = (1.0 + (-2f64).exp()).ln() + (1.0 + (-3f64).exp()).ln();
        assert!((got as f64 - want).abs() < 1e-6);
        let halt = Tensor::<Cpu, 1>::from_floats([1.0, 1.0], &device);
        let cont = Tensor::<Cpu, 1>::from_floats([3.0, 3.0], &device);
        let last = Tensor::<Cpu, 1, burn::tensor::Bool>::from_data(
            TensorData::new(vec![true, false], [2]),
            &device,
        );
        let t: Vec<f32> = q_continue_target(halt, cont, last)
            .into_data()
            .to_vec()
            .unwrap();
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        assert!((t[0] as f64 - sig(1.0)).abs() < 1e-6 && (t[1] as f64 - sig(3.0)).abs() < 1e-6);
    }

    #[test]
    fn metrics_count_exact_and_blank_cells() {
        let device = Default::default();
        // Two puzzles of 2 cells, vocab 3. Puzzle 0 fully right, puzzle 1 wrong on a blank.
        let logits = logits_from(
            vec![0., 0., 9., 0., 9., 0., 0., 0., 9., 9., 0., 0.],
            [2, 2, 3],
        );
        let labels =
            Tensor::<Cpu, 2, Int>::from_data(TensorData::new(vec![2i64, 1, 2, 2], [2, 2]), &device);
        let inputs =
            Tensor::<Cpu, 2, Int>::from_data(TensorData::new(vec![1i64, 1, 2, 1], [2, 2]), &device);
        assert_eq!(exact_accuracy(logits.clone(), labels.clone()), 0.5);
        // Blanks: (0,0) right, (0,1) right, (1,1) wrong → 2/3.
        assert!((blank_cell_accuracy(logits, inputs, labels) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(mean_steps(&[1, 2, 3]), 2.0);
    }
}
