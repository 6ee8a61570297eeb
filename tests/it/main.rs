//! envgen's integration tests: one test binary, one module per area (each
//! was its own binary before, linking envgen, the experiments and Burn
//! once more). Run an area with `cargo test --test it doctor_cli::`, one
//! test with `cargo test --test it gpt2_cli::sigint_checkpoints_and_exits_130`.
//!
//! Helpers shared by several areas live in [`common`]. The areas that train,
//! build images or use Docker or Slurm take turns ([`common::turns`]): each
//! runs beside itself only, as when it was a binary of its own.
//! `cargo test --test it doctor_` would also pick `images::…_runs_doctor_…`:
//! name an area with its `::`.

mod common;

mod cli_conventions;
mod cuda_standin;
mod distributed_cli;
mod docs_commands;
mod doctor_answer;
mod doctor_cli;
mod doctor_kb;
mod doctor_parsers;
mod fresh_clone;
mod generate_bench;
mod gpt2_cli;
mod gpt2_data_cli;
mod gpt2_hf;
mod gpu_check;
mod hostile_cli;
mod hrm_cli;
mod image_requirements;
mod images;
mod io_errors_cli;
mod layering;
mod llama_hf;
mod nvml_standin;
mod portable_binary;
mod precision_cli;
mod quantize_cli;
mod report_cli;
mod rft_chat;
mod rft_cli;
mod rft_gpt2_hf;
mod rft_llama;
mod run_docker;
mod run_slurm;
mod runs_cli;
mod runs_ux;
mod runs_watch;
mod slurm;
mod sudoku_cli;
mod tensorboard_cli;
mod toolchain;
mod tune_cli;
mod user_command;
mod user_command_docker;
mod user_command_knobs;
mod user_command_slurm;
mod user_command_torch;
