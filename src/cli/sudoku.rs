//! `envgen sudoku …`: solve, generate, build the HRM dataset, benchmark.

use std::path::{Path, PathBuf};
use std::time::Instant;

use envgen_experiments::hrm::sudoku::csvfile;
use envgen_experiments::hrm::sudoku::dataset::{self, BuildOptions};
use envgen_experiments::hrm::sudoku::generate::Difficulty;
use envgen_experiments::hrm::sudoku::{analyze, bench, parse_grid, to_line, Grid, Outcome};
use serde_json::json;

use crate::error::{Result, UserError};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Level {
    Easy,
    Hard,
    Extreme,
}

impl From<Level> for Difficulty {
    fn from(level: Level) -> Self {
        match level {
            Level::Easy => Difficulty::Easy,
            Level::Hard => Difficulty::Hard,
            Level::Extreme => Difficulty::Extreme,
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Solve puzzles (81-character strings, '.' or '0' for blanks), prove
    /// uniqueness and rate them. Exit 1 when a puzzle has no solution or
    /// several; exit 2 on malformed input.
    Solve {
        /// Puzzles as 81 characters (digits, `.` or `0` for a blank).
        puzzles: Vec<String>,
        /// Read puzzles from a Sudoku-Extreme CSV (column q) or one a line.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Generate unique-solution puzzles as a Sudoku-Extreme CSV.
    Generate {
        /// Puzzles to generate.
        #[arg(long)]
        count: usize,
        /// How hard the puzzles are (fewer clues, more search).
        #[arg(long, value_enum, default_value = "easy")]
        difficulty: Level,
        /// Seed of the generator: the same seed, the same puzzles.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The CSV to write.
        #[arg(long)]
        out: PathBuf,
        /// Worker threads (0 = all cores); the output does not depend on it.
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Build the HRM dataset (`extreme-1k-aug-1000` layout) into a directory.
    BuildDataset {
        /// Train CSV (Sudoku-Extreme layout); generated when absent.
        #[arg(long, requires = "test")]
        train: Option<PathBuf>,
        /// Test CSV; generated when absent.
        #[arg(long, requires = "train")]
        test: Option<PathBuf>,
        /// Random train puzzles to keep (all when absent).
        #[arg(long)]
        subsample: Option<usize>,
        /// Augmentations per train puzzle (the original is kept too).
        #[arg(long, default_value_t = 1000)]
        aug: usize,
        /// The dataset directory to write.
        #[arg(long)]
        out: PathBuf,
        /// Seed of the generator: the same seed, the same puzzles.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Difficulty of generated puzzles (without --train/--test).
        #[arg(long, value_enum, default_value = "extreme")]
        generate_difficulty: Level,
        /// Train puzzles to generate (without --train/--test).
        #[arg(long, default_value_t = 1000)]
        train_count: usize,
        /// Test puzzles to generate (without --train/--test).
        #[arg(long, default_value_t = 200)]
        test_count: usize,
        /// Solution cells given back to each generated puzzle (easier set).
        #[arg(long, default_value_t = 0)]
        extra_clues: usize,
        /// Worker threads (0 = all cores); the output does not depend on it.
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Measure generation speed and single-thread solve speed.
    Bench {
        /// Puzzles to generate and solve.
        #[arg(long, default_value_t = 200)]
        count: usize,
        /// How hard the puzzles are (fewer clues, more search).
        #[arg(long, value_enum, default_value = "extreme")]
        difficulty: Level,
        /// Seed of the generator: the same seed, the same puzzles.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Worker threads (0 = all cores); the output does not depend on it.
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Timed solves per puzzle (the best counts).
        #[arg(long, default_value_t = 5)]
        repetitions: usize,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Solve {
            puzzles,
            file,
            json,
        } => solve(puzzles, file.as_deref(), json),
        Command::Generate {
            count,
            difficulty,
            seed,
            out,
            threads,
        } => {
            let rows = dataset::generate_rows(difficulty.into(), count, 0, seed, threads);
            csvfile::write_file(&out, &rows)?;
            eprintln!(
                "wrote {count} {} puzzles to {}",
                Difficulty::from(difficulty).name(),
                out.display()
            );
            Ok(0)
        }
        Command::BuildDataset {
            train,
            test,
            subsample,
            aug,
            out,
            seed,
            generate_difficulty,
            train_count,
            test_count,
            extra_clues,
            threads,
            json,
        } => {
            let inputs = Inputs {
                train,
                test,
                difficulty: generate_difficulty.into(),
                train_count,
                test_count,
                extra_clues,
                threads,
            };
            build_dataset(inputs, subsample, aug, &out, seed, json)
        }
        Command::Bench {
            count,
            difficulty,
            seed,
            threads,
            repetitions,
            json,
        } => {
            let report = bench::run(difficulty.into(), count, seed, threads, repetitions)?;
            if json {
                crate::output::outln!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                crate::output::outln!(
                    "generate {count} {}: {:.2} s on {} threads ({:.1} puzzles/s)\n\
                     solve + uniqueness proof, 1 thread: mean {:.1} µs, hardest decile {:.1} µs, max {:.1} µs\n\
                     rating: min {} p50 {} p90 {} max {} mean {:.1}",
                    report.difficulty.name(),
                    report.generate_wall_s,
                    report.threads,
                    report.generated_per_s,
                    report.solve_us_mean,
                    report.solve_us_hardest_decile,
                    report.solve_us_max,
                    report.ratings.min,
                    report.ratings.p50,
                    report.ratings.p90,
                    report.ratings.max,
                    report.ratings.mean,
                );
            }
            Ok(0)
        }
    }
}

fn solve(args: Vec<String>, file: Option<&Path>, json: bool) -> Result<i32> {
    let mut labelled: Vec<(String, String)> = args
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("puzzle {} ({p:?})", i + 1), p))
        .collect();
    if let Some(path) = file {
        for (line, p) in csvfile::read_puzzle_lines(path)? {
            labelled.push((format!("{}: line {line}", path.display()), p));
        }
    }
    if labelled.is_empty() {
        return Err(UserError::usage("no puzzles given")
            .with_fix("pass 81-character puzzles as arguments or --file F.csv")
            .into());
    }
    // Check every puzzle before solving any, so bad input always exits 2.
    let mut grids: Vec<Grid> = Vec::with_capacity(labelled.len());
    for (label, text) in &labelled {
        let grid = parse_grid(text.trim()).map_err(|e| {
            UserError::usage(format!("{label}: {e}")).with_fix(
                "a puzzle is 81 characters, row by row: digits 1-9 and '.' or '0' for blanks, \
                 with no digit twice in a row, column or box",
            )
        })?;
        grids.push(grid);
    }
    let mut all_unique = true;
    let mut results = Vec::with_capacity(grids.len());
    for (grid, (label, _)) in grids.iter().zip(&labelled) {
        let start = Instant::now();
        let analysis = analyze(grid);
        let micros = start.elapsed().as_secs_f64() * 1e6;
        let (status, solution) = match &analysis.outcome {
            Outcome::Unique(s) => ("unique", Some(to_line(s))),
            Outcome::None => ("none", None),
            Outcome::Multiple => ("multiple", None),
        };
        all_unique &= status == "unique";
        if !json {
            match &solution {
                Some(s) => crate::output::outln!("{s}  rating {}  ({label})", analysis.guesses),
                None if status == "none" => crate::output::outln!("no solution  ({label})"),
                None => crate::output::outln!("multiple solutions  ({label})"),
            }
        }
        results.push(json!({
            "input": label,
            "puzzle": to_line(grid),
            "status": status,
            "solution": solution,
            "rating": analysis.guesses,
            "micros": micros,
        }));
    }
    if json {
        crate::output::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({ "puzzles": results }))?
        );
    }
    Ok(if all_unique { 0 } else { 1 })
}

struct Inputs {
    train: Option<PathBuf>,
    test: Option<PathBuf>,
    difficulty: Difficulty,
    train_count: usize,
    test_count: usize,
    extra_clues: usize,
    threads: usize,
}

fn build_dataset(
    inputs: Inputs,
    subsample: Option<usize>,
    aug: usize,
    out: &Path,
    seed: u64,
    json: bool,
) -> Result<i32> {
    let csvs = inputs.train.zip(inputs.test);
    if csvs.is_none() {
        eprintln!(
            "generating {} train + {} test {} puzzles…",
            inputs.train_count,
            inputs.test_count,
            inputs.difficulty.name()
        );
    }
    let recipe = dataset::Recipe {
        csvs,
        difficulty: inputs.difficulty,
        train_count: inputs.train_count,
        test_count: inputs.test_count,
        extra_clues: inputs.extra_clues,
        options: BuildOptions {
            subsample,
            augmentations: aug,
            seed,
        },
        threads: inputs.threads,
    };
    let meta = dataset::build_recipe(&recipe, out)?;
    if json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&meta)?);
    } else {
        crate::output::outln!(
            "{}: train {} examples ({} groups × {}), test {} examples → {}",
            meta.name,
            meta.train.examples,
            meta.train.groups,
            meta.train.examples_per_group,
            meta.test.examples,
            out.display()
        );
    }
    Ok(0)
}
