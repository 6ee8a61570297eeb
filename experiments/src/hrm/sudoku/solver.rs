//! An exact Sudoku solver: bitmask constraint propagation plus search.
//!
//! Written for this crate rather than taken from a library because we need
//! two things the Sudoku crates do not expose together: a solution count
//! with early stop at two (the uniqueness proof) and a difficulty rating
//! defined by *our* search, so that generated puzzles and their ratings are
//! reproducible from this code alone.
//!
//! Each cell holds a `u16` mask of its remaining candidates (bit `d-1` for
//! digit `d`); a placed cell keeps exactly its digit's bit. Propagation
//! alternates two rules until neither fires:
//! * naked single — a cell with one candidate takes it, and the digit is
//!   removed from its 20 peers;
//! * hidden single — a digit that fits in only one cell of a row, column or
//!   box goes there.
//!
//! A contradiction is a cell with no candidate or a unit in which some digit
//! fits nowhere. When propagation stalls, the search branches on the unsolved
//! cell with the fewest candidates (lowest index on ties), trying its digits
//! in ascending order (or in a caller-supplied random order when generating
//! grids).
//!
//! **Rating** (`guesses`): the number of branch assignments tried beyond the
//! first candidate of each branching cell, over the whole search that finds
//! the solutions *and* proves there is no other (stopping at two). A search
//! tree whose branching nodes have `k_i` children has `1 + Σ(k_i − 1)`
//! leaves, and every leaf is a solution or a dead end; so for a puzzle with a
//! unique solution the rating equals the number of dead ends met, i.e. the
//! backtracks — the same notion as Sudoku-Extreme's tdoku rating, measured
//! with a different (weaker-propagating) solver, so the numbers are not
//! interchangeable. 0 means singles alone solve the puzzle.

use super::grid::{Grid, CELLS, PEERS, UNITS};

const ALL: u16 = 0x1ff;

/// What the search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exactly one solution.
    Unique(Grid),
    /// No solution at all.
    None,
    /// At least two solutions (the search stopped at the second).
    Multiple,
}

/// The outcome of a full search and its difficulty rating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    pub outcome: Outcome,
    /// Branch assignments beyond the first candidate (see the module docs).
    pub guesses: u32,
}

impl Analysis {
    /// The solution when it is unique.
    pub fn solution(&self) -> Option<&Grid> {
        match &self.outcome {
            Outcome::Unique(grid) => Some(grid),
            _ => None,
        }
    }
}

/// For each cell, its three units (row, column, box) as bits of a `u32`
/// indexed like [`UNITS`].
static CELL_UNITS: [u32; CELLS] = build_cell_units();

const fn build_cell_units() -> [u32; CELLS] {
    let mut out = [0u32; CELLS];
    let mut cell = 0;
    while cell < CELLS {
        let (row, col) = (cell / 9, cell % 9);
        let bx = (row / 3) * 3 + col / 3;
        out[cell] = (1 << row) | (1 << (9 + col)) | (1 << (18 + bx));
        cell += 1;
    }
    out
}

#[derive(Clone)]
struct State {
    candidates: [u16; CELLS],
    /// Cells not yet placed, one bit per cell.
    open: u128,
    /// Cells whose mask has become a single bit but are not yet placed.
    pending: [u8; CELLS],
    pending_len: u8,
    /// Units (bits as in [`UNITS`]) whose candidates changed since their
    /// last hidden-single scan: only those can hold a new hidden single or
    /// a new contradiction, so only those are scanned again.
    dirty: u32,
}

impl State {
    fn empty() -> Self {
        State {
            candidates: [ALL; CELLS],
            open: (1u128 << CELLS) - 1,
            pending: [0; CELLS],
            pending_len: 0,
            dirty: (1 << 27) - 1,
        }
    }

    /// Load the givens; `None` when two givens contradict each other.
    fn from_puzzle(puzzle: &Grid) -> Option<Self> {
        let mut state = State::empty();
        for (cell, &digit) in puzzle.iter().enumerate() {
            if digit != 0 && !state.restrict(cell, 1 << (digit - 1)) {
                return None;
            }
        }
        Some(state)
    }

    fn is_open(&self, cell: usize) -> bool {
        self.open & (1u128 << cell) != 0
    }

    /// Narrow `cell` to `mask` (a subset of its candidates); `false` on contradiction.
    fn restrict(&mut self, cell: usize, mask: u16) -> bool {
        let narrowed = self.candidates[cell] & mask;
        if narrowed == 0 {
            return false;
        }
        if narrowed != self.candidates[cell] {
            self.candidates[cell] = narrowed;
            self.dirty |= CELL_UNITS[cell];
            if narrowed.is_power_of_two() {
                self.pending[self.pending_len as usize] = cell as u8;
                self.pending_len += 1;
            }
        }
        true
    }

