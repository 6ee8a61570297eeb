//! How a step's global batch is cut up and weighted: this rank's share of
//! its rows in micro-batches ([`StepShape`]), and each micro-batch's mean
//! loss weighted by its share of the global batch's loss-bearing units, so
//! that the step's loss and gradients are those of the whole batch at once
//! whatever the micro-batch and the number of ranks (issue #42).

use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use super::task::Task;

/// How a step is cut up and logged: this rank's rows of every global batch
/// (`grad_accum` micro-batches of `micro_batch` rows from `first_row` on),
/// the global batch and world it belongs to, the units a step trains on,
/// and when it evaluates.
pub(super) struct StepShape {
    pub(super) first_row: usize,
    pub(super) micro_batch: usize,
    pub(super) grad_accum: usize,
    pub(super) batch_size: usize,
    pub(super) world_size: usize,
    pub(super) units_per_step: usize,
    pub(super) unit: &'static str,
    pub(super) eval_every: u64,
    pub(super) steps: u64,
}

impl StepShape {
    /// Rank `rank` of `world_size` training `task` in micro-batches of
    /// `micro_batch` rows (at most its share of the global batch).
    pub(super) fn new<B: AutodiffBackend, T: Task<B>>(
        task: &T,
        micro_batch: usize,
        world_size: usize,
        rank: usize,
    ) -> anyhow::Result<Self> {
        let train_cfg = task.train_config();
        // Each rank takes a contiguous, disjoint share of every global
        // batch: rank r the rows r·share … (r+1)·share, in micro-batches.
        let share = super::distributed::rank_batch(train_cfg.batch_size, world_size)?;
        let (micro_batch, grad_accum) = super::config::split_batch(share, Some(micro_batch))?;
        let (units_per_row, unit) = task.units_per_row();
        Ok(StepShape {
            first_row: rank * share,
            micro_batch,
            grad_accum,
            batch_size: train_cfg.batch_size,
            world_size,
            units_per_step: units_per_row * train_cfg.batch_size,
            unit,
            eval_every: train_cfg.eval_every.max(1),
            steps: train_cfg.steps,
        })
    }
}

/// What the mean loss of a micro-batch carrying `units` loss-bearing units
/// is divided by, so that the micro-batches' sum, averaged over the
/// `world_size` ranks (as the collective averages), is the mean over the
/// `global_units` of the whole global batch: `global / (units × world)`.
/// A mean of micro-batch means would weight a token of a short micro-batch
/// more than one of a long one, and so depend on the micro-batch and the
/// ranks (issue #42). Where every row carries the same units the quotient
/// is exactly the integer `grad_accum` (both sides are small integers in
/// f64), the divisor the engine used before, so those losses keep their
/// bits. `None`: the micro-batch carries nothing to learn from.
pub(crate) fn micro_batch_divisor(units: f64, world_size: usize, global_units: f64) -> Option<f64> {
    (units > 0.0).then(|| global_units / (units * world_size as f64))
}

/// Forward and backward over this rank's micro-batches of `step`, the
/// gradients accumulated, each micro-batch's mean loss weighted by its
/// share of the global batch's units ([`micro_batch_divisor`]). Each
/// micro-batch's loss stays on the device until the step's last
/// micro-batch is queued: one read (one GPU sync) a step, not one a
/// micro-batch; summed in f64 in micro-batch order.
pub(super) fn accumulate_micro_batches<B: AutodiffBackend, T: Task<B>>(
    task: &T,
    model: &T::Model,
    step: u64,
    shape: &StepShape,
    loss_scale: f64,
    device: &B::Device,
) -> (GradientsParams, f64) {
    let mut accumulator = GradientsAccumulator::<T::Model>::new();
    let mut micro_losses = Vec::with_capacity(shape.grad_accum);
    // Counted once a step over the whole global batch, on every rank alike
    // (a pure function of the step's rows: no message between ranks).
    let global_units = task.loss_units(step, 0..shape.batch_size);
    for micro in 0..shape.grad_accum {
        let start = shape.first_row + micro * shape.micro_batch;
        let rows = start..start + shape.micro_batch;
        let units = task.loss_units(step, rows.clone());
        let loss = task.loss(model, step, rows, device);
        let loss = match micro_batch_divisor(units, shape.world_size, global_units) {
            Some(divisor) => loss / divisor,
            None => loss * 0.0,
        };
        micro_losses.push(loss.clone().detach().reshape([1]));
        let loss = if loss_scale == 1.0 {
            loss
        } else {
            loss * loss_scale
        };
        let grads = GradientsParams::from_grads(loss.backward(), model);
        accumulator.accumulate(model, grads);
    }
    let loss_sum: f64 = Tensor::cat(micro_losses, 0).into_data().iter::<f64>().sum();
    (accumulator.grads(), loss_sum)
}

/// Test support: the loss rank `rank` of `world_size` contributes to
/// `step` of `task` at `micro_batch` (what it hands the collective, whose
/// mean over the ranks is the step's loss), without starting a world.
#[cfg(test)]
pub(crate) fn rank_loss<B: AutodiffBackend, T: Task<B>>(
    task: &T,
    model: &T::Model,
    step: u64,
    (rank, world_size): (usize, usize),
    micro_batch: usize,
    device: &B::Device,
) -> f64 {
    let shape = StepShape::new(task, micro_batch, world_size, rank).unwrap();
    accumulate_micro_batches(task, model, step, &shape, 1.0, device).1
}

#[cfg(test)]
mod tests {
    use super::micro_batch_divisor;

    /// Where every row carries the same units (gpt2's block of tokens) the
    /// divisor is the integer `grad_accum` to the bit, the divisor before
    /// issue #42, so those runs' losses and gradients did not change.
    #[test]
    fn uniform_rows_divide_by_grad_accum_exactly() {
        for units_per_row in [1usize, 64, 1024, 3000] {
            for world in [1usize, 2, 3, 4, 8] {
                for grad_accum in 1usize..=64 {
                    for micro_batch in [1usize, 3, 16, 512] {
                        let batch = micro_batch * grad_accum * world;
                        let divisor = micro_batch_divisor(
                            (micro_batch * units_per_row) as f64,
                            world,
                            (batch * units_per_row) as f64,
                        );
                        assert_eq!(
                            divisor.map(f64::to_bits),
                            Some((grad_accum as f64).to_bits()),
                            "{units_per_row} units × {micro_batch} rows, {world} ranks"
                        );
                    }
                }
            }
        }
        assert_eq!(micro_batch_divisor(0.0, 2, 10.0), None);
    }
}
