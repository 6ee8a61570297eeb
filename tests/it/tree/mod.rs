//! The repository's own rules: layering and import circles, the toolchain
//! floor, release binaries that start on old glibc.

pub mod layering;
pub mod portable_binary;
pub mod toolchain;