    /// Place every pending single and remove its digit from the peers.
    fn place_pending(&mut self) -> bool {
        while self.pending_len > 0 {
            self.pending_len -= 1;
            let cell = self.pending[self.pending_len as usize] as usize;
            if !self.is_open(cell) {
                continue;
            }
            let bit = self.candidates[cell];
            self.open &= !(1u128 << cell);
            for &peer in &PEERS[cell] {
                let peer = peer as usize;
                let mask = self.candidates[peer];
                if mask & bit != 0 {
                    let rest = mask & !bit;
                    if rest == 0 {
                        return false;
                    }
                    self.candidates[peer] = rest;
                    self.dirty |= CELL_UNITS[peer];
                    if rest.is_power_of_two() {
                        self.pending[self.pending_len as usize] = peer as u8;
                        self.pending_len += 1;
                    }
                }
            }
        }
        true
    }

    /// Scan one unit: a digit that fits nowhere is a contradiction, a digit
    /// that fits in one open cell only goes there.
    fn hidden_singles(&mut self, unit: &[u8; 9]) -> bool {
        let (mut once, mut twice, mut fixed) = (0u16, 0u16, 0u16);
        for &cell in unit {
            let mask = self.candidates[cell as usize];
            twice |= once & mask;
            once |= mask;
            if !self.is_open(cell as usize) {
                fixed |= mask;
            }
        }
        if once != ALL {
            return false; // some digit fits nowhere in this unit
        }
        let mut hidden = once & !twice & !fixed;
        while hidden != 0 {
            let bit = hidden & hidden.wrapping_neg();
            hidden &= hidden - 1;
            for &cell in unit {
                if self.candidates[cell as usize] & bit != 0 {
                    if !self.restrict(cell as usize, bit) {
                        return false;
                    }
                    break;
                }
            }
        }
        true
    }

    /// Naked and hidden singles to a fixed point; `false` on contradiction.
    /// The fixed point does not depend on the order the rules fire in (both
    /// only remove candidates), so scanning just the dirty units reaches the
    /// same state, and the same search tree, as scanning all of them.
    fn propagate(&mut self) -> bool {
        loop {
            if !self.place_pending() {
                return false;
            }
            if self.open == 0 || self.dirty == 0 {
                return true;
            }
            let unit = self.dirty.trailing_zeros() as usize;
            self.dirty &= self.dirty - 1;
            if !self.hidden_singles(&UNITS[unit]) {
                return false;
            }
        }
    }

    /// The open cell with the fewest candidates (lowest index on ties).
    fn branch_cell(&self) -> usize {
        let mut best = usize::MAX;
        let mut best_count = u32::MAX;
        let mut open = self.open;
        while open != 0 {
            let cell = open.trailing_zeros() as usize;
            open &= open - 1;
            let count = self.candidates[cell].count_ones();
            if count < best_count {
                best_count = count;
                best = cell;
                if count == 2 {
                    break;
                }
            }
        }
        best
    }

    fn grid(&self) -> Grid {
        let mut grid = [0u8; CELLS];
        for (cell, &mask) in self.candidates.iter().enumerate() {
            grid[cell] = mask.trailing_zeros() as u8 + 1;
        }
        grid
    }
}

struct Search<'a> {
    solutions: u32,
    limit: u32,
    first: Option<Grid>,
    guesses: u32,
    /// When set, digits at a branch are tried in this permuted order.
    digit_order: Option<&'a mut dyn FnMut(&mut [u8])>,
}

impl Search<'_> {
    fn run(&mut self, mut state: State) {
        if !state.propagate() {
            return;
        }
        if state.open == 0 {
            self.solutions += 1;
            if self.first.is_none() {
                self.first = Some(state.grid());
            }
            return;
        }
        let cell = state.branch_cell();
        let mask = state.candidates[cell];
        let mut digits = [0u8; 9];
        let mut n = 0;
        for d in 0..9u8 {
            if mask & (1 << d) != 0 {
                digits[n] = d;
                n += 1;
            }
        }
        if let Some(order) = self.digit_order.as_mut() {
            order(&mut digits[..n]);
        }
        for (tried, &d) in digits[..n].iter().enumerate() {
            if tried > 0 {
                self.guesses += 1;
            }
            let mut child = state.clone();
            if child.restrict(cell, 1 << d) {
                self.run(child);
            }
            if self.solutions >= self.limit {
                return;
            }
        }
    }
}

/// Solve `puzzle`, proving uniqueness (the search stops at a second solution).
///
/// Givens that contradict each other give `Outcome::None`; callers that must
/// tell malformed input from an unsolvable puzzle check
/// [`super::grid::check_givens`] first.
pub fn analyze(puzzle: &Grid) -> Analysis {
    let Some(state) = State::from_puzzle(puzzle) else {
        return Analysis {
            outcome: Outcome::None,
            guesses: 0,
        };
    };
    let mut search = Search {
        solutions: 0,
        limit: 2,
        first: None,
        guesses: 0,
        digit_order: None,
    };
    search.run(state);
    let outcome = match (search.solutions, search.first) {
        (1, Some(grid)) => Outcome::Unique(grid),
        (0, _) => Outcome::None,
        _ => Outcome::Multiple,
    };
    Analysis {
        outcome,
        guesses: search.guesses,
    }
}

