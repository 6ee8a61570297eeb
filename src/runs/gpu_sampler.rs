//! Live GPU metrics for a run on a GPU host: NVML's utilization and memory
//! per GPU, sampled on a thread and appended to `metrics.jsonl` as
//! `{"time_s": …, "time": UNIX_SECONDS, "gpu": [{"index", "util_percent", "memory_used_gb", …}]}`
//! lines (no `step`: readers that plot steps skip them; the run's TensorBoard
//! file plots them at the last training step). Without NVML
//! (no driver, `ENVGEN_NO_NVML=1`) nothing is sampled and nothing fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envgen_experiments::engine::tensorboard;
use nvml_wrapper::Nvml;
use serde_json::{json, Value};

/// One GPU at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub util_percent: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

/// The metrics.jsonl line for one sampling instant.
pub fn record(elapsed: Duration, samples: &[GpuSample]) -> Value {
    const GB: f64 = 1e9;
    let gpus: Vec<Value> = samples
        .iter()
        .map(|s| {
            json!({
                "index": s.index,
                "util_percent": s.util_percent,
                "memory_used_gb": s.memory_used_bytes as f64 / GB,
                "memory_total_gb": s.memory_total_bytes as f64 / GB,
            })
        })
        .collect();
    let now = envgen_experiments::engine::run_files::unix_now();
    json!({ "time_s": elapsed.as_secs_f64(), "time": now, "gpu": gpus })
}

fn sample(nvml: &Nvml, count: u32) -> Vec<GpuSample> {
    (0..count)
        .filter_map(|index| {
            let device = nvml.device_by_index(index).ok()?;
            let util = device.utilization_rates().ok()?;
            let memory = device.memory_info().ok()?;
            Some(GpuSample {
                index,
                util_percent: util.gpu,
                memory_used_bytes: memory.used,
                memory_total_bytes: memory.total,
            })
        })
        .collect()
}

/// A running sampler; dropping it stops the thread.
pub struct GpuSampler {
    metrics: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl GpuSampler {
    /// Start sampling every `interval` into `metrics_path`; `None` when NVML
    /// is absent or sees no GPU (the normal case on CPU machines).
    pub fn start(metrics_path: &Path, interval: Duration) -> Option<GpuSampler> {
        if crate::probe::nvml::skipped() {
            return None;
        }
        let nvml = Nvml::init().ok()?;
        let count = nvml.device_count().ok().filter(|&n| n > 0)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = metrics_path.to_path_buf();
        // Sample at the end of each interval, and once more when stopped:
        // every run gets at least one line, however short, and the first
        // comes after the trainer has started metrics.jsonl afresh (a line
        // written before that would be truncated with the old ones).
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            loop {
                let until = Instant::now() + interval;
                while Instant::now() < until && !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50).min(interval));
                }
                let samples = sample(&nvml, count);
                if !samples.is_empty() {
                    // One write per line in append mode: lines from the
                    // training loop and from here never interleave mid-line.
                    let line = format!("{}\n", record(started.elapsed(), &samples));
                    if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&path) {
                        let _ = file.write_all(line.as_bytes());
                    }
                }
                if flag.load(Ordering::SeqCst) {
                    break;
                }
            }
        });
        Some(GpuSampler {
            metrics: metrics_path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for GpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // The last sample comes after the trainer's log (which mirrors every
        // line into the run's event file as it goes) has closed: bring the
        // event file up to date.
        let run_dir = self.metrics.parent().unwrap_or(Path::new("."));
        if let Err(e) = tensorboard::export(run_dir, run_dir) {
            tracing::warn!("updating the event file in {}: {e:#}", run_dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_line_has_util_and_memory_per_gpu_and_no_step() {
        let line = record(
            Duration::from_millis(1500),
            &[GpuSample {
                index: 0,
                util_percent: 97,
                memory_used_bytes: 30_000_000_000,
                memory_total_bytes: 80_000_000_000,
            }],
        );
        assert_eq!(line["time_s"], 1.5);
        assert_eq!(line["gpu"][0]["util_percent"], 97);
        assert_eq!(line["gpu"][0]["memory_used_gb"], 30.0);
        assert!(line.get("step").is_none());
    }

    /// On this (driverless) machine the sampler must simply not start; on
    /// a GPU host it must write sample lines. The NVML path is not faked.
    #[test]
    fn samples_only_where_nvml_answers_and_never_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(&path, "").unwrap();
        let nvml_present = !crate::probe::nvml::skipped()
            && Nvml::init()
                .ok()
                .and_then(|n| n.device_count().ok())
                .is_some_and(|n| n > 0);
        let sampler = GpuSampler::start(&path, Duration::from_millis(10));
        assert_eq!(sampler.is_some(), nvml_present);
        std::thread::sleep(Duration::from_millis(300));
        drop(sampler);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.contains("util_percent"), nvml_present, "{text}");
    }
}
