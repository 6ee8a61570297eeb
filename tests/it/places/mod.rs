//! Where runs go: Docker images and containers, the Slurm cluster, a fresh
//! clone building the same image.

pub mod fresh_clone;
pub mod image_requirements;
pub mod images;
pub mod run_docker;
pub mod run_slurm;
pub mod slurm;
