//! `envgen sudoku bench`: generation speed and single-thread solve speed
//! (solution plus uniqueness proof) on freshly generated puzzles.

use std::time::Instant;

use serde::Serialize;

use super::dataset::RatingStats;
use super::generate::{generate, Difficulty, Generated};
use super::solver::{analyze, Outcome};
use crate::error::UserError;

/// What one benchmark run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub difficulty: Difficulty,
    pub count: usize,
    pub seed: u64,
    pub threads: usize,
    pub generate_wall_s: f64,
    pub generated_per_s: f64,
    /// Mean µs to solve and prove uniqueness, one thread, over all puzzles.
    pub solve_us_mean: f64,
    /// The same over the hardest tenth of the puzzles (by rating).
    pub solve_us_hardest_decile: f64,
    /// Slowest single puzzle (best of the repetitions).
    pub solve_us_max: f64,
    pub repetitions: usize,
    pub ratings: RatingStats,
}

/// Best-of-`reps` µs for solving one puzzle.
fn time_one(puzzle: &Generated, reps: usize) -> Result<f64, UserError> {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let start = Instant::now();
        let analysis = std::hint::black_box(analyze(std::hint::black_box(&puzzle.puzzle)));
        let us = start.elapsed().as_secs_f64() * 1e6;
        if analysis.outcome != Outcome::Unique(puzzle.solution) {
            return Err(
                UserError::failed("a generated puzzle did not solve uniquely")
                    .with_fix("this is a bug in envgen; please report it with the seed"),
            );
        }
        best = best.min(us);
    }
    Ok(best)
}

pub fn run(
    difficulty: Difficulty,
    count: usize,
    seed: u64,
    threads: usize,
    reps: usize,
) -> Result<BenchReport, UserError> {
    if count == 0 || reps == 0 {
        return Err(
            UserError::usage("--count and --repetitions must be at least 1")
                .with_fix("pass e.g. --count 200 --repetitions 5"),
        );
    }
    let start = Instant::now();
    let puzzles = generate(difficulty, count, seed, threads);
    let generate_wall_s = start.elapsed().as_secs_f64();

    let mut times = Vec::with_capacity(count);
    for p in &puzzles {
        times.push((p.rating, time_one(p, reps)?));
    }
    times.sort_by(|a, b| b.0.cmp(&a.0));
    let mean = |xs: &[(u32, f64)]| xs.iter().map(|x| x.1).sum::<f64>() / xs.len().max(1) as f64;
    let decile = (count / 10).max(1);
    Ok(BenchReport {
        difficulty,
        count,
        seed,
        threads: if threads == 0 {
            rayon::current_num_threads()
        } else {
            threads
        },
        generate_wall_s,
        generated_per_s: count as f64 / generate_wall_s.max(1e-9),
        solve_us_mean: mean(&times),
        solve_us_hardest_decile: mean(&times[..decile]),
        solve_us_max: times.iter().map(|t| t.1).fold(0.0, f64::max),
        repetitions: reps,
        ratings: RatingStats::of(&puzzles.iter().map(|p| p.rating).collect::<Vec<_>>()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_reports_consistent_numbers() {
        let report = run(Difficulty::Easy, 3, 1, 1, 2).unwrap();
        assert_eq!(report.ratings.count, 3);
        assert!(report.solve_us_mean > 0.0);
        assert!(report.solve_us_max >= report.solve_us_mean);
        assert!(run(Difficulty::Easy, 0, 1, 1, 1).is_err());
    }
}
