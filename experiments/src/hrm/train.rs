//! One HRM optimizer step over the global batch (model + ACT + loss +
//! optimizers), split into micro-batches. It owns no files and no data
//! loading: `run.rs` feeds it puzzles and saves/restores its state.
//!
//! **Gradient accumulation with an ACT carry.** Every row of the global
//! batch keeps its own puzzle, carry and step count across optimizer steps
//! (experiments.md §2b). The rows are split into `grad_accum` fixed chunks
//! of `micro_batch` rows, each chunk with its own [`ActState`]; a step runs
//! one segment per chunk, back-propagates that chunk's share of the loss
//! (its sum over rows divided by the *global* batch size) and accumulates
//! the gradients before one optimizer update. Every term of the loss is a
//! per-row sum and the model has no cross-row operation, so the update is
//! the one the whole batch would give at once (up to float summation
//! order): the global batch stays the science, the micro-batch only
//! decides memory use. The exploration draws come from one random stream
//! per step, consumed row by row, so they too ignore the split.

use burn::module::AutodiffModule;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::ElementConversion as _;
use burn::tensor::Tensor;
use envgen_kernels::FusedAutodiffBackend;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::act::{act_train_step, ActState, HaltPolicy, PuzzleBatch};
use super::config::{HrmPreset, HrmTrainConfig};
use super::loss::{blank_cell_hits, hrm_loss, sequence_correct_count};
use super::model::{Carry, HrmModel};
use super::optim::{AdamAtan2, HrmOptimizer, SignSgd};
use crate::engine::optim::{global_grad_norm, scale_grads};
use crate::engine::{LossScaler, ScaledStep};

/// Learning rate at `step` (1-based): linear warmup, then cosine decay to
/// `lr_min_ratio·lr` over `total_steps` (ratio 1.0 = constant, the paper's).
pub fn learning_rate(base: f64, step: usize, total_steps: usize, train: &HrmTrainConfig) -> f64 {
    if step < train.lr_warmup_steps {
        return base * step as f64 / train.lr_warmup_steps as f64;
    }
    let span = total_steps.saturating_sub(train.lr_warmup_steps).max(1);
    let progress = ((step - train.lr_warmup_steps) as f64 / span as f64).min(1.0);
    let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
    base * (train.lr_min_ratio + (1.0 - train.lr_min_ratio) * cosine)
}

/// Scalars from one training step (means over the global batch).
#[derive(Debug, Clone, PartialEq)]
pub struct StepMetrics {
    pub step: usize,
    pub lr: f64,
    /// Total loss divided by the batch size (what is back-propagated).
    pub loss: f64,
    pub lm_loss: f64,
    pub q_halt_loss: f64,
    pub q_continue_loss: f64,
    /// Exact accuracy over all rows of this segment.
    pub exact_accuracy: f64,
    /// Accuracy on the blank cells of this segment's puzzles.
    pub cell_accuracy: f64,
    /// Segment counts of the rows that halted this step.
    pub halted_steps: Vec<usize>,
    /// fp16: the loss scale this step used and what the scaler decided.
    pub loss_scale: Option<(f64, ScaledStep)>,
}

/// Model, optimizers and the ACT state of every micro-batch chunk.
pub struct HrmTrainer<B: FusedAutodiffBackend> {
    pub model: HrmModel<B>,
    pub optimizer: HrmOptimizer<B::InnerBackend>,
    /// One ACT state per chunk of `micro_batch` rows, in row order.
    pub chunks: Vec<ActState<B>>,
    pub train: HrmTrainConfig,
    pub total_steps: usize,
    /// Steps completed (batches consumed).
    pub step: usize,
    /// Optimizer updates applied: `step` minus the steps fp16 skipped.
    pub optimizer_steps: usize,
    /// fp16's dynamic loss scaling (engine::precision); `None` otherwise.
    pub loss_scaler: Option<LossScaler>,
    pub policy: HaltPolicy,
    pub micro_batch: usize,
}

