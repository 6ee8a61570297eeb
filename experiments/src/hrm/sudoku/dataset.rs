//! The HRM Sudoku dataset (`sudoku-extreme-1k-aug-1000` layout): builder and
//! loader.
//!
//! Directory layout (all integers little-endian):
//! ```text
//! DIR/dataset.json        metadata (Metadata below)
//! DIR/train/inputs.bin    N × 81 u8: puzzle tokens
//! DIR/train/labels.bin    N × 81 u8: solution tokens
//! DIR/train/groups.bin    N × u32:   group id = index of the original puzzle
//! DIR/test/…              same files; one example (and group) per puzzle
//! ```
//! Tokens: PAD 0 (unused by Sudoku), blank 1, digit d → d + 1 (2..=10);
//! vocabulary 11, 81 tokens per example — HRM's encoding. In train/, each
//! group holds its original (augmentation index 0) followed by its
//! augmentations, contiguously; the test split is not augmented.

use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::augment::{augment_pair, Transform};
use super::csvfile::{read_file, write_file, Row};
use super::generate::{generate, puzzle_rng, with_extra_clues, Difficulty};
use super::grid::{Grid, CELLS};
use super::solver::{analyze, Outcome};
use crate::error::UserError;

pub const FORMAT_VERSION: u32 = 1;
pub const SEQ_LEN: usize = CELLS;
pub const VOCAB_SIZE: u32 = 11;
pub const PAD_TOKEN: u8 = 0;
pub const BLANK_TOKEN: u8 = 1;

/// Token of a cell value (0 = blank, 1..=9 digit).
pub fn token(cell: u8) -> u8 {
    cell + 1
}

/// How the cells are encoded, recorded in the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Encoding {
    pub seq_len: usize,
    pub vocab_size: u32,
    pub pad: u8,
    pub blank: u8,
    /// Digit d is stored as d + digit_offset.
    pub digit_offset: u8,
    pub ignore_label_id: u8,
}

impl Default for Encoding {
    fn default() -> Self {
        Encoding {
            seq_len: SEQ_LEN,
            vocab_size: VOCAB_SIZE,
            pad: PAD_TOKEN,
            blank: BLANK_TOKEN,
            digit_offset: 1,
            ignore_label_id: PAD_TOKEN,
        }
    }
}

/// Where a split's puzzles came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub path: String,
    pub sha256: String,
    pub rows: usize,
}

impl Source {
    /// Describe a CSV file by path, content hash and row count.
    pub fn of_file(path: &Path, rows: usize) -> Result<Self, UserError> {
        let bytes = std::fs::read(path).map_err(|e| {
            UserError::usage(format!("cannot read {}: {e}", path.display()))
                .with_fix("pass an existing CSV file")
        })?;
        Ok(Source {
            path: path.display().to_string(),
            sha256: hex::encode(Sha256::digest(&bytes)),
            rows,
        })
    }
}

/// Summary of a list of ratings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatingStats {
    pub count: usize,
    pub min: u32,
    pub p10: u32,
    pub p50: u32,
    pub p90: u32,
    pub p99: u32,
    pub max: u32,
    pub mean: f64,
    /// `(label, count)` over buckets 0, 1, 2-3, 4-7, … (powers of two).
    pub histogram: Vec<(String, usize)>,
}

impl RatingStats {
    pub fn of(ratings: &[u32]) -> Self {
        let mut sorted = ratings.to_vec();
        sorted.sort_unstable();
        let pct = |p: f64| -> u32 {
            if sorted.is_empty() {
                return 0;
            }
            let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
            sorted[idx]
        };
        let max = sorted.last().copied().unwrap_or(0);
        let mut histogram = vec![("0".to_string(), 0usize)];
        let mut low = 1u32;
        while low <= max {
            let high = low * 2 - 1;
            let label = if low == high {
                low.to_string()
            } else {
                format!("{low}-{high}")
            };
            histogram.push((label, 0));
            low *= 2;
        }
        for &r in &sorted {
            let bucket = if r == 0 {
                0
            } else {
                32 - r.leading_zeros() as usize
            };
            histogram[bucket].1 += 1;
        }
        RatingStats {
            count: sorted.len(),
            min: sorted.first().copied().unwrap_or(0),
            p10: pct(0.10),
            p50: pct(0.50),
            p90: pct(0.90),
            p99: pct(0.99),
            max,
            mean: sorted.iter().map(|&r| r as f64).sum::<f64>() / sorted.len().max(1) as f64,
            histogram,
        }
    }
}

