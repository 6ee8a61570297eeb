//! `envgen warmup EXP --preset P`: compile once. A first CUDA run compiles
//! every kernel with NVRTC (single-threaded: minutes) and autotunes its
//! matmuls; this runs a few training steps of the preset on this GPU into
//! a throwaway directory so that the kernel cache (`~/.cache/envgen/cubecl/
//! <GPU>`, see `envgen_experiments::backend::kernel_cache_dir`) holds them,
//! and the real run starts in seconds. The steps are an ordinary
//! `envgen run` in a child process: the same code path as the real run, so
//! the same kernels.

use std::path::PathBuf;
use std::time::Instant;

use crate::error::{Result, UserError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, rft or quantize.
    pub experiment: String,
    #[arg(long)]
    pub preset: Option<String>,
    /// The precision the real runs will use (each compiles its own kernels).
    #[arg(long, value_enum)]
    pub precision: Option<super::run::PrecisionArg>,
    /// The micro-batch the real runs will use (shapes are part of autotuning).
    #[arg(long, value_name = "N", value_parser = super::run::at_least_one)]
    pub micro_batch: Option<usize>,
    /// Training steps to run (every kernel of a step is compiled in the first).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub steps: u64,
}

pub fn execute(args: Args) -> Result<i32> {
    if args.steps == 0 {
        return Err(
            UserError::usage("--steps 0: warmup needs at least one training step")
                .with_fix("use --steps 1 or more")
                .into(),
        );
    }
    let scratch = tempfile::Builder::new()
        .prefix("envgen-warmup-")
        .tempdir()
        .map_err(|e| UserError::environment(format!("cannot create a scratch directory: {e}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| UserError::environment(format!("cannot find the envgen binary: {e}")))?;
    let mut child = std::process::Command::new(exe);
    child
        .args(["run", &args.experiment, "--backend", "cuda", "--stop-after"])
        .arg(args.steps.to_string())
        .arg("--out")
        .arg(scratch.path());
    if let Some(preset) = &args.preset {
        child.args(["--preset", preset]);
    }
    if let Some(precision) = args.precision {
        let name = envgen_experiments::engine::Precision::from(precision).name();
        child.args(["--precision", name]);
    }
    if let Some(n) = args.micro_batch {
        child.args(["--micro-batch", &n.to_string()]);
    }
    eprintln!(
        "envgen warmup: {} steps of {}{} on the CUDA backend (the first run compiles every kernel)",
        args.steps,
        args.experiment,
        args.preset
            .as_deref()
            .map(|p| format!(" --preset {p}"))
            .unwrap_or_default()
    );
    let started = Instant::now();
    let status = child
        .status()
        .map_err(|e| UserError::environment(format!("cannot start envgen run: {e}")))?;
    let seconds = started.elapsed().as_secs_f64();
    // `--stop-after` ends the run as interrupted: exit 130 is the success here.
    match status.code() {
        Some(0) | Some(130) => {}
        Some(code) => return Ok(code),
        None => return Ok(1),
    }
    let cache = kernel_cache();
    eprintln!(
        "envgen warmup: done in {seconds:.1} s; kernel cache {}",
        cache.map_or_else(
            || "(none: no cache folder)".into(),
            |c| c.display().to_string()
        )
    );
    Ok(0)
}

/// The cache folder the child filled (the stack is probed again here, cheaply).
fn kernel_cache() -> Option<PathBuf> {
    let stack = envgen_experiments::cuda_stack::CudaStack::probe();
    envgen_experiments::backend::kernel_cache_dir(&stack)
}
