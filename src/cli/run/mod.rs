//! `envgen run EXP`: resolve the science config, create the run directory,
//! then train here (native), in a Docker container, or in a Slurm job (or a
//! job array for `--sweep`). Launched runs get their directory from this
//! process and train into it with `run EXP --launched --resume DIR`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use envgen_experiments::backend::{self, BackendChoice};
use envgen_experiments::engine::{self, rundir, Manifest, Profile, RunControl};
use envgen_experiments::registry::{self, Experiment, ResolvedConfig};
use serde_json::{json, Map, Value};

use crate::error::{Result, UserError};
use crate::host::Host;
use crate::launch::auto::{self, Decision, Place};
use crate::launch::docker::GpuRequest;
use crate::launch::ranks::WorldPlan;
use crate::launch::slurm::{Runtime, Sweep};
use crate::launch::{docker_job, slurm_job, RunOutcome};
use crate::profiles::{HardwareChoice, Precision, Profiles};
use crate::runs::gpu_sampler::GpuSampler;

/// Exit code of a run stopped by SIGINT/SIGTERM (128 + SIGINT), after its checkpoint.
mod docker;
mod dry_run;
mod here;
mod ranks;
mod setup;
mod slurm;

use docker::*;
use dry_run::*;
pub(crate) use dry_run::{check_data_files, native_backend_plan};
use here::*;
use ranks::*;
use setup::*;
use slurm::*;

pub const EXIT_INTERRUPTED: i32 = 130;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, rft or quantize.
    pub experiment: String,
    #[arg(long, conflicts_with = "config")]
    pub preset: Option<String>,
    /// A science config file (TOML) instead of a preset.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one config key, e.g. --set optim.lr=3e-4; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    #[arg(long = "where", value_enum, default_value = "native")]
    pub location: Where,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// Rows per forward/backward pass (a hardware knob: gradient accumulation
    /// keeps the global batch, hence the science, unchanged).
    #[arg(long, value_name = "N")]
    pub micro_batch: Option<usize>,
    /// CPU threads for tensor work (a hardware knob, recorded in the
    /// manifest; default: every core this process may use).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// What the arithmetic runs in (a hardware knob, recorded in the
    /// manifest; default: the hardware profile's). bf16/fp16: mixed
    /// precision with f32 master weights; fp16 adds loss scaling.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Hardware profile from env/profiles.toml (default: chosen from the host's GPU).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Parent directory of run directories.
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub out: PathBuf,
    /// Continue an interrupted run from its last checkpoint (from step 0
    /// when it has none yet); with --where slurm|docker, launch it again.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["preset", "config", "overrides", "sweep"])]
    pub resume: Option<PathBuf>,
    /// One run per value of a config key, as a Slurm job array, e.g.
    /// --sweep train.seed=1,2,3 (needs --where slurm).
    #[arg(long, value_name = "KEY=V1,V2,…")]
    pub sweep: Option<String>,
    /// Slurm: submit the job (or array) and return without following it.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Test hook: stop (checkpoint, status interrupted, exit 130) after N steps.
    #[arg(long, value_name = "N", hide = true)]
    pub stop_after: Option<u64>,
    /// Set by launchers: this process runs in a Slurm job or a container,
    /// in the run directory given with --resume that the launcher prepared.
    #[arg(long, hide = true, requires = "resume")]
    pub launched: bool,
    /// Re-create the run in RUN_DIR (its config.toml and preset): `envgen rerun`.
    #[arg(long, value_name = "RUN_DIR", hide = true, conflicts_with_all = ["preset", "config", "overrides", "resume", "sweep"])]
    pub from_run: Option<PathBuf>,
    /// Check every flag, the config, the hardware profile and the data
    /// files as the run would, print the plan and exit: no run directory,
    /// no image, no data, no GPU.
    #[arg(long, conflicts_with = "launched")]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

/// Where-specific flags: the image, the Slurm resources and runtime, GPUs.
/// They are recorded in the manifest (`launch_args`) so `envgen rerun`
/// launches the same way.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LaunchArgs {
    /// Docker: the image to run (default: the profile image for the backend,
    /// built on demand). Slurm: with --container, the charliecloud image
    /// directory, the Apptainer SIF, or the pyxis image reference.
    #[arg(long, value_name = "REF|PATH", env = "ENVGEN_RUN_IMAGE")]
    pub image: Option<String>,
    /// Slurm: run envgen natively on the node (default) or in a container.
    #[arg(long, value_enum, default_value = "none")]
    pub container: Container,
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// Slurm time limit, e.g. 01:00:00.
    #[arg(long, value_name = "LIMIT")]
    pub time: Option<String>,
    /// Slurm: nodes to train on (data-parallel across them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: Option<u32>,
    /// Slurm: GPUs per node; with a GPU backend, one rank per GPU.
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// Data-parallel ranks (processes) in all: natively on this machine, or
    /// as Slurm tasks spread over --nodes. The global batch is split over
    /// them; the science stays the same.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: Option<u32>,
    /// Native: the GPU of each rank, e.g. --ranks 2 --devices 0,1.
    #[arg(long, value_name = "ID,…", value_delimiter = ',')]
    pub devices: Vec<String>,
    #[arg(long, value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Slurm memory per node, e.g. 32G.
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Docker: GPUs for the container: all, a count, or device IDs (0,2 or UUIDs).
    #[arg(long, value_name = "all|N|ID,…")]
    pub gpus: Option<String>,
    /// Docker: request GPUs as CDI devices (nvidia.com/gpu=…).
    #[arg(long)]
    pub cdi: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Container {
    #[default]
    None,
    Charliecloud,
    Apptainer,
    Pyxis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Where {
    Auto,
    Native,
    Docker,
    Slurm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    Fp32,
    Tf32,
    Bf16,
    Fp16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Tf32 => Precision::Tf32,
            PrecisionArg::Bf16 => Precision::Bf16,
            PrecisionArg::Fp16 => Precision::Fp16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    Cpu,
    Cuda,
}

impl From<Backend> for BackendChoice {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Auto => BackendChoice::Auto,
            Backend::Cpu => BackendChoice::Cpu,
            Backend::Cuda => BackendChoice::Cuda,
        }
    }
}

