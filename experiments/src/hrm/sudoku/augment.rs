//! HRM's Sudoku augmentation: transforms that map every valid grid to a
//! valid grid (and so keep a puzzle's solution count).
//!
//! One draw, as in HRM's dataset builder: a permutation of the digits 1..9
//! (blanks stay blank); a transpose with probability ½; a permutation of the
//! three bands and of the rows within each band; a permutation of the three
//! stacks and of the columns within each stack. The same transform is
//! applied to the puzzle and its solution. There are 9!·6⁸·2 such transforms.
//!
//! A transform is stored as a cell permutation plus a digit map, which makes
//! inverting and checking it trivial.

use rand::seq::SliceRandom;
use rand::Rng;

use super::grid::{agrees_with, is_solved_grid, Grid, CELLS};
use super::solver::{analyze, Outcome};

/// A validity-preserving transform of the Sudoku grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// `output[i] = digits[input[source[i]]]`.
    source: [u8; CELLS],
    /// Digit map; `digits[0] == 0` keeps blanks blank.
    digits: [u8; 10],
}

/// A permutation of 0..9 that moves whole groups of three and permutes
/// inside each group (bands/rows or stacks/columns).
fn banded_permutation<R: Rng + ?Sized>(rng: &mut R) -> [u8; 9] {
    let mut groups = [0u8, 1, 2];
    groups.shuffle(rng);
    let mut order = [0u8; 9];
    for (slot, &group) in groups.iter().enumerate() {
        let mut within = [0u8, 1, 2];
        within.shuffle(rng);
        for (k, &w) in within.iter().enumerate() {
            order[slot * 3 + k] = group * 3 + w;
        }
    }
    order
}

impl Transform {
    /// The transform that changes nothing.
    pub fn identity() -> Self {
        let mut source = [0u8; CELLS];
        for (i, s) in source.iter_mut().enumerate() {
            *s = i as u8;
        }
        let mut digits = [0u8; 10];
        for (d, m) in digits.iter_mut().enumerate() {
            *m = d as u8;
        }
        Transform { source, digits }
    }

    /// Draw one transform the way HRM's builder does.
    pub fn random<R: Rng + ?Sized>(rng: &mut R) -> Self {
        let mut perm = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        perm.shuffle(rng);
        let mut digits = [0u8; 10];
        digits[1..].copy_from_slice(&perm);
        let transpose = rng.random_bool(0.5);
        let rows = banded_permutation(rng);
        let cols = banded_permutation(rng);
        let mut source = [0u8; CELLS];
        for r in 0..9 {
            for c in 0..9 {
                // Row r of the output is row rows[r] of the (transposed) input.
                let (sr, sc) = (rows[r] as usize, cols[c] as usize);
                let src = if transpose { sc * 9 + sr } else { sr * 9 + sc };
                source[r * 9 + c] = src as u8;
            }
        }
        Transform { source, digits }
    }

    pub fn apply(&self, grid: &Grid) -> Grid {
        let mut out = [0u8; CELLS];
        for (cell, &src) in self.source.iter().enumerate() {
            out[cell] = self.digits[grid[src as usize] as usize];
        }
        out
    }

    /// The transform that undoes this one.
    pub fn inverse(&self) -> Self {
        let mut inv = Transform::identity();
        for (cell, &src) in self.source.iter().enumerate() {
            inv.source[src as usize] = cell as u8;
        }
        for (d, &m) in self.digits.iter().enumerate() {
            inv.digits[m as usize] = d as u8;
        }
        inv
    }
}

/// Why an augmented pair was rejected (a bug, never bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AugmentError {
    #[error("the augmented solution breaks the Sudoku rules")]
    InvalidSolution,
    #[error("an augmented given disagrees with the augmented solution")]
    Inconsistent,
    #[error("the augmented puzzle does not have exactly one solution")]
    NotUnique,
}

/// Apply `t` to a puzzle and its solution and re-validate the pair: the
/// solution must be a valid grid that agrees with the puzzle's givens.
/// With `prove_unique` the solver also re-proves uniqueness (tests and debug
/// builds; the transforms preserve it, so production checks it once per
/// original instead of once per augmentation).
pub fn augment_pair(
    t: &Transform,
    puzzle: &Grid,
    solution: &Grid,
    prove_unique: bool,
) -> Result<(Grid, Grid), AugmentError> {
    let (p, s) = (t.apply(puzzle), t.apply(solution));
    if !is_solved_grid(&s) {
        return Err(AugmentError::InvalidSolution);
    }
    if !agrees_with(&p, &s) {
        return Err(AugmentError::Inconsistent);
    }
    if prove_unique && analyze(&p).outcome != Outcome::Unique(s) {
        return Err(AugmentError::NotUnique);
    }
    Ok((p, s))
}

#[cfg(test)]
mod tests {
    use super::super::grid::parse_grid;
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const PUZZLE: &str =
        "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79";

    fn pair() -> (Grid, Grid) {
        let p = parse_grid(PUZZLE).unwrap();
        let s = *analyze(&p).solution().unwrap();
        (p, s)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn transform_then_inverse_is_identity_and_keeps_validity(seed in any::<u64>()) {
            let (p, s) = pair();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let t = Transform::random(&mut rng);
            let (ap, as_) = augment_pair(&t, &p, &s, true).unwrap();
            let inv = t.inverse();
            prop_assert_eq!(inv.apply(&ap), p);
            prop_assert_eq!(inv.apply(&as_), s);
            // Blanks stay blanks, clue count is kept.
            prop_assert_eq!(ap.iter().filter(|&&d| d == 0).count(), p.iter().filter(|&&d| d == 0).count());
        }
    }

    #[test]
    fn distinct_transforms_give_distinct_valid_grids() {
        let (_, s) = pair();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let t = Transform::random(&mut rng);
            let g = t.apply(&s);
            assert!(is_solved_grid(&g));
            seen.insert(g);
        }
        // 1.2e12 transforms: 200 draws collide with negligible probability.
        assert_eq!(seen.len(), 200);
    }

    #[test]
    fn a_broken_transform_is_caught() {
        let (p, s) = pair();
        let mut t = Transform::identity();
        t.source.swap(0, 1); // swaps two cells of row 1: not a Sudoku symmetry
        let mut bad_solution = s;
        bad_solution.swap(0, 1); // 5 and 3: row 1 keeps its digits, columns 1-2 break
        assert!(augment_pair(&t, &p, &bad_solution, false).is_err());
        assert_eq!(
            augment_pair(&Transform::identity(), &p, &bad_solution, false),
            Err(AugmentError::InvalidSolution)
        );
        assert!(augment_pair(&Transform::identity(), &p, &s, true).is_ok());
    }
}
