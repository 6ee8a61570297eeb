//! `envgen run … --dry-run`: everything a run checks before it trains —
//! flags, where, ranks, sweep, the config (preset or file, `--set`), the
//! hardware profile, precision and micro-batch, the data files the config
//! names — through the same code as a real run ([`plan_run`],
//! [`config_of_run`], the checks of [`RunRequest::new`]); then the plan is
//! returned for the CLI to print and nothing is made: no run directory, no
//! image, no data, no CUDA context (the CUDA readiness check runs a kernel,
//! so it is left to the real run and `envgen doctor`).

use std::path::Path;

use envgen_experiments::backend::{self, BackendChoice};
use envgen_experiments::data::{DataConfig, DataSource};
use serde_json::{json, Value};

use super::auto::Place;
use super::plan::{config_of_run, plan_run, resumed_knobs, Setup};
use super::request::backend_word;
use super::RunRequest;
use crate::error::{Result, UserError};

/// What `req` would run, as the JSON document `--dry-run --json` prints;
/// or the error the run would fail with (exit 2).
pub fn plan(req: &RunRequest) -> Result<Value> {
    let flags = &req.flags;
    let backend = planned_backend(req)?;
    let host = req.host();
    let world = &req.world;
    // Each run's config, for the job script's container binds.
    let mut sciences = Vec::new();
    let runs = match &flags.resume {
        Some(dir) => vec![resumed_plan(req, dir, &mut sciences)?],
        None => {
            let setup = Setup {
                host,
                backend: backend.name,
                device: backend.device,
                threads: Some(
                    flags
                        .threads
                        .map_or_else(rayon::current_num_threads, usize::from),
                ),
                world_size: world.size,
            };
            let values: Vec<Option<(String, String)>> = match &req.sweep {
                None => vec![None],
                Some(s) => s
                    .values
                    .iter()
                    .map(|v| Some((s.key.clone(), v.clone())))
                    .collect(),
            };
            let mut plans = Vec::new();
            for value in values {
                let extra: Vec<String> = value.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let planned = plan_run(req, &setup, &extra)?;
                sciences.push(planned.loaded.science.clone());
                plans.push(json!({
                    "preset": planned.loaded.preset,
                    "config": flags.config,
                    "config_hash": planned.hash,
                    "global_batch": planned.loaded.batch_size,
                    "parameters": planned.loaded.parameters,
                    "profile": planned.knobs,
                    "sweep": value.map(|(k, v)| json!({ "key": k, "value": v })),
                }));
            }
            plans
        }
    };
    // What an sbatch writer wants to read first: the script itself.
    let sbatch_script = match req.decision.place {
        Place::Slurm => Some(super::slurm::planned_script(req, &sciences)?),
        Place::Native | Place::Docker => None,
    };
    Ok(json!({
        "dry_run": true,
        "experiment": req.experiment.name(),
        "where": req.decision.place.name(),
        "where_reason": req.decision.reason,
        "backend": req.backend_name(),
        "backend_planned": backend.name,
        "backend_note": backend.note,
        "world_size": world.size,
        "out": flags.out,
        "resume": flags.resume,
        "stop_after": flags.stop_after,
        "runs": runs,
        "sbatch_script": sbatch_script,
    }))
}

/// The backend a run would train on, decided without touching a GPU.
pub struct PlannedBackend {
    pub name: &'static str,
    pub device: &'static str,
    pub note: &'static str,
}

fn planned_backend(req: &RunRequest) -> Result<PlannedBackend> {
    if req.decision.place != Place::Native {
        // As launched_runs: the launched envgen chooses on its machine.
        return Ok(PlannedBackend {
            name: backend_word(req.flags.backend),
            device: "-",
            note: "chosen again where the run is launched",
        });
    }
    native_backend_plan(req.flags.backend)
}

