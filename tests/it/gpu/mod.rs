//! The CUDA path without a GPU: the stand-in driver runs the backend's host
//! path; `bench/gpu-check.sh`'s pieces.

pub mod cuda_standin;
pub mod gpu_check;