/// Counts of one split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitInfo {
    pub examples: usize,
    pub groups: usize,
    /// Examples per group (1 + augmentations for train, 1 for test).
    pub examples_per_group: usize,
}

/// `dataset.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub format_version: u32,
    pub name: String,
    pub seed: u64,
    pub subsample: Option<usize>,
    pub augmentations: usize,
    pub encoding: Encoding,
    pub train: SplitInfo,
    pub test: SplitInfo,
    pub train_source: Source,
    pub test_source: Source,
    /// Ratings of the train originals and of the test puzzles, as given in the CSV.
    pub train_ratings: RatingStats,
    pub test_ratings: RatingStats,
    /// How the originals were generated, when they were (`envgen sudoku generate`).
    pub generated: Option<serde_json::Value>,
}

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Keep this many random train puzzles (all when `None` or larger than the file).
    pub subsample: Option<usize>,
    /// Augmentations per train puzzle (the original is kept in addition).
    pub augmentations: usize,
    pub seed: u64,
}

/// One split in memory: tokens and group ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    pub inputs: Vec<u8>,
    pub labels: Vec<u8>,
    pub groups: Vec<u32>,
}

impl Split {
    pub fn len(&self) -> usize {
        self.groups.len()
    }
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
    /// The 81 input tokens of example `i`.
    pub fn input(&self, i: usize) -> &[u8] {
        &self.inputs[i * SEQ_LEN..(i + 1) * SEQ_LEN]
    }
    /// The 81 label tokens of example `i`.
    pub fn label(&self, i: usize) -> &[u8] {
        &self.labels[i * SEQ_LEN..(i + 1) * SEQ_LEN]
    }
    /// The example ranges of each group, in group order (groups are contiguous).
    pub fn group_ranges(&self) -> Vec<Range<usize>> {
        let mut ranges: Vec<Range<usize>> = Vec::new();
        for (i, &g) in self.groups.iter().enumerate() {
            match ranges.last_mut() {
                Some(last) if self.groups[last.start] == g => last.end = i + 1,
                _ => ranges.push(i..i + 1),
            }
        }
        ranges
    }

    fn push(&mut self, puzzle: &Grid, solution: &Grid, group: u32) {
        self.inputs.extend(puzzle.iter().map(|&c| token(c)));
        self.labels.extend(solution.iter().map(|&c| token(c)));
        self.groups.push(group);
    }

    fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("inputs.bin"), &self.inputs)?;
        std::fs::write(dir.join("labels.bin"), &self.labels)?;
        let mut groups = Vec::with_capacity(self.groups.len() * 4);
        for g in &self.groups {
            groups.extend_from_slice(&g.to_le_bytes());
        }
        std::fs::write(dir.join("groups.bin"), groups)
    }

    fn read(dir: &Path, info: &SplitInfo) -> Result<Self, UserError> {
        let read = |name: &str, expected: usize| -> Result<Vec<u8>, UserError> {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).map_err(|e| {
                UserError::usage(format!("cannot read {}: {e}", path.display()))
                    .with_fix("rebuild the dataset with `envgen sudoku build-dataset`")
            })?;
            if bytes.len() != expected {
                return Err(UserError::usage(format!(
                    "{} has {} bytes, dataset.json promises {expected}",
                    path.display(),
                    bytes.len()
                ))
                .with_fix("the dataset is truncated or mixed up: rebuild it"));
            }
            Ok(bytes)
        };
        let inputs = read("inputs.bin", info.examples * SEQ_LEN)?;
        let labels = read("labels.bin", info.examples * SEQ_LEN)?;
        let groups = read("groups.bin", info.examples * 4)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let bad_token = inputs
            .iter()
            .chain(&labels)
            .any(|&t| t as u32 >= VOCAB_SIZE);
        if bad_token {
            return Err(UserError::usage(format!(
                "{}: a token is outside 0..{VOCAB_SIZE}",
                dir.display()
            ))
            .with_fix("the files are not an envgen Sudoku dataset: rebuild it"));
        }
        Ok(Split {
            inputs,
            labels,
            groups,
        })
    }
}

/// A built dataset, loaded for training.
#[derive(Debug, Clone)]
pub struct SudokuDataset {
    pub meta: Metadata,
    pub train: Split,
    pub test: Split,
}