/// What `backend::resolve` would pick here, without its CUDA readiness
/// check (which compiles and runs a kernel on the GPU).
pub fn native_backend_plan(choice: BackendChoice) -> Result<PlannedBackend> {
    let unchecked = "CUDA readiness not checked in a dry run (it compiles and runs a kernel): `envgen doctor` checks it, the run checks it first";
    let cuda = PlannedBackend {
        name: "cuda",
        device: "cuda:0",
        note: unchecked,
    };
    let cpu = PlannedBackend {
        name: "cpu",
        device: "flex:cpu",
        note: "",
    };
    Ok(match choice {
        BackendChoice::Cpu => cpu,
        // Without the feature, resolve refuses at once (exit 2) and touches nothing.
        BackendChoice::Cuda if !backend::cuda_compiled() => {
            backend::resolve(BackendChoice::Cuda)?;
            cuda
        }
        BackendChoice::Cuda => cuda,
        BackendChoice::Auto
            if backend::cuda_compiled() && Path::new("/dev/nvidiactl").exists() =>
        {
            PlannedBackend {
                note: "auto: CUDA if its readiness check passes, else the CPU (not checked in a dry run)",
                ..cuda
            }
        }
        BackendChoice::Auto => cpu,
    })
}

/// `--resume DIR`: the run's own config and profile, with the knobs a
/// resumed run may change (--micro-batch, --precision) applied.
fn resumed_plan(req: &RunRequest, dir: &Path, sciences: &mut Vec<toml::Value>) -> Result<Value> {
    let (loaded, manifest) = config_of_run(req.experiment, dir)?;
    check_data_files(&loaded.science)?;
    sciences.push(loaded.science.clone());
    let knobs = resumed_knobs(req, &manifest.profile, loaded.batch_size, req.world.size)?;
    Ok(json!({
        "run_dir": dir,
        "preset": manifest.preset,
        "config_hash": manifest.config_hash,
        "global_batch": loaded.batch_size,
        "parameters": loaded.parameters,
        "profile": knobs,
        "has_checkpoint": dir.join("checkpoints").join("latest").is_file(),
    }))
}

/// The files a config names must be there (a real run opens them before its
/// first step): `[data]` with a source other than `generated` needs `path`,
/// every `path`, `val_path` and `init_from` given must exist, and the data
/// files must pass the run's checks short of their tokens
/// (`data::check::check_files`: shards matched, headers and sizes). Called
/// by [`plan_run`](super::plan::plan_run), so a run refused here leaves no
/// run directory, and by `--dry-run`.
pub fn check_data_files(science: &toml::Value) -> Result<()> {
    if let Some(table) = science.get("data") {
        if let Ok(data) = table.clone().try_into::<DataConfig>() {
            if data.source != DataSource::Generated && data.path.is_none() {
                let source = table.get("source").and_then(|s| s.as_str()).unwrap_or("?");
                return Err(UserError::usage(format!(
                    "[data].path is missing; source = \"{source}\" needs it"
                ))
                .with_fix("--set data.path=FILE_OR_DIR, or --set data.source=generated to train on envgen's generated corpus")
                .into());
            }
            for (key, path) in [("data.path", &data.path), ("data.val_path", &data.val_path)] {
                if let Some(path) = path {
                    must_exist(key, path)?;
                }
            }
            // The run's own matching and header checks (shards of the
            // configured format, sizes that agree), short of the tokens.
            envgen_experiments::data::check::check_files(&data)?;
        }
    }
    if let Some(path) = science.get("init_from").and_then(|p| p.as_str()) {
        must_exist("init_from", Path::new(path))?;
    }
    Ok(())
}

fn must_exist(key: &str, path: &Path) -> Result<()> {
    // llm.c shard sources may be globs: their directory must exist.
    let text = path.to_string_lossy();
    let checked = if text.contains(['*', '?', '[']) {
        path.parent().unwrap_or(Path::new("."))
    } else {
        path
    };
    if checked.as_os_str().is_empty() || checked.exists() {
        return Ok(());
    }
    Err(
        UserError::usage(format!("{key} = {} does not exist", path.display()))
            .with_fix(format!("--set {key}=<an existing file or directory>"))
            .into(),
    )
}
