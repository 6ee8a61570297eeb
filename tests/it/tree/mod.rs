//! The repository's own rules: layering and import circles, the toolchain
//! floor.

pub mod layering;
pub mod toolchain;
