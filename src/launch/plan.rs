//! What a run will be, decided once for every place: the science config
//! (preset or file, `--set`, a sweep value, or the config of `--from-run`),
//! its `config_hash`, the hardware knobs (micro-batch split, precision,
//! device, threads) and the new run directory with its `config.toml` and
//! manifest. A real run, a launched one and `--dry-run` all come through
//! here, so they refuse and choose exactly alike.

use std::path::{Path, PathBuf};

use envgen_experiments::engine::{self, rundir};
use envgen_experiments::registry::{Experiment, ResolvedConfig};

use super::request::{backend_word, RunRequest};
use crate::error::{Result, UserError};
use crate::host::Host;
use crate::profiles::{HardwareChoice, Precision, Profiles};
use crate::runs::manifest::{self, Environment, HardwareKnobs, Manifest, SweepRecord};
use crate::runs::out_dir;

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

/// The hardware profile for this host's GPU (or `--profile`), with the
/// precision asked for; its warnings are printed.
fn hardware_choice(
    req: &RunRequest,
    host: &Host,
    backend_name: &str,
    preset: Option<&str>,
) -> Result<HardwareChoice> {
    let gpu = (backend_name == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice = Profiles::load()?.choose(
        gpu,
        req.flags.profile.as_deref(),
        req.flags.precision,
        &req.flags.experiment,
        preset.unwrap_or("custom"),
    )?;
    for warning in &choice.warnings {
        eprintln!("envgen: warning: {warning}");
    }
    Ok(choice)
}

/// Where and on what a run trains: the host whose hardware picks the
/// profile, and the backend/device recorded for it.
pub struct Setup<'a> {
    pub host: &'a Host,
    pub backend: &'a str,
    pub device: &'a str,
    /// Tensor threads of the process that trains, when known here.
    pub threads: Option<usize>,
    /// Data-parallel ranks the run trains on (1: one process).
    pub world_size: usize,
}

/// The knobs of a run that starts from step 0 here: `--micro-batch` wins,
/// then the hardware profile, then the preset's hint; the global batch is
/// split over the ranks, then into micro-batches. `--gen-batch` likewise.
pub fn fresh_knobs(
    req: &RunRequest,
    setup: &Setup,
    loaded: &ResolvedConfig,
    preset: Option<&str>,
) -> Result<HardwareKnobs> {
    if req.is_command() {
        return Ok(super::command::knobs());
    }
    let choice = hardware_choice(req, setup.host, setup.backend, preset)?;
    let (micro_batch, grad_accum) = engine::split_batch(
        engine::distributed::rank_batch(loaded.batch_size, setup.world_size)?,
        req.flags
            .micro_batch
            .or(choice.micro_batch)
            .or(loaded.hardware.micro_batch),
    )?;
    Ok(HardwareKnobs {
        name: Some(choice.profile.clone()),
        micro_batch,
        gen_batch: gen_batch(
            req.flags
                .gen_batch
                .or(choice.gen_batch)
                .or(loaded.hardware.gen_batch),
        )?,
        grad_accum,
        precision: choice.precision.name().into(),
        backend: setup.backend.into(),
        device: setup.device.into(),
        threads: setup.threads,
    })
}

/// The knobs of a resumed run: its own, with what a resume may change —
/// the precision (checkpoints hold f32 weights and moments whatever it
/// was) and the split of each global batch (micro-batch, world size); the
/// data of every step stays the same.
pub fn resumed_knobs(
    req: &RunRequest,
    recorded: &HardwareKnobs,
    batch_size: usize,
    world_size: usize,
) -> Result<HardwareKnobs> {
    let mut knobs = recorded.clone();
    if let Some(requested) = req.flags.precision {
        knobs.precision = requested.name().into();
    }
    let share = engine::distributed::rank_batch(batch_size, world_size)?;
    let (micro_batch, grad_accum) = engine::split_batch(
        share,
        Some(req.flags.micro_batch.unwrap_or(recorded.micro_batch)),
    )?;
    knobs.micro_batch = micro_batch;
    knobs.grad_accum = grad_accum;
    // Samples do not depend on it: a resume may change it like the micro-batch.
    if req.flags.gen_batch.is_some() {
        knobs.gen_batch = req.flags.gen_batch;
    }
    Ok(knobs)
}

/// The generation batch chosen; 0 rows (a config's `[hardware]` hint; the
/// flag refuses it itself) is refused.
fn gen_batch(chosen: Option<usize>) -> Result<Option<usize>> {
    if chosen == Some(0) {
        return Err(UserError::usage("[hardware] gen_batch = 0")
            .with_fix("set gen_batch to 1 or more rows per generation call, or pass --gen-batch N")
            .into());
    }
    Ok(chosen)
}

/// What a new run will be, before anything is made.
pub struct PlannedRun {
    pub loaded: ResolvedConfig,
    pub hash: String,
    pub knobs: HardwareKnobs,
}

