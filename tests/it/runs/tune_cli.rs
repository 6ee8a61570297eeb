//! `envgen tune` (and `probe`, its hidden alias until the next release)
//! through the real binary on the CPU, with a memory cap
//! standing in for a GPU's memory: it tries micro-batches upward, stops at
//! the first that runs out of memory, writes the fastest that fitted into
//! the user's profile file (under a private HOME here), and `envgen run`
//! then trains with it — the science config untouched.

use std::path::Path;

use serde_json::Value;

use crate::common::experiment::*;
use crate::common::{envgen, expect_success, heavy_test, json_of};

/// `envgen ARGS` with HOME (hence ~/.config/envgen) in `home`.
fn in_home(home: &Path, args: &[&str]) -> std::process::Output {
    envgen()
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("ENVGEN_CONFIG_DIR")
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("spawn envgen")
}

/// The memory cap (RLIMIT_DATA) of the probe below. Measured on the 2-core
/// dev VM, 2026-11-25, bench-cpu (3.3 M parameters, batch 16 × 128 tokens),
/// two rayon threads, caps in steps of 8 MiB: micro-batch 1 first fits at
/// 144M, 8 at 168M, 16 at 224M (it fails at 208M). 192M sits in the middle
/// of the gap: 1…8 fit, 16 runs out — what a GPU's memory does to a probe.
/// Thread stacks count against the cap, hence the pinned thread count.
const MEMORY_LIMIT: &str = "192M";

heavy_test!(tune_stops_at_the_cap_and_run_uses_what_it_wrote, || {
    let home = tempfile::tempdir().unwrap();
    let out = in_home(
        home.path(),
        &[
            "tune",
            "gpt2",
            "--preset",
            "bench-cpu",
            "--backend",
            "cpu",
            "--memory-limit",
            MEMORY_LIMIT,
            "--steps",
            "2",
            "--json",
        ],
    );
    let doc = json_of(&expect_success(out));
    let chosen = &doc["chosen"];
    let trials = chosen["trials"].as_array().unwrap();
    eprintln!("probe: {}", serde_json::to_string_pretty(&doc).unwrap());
    // Upward from 1, stopped at the first out-of-memory.
    let tried: Vec<u64> = trials
        .iter()
        .map(|t| t["micro_batch"].as_u64().unwrap())
        .collect();
    assert_eq!(tried[0], 1);
    assert!(tried.windows(2).all(|w| w[0] < w[1]), "{tried:?}");
    let last = trials.last().unwrap();
    assert_eq!(
        last["out_of_memory"], true,
        "the cap must stop the probe: {tried:?}"
    );
    assert!(trials[..trials.len() - 1]
        .iter()
        .all(|t| t.get("out_of_memory").is_none()));
    assert!(
        tried.len() >= 3,
        "at least two micro-batches must fit: {tried:?}"
    );
    // The fastest of those that fitted, with its measurements.
    let fitted: Vec<&Value> = trials
        .iter()
        .filter(|t| t["steps_per_s"].is_number())
        .collect();
    let best = fitted
        .iter()
        .max_by(|a, b| {
            a["steps_per_s"]
                .as_f64()
                .partial_cmp(&b["steps_per_s"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(chosen["micro_batch"], best["micro_batch"]);
    for t in &fitted {
        assert!(t["peak_memory_mib"].as_f64().unwrap() > 10.0, "{t}");
    }
    assert_eq!(chosen["precision"], "fp32");
    assert_eq!(chosen["memory_limit"], MEMORY_LIMIT);

    // Written to ~/.config/envgen/profiles.toml, with the measurement.
    let file = home.path().join(".config/envgen/profiles.toml");
    assert_eq!(Path::new(doc["profile_file"].as_str().unwrap()), file);
    let written: toml::Value = toml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let profile = &written["profile"][0];
    assert_eq!(profile["name"].as_str(), Some("probed-cpu"));
    let key = "gpt2/bench-cpu";
    assert_eq!(
        profile["micro_batch"][key].as_integer().map(|m| m as u64),
        chosen["micro_batch"].as_u64()
    );
    assert!(profile["measured"][key]["steps_per_s"].as_float().unwrap() > 0.0);

    // `envgen run` picks the probed profile; the science is the preset's.
    let run = |home: &Path| {
        json_of(&expect_success(in_home(
            home,
            &[
                "run",
                "gpt2",
                "--preset",
                "bench-cpu",
                "--backend",
                "cpu",
                "--set",
                "train.steps=1",
                "--json",
                "--out",
                home.join("runs").to_str().unwrap(),
            ],
        )))
    };
    let probed = manifest_of(&run(home.path()));
    assert_eq!(probed["profile"]["name"], "probed-cpu");
    assert_eq!(probed["profile"]["micro_batch"], chosen["micro_batch"]);
    let elsewhere = tempfile::tempdir().unwrap();
    let plain = manifest_of(&run(elsewhere.path()));
    assert_eq!(plain["profile"]["name"], "cpu");
    assert_eq!(probed["config_hash"], plain["config_hash"]);
});

heavy_test!(
    probe_the_old_name_rejects_micro_batches_that_do_not_divide_the_batch,
    || {
        let home = tempfile::tempdir().unwrap();
        let out = in_home(
            home.path(),
            &[
                "probe",
                "gpt2",
                "--backend",
                "cpu",
                "--micro-batches",
                "3",
                "--dry-run",
            ],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("does not divide"));
        assert!(
            !home.path().join(".config").exists(),
            "a refused probe writes nothing"
        );
    }
);
