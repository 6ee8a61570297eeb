//! Whether a run can fit in memory at all, decided from its config before
//! any run directory or tensor exists. Without it a huge `model.n_embd` or
//! `data.corpus_bytes` got as far as the allocation, and the process died
//! with SIGABRT ("memory allocation of N bytes failed") instead of an
//! error (issue #21).
//!
//! The estimate is a lower bound, so it never refuses a run that could fit:
//!
//! ```text
//! bytes ≥ parameters × 4 copies (weights, gradients, Adam's two moments) × 4 B (f32)
//!       + the data the run builds in memory (a generated corpus, a puzzle set)
//!       + activations of ONE row: ACTIVATION_FLOATS × seq × width × layers × 4 B
//! ```
//!
//! One row because the micro-batch is chosen later (`--micro-batch`, the
//! hardware profile) and can be as small as 1; weights stay f32 whatever the
//! precision. It is compared with the memory this machine has for the
//! process: the cgroup limit when there is one, `MemAvailable` of
//! /proc/meminfo, the smaller of the two. A run on a GPU keeps parameters
//! and activations in device memory, whose size is not known here: for it
//! only the data is checked. The check runs where the run trains: natively
//! and in a container on this machine before anything is made; for a Slurm
//! job on its node, when the launched envgen reads the config
//! ([`trains_elsewhere`] turns it off on the submitting host and in
//! `experiments describe`).

use std::path::Path;

use crate::error::UserError;

/// f32: what weights, gradients, moments and (at worst) activations take.
const F32: f64 = 4.0;
/// Copies of every parameter training keeps: weights, gradients, and
/// Adam's first and second moments.
const STATE_COPIES: f64 = 4.0;
/// Floats of saved activations per (position, width, layer) of one row, a
/// rough transformer figure: q, k, v, attention output, two norms, the MLP's
/// 4× hidden before and after its activation, residuals.
pub const ACTIVATION_FLOATS: f64 = 16.0;

/// Set by a process that only plans or describes runs which train on
/// another machine (a Slurm job's node, whose memory a login node's says
/// nothing about): the check is left to the process that trains.
static ELSEWHERE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, [`check`] passes in this process: its runs train elsewhere.
pub fn trains_elsewhere() {
    ELSEWHERE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// One part of a run's memory: the config key that sizes it (named in the
/// refusal when it is the largest part), its value, and its bytes.
#[derive(Debug, Clone)]
pub struct Part {
    pub key: String,
    pub value: String,
    pub bytes: f64,
    /// Where it lives: in device memory on a GPU run, or always on the host.
    pub on_device: bool,
    /// What it is, for the breakdown: "parameters", "activations", "data".
    pub what: &'static str,
}

impl Part {
    /// Training state of `parameters` parameters (on the device on a GPU).
    pub fn parameters(key: &str, value: impl ToString, parameters: f64) -> Part {
        Part {
            key: key.into(),
            value: value.to_string(),
            bytes: parameters * STATE_COPIES * F32,
            on_device: true,
            what: "parameters",
        }
    }
    /// Activations of one row: `seq` positions × `width` × `layers`.
    pub fn activations(key: &str, value: impl ToString, seq: f64, width: f64, layers: f64) -> Part {
        Part {
            key: key.into(),
            value: value.to_string(),
            bytes: ACTIVATION_FLOATS * seq * width * layers * F32,
            on_device: true,
            what: "activations",
        }
    }
    /// f32 weights read from a checkpoint: one copy, widened on the host
    /// before any device sees them.
    pub fn weights(key: &str, value: impl ToString, parameters: f64) -> Part {
        Part {
            key: key.into(),
            value: value.to_string(),
            bytes: parameters * F32,
            on_device: false,
            what: "weights",
        }
    }
    /// A [`Part::parameters`] as the weights alone, on the host: what
    /// loading a checkpoint of that shape holds (no training state).
    pub fn as_weights(&self) -> Part {
        Part {
            bytes: self.bytes / STATE_COPIES,
            on_device: false,
            what: "weights",
            ..self.clone()
        }
    }
    /// Data held in host memory whatever the backend.
    pub fn data(key: &str, value: impl ToString, bytes: f64) -> Part {
        Part {
            key: key.into(),
            value: value.to_string(),
            bytes,
            on_device: false,
            what: "data",
        }
    }
}

/// The memory this process may use, and where that figure came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub bytes: f64,
    pub source: String,
}