/// Resolve the config (preset or file, `--set`, `extra`; or the config of
/// `--from-run`) and choose the hardware knobs for `setup`.
pub fn plan_run(req: &RunRequest, setup: &Setup, extra: &[String]) -> Result<PlannedRun> {
    let flags = &req.flags;
    let loaded = match (&req.command, &flags.from_run) {
        (Some(command), _) => command.resolved(extra)?,
        (None, Some(source)) => config_of_run(req.experiment, source)?.0,
        (None, None) => {
            let mut overrides = flags.overrides.clone();
            overrides.extend(extra.iter().cloned());
            resolve_config(
                req.experiment,
                flags.preset.as_deref(),
                flags.config.as_deref(),
                &overrides,
            )?
        }
    };
    // Before any directory is made: a data folder the run would refuse
    // leaves nothing behind.
    super::data_files::check_data_files(&loaded.science)?;
    let hash = loaded.config_hash()?;
    let knobs = fresh_knobs(req, setup, &loaded, loaded.preset.as_deref())?;
    Ok(PlannedRun {
        loaded,
        hash,
        knobs,
    })
}

/// The directory of a new run: a fresh one under --out, or one made
/// beforehand (a sweep's `<base>-sN`).
pub enum NewDir<'a> {
    Fresh(&'a Path),
    Made(PathBuf),
}

/// A run directory as it was prepared: what its config.toml and
/// manifest.json hold, kept so the launcher does not read them back.
#[derive(Debug, Clone)]
pub struct PreparedRun {
    pub dir: PathBuf,
    /// The science config (config.toml).
    pub science: toml::Value,
    pub manifest: Manifest,
}

/// A new run directory with config.toml and manifest.json, for a run here
/// or launched elsewhere. `extra` are overrides added to --set (a sweep value).
pub fn create_run(
    req: &RunRequest,
    setup: &Setup,
    extra: &[String],
    new_dir: NewDir,
    sweep: Option<SweepRecord>,
) -> Result<PreparedRun> {
    let planned = plan_run(req, setup, extra)?;
    write_run(req, setup, planned, new_dir, sweep)
}

/// Make the run directory of a planned run (or fill the one made
/// beforehand) with its config.toml and manifest.json.
fn write_run(
    req: &RunRequest,
    setup: &Setup,
    planned: PlannedRun,
    new_dir: NewDir,
    sweep: Option<SweepRecord>,
) -> Result<PreparedRun> {
    let PlannedRun {
        loaded,
        hash,
        knobs,
    } = planned;
    // A command's id names its script where an experiment's names its preset.
    let label = req.command.as_ref().map(|c| c.label());
    let id = rundir::new_run_id(
        req.experiment.name(),
        label.as_deref().or(loaded.preset.as_deref()),
        &hash,
    );
    let (run_id, dir) = match new_dir {
        NewDir::Fresh(out) => out_dir::create_run_dir(out, &id)?,
        NewDir::Made(dir) => (
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dir,
        ),
    };
    // Atomic and naming the file: a full disk leaves no half config behind.
    envgen_experiments::fsutil::write_atomic(
        &dir.join("config.toml"),
        loaded.canonical_toml()?.as_bytes(),
    )?;
    let decision = &req.decision;
    let mut environment = Environment::new(decision.place, &decision.reason, setup.host);
    environment.world_size = Some(setup.world_size);
    if !decision.place.is_this_machine() || setup.world_size > 1 {
        // Where-specific flags, so `envgen rerun` launches the same way.
        environment.launch_args = Some(req.flags.launch.words());
        environment.launch = Some(req.flags.launch.clone());
    }
    environment.rerun_of = req.flags.from_run.clone();
    if let Some(command) = &req.command {
        command.write_diff(&dir)?;
        let mut record = command.record.clone();
        if let Some(sweep) = &sweep {
            // This run's own line: the sweep value applied (issue #39).
            let value = format!("{}={}", sweep.key, sweep.value);
            let swept = super::command::with_sweep_values(&command.config, &[value])?;
            record.argv = swept
                .command
                .argv
                .iter()
                .map(|w| crate::runs::redact::userinfo(w))
                .collect();
        }
        environment.command = Some(record);
    }
    environment.sweep = sweep;
    let record = Manifest {
        manifest_version: manifest::MANIFEST_VERSION,
        run_id,
        experiment: req.experiment.name().into(),
        preset: loaded.preset.clone(),
        config_hash: hash,
        profile: knobs,
        started_at: rundir::now_rfc3339(),
        finished_at: None,
        environment,
    };
    manifest::write(&dir, &record)?;
    Ok(PreparedRun {
        dir,
        science: loaded.science,
        manifest: record,
    })
}

