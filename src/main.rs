//! `envgen`: parse the command line, run it, map the outcome to an exit code.

fn main() {
    envgen_experiments::memory::keep_freed_memory();
    envgen_experiments::kernel_cache::register_autotune_records(envgen::warmup::AUTOTUNE_RECORDS);
    let cli = envgen::cli::parse();
    envgen::output::set_quiet(cli.quiet);
    if cli.quiet {
        // Native ranks and other child envgens read the flag from here.
        std::env::set_var("ENVGEN_QUIET", "1");
    }
    envgen::logging::init(cli.verbose);
    let code = match envgen::cli::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            envgen::error::eprint_error(&err);
            envgen::error::exit_code_of(&err)
        }
    };
    std::process::exit(code);
}