/// The experiment called `name` (usage error listing the known ones otherwise).
pub fn find_experiment(name: &str) -> Result<&'static dyn Experiment> {
    registry::find(name)
}

/// The science config named on the command line: a config file, or a preset
/// (the experiment's default when none is named), with `--set` overrides.
pub fn resolve_config(
    experiment: &dyn Experiment,
    preset: Option<&str>,
    config: Option<&Path>,
    overrides: &[String],
) -> Result<ResolvedConfig> {
    match config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                UserError::usage(format!("cannot read config {}: {e}", path.display()))
                    .with_fix("give an existing TOML file, or use --preset")
            })?;
            experiment.resolve(&text, &path.display().to_string(), overrides)
        }
        None => experiment.resolve_preset(preset, overrides),
    }
}

/// The environment part of the manifest: version, revision, image, where
/// (and why), and the doctor's host snapshot.
pub fn manifest_environment(location: &Decision, host: &Host) -> Map<String, Value> {
    let mut env = Map::new();
    env.insert("envgen_version".into(), json!(env!("CARGO_PKG_VERSION")));
    env.insert(
        "git_revision".into(),
        json!(option_env!("ENVGEN_GIT_REVISION")),
    );
    env.insert("image".into(), Value::Null);
    env.insert("where".into(), json!(location.place.name()));
    env.insert("where_reason".into(), json!(location.reason));
    env.insert(
        "host".into(),
        serde_json::to_value(host).unwrap_or(Value::Null),
    );
    env
}

/// The hardware knobs for a new run: `--micro-batch` wins, then the hardware
/// profile for this host's GPU (or `--profile`), then the preset's hint.
fn hardware_choice(
    args: &Args,
    host: &Host,
    backend_name: &str,
    preset: Option<&str>,
) -> Result<HardwareChoice> {
    let gpu = (backend_name == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice = Profiles::load()?.choose(
        gpu,
        args.profile.as_deref(),
        args.precision.map(Precision::from),
        &args.experiment,
        preset.unwrap_or("custom"),
    )?;
    for warning in &choice.warnings {
        eprintln!("envgen: warning: {warning}");
    }
    Ok(choice)
}

/// SIGINT/SIGTERM set the flag (and print `message`): the training loop
/// finishes its step, checkpoints and stops; a launcher stops what it launched.
pub fn install_stop_handler(message: &'static str) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            eprintln!("envgen: {message}");
            flag.store(true, Ordering::SeqCst);
        });
    });
    stop
}

pub fn execute(args: Args) -> Result<i32> {
    let experiment = find_experiment(&args.experiment)?;
    if args.launched {
        // Inside the Slurm job or the container: train into the prepared directory.
        let decision = Decision {
            place: Place::Native,
            reason: "launched".into(),
        };
        return run_here(&args, experiment, &decision);
    }
    let decision = decide_where(&args)?;
    let sweep = args.sweep.as_deref().map(Sweep::parse).transpose()?;
    if sweep.is_some() && decision.place != Place::Slurm {
        return Err(UserError::usage(format!(
            "--sweep fans out a Slurm job array, but this run goes to {} ({})",
            decision.place.name(),
            decision.reason
        ))
        .with_fix(
            "add --where slurm on a Slurm login node, or run the values one by one with --set",
        )
        .into());
    }
    let world = world_plan(&args, experiment, decision.place)?;
    if args.dry_run {
        return dry_run(&args, experiment, &decision, sweep.as_ref(), &world);
    }
    match decision.place {
        Place::Native if world.size > 1 => run_ranks(&args, experiment, &decision, &world),
        Place::Native => run_here(&args, experiment, &decision),
        Place::Slurm => run_slurm(&args, experiment, &decision, sweep.as_ref(), &world),
        Place::Docker => run_docker(&args, experiment, &decision),
    }
}

/// `--where`, with `auto` decided now and said on stderr.
fn decide_where(args: &Args) -> Result<Decision> {
    let given = |place: Place| Decision {
        place,
        reason: format!("--where {}", place.name()),
    };
    Ok(match args.location {
        Where::Native => given(Place::Native),
        Where::Docker => given(Place::Docker),
        Where::Slurm => given(Place::Slurm),
        Where::Auto => {
            let decision = auto::decide();
            eprintln!(
                "envgen: --where auto: {} ({})",
                decision.place.name(),
                decision.reason
            );
            Decision {
                place: decision.place,
                reason: format!("--where auto: {}", decision.reason),
            }
        }
    })
}
