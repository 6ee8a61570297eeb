//! `envgen run … --dry-run`: everything a run checks before it trains —
//! flags, where, ranks, sweep, the config (preset or file, `--set`), the
//! hardware profile, precision and micro-batch, the data files the config
//! names — through the same code as a real run ([`plan_run`], [`world_plan`],
//! [`config_of_run`]); then the plan is printed and nothing is made: no run
//! directory, no image, no data, no CUDA context (the CUDA readiness check
//! runs a kernel, so it is left to the real run and `envgen doctor`).

use envgen_experiments::data::{DataConfig, DataSource};

use super::*;

/// Print what `args` would run and exit 0, or fail as the run would (exit 2).
pub(super) fn dry_run(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
    sweep: Option<&Sweep>,
    world: &WorldPlan,
) -> Result<i32> {
    let backend = planned_backend(args, decision.place)?;
    let host = crate::probe::probe_host();
    let runs = match &args.resume {
        Some(dir) => vec![resumed_plan(args, experiment, dir, world.size)?],
        None => {
            let setup = Setup {
                decision,
                host: &host,
                backend: backend.name,
                device: backend.device,
                threads: Some(
                    args.threads
                        .map_or_else(rayon::current_num_threads, usize::from),
                ),
                world_size: world.size,
            };
            let values: Vec<Option<(String, String)>> = match sweep {
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
                let planned = plan_run(args, experiment, &setup, &extra)?;
                check_data_files(&planned.loaded.science)?;
                plans.push(json!({
                    "preset": planned.loaded.preset,
                    "config": args.config,
                    "config_hash": planned.hash,
                    "global_batch": planned.loaded.batch_size,
                    "parameters": planned.loaded.parameters,
                    "profile": planned.profile,
                    "sweep": value.map(|(k, v)| json!({ "key": k, "value": v })),
                }));
            }
            plans
        }
    };
    let doc = json!({
        "dry_run": true,
        "experiment": experiment.name(),
        "where": decision.place.name(),
        "where_reason": decision.reason,
        "backend": args_backend_name(args),
        "backend_planned": backend.name,
        "backend_note": backend.note,
        "world_size": world.size,
        "out": args.out,
        "resume": args.resume,
        "stop_after": args.stop_after,
        "runs": runs,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_plan(&doc);
    }
    Ok(0)
}

/// The backend a run would train on, decided without touching a GPU.
pub(crate) struct PlannedBackend {
    pub(crate) name: &'static str,
    pub(crate) device: &'static str,
    pub(crate) note: &'static str,
}

fn args_backend_name(args: &Args) -> String {
    format!("{:?}", args.backend).to_lowercase()
}

fn planned_backend(args: &Args, place: Place) -> Result<PlannedBackend> {
    if place != Place::Native {
        // As launched_runs: the launched envgen chooses on its machine.
        let name = match args.backend {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        };
        return Ok(PlannedBackend {
            name,
            device: "-",
            note: "chosen again where the run is launched",
        });
    }
    native_backend_plan(args.backend)
}

/// What `backend::resolve` would pick here, without its CUDA readiness
/// check (which compiles and runs a kernel on the GPU).
pub(crate) fn native_backend_plan(choice: Backend) -> Result<PlannedBackend> {
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
        Backend::Cpu => cpu,
        // Without the feature, resolve refuses at once (exit 2) and touches nothing.
        Backend::Cuda if !backend::cuda_compiled() => {
            backend::resolve(BackendChoice::Cuda)?;
            cuda
        }
        Backend::Cuda => cuda,
        Backend::Auto
            if backend::cuda_compiled() && Path::new("/dev/nvidiactl").exists() =>
        {
            PlannedBackend {
                note: "auto: CUDA if its readiness check passes, else the CPU (not checked in a dry run)",
                ..cuda
            }
        }
        Backend::Auto => cpu,
    })
}

/// `--resume DIR`: the run's own config and profile, with the knobs a
/// resumed run may change (--micro-batch, --precision) applied.
fn resumed_plan(
    args: &Args,
    experiment: &dyn Experiment,
    dir: &Path,
    world_size: usize,
) -> Result<Value> {
    let (loaded, manifest) = config_of_run(experiment, dir)?;
    check_data_files(&loaded.science)?;
    let mut profile = manifest.profile.clone();
    let share = engine::distributed::rank_batch(loaded.batch_size, world_size)?;
    let (micro_batch, grad_accum) =
        engine::split_batch(share, Some(args.micro_batch.unwrap_or(profile.micro_batch)))?;
    profile.micro_batch = micro_batch;
    profile.grad_accum = grad_accum;
    if let Some(p) = args.precision {
        profile.precision = Precision::from(p).name().into();
    }
    Ok(json!({
        "run_dir": dir,
        "preset": manifest.preset,
        "config_hash": manifest.config_hash,
        "global_batch": loaded.batch_size,
        "parameters": loaded.parameters,
        "profile": profile,
        "has_checkpoint": dir.join("checkpoints").join("latest").is_file(),
    }))
}

/// The files a config names must be there (a real run opens them before its
/// first step): `[data]` with a source other than `generated` needs `path`,
/// and every `path`, `val_path` and `init_from` given must exist. The
/// contents are read by the run itself.
pub(crate) fn check_data_files(science: &toml::Value) -> Result<()> {
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

fn print_plan(doc: &Value) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    println!(
        "dry run: {} would train {} on {} (--backend {}), {} rank(s); nothing was created",
        text(&doc["experiment"]),
        text(&doc["where"]),
        text(&doc["backend_planned"]),
        text(&doc["backend"]),
        text(&doc["world_size"]),
    );
    println!("  where: {}", text(&doc["where_reason"]));
    let note = text(&doc["backend_note"]);
    if !note.is_empty() && note != "-" {
        println!("  backend: {note}");
    }
    for run in doc["runs"].as_array().into_iter().flatten() {
        let p = &run["profile"];
        if let Some(dir) = run.get("run_dir") {
            println!("  resume {}", text(dir));
        }
        if let Some(sweep) = run.get("sweep").filter(|s| !s.is_null()) {
            println!(
                "  sweep value {}={}",
                text(&sweep["key"]),
                text(&sweep["value"])
            );
        }
        println!(
            "  preset {}  config_hash {}  global batch {}  parameters {}",
            text(&run["preset"]),
            text(&run["config_hash"]),
            text(&run["global_batch"]),
            text(&run["parameters"]),
        );
        println!(
            "  profile {}: micro-batch {} × {} accumulation, precision {}, device {}, threads {}",
            text(&p["name"]),
            text(&p["micro_batch"]),
            text(&p["grad_accum"]),
            text(&p["precision"]),
            text(&p["device"]),
            text(&p["threads"]),
        );
    }
    if doc["resume"].is_null() {
        println!("  run directory: a new one under {}", text(&doc["out"]));
    }
}
