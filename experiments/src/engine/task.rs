//! What an experiment hands the training loop ([`Task`]: its model, losses
//! and evaluations) and how the loop is to run ([`RunControl`]: where, with
//! which micro-batch and precision, when to stop). `train.rs` runs them.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde_json::{Map, Value};

use super::checkpoint;
use super::config::{OptimConfig, TrainConfig};
use super::distributed::World;
use super::precision::Precision;

/// What an experiment supplies to the loop. Data order must be a pure
/// function of (seed, step, row): that is what makes runs repeatable and
/// resume exact, whatever the micro-batch.
pub trait Task<B: AutodiffBackend> {
    type Model: AutodiffModule<B> + Clone;

    fn train_config(&self) -> &TrainConfig;
    fn optim_config(&self) -> &OptimConfig;
    /// A freshly initialized model (the backend is already seeded).
    fn init_model(&self, device: &B::Device) -> anyhow::Result<Self::Model>;
    /// Mean loss over the loss-bearing units (tokens) of the rows `rows`
    /// of the global batch of `step`: a mean over the
    /// [`Task::loss_units`] of those rows. The engine weights it by their
    /// share of the global batch's units (`micro_batches.rs`,
    /// [`micro_batch_divisor`](super::micro_batches::micro_batch_divisor)).
    fn loss(
        &self,
        model: &Self::Model,
        step: u64,
        rows: Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 1>;
    /// Validation loss (no autodiff): the mean over every loss-bearing
    /// unit of the validation set, the same whatever `micro_batch` (which
    /// only says how many rows go through the model at once).
    fn evaluate(
        &self,
        model: &<Self::Model as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64;
    /// Units (tokens, samples) one row carries, and their name ("tokens").
    fn units_per_row(&self) -> (usize, &'static str);
    /// How many units [`Task::loss`] averages over in the rows `rows` of
    /// the batch of `step` (a pure function of them, as the data order
    /// is). The step's loss is the mean over the global batch's units, so
    /// a task whose rows carry different numbers of loss-bearing tokens
    /// (rft's completions after a masked prompt) says how many; the
    /// default, `units_per_row` per row, is right for tasks whose rows
    /// all carry the same.
    fn loss_units(&self, _step: u64, rows: Range<usize>) -> f64 {
        (rows.len() * self.units_per_row().0) as f64
    }
    /// Extra numbers for summary.json (e.g. the data's entropy bound).
    fn summary_extras(&self) -> Map<String, Value> {
        Map::new()
    }
    /// Extra fields for the metrics record of `step` (0-based), such as
    /// where in the data it was (the epoch of a sequential data order).
    fn step_extras(&self, _step: u64) -> Map<String, Value> {
        Map::new()
    }
    /// Extra evaluations run with the validation loss (logged in the same
    /// metrics record; the last ones also go to summary.json), e.g. a
    /// benchmark's accuracy.
    /// Every rank calls it at the same steps; `share` says which part of
    /// the work is this rank's and sums the ranks' counts (its result
    /// matters on the leader, which writes it).
    fn eval_extras(
        &self,
        _model: &<Self::Model as AutodiffModule<B>>::InnerModule,
        _micro_batch: usize,
        _share: &EvalShare,
        _device: &burn::tensor::Device<B::InnerBackend>,
    ) -> anyhow::Result<Map<String, Value>> {
        Ok(Map::new())
    }
    /// Called once after the last step (e.g. to export weights).
    fn finish(&self, _model: &Self::Model, _run_dir: &Path) -> anyhow::Result<()> {
        Ok(())
    }
}

/// How the ranks of a data-parallel run share an evaluation: rank `rank`
/// of `ranks` takes its part of the items, and `sum_counts` adds up every
/// rank's counts (alone, it returns them as they are).
pub struct EvalShare<'a> {
    pub rank: usize,
    pub ranks: usize,
    sum: Option<SumCounts<'a>>,
}

/// Adds up every rank's counts, element by element (an all-reduce).
pub type SumCounts<'a> = &'a dyn Fn(&[f64]) -> anyhow::Result<Vec<f64>>;

impl<'a> EvalShare<'a> {
    /// One process does all of it.
    pub fn alone() -> Self {
        EvalShare {
            rank: 0,
            ranks: 1,
            sum: None,
        }
    }

    /// Rank `rank` of `ranks`, summing through `sum` (an all-reduce that
    /// every rank calls the same number of times, with as many counts).
    pub fn across(rank: usize, ranks: usize, sum: SumCounts<'a>) -> Self {
        EvalShare {
            rank,
            ranks: ranks.max(1),
            sum: Some(sum),
        }
    }

    /// Whether part `index` (of parts dealt round-robin) is this rank's.
    pub fn is_mine(&self, index: usize) -> bool {
        index % self.ranks == self.rank
    }

    /// Every rank's `counts`, added element by element.
    pub fn sum_counts(&self, counts: &[f64]) -> anyhow::Result<Vec<f64>> {
        match self.sum {
            Some(sum) => sum(counts),
            None => Ok(counts.to_vec()),
        }
    }
}

/// How to run (none of it changes the science).
#[derive(Default)]
pub struct RunControl {
    pub run_dir: PathBuf,
    pub micro_batch: usize,
    /// Resume from `run_dir/checkpoints/latest`.
    pub resume: bool,
    /// Test hook: behave as if interrupted after this many steps.
    pub stop_after: Option<u64>,
    /// Set by a signal handler: finish the step, checkpoint, stop.
    pub stop: Arc<AtomicBool>,
    pub progress: bool,
    /// What the arithmetic runs in (a hardware knob, never the science).
    pub precision: Precision,
    /// Data-parallel: this process is one rank of these (None: alone).
    pub world: Option<World>,
    /// Rows per generation call (`--gen-batch`, the profile's or the
    /// preset's hint) for experiments that sample, such as rft: a speed
    /// knob like `micro_batch` (None: the experiment's default).
    pub gen_batch: Option<usize>,
    /// The stage this control trains, named before its progress bar
    /// (`pretrain`, `round-1/finetune`); None for a one-stage run.
    pub label: Option<String>,
}

impl RunControl {
    /// The control of a sub-run in `dir` (an RFT or pruning stage): this
    /// run's stop flag, progress, precision and generation batch, its own
    /// micro-batch and stop hook, resumed when `dir` has a checkpoint; its
    /// label is `dir` below this run's `stages/` (as `runs watch` names it).
    pub fn stage(&self, dir: &Path, micro_batch: usize, stop_after: Option<u64>) -> RunControl {
        RunControl {
            run_dir: dir.to_path_buf(),
            micro_batch,
            resume: dir.join(checkpoint::CHECKPOINTS).join("latest").exists(),
            stop_after,
            stop: self.stop.clone(),
            progress: self.progress,
            precision: self.precision,
            world: self.world.clone(),
            gen_batch: self.gen_batch,
            label: dir
                .strip_prefix(self.run_dir.join("stages"))
                .ok()
                .map(|stage| stage.to_string_lossy().replace('\\', "/")),
        }
    }
}
