//! The command line's contracts: conventions (help, completions, exit codes),
//! hostile input, I/O errors, and every command the docs print.

pub mod cli_conventions;
pub mod docs_commands;
pub mod hostile_cli;
pub mod io_errors_cli;