impl<B: FusedAutodiffBackend> HrmTrainer<B>
where
    HrmModel<B>: AutodiffModule<B>,
{
    /// A fresh run. `placeholder` is any full global batch: every row
    /// starts halted, so the first step replaces all of it.
    pub fn new(
        preset: &HrmPreset,
        total_steps: usize,
        micro_batch: usize,
        placeholder: PuzzleBatch<B>,
        device: &B::Device,
    ) -> Self {
        let train = preset.train.clone();
        let model = HrmModel::new(&preset.model, train.seed, device);
        let optimizer = HrmOptimizer::new(
            AdamAtan2 {
                beta1: train.beta1,
                beta2: train.beta2,
                weight_decay: train.weight_decay,
            },
            SignSgd {
                weight_decay: train.puzzle_emb_weight_decay,
            },
        );
        let chunks = split_rows(placeholder, micro_batch)
            .into_iter()
            .map(|batch| ActState::new(&model, batch))
            .collect();
        Self {
            model,
            optimizer,
            chunks,
            train,
            total_steps,
            step: 0,
            optimizer_steps: 0,
            loss_scaler: None,
            policy: HaltPolicy::Learned,
            micro_batch,
        }
    }

    /// The exploration stream of step `step` (1-based): a pure function of
    /// (seed, step), so a resumed run draws what an uninterrupted one would.
    fn step_rng(&self, step: usize) -> StdRng {
        StdRng::seed_from_u64(
            self.train
                .seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(step as u64),
        )
    }

    /// One optimizer step: halted rows take their puzzle from the same row
    /// of `fresh` (a full global batch, like the reference's data loader),
    /// one segment runs on every row, and the summed loss divided by the
    /// global batch size is back-propagated chunk by chunk.
    pub fn train_step(&mut self, fresh: PuzzleBatch<B>) -> StepMetrics {
        self.step += 1;
        let rows = fresh.len();
        let mut rng = self.step_rng(self.step);
        let mut accumulator = GradientsAccumulator::<HrmModel<B>>::new();
        let scalar = |t: Tensor<B, 1>| t.into_scalar().elem::<f64>();
        let (mut loss_sum, mut lm, mut q_halt, mut q_cont) = (0.0, 0.0, 0.0, 0.0);
        let (mut exact, mut hits, mut blanks) = (0usize, 0usize, 0usize);
        let mut halted_steps = Vec::new();
        let loss_scale = self.loss_scaler.as_ref().map_or(1.0, |s| s.scale);
        for (chunk, fresh) in self
            .chunks
            .iter_mut()
            .zip(split_rows(fresh, self.micro_batch))
        {
            chunk.replace_halted(&self.model, fresh);
            let out = act_train_step(&self.model, chunk, self.policy, &mut rng);
            let logits = out.logits.clone().inner();
            let labels = out.batch.labels.clone().inner();
            exact += sequence_correct_count(logits.clone(), labels.clone());
            let (h, b) = blank_cell_hits(logits, out.batch.inputs.clone().inner(), labels);
            hits += h;
            blanks += b;
            let loss = hrm_loss(
                out.logits,
                out.batch.labels.clone(),
                out.q_halt,
                out.q_continue,
                out.target_q_continue,
            );
            let scaled = loss.total.div_scalar(rows as f64);
            loss_sum += scalar(scaled.clone());
            lm += scalar(loss.lm);
            q_halt += scalar(loss.q_halt);
            q_cont += scalar(loss.q_continue);
            let scaled = if loss_scale == 1.0 {
                scaled
            } else {
                scaled * loss_scale
            };
            let grads = GradientsParams::from_grads(scaled.backward(), &self.model);
            accumulator.accumulate(&self.model, grads);
            halted_steps.extend(
                (0..out.steps.len())
                    .filter(|&r| out.halted[r])
                    .map(|r| out.steps[r]),
            );
        }
        let lr = learning_rate(self.train.lr, self.step, self.total_steps, &self.train);
        let puzzle_lr = learning_rate(
            self.train.puzzle_emb_lr,
            self.step,
            self.total_steps,
            &self.train,
        );
        let grads = accumulator.grads();
        let decision = match self.loss_scaler.as_mut() {
            Some(scaler) => scaler.update(global_grad_norm::<B, _>(&self.model, &grads)),
            None => ScaledStep::Apply {
                unscale: 1.0,
                raised: false,
            },
        };
        if let ScaledStep::Apply { unscale, .. } = decision {
            let grads = if unscale == 1.0 {
                grads
            } else {
                scale_grads::<B, _>(&self.model, grads, unscale)
            };
            self.optimizer_steps += 1;
            self.model = self.optimizer.step(
                self.model.clone(),
                grads,
                self.optimizer_steps,
                lr,
                puzzle_lr,
            );
        }
        let per_row = |v: f64| v / rows as f64;
        StepMetrics {
            step: self.step,
            lr,
            loss: loss_sum,
            lm_loss: per_row(lm),
            q_halt_loss: per_row(q_halt),
            q_continue_loss: per_row(q_cont),
            exact_accuracy: per_row(exact as f64),
            cell_accuracy: hits as f64 / blanks.max(1) as f64,
            halted_steps,
            loss_scale: self.loss_scaler.is_some().then_some((loss_scale, decision)),
        }
    }

    /// The ACT state of the whole global batch, chunks joined in row order
    /// (checkpoints store it this way, so a resume may use another micro-batch).
    pub fn act_state(&self) -> ActState<B> {
        let cat3 = |f: &dyn Fn(&ActState<B>) -> Tensor<B, 3>| {
            Tensor::cat(self.chunks.iter().map(f).collect(), 0)
        };
        ActState {
            carry: Carry {
                z_h: cat3(&|c| c.carry.z_h.clone()),
                z_l: cat3(&|c| c.carry.z_l.clone()),
            },
            steps: self.chunks.iter().flat_map(|c| c.steps.clone()).collect(),
            halted: self.chunks.iter().flat_map(|c| c.halted.clone()).collect(),
            batch: PuzzleBatch::cat(self.chunks.iter().map(|c| c.batch.clone()).collect()),
        }
    }

    /// Restore the global ACT state saved by [`HrmTrainer::act_state`].
    pub fn set_act_state(&mut self, state: ActState<B>) {
        let mut chunks = Vec::new();
        let rows = state.batch.len();
        let mut start = 0;
        while start < rows {
            let len = self.micro_batch.min(rows - start);
            chunks.push(ActState {
                carry: Carry {
                    z_h: state.carry.z_h.clone().narrow(0, start, len),
                    z_l: state.carry.z_l.clone().narrow(0, start, len),
                },
                steps: state.steps[start..start + len].to_vec(),
                halted: state.halted[start..start + len].to_vec(),
                batch: state.batch.rows(start, len),
            });
            start += len;
        }
        self.chunks = chunks;
    }
}

/// Split a batch into chunks of `micro_batch` rows (the last may be shorter).
fn split_rows<B: burn::tensor::backend::Backend>(
    batch: PuzzleBatch<B>,
    micro_batch: usize,
) -> Vec<PuzzleBatch<B>> {
    let rows = batch.len();
    let micro_batch = micro_batch.max(1);
    (0..rows)
        .step_by(micro_batch)
        .map(|start| batch.rows(start, micro_batch.min(rows - start)))
        .collect()
}
