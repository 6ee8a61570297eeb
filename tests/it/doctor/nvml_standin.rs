//! The GPU sampler and the host probe against a stand-in NVML: a labelled
//! fake libnvidia-ml.so.1 (tests/fixtures/libnvml-standin/libnvidia-ml.c,
//! built here) that answers with fixed numbers. CI has no driver, so without
//! it a sampler that never starts would pass every test (issue #26).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::run::{assert_ok, SHORT};
use crate::common::{envgen, json_of, run_dir_of};

/// The stand-in library, compiled once per test process.
pub(crate) fn standin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libnvml-standin");
        std::fs::create_dir_all(&dir).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/libnvml-standin/libnvidia-ml.c");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(dir.join("libnvidia-ml.so.1"))
            .arg(&source)
            .status()
            .expect("cc (the C compiler) must be installed");
        assert!(status.success(), "building the stand-in NVML failed");
        dir
    })
}

/// A short CPU training run, with the stand-in NVML on the loader path or not.
fn short_cpu_run(out: &Path, standin: bool) -> Output {
    let mut cmd = envgen();
    cmd.env_remove("ENVGEN_NO_NVML")
        .env_remove("LD_LIBRARY_PATH");
    if standin {
        cmd.env("LD_LIBRARY_PATH", standin_dir());
    }
    cmd.args(["run", "gpt2"])
        .args(SHORT)
        .arg("--out")
        .arg(out)
        .output()
        .expect("spawn envgen")
}

/// The `gpu` sample lines of a run's metrics.jsonl.
fn gpu_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("gpu").is_some())
        .collect()
}

#[test]
fn a_run_records_what_nvml_reports_per_gpu_and_nothing_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let with = short_cpu_run(&tmp.path().join("with"), true);
    assert_ok(&with, "run with the stand-in NVML");
    let lines = gpu_lines(&run_dir_of(&json_of(&with)));
    assert!(!lines.is_empty(), "no GPU sample was written");
    let gpu = &lines[0]["gpu"][0];
    assert_eq!(gpu["index"], 0);
    assert_eq!(gpu["util_percent"], 42);
    assert_eq!(gpu["memory_used_gb"], 12.5);
    assert_eq!(gpu["memory_total_gb"], 80.0);
    assert!(lines[0]["time_s"].as_f64().is_some());
    assert!(lines[0].get("step").is_none());

    let without = short_cpu_run(&tmp.path().join("without"), false);
    assert_ok(&without, "run without NVML");
    assert!(gpu_lines(&run_dir_of(&json_of(&without))).is_empty());
}

#[test]
fn doctor_reads_the_gpu_and_driver_through_nvml() {
    let out = envgen()
        .env_remove("ENVGEN_NO_NVML")
        .env("LD_LIBRARY_PATH", standin_dir())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let doc = json_of(&out);
    let host = &doc["host"];
    assert_eq!(host["source"], "nvml", "{host}");
    assert_eq!(host["driver_version"], "580.95.05");
    assert_eq!(host["cuda_driver_version"], "13.0");
    let gpu = &host["gpus"][0];
    assert_eq!(gpu["name"], "NVIDIA H100 80GB HBM3 (envgen stand-in NVML)");
    assert_eq!(gpu["compute_capability"], "9.0");
    assert_eq!(gpu["memory_mib"], 80_000_000_000u64 / (1024 * 1024));
}
