//! `envgen run … --dry-run`: everything a run checks before it trains —
//! flags, where, ranks, sweep, the config (preset or file, `--set`), the
//! hardware profile, precision and micro-batch, the data files the config
//! names — through the same code as a real run ([`plan_run`],
//! [`config_of_run`], the checks of `launch::request`); then the plan is
//! returned for the CLI to print and nothing is made: no run directory, no
//! image, no data, no CUDA context (the CUDA readiness check runs a kernel,
//! so it is left to the real run and `envgen doctor`).

use std::path::Path;

use envgen_experiments::backend::{self, BackendChoice};
use serde_json::{json, Value};

use super::auto::Place;
use super::command::{with_sweep_values, CommandSpec, NAME as COMMAND};
pub use super::data_files::check_data_files;
use super::plan::{config_of_run, plan_run, resumed_knobs, Setup};
use super::request::backend_word;
use super::request::RunRequest;
use crate::error::Result;

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
    if !req.decision.place.is_this_machine() {
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

/// `--dry-run` of a user command's run: what would run where, and what is recorded.
pub fn of_command(req: &RunRequest, spec: &CommandSpec) -> Value {
    let r = &spec.record;
    json!({
        "dry_run": true,
        "experiment": COMMAND,
        "where": req.decision.place.name(),
        "where_reason": req.decision.reason,
        "argv": r.argv,
        "workdir": r.workdir,
        "nproc_per_node": spec.config.command.nproc_per_node,
        "tensorboard_dir": spec.config.command.tensorboard_dir,
        "git": r.git,
        "env": r.env,
        "out": req.flags.out,
        "run_dir": format!("a new one under {}", req.flags.out.display()),
        // `--sweep` (Slurm): each array task's command line (issue #39).
        "sweep": req.sweep.as_ref().map(|sweep| {
            sweep
                .values
                .iter()
                .map(|value| {
                    let one = [format!("{}={value}", sweep.key)];
                    let argv = with_sweep_values(&spec.config, &one)
                        .map(|c| c.command.argv)
                        .unwrap_or_default();
                    json!({ "key": sweep.key, "value": value, "argv": argv })
                })
                .collect::<Vec<_>>()
        }),
        // Docker: what is mounted at /workspace (docker/), read-only
        // unless `--writable-workspace`, and the knobs that relax the
        // hardened container (issue #39), said before anything starts.
        "workspace": req.decision.place.is_local_container().then(|| {
            r.git.as_ref().map_or(&r.workdir, |g| &g.toplevel).clone()
        }),
        "container": req.decision.place.is_local_container().then(|| {
            json!({
                "writable_workspace": req.flags.launch.docker.writable_workspace,
                "relaxed": req.flags.launch.docker.relaxations(),
            })
        }),
    })
}
