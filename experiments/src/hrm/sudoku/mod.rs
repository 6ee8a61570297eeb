//! The Sudoku toolkit behind the HRM experiment.
//!
//! * [`grid`] — the 81-cell grid, parsing and the Sudoku rules;
//! * [`solver`] — exact solver with uniqueness proof and difficulty rating;
//! * [`generate`] — deterministic generator of easy, hard and extreme puzzles;
//! * [`augment`] — the HRM validity-preserving transforms;
//! * [`csvfile`] — the public Sudoku-Extreme CSV layout (`source,q,a,rating`);
//! * [`dataset`] — the `extreme-1k-aug-1000` builder and its loader;
//! * [`bench`] — solve and generation speed.

pub mod augment;
pub mod bench;
pub mod csvfile;
pub mod dataset;
pub mod generate;
pub mod grid;
pub mod solver;

pub use dataset::SudokuDataset;
pub use generate::Difficulty;
pub use grid::{parse_grid, to_line, Grid, GridError, CELLS};
pub use solver::{analyze, is_unique, Analysis, Outcome};
