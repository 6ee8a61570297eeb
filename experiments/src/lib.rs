//! envgen's bundled experiments, written on Burn 0.21.
//!
//! This crate knows nothing about containers or schedulers: the same code
//! runs natively, inside a Docker image, or inside a Slurm job.

pub mod backend;
pub mod cuda_stack;
pub mod data;
pub mod engine;
pub mod error;
pub mod experiment;
pub mod fsutil;
pub mod gpt2;
pub mod hrm;
pub mod kernel_cache;
pub mod llama;
pub mod lora;
pub mod memory;
pub mod notice;
pub mod pretrained;
pub mod quant;
pub mod registry;
pub mod rft;
pub mod sampling;

pub use error::{ErrorKind, UserError};

#[cfg(test)]
mod invariance_tests;
