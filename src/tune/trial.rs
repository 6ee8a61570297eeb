//! One tuning trial: `envgen run` in a child process, stopped after a
//! warm-up step and the timed steps, its memory capped when asked; what it
//! came to is read back from its metrics and the GPU sampler's samples.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::error::{Result, UserError};
use crate::profiles::Precision;
use crate::runs::gpu_sampler::GpuSampler;

/// What one trial came to.
pub(super) enum Outcome {
    Fitted {
        steps_per_s: f64,
        peak_mib: Option<f64>,
    },
    OutOfMemory,
}

/// One trial's settings.
pub(super) struct TrialSpec<'a> {
    pub experiment: &'a str,
    /// `--set KEY=VALUE` overrides, passed on.
    pub overrides: &'a [String],
    /// Timed steps (after one warm-up step).
    pub steps: u64,
    pub preset: &'a str,
    pub backend: &'a str,
    pub precision: Precision,
    pub micro_batch: usize,
    /// Memory cap in bytes.
    pub limit: Option<u64>,
    /// Where the trial's run directory and GPU samples go.
    pub scratch: &'a Path,
}

/// One trial: `envgen run` in a child process, stopped after the warm-up
/// step and `steps` timed steps.
pub(super) fn run(spec: &TrialSpec) -> Result<Outcome> {
    let TrialSpec {
        experiment,
        overrides,
        steps,
        preset,
        backend,
        precision,
        micro_batch,
        limit,
        scratch,
    } = *spec;
    let out_dir = scratch.join(format!("mb-{micro_batch}"));
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["run", experiment, "--preset", preset, "--backend", backend])
        .args(["--precision", precision.name()])
        .args(["--micro-batch", &micro_batch.to_string()])
        .args(["--stop-after", &(steps + 1).to_string()])
        .arg("--json")
        .arg("--out")
        .arg(&out_dir);
    for o in overrides {
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
            experiment
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
