//! Shared by the experiment tests (`gpt2_cli`, `hrm_cli`, `rft_cli`,
//! `quantize_cli`, …): metrics and manifests of runs, the "a resumed run
//! ends where an uninterrupted one does" check, quantize runs.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use super::{json_of, read_json, run, run_dir_of, run_ok};

/// `summary.metrics[key]` of an `envgen run --json` document.
pub fn metric(doc: &Value, key: &str) -> f64 {
    doc["summary"]["metrics"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} in {doc}"))
}

/// The bits of [`metric`]: runs are compared bit for bit, not approximately.
pub fn metric_bits(doc: &Value, key: &str) -> u64 {
    metric(doc, key).to_bits()
}

/// The manifest.json of an `envgen run --json` document's run.
pub fn manifest_of(doc: &Value) -> Value {
    read_json(&run_dir_of(doc).join("manifest.json"))
}

/// `envgen run EXPERIMENT --backend cpu --json --resume DIR`, which must
/// succeed; its JSON document.
pub fn resume(experiment: &str, dir: &Path) -> Value {
    json_of(&run_ok(&[
        "run",
        experiment,
        "--backend",
        "cpu",
        "--json",
        "--resume",
        dir.to_str().unwrap(),
    ]))
}

/// A run resumed in `resumed_dir` ended exactly where the uninterrupted
/// `whole` did: the same bits for every metric in `keys`, the same final
/// weights, and a metrics.jsonl with steps 1..=`steps` once each.
pub fn assert_resumed_identically(
    whole: &Value,
    resumed: &Value,
    resumed_dir: &Path,
    keys: &[&str],
    steps: u64,
) {
    assert_eq!(resumed["summary"]["status"], "completed");
    for key in keys {
        assert_eq!(
            metric(whole, key).to_bits(),
            metric(resumed, key).to_bits(),
            "{key} differs after resume"
        );
    }
    let weights = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(
        weights(&run_dir_of(whole)) == weights(resumed_dir),
        "final weights differ after resume"
    );
    assert_eq!(logged_steps(resumed_dir), (1..=steps).collect::<Vec<_>>());
}

/// The training steps a run's metrics.jsonl logs, in order.
pub fn logged_steps(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["step"].as_u64())
        .filter(|&s| s > 0)
        .collect()
}

/// The JSON of a run that ended interrupted: exit 130, status `interrupted`.
pub fn interrupted(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json_of(out);
    assert_eq!(doc["summary"]["status"], "interrupted");
    doc
}

/// A run stopped by `--stop-after STEPS`: exit 130, status `interrupted`
/// after exactly `steps` steps. Its run directory.
pub fn stopped_after(out: &Output, steps: u64) -> PathBuf {
    let doc = interrupted(out);
    assert_eq!(doc["summary"]["steps_done"], steps);
    run_dir_of(&doc)
}

/// `envgen run quantize --backend cpu --json --out OUT --set source=SOURCE
/// --set S…`, whatever its exit status.
pub fn quantize(out: &Path, source: &Path, sets: &[&str]) -> Output {
    quantize_with(out, source, sets, &[])
}

/// [`quantize`] with more arguments after the `--set`s (`--stop-after N`).
pub fn quantize_with(out: &Path, source: &Path, sets: &[&str], extra: &[&str]) -> Output {
    let source = format!("source={}", source.display());
    let mut args = vec![
        "run",
        "quantize",
        "--backend",
        "cpu",
        "--json",
        "--out",
        out.to_str().unwrap(),
        "--set",
        &source,
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(extra);
    run(&args)
}

/// The row of `scheme` in a quantize run's `metrics.schemes[]`.
pub fn scheme_row<'a>(doc: &'a Value, scheme: &str) -> &'a Value {
    doc["summary"]["metrics"]["schemes"]
        .as_array()
        .expect("metrics.schemes")
        .iter()
        .find(|r| r["scheme"] == scheme)
        .unwrap_or_else(|| panic!("no row {scheme} in {doc}"))
}

/// The rows a quantize run with a `[prune]` table adds, checked against
/// its f32 row: fewer parameters, smaller files, the unpruned control, and
/// the recovery fine-tune moving the metric the right way. Returns
/// (pruned, pruned+recovery) metric values.
pub fn assert_pruned_rows(doc: &Value, lower_is_better: bool) -> (f64, f64) {
    let num = |scheme: &str, key: &str| {
        scheme_row(doc, scheme)[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} of {scheme} in {doc}"))
    };
    let all = num("f32", "parameters");
    let kept = num("pruned", "parameters");
    assert!(kept < all, "pruning kept {kept} of {all} parameters");
    assert_eq!(num("pruned+recovery", "parameters"), kept);
    assert_eq!(num("unpruned+recovery", "parameters"), all);
    assert!(num("pruned", "bytes") < num("f32", "bytes"));
    let int4 = "pruned+recovery+int4-sym-g32";
    // Against the *source's* f32 size: pruning and INT4 g32 (≥ 5.8× alone
    // on these models) multiply.
    let compression = num(int4, "compression");
    assert!(
        compression >= 5.0 * all / kept,
        "{int4}: {compression}x with {kept} of {all} parameters"
    );
    assert!(scheme_row(doc, int4)["file"].is_string());
    let (pruned, recovered) = (
        num("pruned", "metric_value"),
        num("pruned+recovery", "metric_value"),
    );
    let improved = if lower_is_better {
        recovered < pruned
    } else {
        recovered > pruned
    };
    assert!(
        improved,
        "recovery moved the metric from {pruned} to {recovered}"
    );
    let prune = &doc["summary"]["metrics"]["prune"];
    assert!(prune["heads_kept"].as_u64().unwrap() < prune["heads"].as_u64().unwrap());
    (pruned, recovered)
}

/// `computed` (in memory) is the number `reported` in a JSON document,
/// bit for bit up to serde_json's default float parser, which may land one
/// unit in the last place off the decimal it reads.
pub fn assert_reported(computed: f64, reported: f64, what: &str) {
    let ulps = (computed.to_bits() as i64 - reported.to_bits() as i64).abs();
    assert!(
        ulps <= 1,
        "{what}: computed {computed:e}, reported {reported:e} ({ulps} ulps apart)"
    );
}

/// A run refused for the memory it needs: exit 2, the key and value, the
/// estimate, the limit and a fix; no abort, and nothing made under `out`.
pub fn assert_too_big(out: &Output, set: &str, key: &str, runs: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{set}: {stderr}");
    for needle in [
        key,
        "needs more memory than this machine has",
        "the limit is",
        "fix: lower",
    ] {
        assert!(stderr.contains(needle), "{set}: no {needle:?} in {stderr}");
    }
    assert!(!stderr.contains("memory allocation"), "{set}: {stderr}");
    let made = std::fs::read_dir(runs).map_or(0, |d| d.count());
    assert_eq!(
        made,
        0,
        "{set}: a run directory was made in {}",
        runs.display()
    );
}

/// A run that diverged: exit 1, status `failed` before its last step
/// (`steps` in all), the step and the config key to lower in the error.
/// Returns the run's JSON document.
pub fn assert_diverged(out: &Output, steps: u64, lr_key: &str) -> Value {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json_of(out);
    let summary = &doc["summary"];
    assert_eq!(summary["status"], "failed", "{summary}");
    let step = summary["steps_done"].as_u64().unwrap();
    assert!(
        step < steps,
        "stopped at the divergence, not the end: {summary}"
    );
    let error = summary["metrics"]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("at step {step}")) && error.contains(lr_key),
        "{error}"
    );
    doc
}