impl SudokuDataset {
    /// Load `dir` (as written by [`build`]) and check it against its metadata.
    pub fn open(dir: &Path) -> Result<Self, UserError> {
        let meta_path = dir.join("dataset.json");
        let text = std::fs::read_to_string(&meta_path).map_err(|e| {
            UserError::usage(format!("cannot read {}: {e}", meta_path.display()))
                .with_fix("point at a directory made by `envgen sudoku build-dataset`")
        })?;
        let meta: Metadata = serde_json::from_str(&text).map_err(|e| {
            UserError::usage(format!("{}: {e}", meta_path.display()))
                .with_fix("rebuild the dataset with this envgen version")
        })?;
        if meta.format_version != FORMAT_VERSION {
            return Err(UserError::usage(format!(
                "{}: format_version {} is not the supported {FORMAT_VERSION}",
                meta_path.display(),
                meta.format_version
            ))
            .with_fix("rebuild the dataset with this envgen version"));
        }
        let train = Split::read(&dir.join("train"), &meta.train)?;
        let test = Split::read(&dir.join("test"), &meta.test)?;
        Ok(SudokuDataset { meta, train, test })
    }
}

/// Check that every row's puzzle has exactly its stated solution.
fn verify_unique(rows: &[Row], name: &str) -> Result<(), UserError> {
    let bad = rows
        .par_iter()
        .position_first(|row| analyze(&row.puzzle).outcome != Outcome::Unique(row.solution));
    match bad {
        None => Ok(()),
        Some(i) => Err(UserError::usage(format!(
            "{name}: line {}: the puzzle does not have exactly the one solution in column a",
            i + 2
        ))
        .with_fix("remove the row, or regenerate the file with `envgen sudoku generate`")),
    }
}

/// The train split: each chosen original, then `augmentations` transforms of
/// it, each drawn from the group's own random stream.
fn augment_split(originals: &[&Row], augmentations: usize, seed: u64) -> Result<Split, UserError> {
    let groups: Vec<Result<Split, UserError>> = originals
        .par_iter()
        .enumerate()
        .map(|(g, row)| {
            let mut rng = puzzle_rng(seed, g as u64 + 1);
            let mut split = Split::default();
            split.push(&row.puzzle, &row.solution, g as u32);
            for k in 0..augmentations {
                let t = Transform::random(&mut rng);
                let (p, s) = augment_pair(&t, &row.puzzle, &row.solution, cfg!(debug_assertions))
                    .map_err(|e| {
                    UserError::failed(format!("augmentation {k} of train puzzle {g}: {e}"))
                        .with_fix("this is a bug in envgen; please report it with the seed")
                })?;
                split.push(&p, &s, g as u32);
            }
            Ok(split)
        })
        .collect();
    let mut train = Split::default();
    for group in groups {
        let group = group?;
        train.inputs.extend(group.inputs);
        train.labels.extend(group.labels);
        train.groups.extend(group.groups);
    }
    Ok(train)
}

/// Build the dataset into `out` and return its metadata.
pub fn build(
    train_rows: &[Row],
    test_rows: &[Row],
    train_source: Source,
    test_source: Source,
    options: &BuildOptions,
    generated: Option<serde_json::Value>,
    out: &Path,
) -> Result<Metadata, UserError> {
    if train_rows.is_empty() || test_rows.is_empty() {
        return Err(UserError::usage(
            "the train and test files must each hold at least one puzzle",
        )
        .with_fix("pass non-empty CSV files"));
    }
    let mut order: Vec<usize> = (0..train_rows.len()).collect();
    let mut rng = puzzle_rng(options.seed, 0);
    order.shuffle(&mut rng);
    if let Some(n) = options.subsample {
        order.truncate(n);
    }
    let chosen: Vec<&Row> = order.iter().map(|&i| &train_rows[i]).collect();
    let chosen_rows: Vec<Row> = chosen.iter().map(|r| (*r).clone()).collect();
    verify_unique(&chosen_rows, &train_source.path)?;
    verify_unique(test_rows, &test_source.path)?;

    let train = augment_split(&chosen, options.augmentations, options.seed)?;
    let mut test = Split::default();
    for (i, row) in test_rows.iter().enumerate() {
        test.push(&row.puzzle, &row.solution, i as u32);
    }
    let meta = Metadata {
        format_version: FORMAT_VERSION,
        name: format!(
            "sudoku-{}-aug-{}",
            options
                .subsample
                .map_or("all".to_string(), |n| n.to_string()),
            options.augmentations
        ),
        seed: options.seed,
        subsample: options.subsample,
        augmentations: options.augmentations,
        encoding: Encoding::default(),
        train: SplitInfo {
            examples: train.len(),
            groups: chosen.len(),
            examples_per_group: options.augmentations + 1,
        },
        test: SplitInfo {
            examples: test.len(),
            groups: test.len(),
            examples_per_group: 1,
        },
        train_source,
        test_source,
        train_ratings: RatingStats::of(&chosen.iter().map(|r| r.rating).collect::<Vec<_>>()),
        test_ratings: RatingStats::of(&test_rows.iter().map(|r| r.rating).collect::<Vec<_>>()),
        generated,
    };
    write_dataset(out, &meta, &train, &test).map_err(|e| {
        UserError::environment(format!(
            "cannot write the dataset to {}: {e}",
            out.display()
        ))
        .with_fix("choose a writable --out directory")
    })?;
    Ok(meta)
}

