//! A run's directory before it trains: config.toml, manifest.json, the
//! hardware profile; the flags launched envgens get; what a run printed.

use super::*;

/// Where and on what a new run is set up: the place, the host whose
/// hardware picks the profile, and the backend/device recorded for it.
pub(super) struct Setup<'a> {
    pub(super) decision: &'a Decision,
    pub(super) host: &'a Host,
    pub(super) backend: &'a str,
    pub(super) device: &'a str,
    /// Tensor threads of the process that trains, when known here.
    pub(super) threads: Option<usize>,
    /// Data-parallel ranks the run trains on (1: one process).
    pub(super) world_size: usize,
}

/// The directory of a new run: a fresh one under --out, or one made
/// beforehand (a sweep's `<base>-sN`).
pub(super) enum NewDir<'a> {
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

/// What a new run will be, before anything is made: its resolved science
/// config, `config_hash` and hardware profile. A real run and `--dry-run`
/// both come through here, so a dry run refuses exactly what a run would.
pub(super) struct PlannedRun {
    pub(super) loaded: ResolvedConfig,
    pub(super) hash: String,
    pub(super) profile: Profile,
}

/// Resolve the config (preset or file, `--set`, `extra`; or the config of
/// `--from-run`) and choose the hardware knobs for `setup`.
pub(super) fn plan_run(
    args: &Args,
    experiment: &dyn Experiment,
    setup: &Setup,
    extra: &[String],
) -> Result<PlannedRun> {
    let Setup {
        host,
        backend: backend_name,
        device,
        threads,
        world_size,
        ..
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
    Ok(PlannedRun {
        loaded,
        hash,
        profile,
    })
}

/// A new run directory with config.toml and manifest.json, for a run here
/// or launched elsewhere. `extra` are overrides added to --set (a sweep value).
pub(super) fn create_run(
    args: &Args,
    experiment: &dyn Experiment,
    setup: &Setup,
    extra: &[String],
    new_dir: NewDir,
) -> Result<(PathBuf, toml::Value, Profile)> {
    let PlannedRun {
        loaded,
        hash,
        profile,
    } = plan_run(args, experiment, setup, extra)?;
    let Setup {
        decision,
        host,
        world_size,
        ..
    } = *setup;
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
pub(super) fn config_of_run(
    experiment: &dyn Experiment,
    dir: &Path,
) -> Result<(ResolvedConfig, Manifest)> {
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

/// Provenance: the data files the run read (path, sha256, size) from its
/// summary into its manifest, where `runs compare` and `rerun` look.
pub(super) fn record_data_files(run_dir: &Path, summary: &engine::Summary) -> Result<()> {
    let Some(files) = summary.metrics.get("data_files") else {
        return Ok(());
    };
    slurm_job::update_manifest(run_dir, |env| {
        env.insert("data_files".into(), files.clone());
    })
}

pub(super) fn print_outcomes(
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
pub(super) fn launch_args_of(launch: &LaunchArgs) -> Vec<String> {
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
pub(super) fn job_args(args: &Args) -> Vec<String> {
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
pub(super) fn launched_runs(
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
pub(super) fn data_dirs(science: &toml::Value) -> Vec<PathBuf> {
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

pub(super) fn science_of(dir: &Path) -> Result<toml::Value> {
    let text = std::fs::read_to_string(dir.join("config.toml"))?;
    Ok(toml::from_str(&text)?)
}
