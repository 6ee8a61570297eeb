//! `envgen tune`'s work: find the fastest micro-batch that fits this
//! machine. Micro-batches are tried upward, each in a real training run of
//! a few steps (`envgen run … --micro-batch M --stop-after N` in a child
//! process, so an out-of-memory failure ends that trial, not the tuner:
//! [`trial`]); the tuner records steady-state steps/s and peak memory per
//! trial, stops at the first out-of-memory, and writes the fastest
//! micro-batch that fitted into the user's profile file, with the
//! measurements next to it (`envgen run` reads that file first). The
//! science config is never touched: the global batch is the preset's, only
//! its split into micro-batches changes.
//!
//! A memory limit caps each trial's memory (RLIMIT_DATA: heap and private
//! anonymous mappings) — on the CPU a stand-in for a GPU's memory, and how
//! the tuner is tested. `cli/tune.rs` turns the flags into a
//! [`TuneRequest`] and prints what comes back.

mod trial;

use std::path::PathBuf;

use envgen_experiments::backend::BackendChoice;
use envgen_experiments::registry::ResolvedConfig;
use serde_json::{json, Value};

use crate::error::{Result, UserError};
use crate::profiles::{
    self, HardwareProfile, Match, Measurement, Precision, ProfileBackend, Profiles, Trial,
};
use trial::Outcome;

/// What to tune, as the flags gave it.
pub struct TuneRequest {
    pub experiment: String,
    pub preset: Option<String>,
    /// `--set KEY=VALUE`, passed on to every trial.
    pub overrides: Vec<String>,
    pub backend: BackendChoice,
    /// `None`: the hardware profile's precision.
    pub precision: Option<Precision>,
    /// Ascending divisors of the global batch; empty: the default ladder.
    pub micro_batches: Vec<usize>,
    /// Timed steps per trial (after one warm-up step).
    pub steps: u64,
    /// As written ("2G"), kept for the measurement record.
    pub memory_limit: Option<String>,
    /// Measure only; do not write the profile file.
    pub measure_only: bool,
}

/// A request checked against the experiment's config: what will be tried.
pub struct TunePlan {
    pub request: TuneRequest,
    pub experiment: &'static str,
    pub preset: String,
    /// `experiment/preset`, the key a measurement is recorded under.
    pub key: String,
    pub loaded: ResolvedConfig,
    pub candidates: Vec<usize>,
    /// The memory limit in bytes.
    limit: Option<u64>,
}

/// What tuning came to.
pub struct Tuned {
    pub best: Trial,
    pub measurement: Measurement,
    pub trials: Vec<Trial>,
    /// The profile file and the profile's name, unless measuring only.
    pub written: Option<(PathBuf, String)>,
}

/// Check everything that can be refused before a trial runs: the
/// experiment and its config, the memory limit, the candidates, the data files.
pub fn plan(request: TuneRequest) -> Result<TunePlan> {
    let experiment = crate::launch::command::find_bundled(&request.experiment)?;
    let loaded = crate::launch::plan::resolve_config(
        experiment,
        request.preset.as_deref(),
        None,
        &request.overrides,
    )?;
    let preset = loaded.preset.clone().unwrap_or_else(|| "custom".into());
    let key = format!("{}/{preset}", experiment.name());
    let limit = request
        .memory_limit
        .as_deref()
        .map(parse_size)
        .transpose()?;
    let candidates = match request.micro_batches.as_slice() {
        [] => default_candidates(loaded.batch_size),
        given => checked_candidates(given, loaded.batch_size)?,
    };
    crate::launch::dry_run::check_data_files(&loaded.science)?;
    Ok(TunePlan {
        request,
        experiment: experiment.name(),
        preset,
        key,
        loaded,
        candidates,
        limit,
    })
}

