//! `envgen`: parse the command line, run it, map the outcome to an exit code.

use std::io::Write;

use clap::Parser;

fn main() {
    envgen_experiments::memory::keep_freed_memory();
    envgen_experiments::kernel_cache::register_autotune_records(envgen::warmup::AUTOTUNE_RECORDS);
    let cli = envgen::cli::Cli::parse();
    envgen::logging::init(cli.verbose);
    let code = match envgen::cli::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            // Best effort: a closed stderr must not turn an error into a panic.
            let _ = writeln!(std::io::stderr(), "error: {}", envgen::error::render(&err));
            envgen::error::exit_code_of(&err)
        }
    };
    std::process::exit(code);
}
