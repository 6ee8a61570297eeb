//! `envgen tune EXP --preset P` (called `envgen probe` before; `probe`
//! stays a hidden alias until the next release): find the fastest
//! micro-batch that fits this machine. Micro-batches are tried upward, each
//! in a real training run of a few steps (`envgen run … --micro-batch M
//! --stop-after N` in a child process, so an out-of-memory failure ends that
//! trial, not the tuner); the tuner records steady-state steps/s and peak memory per
//! trial, stops at the first out-of-memory, and writes the fastest
//! micro-batch that fitted into the user's profile file, with the
//! measurements next to it (`envgen run` reads that file first). The science
//! config is never touched: the global batch is the preset's, only its split
//! into micro-batches changes.
//!
//! `--memory-limit` caps each trial's memory (RLIMIT_DATA: heap and private
//! anonymous mappings) — on the CPU a stand-in for a GPU's memory, and how
//! the tuner is tested.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

use super::run::{self, Backend, PrecisionArg};
use crate::error::{Result, UserError};
use crate::profiles::{
    self, HardwareProfile, Match, Measurement, Precision, ProfileBackend, Profiles, Trial,
};
use crate::runs::gpu_sampler::GpuSampler;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, … (`envgen experiments list`).
    pub experiment: String,
    /// The preset to tune (default: the experiment's default preset).
    #[arg(long)]
    pub preset: Option<String>,
    /// Override one config key (as `envgen run --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// What the trials run on: `auto` is CUDA when compiled in and usable, else the CPU.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// Precision to measure at (default: the hardware profile's).
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Micro-batches to try, ascending (default: from 1 up to the global
    /// batch, each the smallest divisor of it at least twice the last).
    #[arg(long, value_name = "M,…", value_delimiter = ',')]
    pub micro_batches: Vec<usize>,
    /// Timed steps per trial (after one warm-up step).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Cap each trial's memory, e.g. 2G or 512M (CPU: stands in for GPU memory).
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<String>,
    /// Measure only; do not write the profile file.
    #[arg(long)]
    pub measure_only: bool,
    /// Check the flags, the config, the candidates and the profile as the
    /// tuner would, print the plan and exit: no trial runs, nothing written.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// What one trial came to.
enum Outcome {
    Fitted {
        steps_per_s: f64,
        peak_mib: Option<f64>,
    },
    OutOfMemory,
}

pub fn execute(args: Args) -> Result<i32> {
    let experiment = run::find_experiment(&args.experiment)?;
    let loaded = crate::launch::plan::resolve_config(
        experiment,
        args.preset.as_deref(),
        None,
        &args.overrides,
    )?;
    let preset = loaded.preset.clone().unwrap_or_else(|| "custom".into());
    let key = format!("{}/{preset}", experiment.name());
    let limit = args.memory_limit.as_deref().map(parse_size).transpose()?;
    let candidates = match args.micro_batches.as_slice() {
        [] => default_candidates(loaded.batch_size),
        given => checked_candidates(given, loaded.batch_size)?,
    };
    crate::launch::dry_run::check_data_files(&loaded.science)?;
    if args.dry_run {
        return dry_run(&args, experiment.name(), &preset, &loaded, &candidates);
    }
    let resolved = envgen_experiments::backend::resolve(args.backend.into())?;
    let host = crate::probe::probe_host();
    let gpu = (resolved.name() == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice = Profiles::load()?.choose(
        gpu,
        None,
        args.precision.map(Precision::from),
        experiment.name(),
        &preset,
    )?;
    let scratch = tempfile::tempdir()?;
    let mut trials = Vec::new();
    for &micro_batch in &candidates {
        let outcome = trial(
            &args,
            &preset,
            resolved.name(),
            choice.precision,
            micro_batch,
            limit,
            scratch.path(),
        )?;
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
        if !args.json {
            crate::output::notice!("envgen: tune: {}", describe(&record));
        }
        trials.push(record);
        if matches!(outcome, Outcome::OutOfMemory) {
            break;
        }
    }
    let Some(best) = trials
        .iter()
        .filter(|t| !t.out_of_memory)
        .max_by(|a, b| {
            a.steps_per_s
                .partial_cmp(&b.steps_per_s)
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .cloned()
    else {
        return Err(UserError::environment(format!(
            "{key}: even micro-batch {} runs out of memory here",
            candidates[0]
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
        memory_limit: args.memory_limit.clone(),
        measured_at: envgen_experiments::engine::rundir::now_rfc3339(),
        trials: trials.clone(),
    };
    let written = if args.measure_only {
        None
    } else {
        let path = profiles::user_file().ok_or_else(|| {
            UserError::environment(
                "no HOME, XDG_CONFIG_HOME or ENVGEN_CONFIG_DIR to write the profile file in",
            )
            .with_fix("set one of them, or use --measure-only")
        })?;
        let template = tuned_profile(gpu, resolved.name(), choice.precision, &device);
        profiles::record_measurement(&path, &template, &key, measurement.clone())?;
        Some((path, template.name))
    };
    if args.json {
        let doc = json!({
            "experiment": experiment.name(),
            "preset": preset,
            "global_batch": loaded.batch_size,
            "chosen": measurement,
            "profile_file": written.as_ref().map(|(p, _)| p),
            "profile": written.as_ref().map(|(_, n)| n),
        });
        crate::output::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        crate::output::outln!(
            "{key}: micro-batch {} is fastest ({:.3} steps/s{}) of {} tried",
            best.micro_batch,
            measurement.steps_per_s,
            best.peak_memory_mib
                .map_or(String::new(), |m| format!(", peak {m:.0} MiB")),
            trials.len()
        );
        if let Some((path, name)) = &written {
            crate::output::outln!("written to profile {name} in {}", path.display());
        }
    }
    Ok(0)
}

/// `--dry-run`: the trials the tuner would run, and with which profile.
fn dry_run(
    args: &Args,
    experiment: &str,
    preset: &str,
    loaded: &envgen_experiments::registry::ResolvedConfig,
    candidates: &[usize],
) -> Result<i32> {
    let backend = crate::launch::dry_run::native_backend_plan(args.backend.into())?;
    let host = crate::probe::probe_host();
    let gpu = (backend.name == "cuda")
        .then(|| host.gpus.first())
        .flatten();
    let choice = Profiles::load()?.choose(
        gpu,
        None,
        args.precision.map(Precision::from),
        experiment,
        preset,
    )?;
    let doc = json!({
        "dry_run": true,
        "experiment": experiment,
        "preset": preset,
        "config_hash": loaded.config_hash()?,
        "global_batch": loaded.batch_size,
        "backend": backend.name,
        "backend_note": backend.note,
        "precision": choice.precision.name(),
        "profile": choice.profile,
        "micro_batches": candidates,
        "steps_per_trial": args.steps + 1,
        "memory_limit": args.memory_limit,
        "writes_profile_file": !args.measure_only,
        "profile_file": profiles::user_file(),
    });
    if args.json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        crate::output::outln!(
            "dry run: envgen would tune {experiment}/{preset} (config_hash {}) on {} at {}: micro-batches {:?} of global batch {}, {} steps each; nothing was run",
            doc["config_hash"].as_str().unwrap_or("-"),
            backend.name,
            choice.precision.name(),
            candidates,
            loaded.batch_size,
            args.steps + 1,
        );
    }
    Ok(0)
}

fn describe(t: &Trial) -> String {
    match (t.out_of_memory, t.steps_per_s) {
        (true, _) => format!("micro-batch {}: out of memory", t.micro_batch),
        (false, Some(s)) => format!(
            "micro-batch {}: {s:.3} steps/s{}",
            t.micro_batch,
            t.peak_memory_mib
                .map_or(String::new(), |m| format!(", peak {m:.0} MiB"))
        ),
        (false, None) => format!("micro-batch {}: no measurement", t.micro_batch),
    }
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

/// One trial: `envgen run` in a child process, stopped after the warm-up
/// step and `args.steps` timed steps.
fn trial(
    args: &Args,
    preset: &str,
    backend: &str,
    precision: Precision,
    micro_batch: usize,
    limit: Option<u64>,
    scratch: &Path,
) -> Result<Outcome> {
    let out_dir = scratch.join(format!("mb-{micro_batch}"));
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args([
            "run",
            &args.experiment,
            "--preset",
            preset,
            "--backend",
            backend,
        ])
        .args(["--precision", precision.name()])
        .args(["--micro-batch", &micro_batch.to_string()])
        .args(["--stop-after", &(args.steps + 1).to_string()])
        .arg("--json")
        .arg("--out")
        .arg(&out_dir);
    for o in &args.overrides {
        command.args(["--set", o]);
    }
    if let Some(bytes) = limit {
        limit_memory(&mut command, bytes);
    }
    // GPU memory is sampled from here (NVML, all processes on the GPU):
    // the child's own sampler is too coarse for a run of a few steps.
    let samples = scratch.join(format!("gpu-{micro_batch}.jsonl"));
    let sampler = GpuSampler::start(&samples, std::time::Duration::from_millis(200));
    let output = command.output()?;
    drop(sampler);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if out_of_memory(&output, &stderr) {
        return Ok(Outcome::OutOfMemory);
    }
    // 130: stopped after the requested steps (the normal end of a trial);
    // 0: the run was shorter than that and completed.
    if !matches!(output.status.code(), Some(0 | 130)) {
        return Err(UserError::environment(format!(
            "tune trial with micro-batch {micro_batch} failed ({}): {}",
            output.status,
            stderr.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
        .with_fix(format!(
            "run it yourself to see why: envgen run {} --preset {preset} --micro-batch {micro_batch}",
            args.experiment
        ))
        .into());
    }
    let doc: Value = serde_json::from_slice(&output.stdout)?;
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap_or_default());
    let steps_per_s = steady_steps_per_s(&run_dir.join("metrics.jsonl")).ok_or_else(|| {
        UserError::environment(format!(
            "tune trial with micro-batch {micro_batch} logged no timed steps in {}",
            run_dir.display()
        ))
    })?;
    let cpu_peak = doc["summary"]["metrics"]["peak_rss_mib"].as_f64();
    let gpu_peak = max_gpu_memory_mib(&samples);
    Ok(Outcome::Fitted {
        steps_per_s,
        peak_mib: gpu_peak.or(cpu_peak),
    })
}

/// RLIMIT_DATA for the child: heap and private writable mappings, i.e. the
/// memory tensors take (unlike RLIMIT_AS, not thread stacks or reserved
/// address space). An allocation beyond it fails, and Rust aborts with
/// "memory allocation of N bytes failed".
fn limit_memory(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only setrlimit runs, which is
    // async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes as libc::rlim_t,
                rlim_max: bytes as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether a failed trial ran out of memory: Rust's allocation-failure
/// abort, or CubeCL's out-of-memory errors on a GPU.
fn out_of_memory(output: &Output, stderr: &str) -> bool {
    use std::os::unix::process::ExitStatusExt;
    if output.status.success() || output.status.code() == Some(130) {
        return false;
    }
    let aborted = output.status.signal() == Some(libc::SIGABRT);
    let said = [
        "memory allocation of",
        "out of memory",
        "OutOfMemory",
        "BufferTooBig",
    ]
    .iter()
    .any(|m| stderr.contains(m));
    said || (aborted && stderr.contains("alloc"))
}

/// Median steps/s of the timed steps (all but the first) in metrics.jsonl.
fn steady_steps_per_s(metrics: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(metrics).ok()?;
    let mut ms: Vec<f64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["step"].as_u64().is_some_and(|s| s > 1))
        .filter_map(|r| r["step_ms"].as_f64())
        .collect();
    if ms.is_empty() {
        return None;
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    Some(1000.0 / ms[ms.len() / 2])
}

/// The most GPU memory any sample saw, in MiB (`None` without NVML).
fn max_gpu_memory_mib(samples: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(samples).ok()?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|r| {
            r["gpu"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|g| g["memory_used_gb"].as_f64())
        })
        .map(|gb| gb * 1e9 / (1024.0 * 1024.0))
        .reduce(f64::max)
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
