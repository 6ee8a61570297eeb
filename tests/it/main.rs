//! envgen's integration tests: one test binary (each area was its own
//! binary once, linking envgen, the experiments and Burn once more), its
//! areas grouped by what they exercise: `cli/`, `doctor/`, `gpu/`,
//! `train/`, `rft/`, `runs/`, `places/` (Docker, Slurm, images),
//! `command/` (a user's own command) and `tree/` (the repository's rules).
//! Run a group with `cargo test --test it train::`, an area with
//! `cargo test --test it gpt2_cli::`, one test with
//! `cargo test --test it gpt2_cli::sigint_checkpoints_and_exits_130`.
//!
//! Helpers shared by several areas live in [`common`]. The areas that train,
//! build images or use Docker or Slurm take turns ([`common::turns`]): each
//! runs beside itself only, as when it was a binary of its own; their tests
//! are written `heavy_test!(name, |tmp| { … })` ([`common::heavy_test`]).
//! `cargo test --test it doctor_` would also pick `images::…_runs_doctor_…`:
//! name an area with its `::`.

mod common;

mod cli;
mod command;
mod doctor;
mod gpu;
mod places;
mod rft;
mod runs;
mod train;
mod tree;
