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

/// Where and on what a new run is set up: the place, the host whose
/// hardware picks the profile, and the backend/device recorded for it.
struct Setup<'a> {
    decision: &'a Decision,
    host: &'a Host,
    backend: &'a str,
    device: &'a str,
    /// Tensor threads of the process that trains, when known here.
    threads: Option<usize>,
    /// Data-parallel ranks the run trains on (1: one process).
    world_size: usize,
}

/// The directory of a new run: a fresh one under --out, or one made
/// beforehand (a sweep's `<base>-sN`).
enum NewDir<'a> {
    Fresh(&'a Path),
    Made(PathBuf),
}

impl NewDir<'_> {
    fn create(self, run_id: &str) -> Result<(String, PathBuf)> {
        match self {
            NewDir::Fresh(out) => rundir::create_run_dir(out, run_id),
            NewDir::Made(dir) => {
                let id = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Ok((id, dir))
            }
        }
    }
}

/// A new run directory with config.toml and manifest.json, for a run here
/// or launched elsewhere. `extra` are overrides added to --set (a sweep value).
fn create_run(
    args: &Args,
    experiment: &dyn Experiment,
    setup: &Setup,
    extra: &[String],
    new_dir: NewDir,
) -> Result<(PathBuf, toml::Value, Profile)> {
    let Setup {
        decision,
        host,
        backend: backend_name,
        device,
        threads,
        world_size,
    } = *setup;
    let loaded = match &args.from_run {
        Some(source) => config_of_run(experiment, source)?.0,
        None => {
            let mut overrides = args.overrides.clone();
            overrides.extend(extra.iter().cloned());
            resolve_config(
                experiment,
                args.preset.as_deref(),
                args.config.as_deref(),
                &overrides,
            )?
        }
    };
    let hash = loaded.config_hash()?;
    let choice = hardware_choice(args, host, backend_name, loaded.preset.as_deref())?;
    let (micro_batch, grad_accum) = engine::split_batch(
        engine::distributed::rank_batch(loaded.batch_size, world_size)?,
        args.micro_batch
            .or(choice.micro_batch)
            .or(loaded.hardware.micro_batch),
    )?;
    let profile = Profile {
        name: Some(choice.profile.clone()),
        micro_batch,
        grad_accum,
        precision: choice.precision.name().into(),
        backend: backend_name.into(),
        device: device.into(),
        threads,
    };
    let id = rundir::new_run_id(experiment.name(), loaded.preset.as_deref(), &hash);
    let (run_id, dir) = new_dir.create(&id)?;
    std::fs::write(dir.join("config.toml"), loaded.canonical_toml()?)?;
    let mut environment = manifest_environment(decision, host);
    environment.insert("world_size".into(), json!(world_size));
    if decision.place != Place::Native || world_size > 1 {
        // Where-specific flags, so `envgen rerun` launches the same way.
        environment.insert("launch_args".into(), json!(launch_args_of(&args.launch)));
    }
    if let Some(source) = &args.from_run {
        environment.insert("rerun_of".into(), json!(source));
    }
    let manifest = Manifest {
        run_id,
        experiment: experiment.name().into(),
        preset: loaded.preset.clone(),
        config_hash: hash,
        profile: profile.clone(),
        started_at: rundir::now_rfc3339(),
        finished_at: None,
        environment,
    };
    rundir::write_json(&dir.join("manifest.json"), &manifest)?;
    Ok((dir, loaded.science, profile))
}

