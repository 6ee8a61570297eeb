//! Deterministic generation of unique-solution puzzles.
//!
//! * **easy** — a random complete grid, then its clues removed one by one in
//!   random order, keeping a removal only while the puzzle stays unique. The
//!   result is *minimal* (no clue can go) and, as uniformly drawn minimal
//!   puzzles are, almost always easy.
//! * **hard / extreme** — a hill climb over puzzles of one fixed solution:
//!   each step moves clues (drops one or two, adds one or two other cells of
//!   the solution), re-adds random solution cells until the puzzle is unique
//!   again, and re-minimizes it; the candidate replaces the current puzzle
//!   when its rating ([`super::solver`]) is at least as high (ties accepted,
//!   so the climb drifts across plateaus). The climb stops at the rating
//!   threshold of the difficulty; after [`STEPS_PER_CLIMB`] steps without
//!   reaching it a fresh grid is drawn.
//!
//! Every puzzle `i` of a run draws from its own stream
//! `ChaCha8Rng(seed, stream = i)`, so the output depends only on
//! `(seed, difficulty, count)` — not on the machine or the thread count.

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::grid::{Grid, CELLS};
use super::solver::{analyze, first_solution, Outcome};

/// Hill-climb steps on one grid before starting over from a fresh grid.
pub const STEPS_PER_CLIMB: usize = 400;

/// How hard the generated puzzles are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Difficulty {
    Easy,
    Hard,
    Extreme,
}

impl Difficulty {
    pub const ALL: [Difficulty; 3] = [Difficulty::Easy, Difficulty::Hard, Difficulty::Extreme];

    /// The least rating (guesses, see [`super::solver`]) a puzzle of this
    /// difficulty must have. Chosen from measured distributions (see
    /// docs/experiments/hrm.md): "hard" lies beyond the 99th percentile of
    /// minimal puzzles, "extreme" several times further.
    pub fn min_rating(self) -> u32 {
        match self {
            Difficulty::Easy => 0,
            Difficulty::Hard => 8,
            Difficulty::Extreme => 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Difficulty::Easy => "easy",
            Difficulty::Hard => "hard",
            Difficulty::Extreme => "extreme",
        }
    }
}

/// One generated puzzle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub puzzle: Grid,
    pub solution: Grid,
    pub rating: u32,
}

/// The random stream of puzzle `index` in a run seeded with `seed`.
pub fn puzzle_rng(seed: u64, index: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    rng
}

/// A uniformly shuffled digit order at every branch of the solver.
pub fn random_grid<R: Rng + ?Sized>(rng: &mut R) -> Grid {
    let mut shuffle = |digits: &mut [u8]| digits.shuffle(rng);
    // An empty grid always has a solution: the search cannot fail.
    first_solution(&[0; CELLS], &mut shuffle).unwrap_or([0; CELLS])
}

/// Remove clues of a unique puzzle in random order while it stays unique.
pub fn minimize<R: Rng + ?Sized>(puzzle: &Grid, rng: &mut R) -> Grid {
    let mut out = *puzzle;
    let mut clues: Vec<usize> = (0..CELLS).filter(|&c| out[c] != 0).collect();
    clues.shuffle(rng);
    for cell in clues {
        let digit = out[cell];
        out[cell] = 0;
        if !matches!(analyze(&out).outcome, Outcome::Unique(_)) {
            out[cell] = digit;
        }
    }
    out
}

/// Add random cells of `solution` until `puzzle` is unique again.
fn complete<R: Rng + ?Sized>(puzzle: &mut Grid, solution: &Grid, rng: &mut R) {
    let mut blanks: Vec<usize> = (0..CELLS).filter(|&c| puzzle[c] == 0).collect();
    blanks.shuffle(rng);
    for cell in blanks {
        if matches!(analyze(puzzle).outcome, Outcome::Unique(_)) {
            return;
        }
        puzzle[cell] = solution[cell];
    }
}

fn rating(puzzle: &Grid) -> u32 {
    analyze(puzzle).guesses
}

/// One climbing step: move a few clues, restore uniqueness, re-minimize.
fn mutate<R: Rng + ?Sized>(puzzle: &Grid, solution: &Grid, rng: &mut R) -> Grid {
    let mut next = *puzzle;
    let clues: Vec<usize> = (0..CELLS).filter(|&c| next[c] != 0).collect();
    let blanks: Vec<usize> = (0..CELLS).filter(|&c| next[c] == 0).collect();
    let drop = rng.random_range(1..=2usize);
    for &cell in clues.choose_multiple(rng, drop) {
        next[cell] = 0;
    }
    let add = rng.random_range(1..=2usize);
    for &cell in blanks.choose_multiple(rng, add) {
        next[cell] = solution[cell];
    }
    complete(&mut next, solution, rng);
    minimize(&next, rng)
}

