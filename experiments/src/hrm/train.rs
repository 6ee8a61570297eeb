//! A self-contained HRM training step (model + ACT + loss + optimizers),
//! for the shared engine to wrap: it owns no files and no data loading.

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::act::{act_train_step, ActState, HaltPolicy, PuzzleBatch};
use super::config::{HrmPreset, HrmTrainConfig};
use super::loss::{exact_accuracy, hrm_loss, mean_steps};
use super::model::HrmModel;
use super::optim::{AdamAtan2, HrmOptimizer, SignSgd};

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

/// Scalars from one training step.
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
    /// Mean segments of the rows that halted this step (0 if none).
    pub halted_mean_steps: f64,
    pub halted_rows: usize,
}

/// Model, optimizers and ACT state for one training run.
pub struct HrmTrainer<B: AutodiffBackend> {
    pub model: HrmModel<B>,
    pub optimizer: HrmOptimizer<B>,
    pub act: ActState<B>,
    pub train: HrmTrainConfig,
    pub total_steps: usize,
    pub step: usize,
    pub policy: HaltPolicy,
    rng: StdRng,
}

impl<B: AutodiffBackend> HrmTrainer<B>
where
    HrmModel<B>: AutodiffModule<B>,
{
    /// A fresh run. `first` is a full batch: the initial puzzles of every row.
    pub fn new(
        preset: &HrmPreset,
        total_steps: usize,
        first: PuzzleBatch<B>,
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
        let act = ActState::new(&model, first);
        Self {
            model,
            optimizer,
            act,
            rng: StdRng::seed_from_u64(train.seed.wrapping_add(1)),
            train,
            total_steps,
            step: 0,
            policy: HaltPolicy::Learned,
        }
    }

    /// One optimizer step: halted rows take their puzzle from `fresh` (a
    /// full batch, like the reference's data loader), one segment runs, and
    /// the loss (sum over the batch / batch size) is back-propagated.
    pub fn train_step(&mut self, fresh: PuzzleBatch<B>) -> StepMetrics {
        self.step += 1;
        self.act.replace_halted(&self.model, fresh);
        let out = act_train_step(&self.model, &mut self.act, self.policy, &mut self.rng);
        let rows = out.batch.len();
        let accuracy = exact_accuracy(out.logits.clone().inner(), out.batch.labels.clone().inner());
        let loss = hrm_loss(
            out.logits,
            out.batch.labels.clone(),
            out.q_halt,
            out.q_continue,
            out.target_q_continue,
        );
        let scaled = loss.total.clone().div_scalar(rows as f64);
        let grads = scaled.backward();
        let lr = learning_rate(self.train.lr, self.step, self.total_steps, &self.train);
        let puzzle_lr = learning_rate(
            self.train.puzzle_emb_lr,
            self.step,
            self.total_steps,
            &self.train,
        );
        self.model = self
            .optimizer
            .step(self.model.clone(), grads, lr, puzzle_lr);
        let halted_steps: Vec<usize> = (0..rows)
            .filter(|&r| out.halted[r])
            .map(|r| out.steps[r])
            .collect();
        let scalar = |t: burn::tensor::Tensor<B, 1>| t.into_scalar().elem::<f64>();
        StepMetrics {
            step: self.step,
            lr,
            loss: scalar(scaled),
            lm_loss: scalar(loss.lm) / rows as f64,
            q_halt_loss: scalar(loss.q_halt) / rows as f64,
            q_continue_loss: scalar(loss.q_continue) / rows as f64,
            exact_accuracy: accuracy,
            halted_mean_steps: mean_steps(&halted_steps),
            halted_rows: halted_steps.len(),
        }
    }
}

use burn::tensor::ElementConversion as _;