fn write_dataset(out: &Path, meta: &Metadata, train: &Split, test: &Split) -> std::io::Result<()> {
    train.write(&out.join("train"))?;
    test.write(&out.join("test"))?;
    let mut file = std::fs::File::create(out.join("dataset.json"))?;
    serde_json::to_writer_pretty(&mut file, meta)?;
    file.write_all(b"\n")
}

/// The directory for the generated source CSVs inside a dataset.
pub fn source_dir(out: &Path) -> PathBuf {
    out.join("source")
}

/// Everything that decides a dataset: its CSV sources, or how to generate
/// them, and the build options. Shared by `envgen sudoku build-dataset` and
/// `envgen run hrm-sudoku`.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// Train and test CSVs (Sudoku-Extreme layout); generated when `None`.
    pub csvs: Option<(PathBuf, PathBuf)>,
    pub difficulty: Difficulty,
    pub train_count: usize,
    pub test_count: usize,
    /// Solution cells added back to each generated puzzle.
    pub extra_clues: usize,
    pub options: BuildOptions,
    /// Generation threads (0 = all cores); the output does not depend on it.
    pub threads: usize,
}

/// Generated puzzles as CSV rows (see [`with_extra_clues`]).
pub fn generate_rows(
    difficulty: Difficulty,
    count: usize,
    extra_clues: usize,
    seed: u64,
    threads: usize,
) -> Vec<Row> {
    let source = if extra_clues == 0 {
        format!("envgen-{}-seed{seed}", difficulty.name())
    } else {
        format!("envgen-{}+{extra_clues}-seed{seed}", difficulty.name())
    };
    generate(difficulty, count, seed, threads)
        .into_iter()
        .enumerate()
        .map(|(i, g)| with_extra_clues(g, extra_clues, seed, i as u64))
        .map(|g| Row {
            source: source.clone(),
            puzzle: g.puzzle,
            solution: g.solution,
            rating: g.rating,
        })
        .collect()
}

/// Build the dataset of `recipe` into `out`: generate the source CSVs into
/// `out/source/` first when the recipe has none. Train and test puzzles
/// come from disjoint seed streams, so the test puzzles are held out.
pub fn build_recipe(recipe: &Recipe, out: &Path) -> Result<Metadata, UserError> {
    let seed = recipe.options.seed;
    let (train_path, test_path, generated) = match &recipe.csvs {
        Some((train, test)) => (train.clone(), test.clone(), None),
        None => {
            let dir = source_dir(out);
            std::fs::create_dir_all(&dir).map_err(|e| {
                UserError::environment(format!("cannot create {}: {e}", dir.display()))
                    .with_fix("choose a writable output directory")
            })?;
            let (train, test) = (dir.join("train.csv"), dir.join("test.csv"));
            let d = recipe.difficulty;
            let test_seed = seed ^ TEST_SEED_MASK;
            for (path, count, seed) in [
                (&train, recipe.train_count, seed),
                (&test, recipe.test_count, test_seed),
            ] {
                let rows = generate_rows(d, count, recipe.extra_clues, seed, recipe.threads);
                write_file(path, &rows)?;
            }
            let info = serde_json::json!({
                "difficulty": d.name(),
                "min_rating": d.min_rating(),
                "extra_clues": recipe.extra_clues,
                "train_seed": seed,
                "test_seed": test_seed,
                "train_count": recipe.train_count,
                "test_count": recipe.test_count,
            });
            (train, test, Some(info))
        }
    };
    let train_rows = read_file(&train_path)?;
    let test_rows = read_file(&test_path)?;
    let train_source = Source::of_file(&train_path, train_rows.len())?;
    let test_source = Source::of_file(&test_path, test_rows.len())?;
    build(
        &train_rows,
        &test_rows,
        train_source,
        test_source,
        &recipe.options,
        generated,
        out,
    )
}

