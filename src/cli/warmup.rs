//! `envgen warmup EXP --preset P [--target GPU…]`: compile once, before the
//! run. A first CUDA run compiles every kernel with NVRTC (one at a time:
//! minutes) and autotunes its matmuls; warmup does the compiling ahead, into
//! the kernel cache (`~/.cache/envgen/cubecl/<GPU>-sm<cc>`, see
//! `envgen_experiments::kernel_cache`), on this machine's GPU or, with
//! `--target`, for GPU models this machine does not have (a login node, CI,
//! an image build). The work is `crate::warmup`; this parses and prints.

use crate::compat::{devices, KnowledgeBase};
use crate::error::{Result, UserError};
use crate::warmup::{self, Length, WarmupRequest};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, rft or quantize.
    pub experiment: String,
    /// The preset whose kernels to compile (default: the experiment's default preset).
    #[arg(long)]
    pub preset: Option<String>,
    /// Compile for this GPU model without it (repeatable): a name from
    /// env/gpu_devices.toml or env/gpus.toml (`h100`, `a100-80gb`, `A30`),
    /// each board variant of it; needs NVRTC and the CUDA headers, no GPU.
    #[arg(long, value_name = "GPU")]
    pub target: Vec<String>,
    /// Compile for every GPU model of this SM that envgen has properties for
    /// (`90a`, `sm_80`, `8.9`); repeatable, with or instead of --target.
    #[arg(long, value_name = "SM")]
    pub sm: Vec<String>,
    /// A precision the real runs will use (repeatable; each compiles its own
    /// kernels). Default: the hardware profile's for each GPU.
    #[arg(long, value_enum)]
    pub precision: Vec<super::run::PrecisionArg>,
    /// The micro-batch the real runs will use (shapes are part of autotuning;
    /// default: the hardware profile's).
    #[arg(long, value_name = "N", value_parser = super::run::at_least_one)]
    pub micro_batch: Option<usize>,
    /// Training steps to run (every kernel of a step is compiled in the
    /// first): a whole run of N steps where the preset counts in steps
    /// (`train.steps`: its final evaluation is compiled too), else N steps
    /// and a stop.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub steps: u64,
    /// A config override for the warming runs, as in `envgen run --set`
    /// (e.g. `data.source=generated` where the data is elsewhere: kernels
    /// depend on shapes, not on the tokens).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Targets compiled at once (default: the CPU cores).
    #[arg(long, value_name = "N", value_parser = super::run::at_least_one)]
    pub jobs: Option<usize>,
    /// Keep --target kernels as PTX (default: assembled to cubins with
    /// ptxas when it is found, so the driver compiles nothing either).
    #[arg(long)]
    pub no_cubin: bool,
    /// Print what was warmed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(args: Args) -> Result<i32> {
    let req = request(&args)?;
    if req.targets.is_empty() {
        let (Length::Steps(steps) | Length::StopAfter(steps)) = req.length;
        crate::output::notice!(
            "envgen warmup: {steps} steps of {}{} on this machine's GPU (the first run compiles every kernel)",
            req.experiment,
            preset_text(&req)
        );
        return warmup::warm_local(&req);
    }
    let names: Vec<&str> = req.targets.iter().map(|d| d.name.as_str()).collect();
    crate::output::notice!(
        "envgen warmup: {}{} for {} on envgen's stand-in driver (kernels compiled, not run), {} at a time",
        req.experiment,
        preset_text(&req),
        names.join(", "),
        req.jobs.min(req.targets.len())
    );
    let mut warmed = Vec::new();
    let mut code = 0;
    for outcome in warmup::warm_targets(&req)? {
        match outcome {
            Ok(w) => {
                eprintln!(
                    "envgen warmup: {} (sm {}): {} kernels compiled{} in {:.1} s -> {}",
                    w.device,
                    w.compute_capability,
                    w.compiled,
                    w.arch
                        .as_ref()
                        .map(|a| format!(", {} assembled for {a}", w.cubins))
                        .unwrap_or_default(),
                    w.seconds,
                    w.cache.display()
                );
                warmed.push(w);
            }
            Err(e) => {
                crate::error::eprint_error(&e);
                code = code.max(crate::error::exit_code_of(&e));
            }
        }
    }
    if args.json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&warmed)?);
    }
    Ok(code)
}

fn preset_text(req: &WarmupRequest) -> String {
    req.preset
        .as_deref()
        .map(|p| format!(" --preset {p}"))
        .unwrap_or_default()
}

/// The flags, checked once.
fn request(args: &Args) -> Result<WarmupRequest> {
    if args.steps == 0 {
        return Err(
            UserError::usage("--steps 0: warmup needs at least one training step")
                .with_fix("use --steps 1 or more")
                .into(),
        );
    }
    let kb = KnowledgeBase::embedded();
    let mut targets: Vec<&'static devices::DeviceSpec> = Vec::new();
    for query in &args.target {
        targets.extend(devices::for_target(kb, query)?);
    }
    for sm in &args.sm {
        let digits = sm.trim().trim_start_matches("sm_").trim_end_matches('a');
        let query = format!("sm_{digits}");
        targets.extend(devices::for_target(kb, &query).map_err(|_| {
            UserError::usage(format!("--sm {sm}: envgen has no GPU model of that SM")).with_fix(
                "give an SM such as 80, 86, 89, 90a, 100 or 120, or name a GPU with --target",
            )
        })?);
    }
    let mut seen = std::collections::HashSet::new();
    targets.retain(|d| seen.insert(d.name.as_str()));
    for set in &args.sets {
        if !set.contains('=') {
            return Err(UserError::usage(format!("--set {set}: expected KEY=VALUE"))
                .with_fix("e.g. --set data.source=generated")
                .into());
        }
    }
    // The preset and overrides must resolve (exit 2 here, not in a child);
    // a preset counted in steps runs whole.
    let experiment = envgen_experiments::registry::find(&args.experiment)?;
    let config = experiment.resolve_preset(args.preset.as_deref(), &args.sets)?;
    let length = match config.science.get("train").and_then(|t| t.get("steps")) {
        Some(toml::Value::Integer(_)) => Length::Steps(args.steps),
        _ => Length::StopAfter(args.steps),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(WarmupRequest {
        experiment: args.experiment.clone(),
        preset: args.preset.clone(),
        targets,
        precisions: args.precision.iter().map(|&p| p.into()).collect(),
        micro_batch: args.micro_batch,
        length,
        sets: args.sets.clone(),
        jobs: args.jobs.unwrap_or(cores),
        cubin: !args.no_cubin,
    })
}