/// Refuse (exit 2) a run whose `parts` cannot fit in this machine's memory,
/// naming the largest part's key and value, the estimate, the limit and a fix.
pub fn check(origin: &str, parts: &[Part]) -> Result<(), UserError> {
    if ELSEWHERE.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    let gpu = crate::backend::trains_on_gpu();
    match host_limit() {
        Some(limit) => check_against(origin, parts, gpu, &limit),
        None => Ok(()),
    }
}

/// [`check`] with the limit given (tests give their own).
pub fn check_against(
    origin: &str,
    parts: &[Part],
    gpu: bool,
    limit: &Limit,
) -> Result<(), UserError> {
    // On a GPU, what lives in device memory is not counted against the host
    // (and the device's size is not known here).
    let counted: Vec<&Part> = parts.iter().filter(|p| !(gpu && p.on_device)).collect();
    let total: f64 = counted.iter().map(|p| p.bytes).sum();
    if total <= limit.bytes {
        return Ok(());
    }
    let Some(largest) = counted.iter().max_by(|a, b| a.bytes.total_cmp(&b.bytes)) else {
        return Ok(());
    };
    let breakdown: Vec<String> = counted
        .iter()
        .map(|p| format!("{} ({}) {}", p.what, p.key, human(p.bytes)))
        .collect();
    Err(UserError::usage(format!(
        "{origin}: {} = {} needs more memory than this machine has: the run needs at least {} \
         ({}), the limit is {} ({})",
        largest.key,
        largest.value,
        human(total),
        breakdown.join(", "),
        human(limit.bytes),
        limit.source
    ))
    .with_fix(format!(
        "lower {} (--set {}=…), or run where more memory is free",
        largest.key, largest.key
    )))
}

/// Floating-point operations per second a CPU thread is assumed to do in
/// training (fp32 matrix products; measured gpt2-tiny steps run below it,
/// so the estimate below errs fast, never slow).
const CPU_FLOPS_PER_THREAD: f64 = 2e10;
/// A step estimated to take longer than this is warned about.
const SLOW_STEP_S: f64 = 3600.0;

/// The warning for a step of `flops` floating-point operations on
/// `threads` CPU threads when it would take more than an hour at
/// [`CPU_FLOPS_PER_THREAD`] (None otherwise): `key = value` named, with
/// the estimate (issue #40: `train.batch_size = 100000000` was accepted and
/// printed nothing for a minute; a step would take ~36 h).
pub fn slow_step(
    origin: &str,
    key: &str,
    value: &str,
    flops: f64,
    threads: usize,
) -> Option<String> {
    let seconds = flops / (CPU_FLOPS_PER_THREAD * threads.max(1) as f64);
    (seconds > SLOW_STEP_S).then(|| {
        format!(
            "{origin}: {key} = {value}: one training step is about {flops:.1e} floating-point \
             operations, roughly {:.0} h on this machine's {threads} CPU thread(s); lower {key} \
             (--set {key}=…) unless that is what you want",
            seconds / 3600.0
        )
    })
}

/// [`slow_step`] for a run on this machine's CPU, said on stderr. A GPU run
/// (whose speed is not known here) and a run that trains elsewhere are not
/// estimated.
pub fn warn_if_slow(origin: &str, key: &str, value: impl ToString, flops: f64) {
    if ELSEWHERE.load(std::sync::atomic::Ordering::Relaxed) || crate::backend::trains_on_gpu() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    if let Some(warning) = slow_step(origin, key, &value.to_string(), flops, threads) {
        eprintln!("envgen: warning: {warning}");
    }
}

/// Bytes in binary units, e.g. "16.0 TiB".
pub fn human(bytes: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The smaller of the cgroup's memory limit and MemAvailable; None when
/// neither can be read (then nothing is refused).
pub fn host_limit() -> Option<Limit> {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_available(&text))
        .map(|bytes| Limit {
            bytes,
            source: "MemAvailable in /proc/meminfo".into(),
        });
    let cgroup = cgroup_limit(Path::new("/proc/self/cgroup"), Path::new("/sys/fs/cgroup"));
    match (available, cgroup) {
        (Some(a), Some(c)) => Some(if c.bytes < a.bytes { c } else { a }),
        (a, c) => a.or(c),
    }
}

