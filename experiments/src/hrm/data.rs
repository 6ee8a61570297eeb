//! The Sudoku data of a run (built into, or re-opened from, the run
//! directory), the batches training draws from it, and evaluation on it.

use std::path::{Path, PathBuf};

use burn::tensor::{Int, Tensor, TensorData};
use envgen_kernels::FusedBackend;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::act::{act_eval, PuzzleBatch};
use super::config::HrmDataConfig;
use super::loss::{blank_cell_hits, sequence_correct_count};
use super::model::HrmModel;
use super::sudoku::dataset::{self, BuildOptions, Recipe, Split, SudokuDataset};
use super::sudoku::generate::puzzle_rng;
use crate::error::UserError;

/// The dataset of a run: `data.dir` as is, else built (or re-opened on
/// resume) in `run_dir/dataset` from the CSVs or from generated puzzles.
pub fn prepare_dataset(data: &HrmDataConfig, run_dir: &Path) -> anyhow::Result<SudokuDataset> {
    if let Some(dir) = &data.dir {
        return Ok(SudokuDataset::open(Path::new(dir)).map_err(|e| {
            let message = format!("data.dir: {}", e.message);
            let fix = e
                .fix
                .clone()
                .unwrap_or_else(|| "build one with `envgen sudoku build-dataset`".into());
            UserError::usage(message).with_fix(fix)
        })?);
    }
    let out = run_dir.join("dataset");
    if out.join("dataset.json").exists() {
        if let Ok(ds) = SudokuDataset::open(&out) {
            return Ok(ds);
        }
    }
    let csvs = data
        .train_csv
        .as_ref()
        .zip(data.test_csv.as_ref())
        .map(|(train, test)| (PathBuf::from(train), PathBuf::from(test)));
    let recipe = Recipe {
        csvs,
        difficulty: data.difficulty,
        train_count: data.train_puzzles,
        test_count: data.test_puzzles,
        extra_clues: data.extra_clues,
        options: BuildOptions {
            subsample: data.subsample,
            augmentations: data.augmentations,
            seed: data.seed,
        },
        threads: 0,
    };
    tracing::info!(dir = %out.display(), "building the Sudoku dataset");
    dataset::build_recipe(&recipe, &out)?;
    Ok(SudokuDataset::open(&out)?)
}

/// Which train example each row of each step starts from: a pure function
/// of (seed, step, row). As in the reference loader, every epoch visits the
/// groups in a fresh random order and takes one random variant (original or
/// augmentation) of each.
pub struct Sampler<'a> {
    split: &'a Split,
    groups: Vec<std::ops::Range<usize>>,
    seed: u64,
    batch: usize,
    /// The example order of the most recent epoch asked for.
    epoch_order: Option<(u64, Vec<usize>)>,
}

/// Separates the sampler's random streams from the dataset builder's.
pub(crate) const SAMPLER_STREAM: u64 = 0x5a3f_1e00_0000_0001;

impl<'a> Sampler<'a> {
    pub fn new(split: &'a Split, seed: u64, batch: usize) -> Self {
        Self {
            groups: split.group_ranges(),
            split,
            seed,
            batch,
            epoch_order: None,
        }
    }

    fn example(&mut self, index: u64) -> usize {
        let groups = self.groups.len() as u64;
        let (epoch, pos) = (index / groups, (index % groups) as usize);
        if self.epoch_order.as_ref().map(|(e, _)| *e) != Some(epoch) {
            let mut rng = puzzle_rng(self.seed ^ SAMPLER_STREAM, epoch);
            let mut order: Vec<usize> = (0..self.groups.len()).collect();
            order.shuffle(&mut rng);
            let examples = order
                .into_iter()
                .map(|g| {
                    let range = &self.groups[g];
                    range.start + rng.random_range(0..range.len())
                })
                .collect();
            self.epoch_order = Some((epoch, examples));
        }
        self.epoch_order.as_ref().map_or(0, |(_, order)| order[pos])
    }

    /// The fresh puzzles offered to the rows of 1-based `step`.
    pub fn batch<B: FusedBackend>(&mut self, step: u64, device: &B::Device) -> PuzzleBatch<B> {
        let first = (step - 1) * self.batch as u64;
        let rows: Vec<usize> = (0..self.batch as u64)
            .map(|r| self.example(first + r))
            .collect();
        rows_to_batch(self.split, &rows, device)
    }
}

pub(crate) fn rows_to_batch<B: FusedBackend>(
    split: &Split,
    rows: &[usize],
    device: &B::Device,
) -> PuzzleBatch<B> {
    let seq = dataset::SEQ_LEN;
    let gather = |labels: bool| -> Tensor<B, 2, Int> {
        let flat: Vec<i64> = rows
            .iter()
            .flat_map(|&i| {
                if labels {
                    split.label(i)
                } else {
                    split.input(i)
                }
            })
            .map(|&t| t as i64)
            .collect();
        Tensor::from_data(TensorData::new(flat, [rows.len(), seq]), device)
    };
    PuzzleBatch {
        inputs: gather(false),
        labels: gather(true),
        puzzle_ids: Tensor::zeros([rows.len()], device),
    }
}

/// Accuracy on held-out puzzles after `halt_max_steps` segments.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvalMetrics {
    pub exact_accuracy: f64,
    /// Over the cells that are blank in the puzzle.
    pub cell_accuracy: f64,
    pub puzzles: usize,
}

/// Evaluate on every puzzle of `split`, `batch` puzzles at a time.
pub fn evaluate<B: FusedBackend>(
    model: &HrmModel<B>,
    split: &Split,
    batch: usize,
    device: &B::Device,
) -> EvalMetrics {
    let (mut exact, mut hits, mut blanks) = (0usize, 0usize, 0usize);
    let rows: Vec<usize> = (0..split.len()).collect();
    for chunk in rows.chunks(batch.max(1)) {
        let puzzles = rows_to_batch::<B>(split, chunk, device);
        let out = act_eval(model, &puzzles);
        exact += sequence_correct_count(out.logits.clone(), puzzles.labels.clone());
        let (h, b) = blank_cell_hits(out.logits, puzzles.inputs, puzzles.labels);
        hits += h;
        blanks += b;
    }
    EvalMetrics {
        exact_accuracy: exact as f64 / split.len().max(1) as f64,
        cell_accuracy: hits as f64 / blanks.max(1) as f64,
        puzzles: split.len(),
    }
}