/// The science config and manifest of an existing run directory, checked
/// against each other (config_hash) and against the experiment.
/// The config hash of a run's config where this process runs: in a
/// container the data files are mounted at other paths
/// (`mounts::path_map_from_env`), and the hash identifies them by content,
/// which is read there.
fn content_hash(loaded: &ResolvedConfig) -> Result<String> {
    let map = super::mounts::path_map_from_env();
    if map.is_empty() {
        return loaded.config_hash();
    }
    let mut science = loaded.science.clone();
    super::mounts::map_paths(&mut science, &map);
    ResolvedConfig {
        science,
        ..loaded.clone()
    }
    .config_hash()
}

pub fn config_of_run(
    experiment: &dyn Experiment,
    dir: &Path,
) -> Result<(ResolvedConfig, Manifest)> {
    let record = manifest::read(dir)?;
    if record.experiment != experiment.name() {
        return Err(UserError::usage(format!(
            "{} is a `{}` run, not `{}`",
            dir.display(),
            record.experiment,
            experiment.name()
        ))
        .with_fix(format!(
            "envgen run {} --resume {}",
            record.experiment,
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
    // A run from before issue #39 recorded the hash of its data paths
    // (the same hash as by content for generated data): it is resumed and
    // rerun as it was, its data where it was. Checked first, so such a run
    // reads no data files here.
    if loaded.config_hash_by_path()? != record.config_hash
        && content_hash(&loaded)? != record.config_hash
    {
        return Err(UserError::usage(format!(
            "{}: config.toml, or the content of the data files it names, does not match the manifest's config_hash",
            dir.display()
        ))
        .with_fix("restore the original config.toml and data files, or start a new run")
        .into());
    }
    loaded.preset = record.preset.clone();
    Ok((loaded, record))
}

/// Flags every launched envgen gets: the hardware knobs the user chose.
pub fn job_args(req: &RunRequest) -> Vec<String> {
    let flags = &req.flags;
    let mut words = vec!["--backend".to_string(), req.backend_name().to_string()];
    if let Some(profile) = &flags.profile {
        words.extend(["--profile".to_string(), profile.clone()]);
    }
    if let Some(n) = flags.micro_batch {
        words.extend(["--micro-batch".to_string(), n.to_string()]);
    }
    if let Some(n) = flags.gen_batch {
        words.extend(["--gen-batch".to_string(), n.to_string()]);
    }
    if let Some(n) = flags.threads {
        words.extend(["--threads".to_string(), n.to_string()]);
    }
    if let Some(p) = flags.precision {
        words.extend(["--precision".to_string(), Precision::name(p).to_string()]);
    }
    if let Some(n) = flags.stop_after {
        words.extend(["--stop-after".to_string(), n.to_string()]);
    }
    words
}

/// The run directories a launcher trains into: the one given with
/// `--resume` (launched again), or new ones (one per sweep value). Returns
/// them and, for a sweep, their base name.
pub fn launched_runs(req: &RunRequest) -> Result<(Vec<PreparedRun>, Option<String>)> {
    let flags = &req.flags;
    if let Some(dir) = &flags.resume {
        let (loaded, manifest) = config_of_run(req.experiment, dir)?;
        crate::runs::lock::ensure_not_training(dir)?;
        // Launched again: what the last attempt ended with is kept aside,
        // so this attempt's outcome is read from its own summary.
        manifest::keep_attempt(dir)?;
        let resumed = PreparedRun {
            dir: dir.clone(),
            science: loaded.science,
            manifest,
        };
        return Ok((vec![resumed], None));
    }
    // The submitting host's choice is provisional: the launched envgen
    // chooses again on the machine it runs on.
    let setup = Setup {
        host: req.host(),
        backend: backend_word(flags.backend),
        device: "-",
        threads: flags.threads.map(usize::from),
        world_size: req.world.size,
    };
    let Some(sweep) = &req.sweep else {
        let run = create_run(req, &setup, &[], NewDir::Fresh(&flags.out), None)?;
        return Ok((vec![run], None));
    };
    // Every value is planned (and refused) before any directory is made.
    let planned = sweep
        .values
        .iter()
        .map(|value| plan_run(req, &setup, &[format!("{}={value}", sweep.key)]))
        .collect::<Result<Vec<_>>>()?;
    // The base name comes from the first value's config (a command's from
    // its script, as its single runs are named).
    let label = req.command.as_ref().map(|c| c.label());
    let base = rundir::new_run_id(
        req.experiment.name(),
        label.as_deref().or(planned[0].loaded.preset.as_deref()),
        &planned[0].hash,
    );
    let (base, dirs) = out_dir::create_sweep_dirs(&flags.out, &base, sweep.values.len())?;
    let mut runs = Vec::new();
    for (index, ((value, dir), planned)) in sweep.values.iter().zip(&dirs).zip(planned).enumerate()
    {
        let record = SweepRecord {
            key: sweep.key.clone(),
            value: value.clone(),
            index,
            of: sweep.values.len(),
        };
        runs.push(write_run(
            req,
            &setup,
            planned,
            NewDir::Made(dir.clone()),
            Some(record),
        )?);
    }
    Ok((runs, Some(base)))
}
