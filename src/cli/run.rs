//! `envgen run EXP`: resolve the science config, create the run directory,
//! train natively (Docker and Slurm arrive with issue #5), print the summary.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use envgen_experiments::backend::{self, BackendChoice};
use envgen_experiments::engine::{self, rundir, Manifest, Profile, RunControl, Status};
use envgen_experiments::registry::{self, Experiment, ResolvedConfig};
use serde_json::{json, Map, Value};

use crate::error::{not_yet, Result, UserError};
use crate::host::Host;
use crate::profiles::{HardwareChoice, ProfilePrecision, Profiles};

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
    /// Hardware profile from env/profiles.toml (default: chosen from the host's GPU).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Parent directory of run directories.
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub out: PathBuf,
    /// Continue an interrupted run from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["preset", "config", "overrides"])]
    pub resume: Option<PathBuf>,
    /// Test hook: stop (checkpoint, status interrupted, exit 130) after N steps.
    #[arg(long, value_name = "N", hide = true)]
    pub stop_after: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Where {
    Auto,
    Native,
    Docker,
    Slurm,
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

/// The environment part of the manifest: version, revision, image, where,
/// and the doctor's host snapshot.
pub fn manifest_environment(location: &str, host: &Host) -> Map<String, Value> {
    let mut env = Map::new();
    env.insert("envgen_version".into(), json!(env!("CARGO_PKG_VERSION")));
    env.insert(
        "git_revision".into(),
        json!(option_env!("ENVGEN_GIT_REVISION")),
    );
    env.insert("image".into(), Value::Null);
    env.insert("where".into(), json!(location));
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
    resolved: &backend::Resolved,
    preset: Option<&str>,
) -> Result<HardwareChoice> {
    let gpu = (resolved.name() == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice = Profiles::embedded().choose(
        gpu,
        args.profile.as_deref(),
        &args.experiment,
        preset.unwrap_or("custom"),
    )?;
    for warning in &choice.warnings {
        eprintln!("envgen: warning: {warning}");
    }
    if choice.precision != ProfilePrecision::Fp32 {
        // Burn 0.21 has no autocast / master weights (burn-notes.md): a
        // per-tensor cast would change the numerics, so the engine trains
        // in f32 and says so rather than silently pretending.
        eprintln!(
            "envgen: warning: profile {} asks for {:?}; the Burn engine trains in f32 for now",
            choice.profile, choice.precision
        );
    }
    Ok(choice)
}

/// SIGINT/SIGTERM set the flag; the loop finishes its step, checkpoints and stops.
fn install_stop_handler() -> Arc<AtomicBool> {
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
            eprintln!("envgen: stopping after this step (checkpoint follows)");
            flag.store(true, Ordering::SeqCst);
        });
    });
    stop
}

pub fn execute(args: Args) -> Result<i32> {
    match args.location {
        Where::Docker | Where::Slurm => {
            return Err(not_yet(
                "run --where docker|slurm",
                "issue #5 (run anywhere)",
            ))
        }
        Where::Auto | Where::Native => {}
    }
    let experiment = find_experiment(&args.experiment)?;
    let resolved = backend::resolve(args.backend.into())?;
    let host = crate::probe::probe_host();

    let (run_dir, science, profile) = match &args.resume {
        Some(dir) => {
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
                    .with_fix("resume a directory written by `envgen run`")
            })?;
            let loaded = experiment.resolve(&text, &config_path.display().to_string(), &[])?;
            if loaded.config_hash()? != manifest.config_hash {
                return Err(UserError::usage(format!(
                    "{}: config.toml does not match the manifest's config_hash",
                    dir.display()
                ))
                .with_fix("restore the original config.toml, or start a new run")
                .into());
            }
            let mut profile = manifest.profile.clone();
            profile.backend = resolved.name().into();
            profile.device = resolved.device().into();
            (dir.clone(), loaded.science, profile)
        }
        None => {
            let loaded = resolve_config(
                experiment,
                args.preset.as_deref(),
                args.config.as_deref(),
                &args.overrides,
            )?;
            let hash = loaded.config_hash()?;
            let choice = hardware_choice(&args, &host, &resolved, loaded.preset.as_deref())?;
            let (micro_batch, grad_accum) = engine::split_batch(
                loaded.batch_size,
                args.micro_batch
                    .or(choice.micro_batch)
                    .or(loaded.hardware.micro_batch),
            )?;
            let profile = Profile {
                name: Some(choice.profile.clone()),
                micro_batch,
                grad_accum,
                precision: "f32".into(),
                backend: resolved.name().into(),
                device: resolved.device().into(),
            };
            let id = rundir::new_run_id(experiment.name(), loaded.preset.as_deref(), &hash);
            let (run_id, dir) = rundir::create_run_dir(&args.out, &id)?;
            std::fs::write(dir.join("config.toml"), loaded.canonical_toml()?)?;
            let manifest = Manifest {
                run_id,
                experiment: experiment.name().into(),
                preset: loaded.preset.clone(),
                config_hash: hash,
                profile: profile.clone(),
                started_at: rundir::now_rfc3339(),
                finished_at: None,
                environment: manifest_environment("native", &host),
            };
            rundir::write_json(&dir.join("manifest.json"), &manifest)?;
            (dir, loaded.science, profile)
        }
    };
    eprintln!("envgen: run directory {}", run_dir.display());

    let control = RunControl {
        run_dir: run_dir.clone(),
        micro_batch: profile.micro_batch,
        resume: args.resume.is_some(),
        stop_after: args.stop_after,
        stop: install_stop_handler(),
        progress: !args.json,
    };
    let summary = match experiment.run(&science, &control, resolved) {
        Ok(summary) => summary,
        Err(err) => {
            let _ = rundir::write_json(
                &run_dir.join("summary.json"),
                &registry::failed_summary(&err),
            );
            return Err(err);
        }
    };
    if args.json {
        let doc = json!({ "run_dir": run_dir, "summary": summary });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", experiment.summary_line(&summary));
        println!("run directory: {}", run_dir.display());
    }
    Ok(match summary.status {
        Status::Completed => 0,
        Status::Interrupted => EXIT_INTERRUPTED,
        Status::Failed | Status::Running => 1,
    })
}