/// The science config and manifest of an existing run directory, checked
/// against each other (config_hash) and against the experiment.
fn config_of_run(experiment: &dyn Experiment, dir: &Path) -> Result<(ResolvedConfig, Manifest)> {
    let manifest: Manifest = rundir::read_json(&dir.join("manifest.json"))?;
    if manifest.experiment != experiment.name() {
        return Err(UserError::usage(format!(
            "{} is a `{}` run, not `{}`",
            dir.display(),
            manifest.experiment,
            experiment.name()
        ))
        .with_fix(format!(
            "envgen run {} --resume {}",
            manifest.experiment,
            dir.display()
        ))
        .into());
    }
    let config_path = dir.join("config.toml");
    let text = std::fs::read_to_string(&config_path).map_err(|e| {
        UserError::usage(format!("{}: cannot read config.toml: {e}", dir.display()))
            .with_fix("give a directory written by `envgen run`")
    })?;
    let mut loaded = experiment.resolve(&text, &config_path.display().to_string(), &[])?;
    if loaded.config_hash()? != manifest.config_hash {
        return Err(UserError::usage(format!(
            "{}: config.toml does not match the manifest's config_hash",
            dir.display()
        ))
        .with_fix("restore the original config.toml, or start a new run")
        .into());
    }
    loaded.preset = manifest.preset.clone();
    Ok((loaded, manifest))
}

