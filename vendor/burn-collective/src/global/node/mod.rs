pub mod base;
#[cfg(test)]
mod broken;
pub mod centralized;
pub mod ring;
pub mod sync;
pub mod tree;
pub mod worker;
