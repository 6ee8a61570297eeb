//! `envgen tune EXP --preset P` (called `envgen probe` before; `probe`
//! stays a hidden alias until the next release): the flags become a
//! [`TuneRequest`], `crate::tune` runs the trials and records the fastest
//! micro-batch, and this file prints what it came to.

use serde_json::json;

use super::run::{Backend, PrecisionArg};
use crate::error::Result;
use crate::profiles::{Precision, Trial};
use crate::tune::{self, TunePlan, TuneRequest, Tuned};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, … (`envgen experiments list`).
    pub experiment: String,
    /// The preset to tune (default: the experiment's default preset).
    #[arg(long)]
    pub preset: Option<String>,
    /// Override one config key (as `envgen run --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// What the trials run on: `auto` is CUDA when compiled in and usable, else the CPU.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// Precision to measure at (default: the hardware profile's).
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Micro-batches to try, ascending (default: from 1 up to the global
    /// batch, each the smallest divisor of it at least twice the last).
    #[arg(long, value_name = "M,…", value_delimiter = ',')]
    pub micro_batches: Vec<usize>,
    /// Timed steps per trial (after one warm-up step).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Cap each trial's memory, e.g. 2G or 512M (CPU: stands in for GPU memory).
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<String>,
    /// Measure only; do not write the profile file.
    #[arg(long)]
    pub measure_only: bool,
    /// Check the flags, the config, the candidates and the profile as the
    /// tuner would, print the plan and exit: no trial runs, nothing written.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(args: Args) -> Result<i32> {
    let json = args.json;
    let dry = args.dry_run;
    let plan = tune::plan(TuneRequest {
        experiment: args.experiment,
        preset: args.preset,
        overrides: args.overrides,
        backend: args.backend.into(),
        precision: args.precision.map(Precision::from),
        micro_batches: args.micro_batches,
        steps: args.steps,
        memory_limit: args.memory_limit,
        measure_only: args.measure_only,
    })?;
    if dry {
        let doc = tune::dry_run(&plan)?;
        print_dry_run(&plan, &doc, json)?;
        return Ok(0);
    }
    let tuned = tune::tune(&plan, |trial| {
        if !json {
            crate::output::notice!("envgen: tune: {}", describe(trial));
        }
    })?;
    print_tuned(&plan, &tuned, json)?;
    Ok(0)
}

/// `--dry-run`: the plan as JSON, or one sentence.
fn print_dry_run(plan: &TunePlan, doc: &serde_json::Value, json: bool) -> Result<()> {
    if json {
        crate::output::outln!("{}", serde_json::to_string_pretty(doc)?);
    } else {
        crate::output::outln!(
            "dry run: envgen would tune {}/{} (config_hash {}) on {} at {}: micro-batches {:?} of global batch {}, {} steps each; nothing was run",
            plan.experiment,
            plan.preset,
            doc["config_hash"].as_str().unwrap_or("-"),
            doc["backend"].as_str().unwrap_or("-"),
            doc["precision"].as_str().unwrap_or("-"),
            plan.candidates,
            plan.loaded.batch_size,
            plan.request.steps + 1,
        );
    }
    Ok(())
}

/// The chosen micro-batch and where it was written, as JSON or two lines.
fn print_tuned(plan: &TunePlan, tuned: &Tuned, json: bool) -> Result<()> {
    let Tuned {
        best,
        measurement,
        trials,
        written,
    } = tuned;
    if json {
        let doc = json!({
            "experiment": plan.experiment,
            "preset": plan.preset,
            "global_batch": plan.loaded.batch_size,
            "chosen": measurement,
            "profile_file": written.as_ref().map(|(p, _)| p),
            "profile": written.as_ref().map(|(_, n)| n),
        });
        crate::output::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        crate::output::outln!(
            "{}: micro-batch {} is fastest ({:.3} steps/s{}) of {} tried",
            plan.key,
            best.micro_batch,
            measurement.steps_per_s,
            best.peak_memory_mib
                .map_or(String::new(), |m| format!(", peak {m:.0} MiB")),
            trials.len()
        );
        if let Some((path, name)) = written {
            crate::output::outln!("written to profile {name} in {}", path.display());
        }
    }
    Ok(())
}

fn describe(t: &Trial) -> String {
    match (t.out_of_memory, t.steps_per_s) {
        (true, _) => format!("micro-batch {}: out of memory", t.micro_batch),
        (false, Some(s)) => format!(
            "micro-batch {}: {s:.3} steps/s{}",
            t.micro_batch,
            t.peak_memory_mib
                .map_or(String::new(), |m| format!(", peak {m:.0} MiB"))
        ),
        (false, None) => format!("micro-batch {}: no measurement", t.micro_batch),
    }
}
