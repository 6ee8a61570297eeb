//! Starting runs somewhere other than this process: Slurm (and, with issue
//! #5, Docker). The experiments never know which.

pub mod docker;
pub mod slurm;
