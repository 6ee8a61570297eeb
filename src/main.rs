//! `envgen`: parse the command line, run it, map the outcome to an exit code.

use clap::Parser;

fn main() {
    envgen_experiments::memory::keep_freed_memory();
    let cli = envgen::cli::Cli::parse();
    envgen::logging::init(cli.verbose);
    let code = match envgen::cli::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", envgen::error::render(&err));
            envgen::error::exit_code_of(&err)
        }
    };
    std::process::exit(code);
}
