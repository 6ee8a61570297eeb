//! `envgen sudoku …`

use crate::error::{not_yet, Result};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Solve puzzles (81-character strings, '.' or '0' for blanks).
    Solve { puzzles: Vec<String> },
}

pub fn execute(_cmd: Command) -> Result<i32> {
    Err(not_yet("sudoku", "issue #3 (HRM on Sudoku)"))
}