/// Whether `puzzle` has exactly one solution.
pub fn is_unique(puzzle: &Grid) -> bool {
    matches!(analyze(puzzle).outcome, Outcome::Unique(_))
}

/// One solution of `puzzle` (not checked for uniqueness), trying the digits
/// of every branch in the order `order` leaves them; used to draw random
/// complete grids.
pub fn first_solution(puzzle: &Grid, order: &mut dyn FnMut(&mut [u8])) -> Option<Grid> {
    let state = State::from_puzzle(puzzle)?;
    let mut search = Search {
        solutions: 0,
        limit: 1,
        first: None,
        guesses: 0,
        digit_order: Some(order),
    };
    search.run(state);
    search.first
}

#[cfg(test)]
mod tests {
    use super::super::grid::{agrees_with, is_solved_grid, parse_cells, parse_grid};
    use super::*;

    /// A well-known newspaper-style puzzle solved by singles alone.
    const EASY: &str =
        "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79";
    /// Arto Inkala's 2012 "world's hardest Sudoku" (widely published, 21 clues).
    const HARD: &str =
        "8..........36......7..9.2...5...7.......457.....1...3...1....68..85...1..9....4..";

    #[test]
    fn singles_solve_the_easy_puzzle_without_guessing() {
        let puzzle = parse_grid(EASY).unwrap();
        let analysis = analyze(&puzzle);
        let solution = analysis.solution().expect("unique");
        assert!(is_solved_grid(solution));
        assert!(agrees_with(&puzzle, solution));
        assert_eq!(&super::super::grid::to_line(solution)[..9], "534678912");
        assert_eq!(analysis.guesses, 0);
    }

    #[test]
    fn hard_puzzle_needs_search_and_is_unique() {
        let puzzle = parse_grid(HARD).unwrap();
        let analysis = analyze(&puzzle);
        let solution = analysis.solution().expect("unique");
        assert!(is_solved_grid(solution));
        assert!(agrees_with(&puzzle, solution));
        assert_eq!(&super::super::grid::to_line(solution)[..9], "812753649");
        assert!(analysis.guesses > 0, "rating {}", analysis.guesses);
    }

    #[test]
    fn empty_and_underdetermined_grids_have_multiple_solutions() {
        assert_eq!(analyze(&[0; CELLS]).outcome, Outcome::Multiple);
        // Blank a "deadly rectangle": rows r1,r2 in one band, columns c1,c2
        // in different stacks, holding a,b / b,a. Swapping a and b in those
        // four cells gives a second valid grid.
        let puzzle = parse_grid(EASY).unwrap();
        let mut solution = *analyze(&puzzle).solution().unwrap();
        let mut found = false;
        'outer: for r1 in 0..9 {
            for r2 in (r1 + 1)..(r1 / 3 * 3 + 3) {
                for c1 in 0..9 {
                    for c2 in (c1 / 3 * 3 + 3)..9 {
                        let (a, b) = (solution[r1 * 9 + c1], solution[r1 * 9 + c2]);
                        if solution[r2 * 9 + c1] == b && solution[r2 * 9 + c2] == a {
                            for cell in [r1 * 9 + c1, r1 * 9 + c2, r2 * 9 + c1, r2 * 9 + c2] {
                                solution[cell] = 0;
                            }
                            found = true;
                            break 'outer;
                        }
                    }
                }
            }
        }
        assert!(found, "the solution has a swappable rectangle");
        assert_eq!(analyze(&solution).outcome, Outcome::Multiple);
    }

    #[test]
    fn unsolvable_puzzle_is_reported() {
        // Row 1 leaves only cell (1,9) open, and digit 9 — its only
        // candidate — is already in column 9 further down. No two givens
        // clash, yet there is no solution.
        let mut text = String::from("12345678.");
        text.push_str(&".".repeat(8));
        text.push('9');
        text.push_str(&".".repeat(63));
        let puzzle = parse_grid(&text).unwrap();
        assert_eq!(analyze(&puzzle).outcome, Outcome::None);
        // Contradictory givens are also "no solution" for the solver.
        let clash = parse_cells(&format!("11{}", ".".repeat(79))).unwrap();
        assert_eq!(analyze(&clash).outcome, Outcome::None);
    }

    #[test]
    fn random_order_fills_an_empty_grid() {
        let mut flip = |digits: &mut [u8]| digits.reverse();
        let grid = first_solution(&[0; CELLS], &mut flip).unwrap();
        assert!(is_solved_grid(&grid));
        assert_eq!(grid[0], 9, "reversed order tries 9 first");
    }
}
