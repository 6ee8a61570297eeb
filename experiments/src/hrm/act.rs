//! Adaptive computation time (ACT) with Q-learning halting, as in the
//! reference `HierarchicalReasoningModel_ACTV1` (experiments.md §2b).
//!
//! Each training step runs **one segment** for the whole batch. Rows keep
//! their puzzle and carry across steps until they halt; halted rows are
//! then replaced by fresh puzzles with the carry reset (`replace_halted`).

use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};
use rand::rngs::StdRng;
use rand::Rng;

use super::loss::q_continue_target;
use super::model::{segment_autodiff, Carry, HrmModel};

/// A batch of puzzles: inputs and labels [B, seq_len], puzzle ids [B].
#[derive(Debug, Clone)]
pub struct PuzzleBatch<B: Backend> {
    pub inputs: Tensor<B, 2, Int>,
    pub labels: Tensor<B, 2, Int>,
    pub puzzle_ids: Tensor<B, 1, Int>,
}

impl<B: Backend> PuzzleBatch<B> {
    /// From encoded grids (PAD 0, blank 1, digit d → d+1); every puzzle has id 0.
    pub fn from_grids<const N: usize>(
        inputs: &[[u8; N]],
        labels: &[[u8; N]],
        device: &B::Device,
    ) -> Self {
        let to_tensor = |grids: &[[u8; N]]| {
            let flat: Vec<i64> = grids.iter().flatten().map(|&v| v as i64).collect();
            Tensor::<B, 2, Int>::from_data(TensorData::new(flat, [grids.len(), N]), device)
        };
        Self {
            inputs: to_tensor(inputs),
            labels: to_tensor(labels),
            puzzle_ids: Tensor::zeros([inputs.len()], device),
        }
    }

