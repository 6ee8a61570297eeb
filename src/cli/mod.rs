//! The command line: one file per subcommand, each with its `Args` and an
//! `execute` that returns the exit code. Parsing is clap's; bad flags and
//! values exit 2 with clap's message naming the value.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::error::Result;

pub mod completions;
pub mod doctor;
pub mod eval;
pub mod experiments;
pub mod export;
pub mod image;
pub mod rerun;
pub mod run;
pub mod runs;
pub mod sample;
pub mod sudoku;
pub mod tune;
pub mod version;
pub mod warmup;

/// Reproducible deep-learning research environments on any NVIDIA machine.
#[derive(Debug, Parser)]
#[command(name = "envgen", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug; or ENVGEN_LOG=filter).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// No progress bars or informational lines on stderr; errors,
    /// warnings and the output asked for still print.
    #[arg(short, long, global = true, env = "ENVGEN_QUIET", value_parser = clap::builder::BoolishValueParser::new())]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process and matched at once: boxing `run`'s many flags
// would only add a dereference.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Probe the host and say, per GPU and image, whether it will really run.
    Doctor(doctor::Args),
    /// Pinned container images: list, render, build, lock, verify, export.
    #[command(subcommand)]
    Image(image::Command),
    /// The bundled experiments and their presets.
    #[command(subcommand)]
    Experiments(experiments::Command),
    /// Run an experiment natively, in Docker, or through Slurm.
    Run(run::Args),
    /// Find the fastest micro-batch that fits this machine; write it to
    /// the user's hardware profile file.
    ///
    /// `envgen probe`, its old name, still works: a hidden alias until the
    /// next release.
    #[command(alias = "probe")]
    Tune(tune::Args),
    /// Inspect, compare and report finished or running runs.
    #[command(subcommand)]
    Runs(runs::Command),
    /// Re-create a run from its manifest (same science config, same image).
    Rerun(rerun::Args),
    /// Sample text from a trained GPT-2 run or a Hugging Face checkpoint.
    Sample(sample::Args),
    /// Evaluate a finished GPT-2 (run or Hugging Face directory): val loss, HellaSwag.
    Eval(eval::Args),
    /// Export a run's weights to another format (`hf`: Hugging Face).
    #[command(subcommand)]
    Export(export::Command),
    /// Sudoku toolkit: solve, generate, build the HRM dataset.
    #[command(subcommand)]
    Sudoku(sudoku::Command),
    /// Compile an experiment's CUDA kernels into the kernel cache, so that
    /// its runs on this GPU start in seconds.
    Warmup(warmup::Args),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Print envgen's man page (or a subcommand's), or write them all with --dir.
    Man(completions::ManArgs),
}

/// Parse the process's arguments as [`Cli`], with the version texts of
/// [`version`]: `-V` one line, `--version` the long form, which probes
/// this machine's CUDA only when it is asked for (it loads libraries).
pub fn parse() -> Cli {
    let long = if std::env::args_os().any(|arg| arg == "--version") {
        version::long(&version::cuda_here())
    } else {
        version::long("(not probed)")
    };
    let matches = command_with_versions(long).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
}

/// [`Cli`]'s clap command with the version texts of [`version`] (the man
/// pages carry the short one too).
pub fn command_with_versions(long: String) -> clap::Command {
    // clap keeps version texts as &'static str; these live until exit anyway.
    Cli::command()
        .version(&*Box::leak(version::short().into_boxed_str()))
        .long_version(&*Box::leak(long.into_boxed_str()))
}

/// Run the parsed command; `Ok` carries the exit code (0, or 1 for a failed check).
pub fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Doctor(args) => doctor::execute(args),
        Command::Image(cmd) => image::execute(cmd),
        Command::Experiments(cmd) => experiments::execute(cmd),
        Command::Run(args) => run::execute(args),
        Command::Tune(args) => tune::execute(args),
        Command::Runs(cmd) => runs::execute(cmd),
        Command::Rerun(args) => rerun::execute(args),
        Command::Sample(args) => sample::execute(args),
        Command::Eval(args) => eval::execute(args),
        Command::Export(cmd) => export::execute(cmd),
        Command::Sudoku(cmd) => sudoku::execute(cmd),
        Command::Warmup(args) => warmup::execute(args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
    }
}

#[cfg(test)]
mod conventions_tests;