/// `MemAvailable:  123 kB` in bytes.
fn meminfo_available(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

/// The tightest `memory.max` (cgroup v2) or `memory.limit_in_bytes` (v1)
/// on the way from this process's cgroup up to the root; "max" and v1's
/// huge "unlimited" number are no limit.
fn cgroup_limit(self_cgroup: &Path, root: &Path) -> Option<Limit> {
    let text = std::fs::read_to_string(self_cgroup).ok()?;
    let mut best: Option<Limit> = None;
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let (base, file) = match controllers {
            "" => (root.to_path_buf(), "memory.max"),
            c if c.split(',').any(|c| c == "memory") => {
                (root.join("memory"), "memory.limit_in_bytes")
            }
            _ => continue,
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            let limit = std::fs::read_to_string(dir.join(file))
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
                .filter(|&b| b < 1e18);
            if let Some(bytes) = limit {
                if best.as_ref().is_none_or(|l| bytes < l.bytes) {
                    best = Some(Limit {
                        bytes,
                        source: format!("the cgroup limit in {}", dir.join(file).display()),
                    });
                }
            }
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_of_hours_is_warned_about_with_its_estimate() {
        // gpt2 tiny (~0.1 M parameters, 64 positions) at batch 1e8: the
        // issue's ~36 h on 2 threads; at its preset's 16, no warning.
        let flops = |batch: f64| 6.0 * 1.0e5 * batch * 64.0;
        let warning = slow_step("gpt2", "train.batch_size", "100000000", flops(1e8), 2).unwrap();
        assert!(
            warning.contains("train.batch_size = 100000000") && warning.contains(" h on"),
            "{warning}"
        );
        assert_eq!(
            slow_step("gpt2", "train.batch_size", "16", flops(16.0), 2),
            None
        );
    }

    fn limit(gib: f64) -> Limit {
        Limit {
            bytes: gib * 1024f64.powi(3),
            source: "a test".into(),
        }
    }

    #[test]
    fn the_largest_part_is_named_with_the_estimate_and_the_limit() {
        let parts = [
            Part::parameters("model.n_embd", 1_000_000, 1e12),
            Part::data("data.corpus_bytes", 200_000, 1e6),
        ];
        let err = check_against("preset tiny", &parts, false, &limit(16.0)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("preset tiny: model.n_embd = 1000000 needs more memory")
                && text.contains("at least 14.6 TiB")
                && text.contains("the limit is 16.0 GiB (a test)")
                && text.contains("--set model.n_embd="),
            "{text}"
        );
        assert_eq!(err.kind, crate::error::ErrorKind::Usage);
        assert!(check_against("p", &parts[1..], false, &limit(16.0)).is_ok());
    }

    #[test]
    fn a_gpu_run_counts_only_what_stays_on_the_host() {
        let parts = [
            Part::parameters("model.n_embd", 1, 1e12),
            Part::data("data.corpus_bytes", 1, 1e6),
        ];
        assert!(check_against("p", &parts, true, &limit(1.0)).is_ok());
        let huge = [Part::data("data.corpus_bytes", 1, 1e15)];
        assert!(check_against("p", &huge, true, &limit(1.0)).is_err());
    }

    #[test]
    fn limits_are_read_from_meminfo_and_cgroups() {
        assert_eq!(
            meminfo_available("MemTotal: 10 kB\nMemAvailable:   2048 kB\n"),
            Some(2048.0 * 1024.0)
        );
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cg");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/memory.max"), "1073741824\n").unwrap();
        std::fs::write(root.join("a/b/memory.max"), "max\n").unwrap();
        let own = tmp.path().join("self");
        std::fs::write(&own, "0::/a/b\n").unwrap();
        let found = cgroup_limit(&own, &root).unwrap();
        assert_eq!(found.bytes, 1073741824.0);
        assert!(found.source.contains("a/memory.max"), "{}", found.source);
        std::fs::write(root.join("a/memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit(&own, &root), None);
    }
}