    pub fn len(&self) -> usize {
        self.inputs.dims()[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` rows starting at `start`.
    pub fn rows(&self, start: usize, len: usize) -> Self {
        Self {
            inputs: self.inputs.clone().narrow(0, start, len),
            labels: self.labels.clone().narrow(0, start, len),
            puzzle_ids: self.puzzle_ids.clone().narrow(0, start, len),
        }
    }

    /// Batches stacked in order.
    pub fn cat(parts: Vec<Self>) -> Self {
        let mut inputs = Vec::with_capacity(parts.len());
        let mut labels = Vec::with_capacity(parts.len());
        let mut ids = Vec::with_capacity(parts.len());
        for part in parts {
            inputs.push(part.inputs);
            labels.push(part.labels);
            ids.push(part.puzzle_ids);
        }
        Self {
            inputs: Tensor::cat(inputs, 0),
            labels: Tensor::cat(labels, 0),
            puzzle_ids: Tensor::cat(ids, 0),
        }
    }

    /// Rows from `fresh` where `take[row]`, else from `self`.
    fn take_rows(self, take: &[bool], fresh: Self) -> Self {
        let [batch, seq] = self.inputs.dims();
        let device = self.inputs.device();
        let mask1 =
            Tensor::<B, 1, Bool>::from_data(TensorData::new(take.to_vec(), [batch]), &device);
        let mask2 = mask1.clone().reshape([batch, 1]).expand([batch, seq]);
        Self {
            inputs: self.inputs.mask_where(mask2.clone(), fresh.inputs),
            labels: self.labels.mask_where(mask2, fresh.labels),
            puzzle_ids: self.puzzle_ids.mask_where(mask1, fresh.puzzle_ids),
        }
    }
}

/// How a training step decides to halt before `halt_max_steps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaltPolicy {
    /// The reference rule: halt when q_halt > q_continue.
    Learned,
    /// Test hook: behave as if the Q-head always said halt (`true`) or
    /// always said continue (`false`).
    Forced(bool),
}

/// The per-row ACT state that persists between training steps.
#[derive(Debug, Clone)]
pub struct ActState<B: Backend> {
    pub carry: Carry<B>,
    /// Segments run on the row's current puzzle.
    pub steps: Vec<usize>,
    pub halted: Vec<bool>,
    pub batch: PuzzleBatch<B>,
}

impl<B: FusedBackend> ActState<B> {
    /// Every row starts halted, so the first `replace_halted` loads all rows.
    pub fn new(model: &HrmModel<B>, batch: PuzzleBatch<B>) -> Self {
        let rows = batch.len();
        Self {
            carry: model.initial_carry(rows),
            steps: vec![0; rows],
            halted: vec![true; rows],
            batch,
        }
    }

    /// Rows that will take a fresh puzzle at the next `replace_halted`.
    pub fn halted_rows(&self) -> Vec<usize> {
        (0..self.halted.len())
            .filter(|&row| self.halted[row])
            .collect()
    }

    /// Give every halted row the puzzle at the same row of `fresh` (a full
    /// batch; rows that did not halt ignore it, as in the reference), reset
    /// its carry to H_init/L_init and its step count to 0.
    pub fn replace_halted(&mut self, model: &HrmModel<B>, fresh: PuzzleBatch<B>) {
        let halted = self.halted.clone();
        self.carry = model.reset_carry(self.carry.clone(), &halted);
        self.batch = self.batch.clone().take_rows(&halted, fresh);
        for (row, was_halted) in halted.iter().enumerate() {
            if *was_halted {
                self.steps[row] = 0;
                self.halted[row] = false;
            }
        }
    }
}

/// What one ACT training step produces (feed it to `loss::hrm_loss`).
#[derive(Debug, Clone)]
pub struct ActStepOutput<B: Backend> {
    pub logits: Tensor<B, 3>,
    pub q_halt: Tensor<B, 1>,
    pub q_continue: Tensor<B, 1>,
    /// Bootstrap target for q_continue (no grad); `None` if halt_max_steps = 1.
    pub target_q_continue: Option<Tensor<B, 1>>,
    /// The puzzles this segment worked on.
    pub batch: PuzzleBatch<B>,
    /// Step counts after this segment, and which rows halted.
    pub steps: Vec<usize>,
    pub halted: Vec<bool>,
}

/// Decide which rows halt after a segment. `steps` are the counts after it;
/// `halt_preferred[row]` is the Q-head's (or the forced) vote;
/// `min_halt_steps[row]` is the exploration floor (0 = none).
pub fn halting_decision(
    steps: &[usize],
    halt_preferred: &[bool],
    min_halt_steps: &[usize],
    halt_max_steps: usize,
) -> Vec<bool> {
    (0..steps.len())
        .map(|row| {
            let last = steps[row] >= halt_max_steps;
            let voted = halt_max_steps > 1 && halt_preferred[row];
            (last || voted) && steps[row] >= min_halt_steps[row]
        })
        .collect()
}

/// Exploration: with probability p a row must run at least U{2..=max} segments.
fn exploration_floor(
    rows: usize,
    prob: f64,
    halt_max_steps: usize,
    rng: &mut StdRng,
) -> Vec<usize> {
    (0..rows)
        .map(|_| {
            if halt_max_steps >= 2 && rng.random::<f64>() < prob {
                rng.random_range(2..=halt_max_steps)
            } else {
                0
            }
        })
        .collect()
}

fn to_vec_f32<B: FusedBackend>(t: Tensor<B, 1>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap_or_default()
}

/// One ACT training segment: run the model with the 1-step gradient,
/// update step counts and halting, and compute the Q target from a no-grad
/// forward of the next segment. Call `state.replace_halted` before it.
pub fn act_train_step<AD: FusedAutodiffBackend>(
    model: &HrmModel<AD>,
    state: &mut ActState<AD>,
    policy: HaltPolicy,
    rng: &mut StdRng,
) -> ActStepOutput<AD> {
    let cfg = model.config().clone();
    let batch = state.batch.clone();
    let out = segment_autodiff(
        model,
        state.carry.clone(),
        batch.inputs.clone(),
        batch.puzzle_ids.clone(),
    );
    let rows = batch.len();
    for step in state.steps.iter_mut() {
        *step += 1;
    }
    let halt_preferred: Vec<bool> = match policy {
        HaltPolicy::Forced(halt) => vec![halt; rows],
        HaltPolicy::Learned => {
            let q_halt = to_vec_f32(out.q_halt.clone().inner());
            let q_cont = to_vec_f32(out.q_continue.clone().inner());
            q_halt.iter().zip(&q_cont).map(|(h, c)| h > c).collect()
        }
    };
    let floor = exploration_floor(rows, cfg.halt_exploration_prob, cfg.halt_max_steps, rng);
    state.halted = halting_decision(&state.steps, &halt_preferred, &floor, cfg.halt_max_steps);

    let target_q_continue = (cfg.halt_max_steps > 1).then(|| {
        // The next segment on the same puzzles, without any graph.
        let inner = model.valid();
        let next = inner.segment(
            Carry {
                z_h: out.carry.z_h.clone().inner(),
                z_l: out.carry.z_l.clone().inner(),
            },
            batch.inputs.clone().inner(),
            batch.puzzle_ids.clone().inner(),
        );
        let is_last: Vec<bool> = state
            .steps
            .iter()
            .map(|&s| s >= cfg.halt_max_steps)
            .collect();
        let device = next.q_halt.device();
        let is_last = Tensor::from_data(TensorData::new(is_last, [rows]), &device);
        Tensor::from_inner(q_continue_target(next.q_halt, next.q_continue, is_last))
    });

    state.carry = out.carry;
    ActStepOutput {
        logits: out.logits,
        q_halt: out.q_halt,
        q_continue: out.q_continue,
        target_q_continue,
        batch,
        steps: state.steps.clone(),
        halted: state.halted.clone(),
    }
}

/// Evaluation output: the predictions after `halt_max_steps` segments.
#[derive(Debug, Clone)]
pub struct ActEvalOutput<B: Backend> {
    pub logits: Tensor<B, 3>,
    pub q_halt: Tensor<B, 1>,
    pub q_continue: Tensor<B, 1>,
    pub steps: usize,
}

/// Evaluation always runs `halt_max_steps` segments (the reference halts
/// only at the limit when not training). Use an inference backend.
pub fn act_eval<B: FusedBackend>(model: &HrmModel<B>, batch: &PuzzleBatch<B>) -> ActEvalOutput<B> {
    let steps = model.config().halt_max_steps;
    let mut carry = model.initial_carry(batch.len());
    let mut last = None;
    for _ in 0..steps {
        let out = model.segment(carry, batch.inputs.clone(), batch.puzzle_ids.clone());
        carry = out.carry.clone();
        last = Some(out);
    }
    let out = last.expect("halt_max_steps ≥ 1 is validated by HrmConfig::validate");
    ActEvalOutput {
        logits: out.logits,
        q_halt: out.q_halt,
        q_continue: out.q_continue,
        steps,
    }
}