/// Train in this process: a new native run, `--resume`, or (`--launched`)
/// the run a launcher prepared for this job or container.
fn run_here(args: &Args, experiment: &dyn Experiment, decision: &Decision) -> Result<i32> {
    // A rank of a data-parallel run (started by `--ranks` or srun) learns
    // its place from the environment its launcher set.
    let world = if args.launched {
        engine::World::from_env()?
    } else {
        None
    };
    if let Some(w) = &world {
        if !experiment.data_parallel() {
            return Err(not_data_parallel(experiment, w.size));
        }
        select_gpu_of_rank();
    }
    let leader = engine::distributed::writes_files(world.as_ref());
    let world_size = world.as_ref().map_or(1, |w| w.size);
    let threads = configure_threads(args.threads)?;
    let resolved = backend::resolve(args.backend.into())?;
    let host = crate::probe::probe_host();

    let (run_dir, science, profile, resume) = match &args.resume {
        Some(dir) => {
            let (loaded, mut manifest) = config_of_run(experiment, dir)?;
            let resume = dir.join("checkpoints").join("latest").is_file();
            if !resume && !args.launched {
                eprintln!(
                    "envgen: {} has no checkpoint yet: starting at step 0",
                    dir.display()
                );
            }
            let mut profile = manifest.profile.clone();
            let share = engine::distributed::rank_batch(loaded.batch_size, world_size)?;
            if args.launched && !resume {
                // First start of a launched run: its hardware is this node's
                // (or this container's), not the submitting host's.
                let choice =
                    hardware_choice(args, &host, resolved.name(), manifest.preset.as_deref())?;
                let (micro_batch, grad_accum) = engine::split_batch(
                    share,
                    args.micro_batch
                        .or(choice.micro_batch)
                        .or(loaded.hardware.micro_batch),
                )?;
                profile.name = Some(choice.profile);
                profile.micro_batch = micro_batch;
                profile.grad_accum = grad_accum;
                profile.precision = choice.precision.name().into();
            } else {
                if let Some(requested) = args.precision {
                    // A resumed run may change its precision (not its science):
                    // checkpoints hold f32 weights and moments whatever it was.
                    profile.precision = Precision::from(requested).name().into();
                }
                // ... and its world size: the split of each global batch
                // follows; the data of every step stays the same.
                let (micro_batch, grad_accum) = engine::split_batch(
                    share,
                    Some(args.micro_batch.unwrap_or(profile.micro_batch)),
                )?;
                profile.micro_batch = micro_batch;
                profile.grad_accum = grad_accum;
            }
            profile.backend = resolved.name().into();
            profile.device = resolved.device().into();
            profile.threads = Some(threads);
            if leader {
                if args.launched {
                    manifest
                        .environment
                        .insert("host".into(), serde_json::to_value(&host)?);
                }
                manifest
                    .environment
                    .insert("world_size".into(), json!(world_size));
                if let Some(w) = &world {
                    manifest
                        .environment
                        .insert("distributed".into(), distributed_record(w));
                }
                manifest.profile = profile.clone();
                rundir::write_json(&dir.join("manifest.json"), &manifest)?;
                // A stale summary (interrupted) must not describe the run while it goes on.
                let _ = std::fs::remove_file(dir.join("summary.json"));
            }
            (dir.clone(), loaded.science, profile, resume)
        }
        None => {
            let setup = Setup {
                decision,
                host: &host,
                backend: resolved.name(),
                device: resolved.device(),
                threads: Some(threads),
                world_size: 1,
            };
            let (dir, science, profile) =
                create_run(args, experiment, &setup, &[], NewDir::Fresh(&args.out))?;
            (dir, science, profile, false)
        }
    };
    if leader {
        eprintln!("envgen: run directory {}", run_dir.display());
    }

    let control = RunControl {
        run_dir: run_dir.clone(),
        micro_batch: profile.micro_batch,
        resume,
        stop_after: args.stop_after,
        stop: install_stop_handler("stopping after this step (checkpoint follows)"),
        progress: !args.json,
        precision: Precision::from_name(&profile.precision).ok_or_else(|| {
            UserError::usage(format!(
                "{}: profile.precision = {:?} is not fp32, tf32, bf16 or fp16",
                run_dir.join("manifest.json").display(),
                profile.precision
            ))
            .with_fix("restore the manifest.json that `envgen run` wrote")
        })?,
        world: world.clone(),
    };
    let mut science = science;
    if args.launched {
        // In a container the data is mounted at neutral paths: map the host
        // paths the config names (its hash was checked above, unchanged).
        crate::launch::docker_job::map_paths(
            &mut science,
            &crate::launch::docker_job::path_map_from_env(),
        );
    }
    let sampler =
        leader.then(|| GpuSampler::start(&run_dir.join("metrics.jsonl"), GPU_SAMPLE_INTERVAL));
    let outcome = experiment.run(&science, &control, resolved);
    drop(sampler);
    let mut summary = match outcome {
        Ok(summary) => summary,
        Err(err) => {
            if leader {
                let _ = rundir::write_json(
                    &run_dir.join("summary.json"),
                    &registry::failed_summary(&err),
                );
            }
            return Err(err);
        }
    };
    if !leader {
        // The run's files are rank 0's; this rank says only how it ended.
        let rank = world.as_ref().map_or(0, |w| w.rank);
        eprintln!(
            "envgen: rank {rank}: {:?} after {} steps",
            summary.status, summary.steps_done
        );
        return Ok(crate::launch::exit_code(&[RunOutcome { run_dir, summary }]));
    }
    // The process's peak memory, for `envgen probe` and for readers sizing
    // a machine (CPU runs: it is the tensors' memory too).
    if let Some(mib) = crate::probe::proc::peak_rss_mib() {
        summary.metrics.insert("peak_rss_mib".into(), json!(mib));
        rundir::write_json(&run_dir.join("summary.json"), &summary)?;
    }
    record_data_files(&run_dir, &summary)?;
    let outcomes = [RunOutcome { run_dir, summary }];
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

/// How many ranks the run trains on and where they sit (launch::ranks).
fn world_plan(args: &Args, experiment: &dyn Experiment, place: Place) -> Result<WorldPlan> {
    let l = &args.launch;
    let gpus_per_node = match place {
        Place::Slurm => slurm_resources(args)?.gpus_per_node,
        _ => None,
    };
    let plan = crate::launch::ranks::plan_world(
        place,
        l.ranks,
        l.nodes,
        gpus_per_node.filter(|_| args.backend != Backend::Cpu),
    )?;
    if !l.devices.is_empty() && place != Place::Native {
        return Err(
            UserError::usage("--devices picks GPUs for --ranks on this machine")
                .with_fix("under Slurm, ask for GPUs with --gpus-per-node")
                .into(),
        );
    }
    if plan.size > 1 && !experiment.data_parallel() {
        return Err(not_data_parallel(experiment, plan.size));
    }
    Ok(plan)
}

fn not_data_parallel(experiment: &dyn Experiment, size: usize) -> anyhow::Error {
    UserError::usage(format!(
        "{} does not train data-parallel yet ({size} ranks asked for)",
        experiment.name()
    ))
    .with_fix("run it on one rank (leave out --ranks; under Slurm one GPU per node), or train gpt2, which does")
    .into()
}

/// With one process per GPU, each sees only its own: the `local rank`-th of
/// the GPUs the job was given (CUDA_VISIBLE_DEVICES, set by Slurm or by
/// `--devices`), so every CUDA device 0 below is this rank's.
fn select_gpu_of_rank() {
    let local = std::env::var("ENVGEN_LOCAL_RANK")
        .or_else(|_| std::env::var("SLURM_LOCALID"))
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let gpus: Vec<&str> = visible.split(',').filter(|g| !g.is_empty()).collect();
    if let (Some(local), true) = (local, gpus.len() > 1) {
        if let Some(gpu) = gpus.get(local) {
            // Before any CUDA call in this process (the backend is resolved after).
            std::env::set_var("CUDA_VISIBLE_DEVICES", gpu);
        }
    }
}

/// The manifest's `distributed`: how the ranks sat and how they reduced.
fn distributed_record(world: &engine::World) -> Value {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let nodes: Vec<String> = match var("SLURM_JOB_NODELIST") {
        Some(list) => std::process::Command::new("scontrol")
            .args(["show", "hostnames", &list])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_else(|| vec![list]),
        None => vec![std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())],
    };
    let per_node = var("SLURM_NTASKS_PER_NODE")
        .and_then(|v| {
            v.split(['(', ','])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(world.size / nodes.len().max(1));
    json!({
        "ranks_per_node": per_node,
        "nodes": nodes,
        "reduction": "collective",
        "reduction_detail": "burn-collective tree all-reduce over TCP (one bucket per step)",
        "rendezvous": format!("{}:{}", world.rendezvous.0, world.rendezvous.1),
    })
}

/// `--ranks N` on this machine: the run directory is made here, then N
/// ranks train into it (launch::ranks) and rank 0 writes its files.
fn run_ranks(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
    world: &WorldPlan,
) -> Result<i32> {
    let devices = crate::launch::ranks::devices_for(&args.launch.devices, world.size)?;
    let resolved = backend::resolve(args.backend.into())?;
    let run_dir = match &args.resume {
        Some(dir) => {
            config_of_run(experiment, dir)?;
            dir.clone()
        }
        None => {
            let host = crate::probe::probe_host();
            let setup = Setup {
                decision,
                host: &host,
                backend: resolved.name(),
                device: resolved.device(),
                threads: None,
                world_size: world.size,
            };
            create_run(args, experiment, &setup, &[], NewDir::Fresh(&args.out))?.0
        }
    };
    eprintln!(
        "envgen: run directory {} ({} ranks on this machine)",
        run_dir.display(),
        world.size
    );
    let mut words = vec![
        "run".to_string(),
        experiment.name().to_string(),
        "--launched".into(),
        "--resume".into(),
        run_dir.display().to_string(),
    ];
    words.extend(job_args(args));
    if args.threads.is_none() && resolved.name() == "cpu" {
        // Ranks share this machine's cores instead of each taking all.
        let per_rank = (rayon::current_num_threads() / world.size).max(1);
        words.extend(["--threads".to_string(), per_rank.to_string()]);
    }
    let stop = install_stop_handler("interrupted: stopping every rank (rank 0 checkpoints first)");
    let ends = crate::launch::ranks::run(
        &crate::launch::ranks::RankLaunch {
            args: &words,
            ranks: world.size,
            devices: devices.as_deref(),
        },
        &stop,
    )?;
    if let Some(err) = crate::launch::ranks::failure(&ends, experiment.name(), &run_dir, world.size)
    {
        let state: Option<engine::Summary> = rundir::read_json(&run_dir.join("summary.json")).ok();
        if state.is_none_or(|s| s.status == engine::Status::Running) {
            crate::launch::mark_ended(&run_dir, engine::Status::Failed, &format!("{err}"))?;
        }
        return Err(err);
    }
    let summary: engine::Summary = rundir::read_json(&run_dir.join("summary.json"))?;
    record_data_files(&run_dir, &summary)?;
    let outcomes = [RunOutcome { run_dir, summary }];
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

/// Size the global rayon pool, which Burn's CPU backend and envgen's fused
/// kernels run on: `--threads N`, else rayon's default (every core this
/// process may use: its CPU affinity, e.g. a Slurm task's or a container's
/// cpuset). Returns the pool's size, for the manifest.
fn configure_threads(requested: Option<u16>) -> Result<usize> {
    if let Some(n) = requested {
        rayon::ThreadPoolBuilder::new()
            .num_threads(usize::from(n))
            .build_global()
            .map_err(|e| {
                UserError::environment(format!("--threads {n}: cannot size the thread pool: {e}"))
                    .with_fix("leave out --threads")
            })?;
    }
    Ok(rayon::current_num_threads())
}

/// How often NVML is sampled on GPU hosts (W&B's system metrics default: 10-15 s;
/// a run of minutes wants finer).
const GPU_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Provenance: the data files the run read (path, sha256, size) from its
/// summary into its manifest, where `runs compare` and `rerun` look.
fn record_data_files(run_dir: &Path, summary: &engine::Summary) -> Result<()> {
    let Some(files) = summary.metrics.get("data_files") else {
        return Ok(());
    };
    slurm_job::update_manifest(run_dir, |env| {
        env.insert("data_files".into(), files.clone());
    })
}

fn print_outcomes(
    experiment: &dyn Experiment,
    outcomes: &[RunOutcome],
    as_json: bool,
) -> Result<()> {
    if as_json {
        let doc = match outcomes {
            [one] => json!({ "run_dir": one.run_dir, "summary": one.summary }),
            many => {
                json!({ "runs": many.iter().map(|o| json!({ "run_dir": o.run_dir, "summary": o.summary })).collect::<Vec<_>>() })
            }
        };
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    for outcome in outcomes {
        println!("{}", experiment.summary_line(&outcome.summary));
        println!("run directory: {}", outcome.run_dir.display());
    }
    Ok(())
}

/// The flags of `launch` as words (recorded for `rerun`).
fn launch_args_of(launch: &LaunchArgs) -> Vec<String> {
    let mut words = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            words.push(flag.to_string());
            words.push(value);
        }
    };
    push("--image", launch.image.clone());
    if launch.container != Container::None {
        let name = format!("{:?}", launch.container).to_lowercase();
        push("--container", Some(name));
    }
    push("--partition", launch.partition.clone());
    push("--account", launch.account.clone());
    push("--time", launch.time.clone());
    push("--nodes", launch.nodes.map(|n| n.to_string()));
    push("--ranks", launch.ranks.map(|n| n.to_string()));
    if !launch.devices.is_empty() {
        push("--devices", Some(launch.devices.join(",")));
    }
    push(
        "--gpus-per-node",
        launch.gpus_per_node.map(|n| n.to_string()),
    );
    push(
        "--cpus-per-task",
        launch.cpus_per_task.map(|n| n.to_string()),
    );
    push("--mem", launch.mem.clone());
    push("--gpus", launch.gpus.clone());
    if launch.cdi {
        words.push("--cdi".into());
    }
    words
}

/// Flags every launched envgen gets: the hardware knobs the user chose.
fn job_args(args: &Args) -> Vec<String> {
    let mut words = vec![
        "--backend".to_string(),
        format!("{:?}", args.backend).to_lowercase(),
    ];
    if let Some(profile) = &args.profile {
        words.extend(["--profile".to_string(), profile.clone()]);
    }
    if let Some(n) = args.micro_batch {
        words.extend(["--micro-batch".to_string(), n.to_string()]);
    }
    if let Some(n) = args.threads {
        words.extend(["--threads".to_string(), n.to_string()]);
    }
    if let Some(p) = args.precision {
        words.extend([
            "--precision".to_string(),
            Precision::from(p).name().to_string(),
        ]);
    }
    if let Some(n) = args.stop_after {
        words.extend(["--stop-after".to_string(), n.to_string()]);
    }
    words
}

/// The run directories a launcher trains into: the one given with
/// `--resume` (launched again), or new ones (one per sweep value).
fn launched_runs(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
    sweep: Option<&Sweep>,
    world_size: usize,
) -> Result<(Vec<PathBuf>, Option<String>)> {
    if let Some(dir) = &args.resume {
        config_of_run(experiment, dir)?;
        let _ = std::fs::remove_file(dir.join("summary.json"));
        return Ok((vec![dir.clone()], None));
    }
    let host = crate::probe::probe_host();
    // The submitting host's choice is provisional: the launched envgen
    // chooses again on the machine it runs on.
    let backend_name = format!("{:?}", args.backend).to_lowercase();
    let setup = Setup {
        decision,
        host: &host,
        backend: &backend_name,
        device: "-",
        threads: args.threads.map(usize::from),
        world_size,
    };
    let create = |extra: &[String], new_dir: NewDir| {
        create_run(args, experiment, &setup, extra, new_dir).map(|(dir, _, _)| dir)
    };
    match sweep {
        None => Ok((vec![create(&[], NewDir::Fresh(&args.out))?], None)),
        Some(sweep) => {
            // The base name comes from the first value's config.
            let first = vec![format!("{}={}", sweep.key, sweep.values[0])];
            let mut overrides = args.overrides.clone();
            overrides.extend(first);
            let loaded = resolve_config(
                experiment,
                args.preset.as_deref(),
                args.config.as_deref(),
                &overrides,
            )?;
            let base = rundir::new_run_id(
                experiment.name(),
                loaded.preset.as_deref(),
                &loaded.config_hash()?,
            );
            let (base, dirs) = slurm_job::create_sweep_dirs(&args.out, &base, sweep.values.len())?;
            for (index, (value, dir)) in sweep.values.iter().zip(&dirs).enumerate() {
                let extra = [format!("{}={value}", sweep.key)];
                create(&extra, NewDir::Made(dir.clone()))?;
                slurm_job::update_manifest(&dirs[index], |env| {
                    env.insert("sweep".into(), json!({ "key": sweep.key, "value": value, "index": index, "of": sweep.values.len() }));
                })?;
            }
            Ok((dirs, Some(base)))
        }
    }
}

/// Host directories a science config reads: every string under a key named
/// `path`, `*_path` or `*_dir` that exists (a file's directory, for binds).
fn data_dirs(science: &toml::Value) -> Vec<PathBuf> {
    fn walk(value: &toml::Value, key: &str, out: &mut Vec<PathBuf>) {
        match value {
            toml::Value::Table(table) => table.iter().for_each(|(k, v)| walk(v, k, out)),
            toml::Value::Array(items) => items.iter().for_each(|v| walk(v, key, out)),
            toml::Value::String(text)
                if key == "path" || key.ends_with("_path") || key.ends_with("_dir") =>
            {
                let path = Path::new(text);
                let dir = if path.is_file() {
                    path.parent()
                } else {
                    Some(path)
                };
                if let Some(dir) = dir.filter(|d| d.is_dir()) {
                    if let Ok(abs) = std::path::absolute(dir) {
                        out.push(abs);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(science, "", &mut out);
    out.sort();
    out.dedup();
    out
}

fn science_of(dir: &Path) -> Result<toml::Value> {
    let text = std::fs::read_to_string(dir.join("config.toml"))?;
    Ok(toml::from_str(&text)?)
}

/// `--where slurm`: prepare the run directories, submit one job (an array
/// for a sweep), then follow it (or return at once with --detach).
fn run_slurm(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
    sweep: Option<&Sweep>,
    world: &WorldPlan,
) -> Result<i32> {
    let runtime = slurm_runtime(&args.launch)?;
    let (runs, sweep_base) = launched_runs(args, experiment, decision, sweep, world.size)?;
    let output = match &sweep_base {
        Some(base) => slurm_job::sweep_output(&args.out, base),
        None => runs[0].join(slurm_job::JOB_OUTPUT),
    };
    let mut data = Vec::new();
    for run in &runs {
        data.extend(data_dirs(&science_of(run)?));
    }
    let submission = slurm_job::Submission {
        experiment: experiment.name().into(),
        runs: runs.clone(),
        job_args: job_args(args),
        output,
        resources: slurm_job::Resources {
            nodes: Some(world.nodes as u32),
            tasks_per_node: world.per_node as u32,
            ..slurm_resources(args)?
        },
        runtime,
        data_dirs: data,
    };
    if let Some(image) = slurm_job::image_provenance(&submission.runtime)? {
        for run in &runs {
            slurm_job::update_manifest(run, |env| {
                env.insert("image".into(), image.clone());
            })?;
        }
    }
    // Installed before submitting: a Ctrl-C during sbatch still cancels the
    // job (the follow loop looks at the flag first).
    let stop =
        install_stop_handler("interrupted: cancelling the Slurm job (the run checkpoints first)");
    let job_id = slurm_job::submit(&submission)?;
    eprintln!(
        "envgen: submitted Slurm job {job_id} ({} run{}): {}",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        runs.iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // A Ctrl-C during submission goes on to follow, which cancels at once.
    if args.detach && !stop.load(Ordering::SeqCst) {
        detached(args, &job_id, &runs)?;
        return Ok(0);
    }
    let outcomes = slurm_job::follow(&job_id, &runs, &stop)?;
    for outcome in &outcomes {
        record_data_files(&outcome.run_dir, &outcome.summary)?;
    }
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

fn detached(args: &Args, job: &str, runs: &[PathBuf]) -> Result<()> {
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "job_id": job, "run_dirs": runs }))?
        );
    } else {
        for run in runs {
            println!("run directory: {}", run.display());
        }
        println!("follow with `envgen runs show RUN`, stop with `envgen runs cancel RUN`");
    }
    Ok(())
}

/// How the Slurm job runs envgen, from --container and --image.
fn slurm_runtime(launch: &LaunchArgs) -> Result<Runtime> {
    let image = || {
        launch.image.clone().ok_or_else(|| -> anyhow::Error {
            UserError::usage(format!(
                "--container {:?} needs --image",
                launch.container
            ))
            .with_fix("--image DIR (charliecloud: `envgen image export cpu --format charliecloud`, then ch-convert), --image FILE.sif (apptainer), --image REF (pyxis)")
            .into()
        })
    };
    Ok(match launch.container {
        Container::None => Runtime::Native,
        Container::Charliecloud => {
            let dir = PathBuf::from(image()?);
            if !dir.join("usr/local/bin/envgen").is_file() {
                return Err(UserError::usage(format!(
                    "--image {}: not a charliecloud image directory with envgen in it",
                    dir.display()
                ))
                .with_fix("export one with `envgen image export cpu --format charliecloud -o cpu.tar` and `ch-convert cpu.tar DIR`")
                .into());
            }
            Runtime::Charliecloud {
                image_dir: std::path::absolute(dir)?,
            }
        }
        Container::Apptainer => Runtime::Apptainer {
            sif: std::path::absolute(image()?)?,
        },
        Container::Pyxis => Runtime::Pyxis { image: image()? },
    })
}

/// Flags first, then the `[slurm]` defaults of the forced hardware profile.
fn slurm_resources(args: &Args) -> Result<slurm_job::Resources> {
    let defaults = match &args.profile {
        Some(name) => Profiles::load()?
            .get(name)?
            .slurm
            .clone()
            .unwrap_or_default(),
        None => Default::default(),
    };
    let l = &args.launch;
    Ok(slurm_job::Resources {
        partition: l.partition.clone(),
        account: l.account.clone(),
        time: l.time.clone(),
        nodes: l.nodes,
        // `--backend cuda` needs a GPU in the allocation even without a profile.
        gpus_per_node: l
            .gpus_per_node
            .or(defaults.gpus_per_node)
            .or((args.backend == Backend::Cuda).then_some(1)),
        cpus_per_task: l.cpus_per_task.or(defaults.cpus_per_task),
        mem: l.mem.clone().or(defaults.mem),
        tasks_per_node: 1,
    })
}

/// `--gpus` for Docker; by default all GPUs for the cuda backend, none for cpu.
fn docker_gpus(args: &Args, host: &Host) -> Result<GpuRequest> {
    let Some(spec) = &args.launch.gpus else {
        return Ok(match args.backend {
            Backend::Cpu => GpuRequest::None,
            Backend::Cuda => GpuRequest::All,
            Backend::Auto if host.gpus.is_empty() => GpuRequest::None,
            Backend::Auto => GpuRequest::All,
        });
    };
    if spec == "all" {
        return Ok(GpuRequest::All);
    }
    if let Ok(n) = spec.parse::<i64>() {
        if n > 0 {
            return Ok(GpuRequest::Count(n));
        }
    }
    let ids: Vec<String> = spec.split(',').map(str::trim).map(str::to_owned).collect();
    if ids
        .iter()
        .any(|id| id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(UserError::usage(format!(
            "--gpus {spec:?}: not `all`, a count, or device IDs"
        ))
        .with_fix("e.g. --gpus all, --gpus 2, --gpus 0,1 or --gpus GPU-<uuid>")
        .into());
    }
    Ok(GpuRequest::Devices(ids))
}

/// `--where docker`: doctor's verdict first, the image (built on demand),
/// then the run directory, then the container, followed to its end.
fn run_docker(args: &Args, experiment: &dyn Experiment, decision: &Decision) -> Result<i32> {
    if args.detach {
        return Err(UserError::usage(
            "--detach is for Slurm jobs: a Docker run is followed until it ends",
        )
        .with_fix("drop --detach (Ctrl-C stops the container and keeps the run resumable), or use --where slurm")
        .into());
    }
    let host = crate::probe::probe_host();
    let gpus = docker_gpus(args, &host)?;
    let runtime = crate::image::docker::runtime()?;
    let stop =
        install_stop_handler("interrupted: stopping the container (the run checkpoints first)");
    let image = docker_image(&runtime, args, &gpus)?;
    let facts = crate::image::profile_facts(&image.profile);
    docker_job::check_verdict(&host, &image.reference, facts)?;
    let (runs, _) = launched_runs(args, experiment, decision, None, 1)?;
    let run_dir = runs[0].clone();
    let job = docker_job::DockerRun {
        experiment: experiment.name().into(),
        run_dir: run_dir.clone(),
        image: image.reference.clone(),
        job_args: job_args(args),
        data_dirs: data_dirs(&science_of(&run_dir)?),
        gpus,
        cdi: args.launch.cdi,
    };
    eprintln!("envgen: run directory {}", run_dir.display());
    let outcome = runtime.block_on(async {
        let docker = crate::launch::docker::connect().await?;
        let interrupt = async {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        };
        docker_job::run(&docker, &job, interrupt).await
    })?;
    record_data_files(&outcome.run_dir, &outcome.summary)?;
    let outcomes = [outcome];
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

/// The image a Docker run uses: --image, else the profile image for the
/// backend (`cpu`, `cuda12.8`), built now if the daemon lacks one holding
/// this very envgen binary.
struct DockerImage {
    reference: String,
    profile: String,
}

fn docker_image(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
    gpus: &GpuRequest,
) -> Result<DockerImage> {
    let profile = if *gpus == GpuRequest::None {
        "cpu"
    } else {
        "cuda12.8"
    };
    let reference = match &args.launch.image {
        Some(reference) => reference.clone(),
        None => {
            let containers = crate::image::Containers::locate(None)?;
            eprintln!("envgen: docker: using the {profile} profile image (built now if missing)");
            runtime.block_on(crate::image::build::ensure_built(
                &containers,
                profile,
                None,
            ))?;
            crate::image::build::default_tag(profile)
        }
    };
    Ok(DockerImage {
        reference,
        profile: profile.into(),
    })
}