/// `--dry-run`: the trials the tuner would run, and with which profile, as
/// the JSON document `envgen tune --dry-run --json` prints.
pub fn dry_run(plan: &TunePlan) -> Result<Value> {
    let req = &plan.request;
    let backend = crate::launch::dry_run::native_backend_plan(req.backend)?;
    let host = crate::probe::probe_host();
    let gpu = (backend.name == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice =
        Profiles::load()?.choose(gpu, None, req.precision, plan.experiment, &plan.preset)?;
    Ok(json!({
        "dry_run": true,
        "experiment": plan.experiment,
        "preset": plan.preset,
        "config_hash": plan.loaded.config_hash()?,
        "global_batch": plan.loaded.batch_size,
        "backend": backend.name,
        "backend_note": backend.note,
        "precision": choice.precision.name(),
        "profile": choice.profile,
        "micro_batches": plan.candidates,
        "steps_per_trial": req.steps + 1,
        "memory_limit": req.memory_limit,
        "writes_profile_file": !req.measure_only,
        "profile_file": profiles::user_file(),
    }))
}

/// Run the trials (each one reported to `on_trial` as it ends), pick the
/// fastest that fitted and, unless measuring only, record it in the user's
/// profile file.
pub fn tune(plan: &TunePlan, mut on_trial: impl FnMut(&Trial)) -> Result<Tuned> {
    let req = &plan.request;
    let resolved = envgen_experiments::backend::resolve(req.backend)?;
    let host = crate::probe::probe_host();
    let gpu = (resolved.name() == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice =
        Profiles::load()?.choose(gpu, None, req.precision, plan.experiment, &plan.preset)?;
    let trials = run_trials(plan, resolved.name(), choice.precision, &mut on_trial)?;
    let Some(best) = fastest(&trials) else {
        return Err(UserError::environment(format!(
            "{}: even micro-batch {} runs out of memory here",
            plan.key, plan.candidates[0]
        ))
        .with_fix("raise --memory-limit, free GPU memory, or use a smaller model")
        .into());
    };
    let device = gpu.map_or_else(|| "cpu".to_string(), |g| g.name.clone());
    let measurement = Measurement {
        micro_batch: best.micro_batch,
        steps_per_s: best.steps_per_s.unwrap_or_default(),
        peak_memory_mib: best.peak_memory_mib,
        precision: choice.precision,
        device: device.clone(),
        memory_limit: req.memory_limit.clone(),
        measured_at: envgen_experiments::engine::rundir::now_rfc3339(),
        trials: trials.clone(),
    };
    let written = if req.measure_only {
        None
    } else {
        let path = profiles::user_file().ok_or_else(|| {
            UserError::environment(
                "no HOME, XDG_CONFIG_HOME or ENVGEN_CONFIG_DIR to write the profile file in",
            )
            .with_fix("set one of them, or use --measure-only")
        })?;
        let template = tuned_profile(gpu, resolved.name(), choice.precision, &device);
        profiles::record_measurement(&path, &template, &plan.key, measurement.clone())?;
        Some((path, template.name))
    };
    Ok(Tuned {
        best,
        measurement,
        trials,
        written,
    })
}

/// The candidates upward, in a scratch folder, until the first that runs
/// out of memory.
fn run_trials(
    plan: &TunePlan,
    backend: &str,
    precision: Precision,
    on_trial: &mut impl FnMut(&Trial),
) -> Result<Vec<Trial>> {
    let scratch = tempfile::tempdir()?;
    let mut trials = Vec::new();
    for &micro_batch in &plan.candidates {
        let outcome = trial::run(&trial::TrialSpec {
            experiment: &plan.request.experiment,
            overrides: &plan.request.overrides,
            steps: plan.request.steps,
            preset: &plan.preset,
            backend,
            precision,
            micro_batch,
            limit: plan.limit,
            scratch: scratch.path(),
        })?;
        let record = match &outcome {
            Outcome::Fitted {
                steps_per_s,
                peak_mib,
            } => Trial {
                micro_batch,
                steps_per_s: Some(*steps_per_s),
                peak_memory_mib: *peak_mib,
                out_of_memory: false,
            },
            Outcome::OutOfMemory => Trial {
                micro_batch,
                steps_per_s: None,
                peak_memory_mib: None,
                out_of_memory: true,
            },
        };
        on_trial(&record);
        trials.push(record);
        if matches!(outcome, Outcome::OutOfMemory) {
            break;
        }
    }
    Ok(trials)
}

/// The trial with the most steps/s among those that fitted.
fn fastest(trials: &[Trial]) -> Option<Trial> {
    trials
        .iter()
        .filter(|t| !t.out_of_memory)
        .max_by(|a, b| {
            a.steps_per_s
                .partial_cmp(&b.steps_per_s)
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .cloned()
}

/// 1, then each time the smallest divisor of `batch` at least twice the
/// last one, ending at `batch` itself.
fn default_candidates(batch: usize) -> Vec<usize> {
    let mut out = vec![1];
    while let Some(&last) = out.last() {
        match (last * 2..=batch).find(|d| batch % d == 0) {
            Some(next) => out.push(next),
            None => break,
        }
    }
    out
}

fn checked_candidates(given: &[usize], batch: usize) -> Result<Vec<usize>> {
    for &m in given {
        if m == 0 || batch % m != 0 {
            return Err(UserError::usage(format!(
                "--micro-batches: {m} does not divide the global batch {batch}"
            ))
            .with_fix("give divisors of the global batch, ascending")
            .into());
        }
    }
    let mut sorted = given.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(sorted)
}

/// "512M", "2G", "1.5G", or a number of bytes.
fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&t[..i], t[i..].to_ascii_uppercase()),
        None => (t, String::new()),
    };
    let factor: f64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        _ => f64::NAN,
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n > 0.0 && factor.is_finite() => Ok((n * factor) as u64),
        _ => Err(
            UserError::usage(format!("--memory-limit {text}: not a size"))
                .with_fix("write e.g. 512M or 2G")
                .into(),
        ),
    }
}

/// The profile the tuner writes into: this GPU model (compute capability and
/// memory within 1 GiB), or the CPU. Its name keeps the `probed-` prefix
/// of the files written before the rename, so they are updated, not doubled.
fn tuned_profile(
    gpu: Option<&crate::host::Gpu>,
    backend: &str,
    precision: Precision,
    device: &str,
) -> HardwareProfile {
    let slug: String = device
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let matches = match gpu {
        None => Match {
            cpu: true,
            ..Match::default()
        },
        Some(g) => {
            let gib = g.memory_mib.map(|m| m as f64 / 1024.0);
            Match {
                cpu: false,
                compute_capability: g.compute_capability.clone(),
                min_memory_gib: gib.map(|m| m - 1.0),
                max_memory_gib: gib.map(|m| m + 1.0),
            }
        }
    };
    HardwareProfile {
        name: format!("probed-{}", slug.trim_matches('-')),
        matches,
        backend: if backend == "cuda" {
            ProfileBackend::Cuda
        } else {
            ProfileBackend::Cpu
        },
        precision,
        micro_batch: Default::default(),
        gen_batch: Default::default(),
        slurm: None,
        measured: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_double_through_divisors_of_the_batch() {
        assert_eq!(default_candidates(16), vec![1, 2, 4, 8, 16]);
        assert_eq!(
            default_candidates(384),
            vec![1, 2, 4, 8, 16, 32, 64, 128, 384]
        );
        assert_eq!(default_candidates(12), vec![1, 2, 4, 12]);
        assert_eq!(default_candidates(1), vec![1]);
        assert!(checked_candidates(&[3], 16).is_err());
        assert_eq!(checked_candidates(&[8, 2, 8], 16).unwrap(), vec![2, 8]);
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }
}
