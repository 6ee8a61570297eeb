//! A user's own command (`envgen run -- CMD`): natively, in Docker, through
//! Slurm, with its knobs and torch preflight.

pub mod personas;
pub mod user_command;
pub mod user_command_docker;
pub mod user_command_knobs;
pub mod user_command_slurm;
pub mod user_command_torch;
