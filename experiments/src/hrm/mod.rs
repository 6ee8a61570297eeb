//! HRM (Hierarchical Reasoning Model) on Sudoku.

pub mod act;
pub mod config;
pub mod data;
pub mod loss;
pub mod model;
pub mod optim;
pub mod run;
pub mod sudoku;
pub mod train;

#[cfg(test)]
pub(crate) mod tests;