/// Generate puzzle number `index` of the run `(seed, difficulty)`.
pub fn generate_one(difficulty: Difficulty, seed: u64, index: u64) -> Generated {
    let mut rng = puzzle_rng(seed, index);
    let target = difficulty.min_rating();
    loop {
        let solution = random_grid(&mut rng);
        let mut puzzle = minimize(&solution, &mut rng);
        let mut current = rating(&puzzle);
        let mut steps = 0;
        while current < target && steps < STEPS_PER_CLIMB {
            let candidate = mutate(&puzzle, &solution, &mut rng);
            let r = rating(&candidate);
            if r >= current {
                puzzle = candidate;
                current = r;
            }
            steps += 1;
        }
        if current >= target {
            return Generated {
                puzzle,
                solution,
                rating: current,
            };
        }
    }
}

/// Generate `count` puzzles; `threads` (0 = all cores) only changes speed.
pub fn generate(difficulty: Difficulty, count: usize, seed: u64, threads: usize) -> Vec<Generated> {
    let work = || {
        (0..count as u64)
            .into_par_iter()
            .map(|i| generate_one(difficulty, seed, i))
            .collect()
    };
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(work),
        Err(_) => work(),
    }
}

/// Give `extra` random solution cells back to a generated puzzle (it stays
/// unique: adding clues never adds solutions) and re-rate it. Draws from the
/// puzzle's own stream after generation, so the result depends only on
/// `(seed, difficulty, index, extra)`.
pub fn with_extra_clues(g: Generated, extra: usize, seed: u64, index: u64) -> Generated {
    if extra == 0 {
        return g;
    }
    let mut rng = puzzle_rng(seed ^ EXTRA_CLUES_STREAM, index);
    let mut puzzle = g.puzzle;
    let blanks: Vec<usize> = (0..CELLS).filter(|&c| puzzle[c] == 0).collect();
    for &cell in blanks.choose_multiple(&mut rng, extra) {
        puzzle[cell] = g.solution[cell];
    }
    Generated {
        rating: rating(&puzzle),
        puzzle,
        solution: g.solution,
    }
}

/// Separates the extra-clue draws from the generation streams.
const EXTRA_CLUES_STREAM: u64 = 0xc1e5_5eed_0000_0001;

#[cfg(test)]
mod tests {
    use super::super::grid::{agrees_with, clue_count, is_solved_grid};
    use super::*;
    use proptest::prelude::*;

    fn assert_valid(g: &Generated) {
        assert!(is_solved_grid(&g.solution));
        assert!(agrees_with(&g.puzzle, &g.solution));
        let analysis = analyze(&g.puzzle);
        assert_eq!(analysis.outcome, Outcome::Unique(g.solution));
        assert_eq!(analysis.guesses, g.rating);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        #[test]
        fn easy_puzzles_are_unique_and_minimal(seed in any::<u64>()) {
            let g = generate_one(Difficulty::Easy, seed, 0);
            assert_valid(&g);
            // Minimal: removing any clue breaks uniqueness.
            for cell in (0..CELLS).filter(|&c| g.puzzle[c] != 0) {
                let mut fewer = g.puzzle;
                fewer[cell] = 0;
                prop_assert_eq!(analyze(&fewer).outcome, Outcome::Multiple);
            }
            prop_assert!(clue_count(&g.puzzle) >= 17);
        }
    }

    #[test]
    fn hard_puzzles_reach_their_threshold() {
        let g = generate_one(Difficulty::Hard, 3, 0);
        assert_valid(&g);
        assert!(g.rating >= Difficulty::Hard.min_rating());
    }

    #[test]
    fn extra_clues_keep_the_solution_and_uniqueness() {
        let g = generate_one(Difficulty::Easy, 5, 0);
        let more = with_extra_clues(g.clone(), 10, 5, 0);
        assert_valid(&more);
        assert_eq!(clue_count(&more.puzzle), clue_count(&g.puzzle) + 10);
        assert_eq!(more.solution, g.solution);
        assert_eq!(with_extra_clues(g.clone(), 0, 5, 0), g);
    }

    #[test]
    fn output_does_not_depend_on_threads() {
        let one = generate(Difficulty::Easy, 4, 11, 1);
        let two = generate(Difficulty::Easy, 4, 11, 2);
        assert_eq!(one, two);
        assert_eq!(one[2], generate_one(Difficulty::Easy, 11, 2));
        assert_ne!(one[0].solution, one[1].solution);
    }
}