/// The test split's generation seed is the train seed with these bits flipped.
const TEST_SEED_MASK: u64 = 0x7e57_7e57_7e57_7e57;

#[cfg(test)]
mod tests {
    use super::super::csvfile::{write_file, Row};
    use super::super::generate::{generate, Difficulty};
    use super::super::grid::{agrees_with, is_solved_grid};
    use super::*;

    fn rows(count: usize, seed: u64) -> Vec<Row> {
        generate(Difficulty::Easy, count, seed, 1)
            .into_iter()
            .map(|g| Row {
                source: "test".into(),
                puzzle: g.puzzle,
                solution: g.solution,
                rating: g.rating,
            })
            .collect()
    }

    fn decode(tokens: &[u8]) -> Grid {
        let mut grid = [0u8; CELLS];
        for (cell, &t) in grid.iter_mut().zip(tokens) {
            *cell = t - 1;
        }
        grid
    }

    #[test]
    fn small_build_has_the_documented_layout_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let (train_rows, test_rows) = (rows(8, 1), rows(2, 2));
        let train_csv = dir.path().join("train.csv");
        write_file(&train_csv, &train_rows).unwrap();
        let source = Source::of_file(&train_csv, train_rows.len()).unwrap();
        let options = BuildOptions {
            subsample: Some(5),
            augmentations: 3,
            seed: 9,
        };
        let out = dir.path().join("ds");
        let meta = build(
            &train_rows,
            &test_rows,
            source.clone(),
            source,
            &options,
            None,
            &out,
        )
        .unwrap();
        assert_eq!(meta.train.examples, 5 * 4);
        assert_eq!(meta.test.examples, 2);
        assert_eq!(
            std::fs::metadata(out.join("train/inputs.bin"))
                .unwrap()
                .len(),
            20 * 81
        );
        assert_eq!(
            std::fs::metadata(out.join("train/groups.bin"))
                .unwrap()
                .len(),
            20 * 4
        );

        let ds = SudokuDataset::open(&out).unwrap();
        assert_eq!(ds.meta, meta);
        let ranges = ds.train.group_ranges();
        assert_eq!(ranges.len(), 5);
        assert!(ranges.iter().all(|r| r.len() == 4));
        for i in 0..ds.train.len() {
            let (p, s) = (decode(ds.train.input(i)), decode(ds.train.label(i)));
            assert!(is_solved_grid(&s) && agrees_with(&p, &s));
            assert_eq!(analyze(&p).outcome, Outcome::Unique(s));
        }
        // Index 0 of each group is an original train puzzle, verbatim.
        for r in &ranges {
            let p = decode(ds.train.input(r.start));
            assert!(train_rows.iter().any(|row| row.puzzle == p));
        }
        assert_eq!(decode(ds.test.input(1)), test_rows[1].puzzle);
        // Blank cells are token 1, never PAD.
        assert!(ds.train.inputs.contains(&BLANK_TOKEN));
        assert!(!ds.train.inputs.contains(&PAD_TOKEN));

        // Same seed, same bytes.
        let again = dir.path().join("ds2");
        let source = Source::of_file(&train_csv, 8).unwrap();
        build(
            &train_rows,
            &test_rows,
            source.clone(),
            source,
            &options,
            None,
            &again,
        )
        .unwrap();
        assert_eq!(
            std::fs::read(out.join("train/inputs.bin")).unwrap(),
            std::fs::read(again.join("train/inputs.bin")).unwrap()
        );
        // A truncated file is refused with its name.
        std::fs::write(out.join("test/labels.bin"), [2u8; 10]).unwrap();
        let err = SudokuDataset::open(&out).unwrap_err();
        assert!(err.message.contains("labels.bin"), "{}", err.message);
    }

    #[test]
    fn rating_stats_percentiles_and_buckets() {
        let stats = RatingStats::of(&[0, 0, 1, 2, 3, 5, 9, 40]);
        assert_eq!(stats.min, 0);
        assert_eq!(stats.max, 40);
        assert_eq!(stats.histogram[0], ("0".to_string(), 2));
        assert_eq!(stats.histogram[1], ("1".to_string(), 1));
        assert_eq!(stats.histogram[2], ("2-3".to_string(), 2));
        assert_eq!(stats.histogram.last().unwrap(), &("32-63".to_string(), 1));
        assert_eq!(stats.histogram.iter().map(|h| h.1).sum::<usize>(), 8);
    }
}
