//! Mixed precision through the real `envgen` binary on the CPU backend
//! (issue #12): bf16 and fp16 runs of the tiny gpt2 and hrm-sudoku presets
//! learn like fp32, the precision is recorded in the manifest and never in
//! `config_hash`, fp16's loss scaler reports itself in metrics.jsonl, and a
//! bf16 run resumed midway ends on the same bits as an uninterrupted one.
//! Learning "like fp32" alone would pass with the half types switched off
//! (issue #26), so each half-precision run must also have moved its first
//! step away from fp32's, bf16 further than fp16.
//!
//! The CPU computes bf16/fp16 the way a GPU does (half inputs, f32
//! accumulation, f32 statistics and losses; see envgen_kernels::autocast),
//! so these are numerics checks; they say nothing about GPU speed.

use std::path::Path;

use serde_json::Value;

use crate::common::experiment::*;
use crate::common::{heavy_test, json_of, run, run_dir_of, run_ok};

/// How far a bf16/fp16 run's final validation loss may lie from the fp32
/// run of the same config and seed, in nats. Measured on the tiny preset
/// (300 steps, 2026-11-25): fp32 runs with seeds 1337, 1, 2, 3 end at
/// 1.926, 1.943, 1.957 and 1.987, a spread of 0.061 — changing the
/// precision may move the result by what changing the seed does, not more.
/// Observed: bf16 within 0.005-0.010 of fp32, fp16 within 0.04 (fp16 skips
/// the first few steps while its loss scale settles).
const GPT2_VAL_LOSS_TOLERANCE: f64 = 0.06;

/// The same for hrm-sudoku's held-out blank-cell accuracy. Measured on the
/// tiny preset (2026-11-25): fp32 runs with seeds 0, 1, 2 end at 0.359,
/// 0.381 and 0.345, a spread of 0.037. Observed: bf16 and fp16 within
/// 0.02 of fp32.
const HRM_CELL_ACCURACY_TOLERANCE: f64 = 0.04;

/// A value computed in f32 twice agrees to its last bits (the CPU backend is
/// deterministic, whatever the thread count); 16 units of f32's roundoff
/// (2^-24) is far above that and far below what a half type changes.
const F32_NOISE: f64 = 16.0 / (1u64 << 24) as f64;

/// How far `key` of step 1 (the first forward and backward, from the same
/// initial weights) lies from the fp32 run's, relative. Only the precision
/// differs there: without the autocast scope it is exactly 0.
/// Measured (2026-11-25, tiny presets): gpt2 `grad_norm` bf16 3.1e-4,
/// fp16 1.7e-5; hrm `lm_loss` bf16 2.4e-4, fp16 1.3e-5.
fn first_step_deviation(doc: &Value, fp32: &Value, key: &str) -> f64 {
    let first = |doc: &Value| {
        let text = std::fs::read_to_string(run_dir_of(doc).join("metrics.jsonl")).unwrap();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["step"] == 1 && r.get(key).is_some())
            .and_then(|r| r[key].as_f64())
            .unwrap_or_else(|| panic!("no {key} at step 1"))
    };
    let (half, full) = (first(doc), first(fp32));
    (half - full).abs() / full.abs()
}

/// The half types really computed: both moved step 1 beyond f32's noise,
/// bf16 (8 significant bits) further than fp16 (11), and neither absurdly.
fn assert_computed_in_half(bf16: f64, fp16: f64, what: &str) {
    eprintln!("{what} at step 1 vs fp32: bf16 {bf16:.2e}, fp16 {fp16:.2e}");
    assert!(fp16 > F32_NOISE, "fp16 {what} is fp32's: {fp16:e}");
    assert!(
        bf16 > fp16,
        "bf16 ({bf16:e}) not coarser than fp16 ({fp16:e})"
    );
    assert!(bf16 < 1e-2, "bf16 {what} off by {bf16:e}");
}

fn run_at(experiment: &str, precision: &str, out: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "run",
        experiment,
        "--backend",
        "cpu",
        "--precision",
        precision,
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    json_of(&run_ok(&args))
}

/// Precision is in the manifest's profile, and the science is untouched.
fn assert_recorded(doc: &Value, fp32: &Value, precision: &str) {
    let manifest = manifest_of(doc);
    assert_eq!(manifest["profile"]["precision"], precision);
    assert_eq!(
        manifest["config_hash"],
        manifest_of(fp32)["config_hash"],
        "precision must not change config_hash"
    );
}

/// Every fp16 step record says what the loss scaler did, and the summary
/// counts agree with the records.
fn assert_loss_scaler_reported(doc: &Value) {
    let metrics = std::fs::read_to_string(run_dir_of(doc).join("metrics.jsonl")).unwrap();
    let steps: Vec<Value> = metrics
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["step"].as_u64().is_some_and(|s| s > 0) && r.get("loss").is_some())
        .collect();
    assert!(!steps.is_empty());
    let mut skipped = 0;
    for record in &steps {
        let scale = record["loss_scale"]
            .as_f64()
            .expect("loss_scale in every fp16 step");
        assert!(scale >= 1.0, "{record}");
        if record["skipped"] == true {
            skipped += 1;
            assert!(
                record["grad_norm"].is_null(),
                "a skipped step has no norm: {record}"
            );
        }
    }
    assert_eq!(metric(doc, "skipped_steps") as u64, skipped);
    assert!(metric(doc, "loss_scale") >= 1.0);
}

heavy_test!(gpt2_tiny_in_bf16_and_fp16_learns_like_fp32, |tmp| {
    let fp32 = run_at("gpt2", "fp32", tmp.path(), &[]);
    let reference = metric(&fp32, "final_val_loss");
    let mut deviation = Vec::new();
    for precision in ["bf16", "fp16"] {
        let doc = run_at("gpt2", precision, tmp.path(), &[]);
        deviation.push(first_step_deviation(&doc, &fp32, "grad_norm"));
        let val = metric(&doc, "final_val_loss");
        let initial = metric(&doc, "initial_val_loss");
        eprintln!("gpt2 tiny {precision}: val loss {initial:.4} -> {val:.4} (fp32 {reference:.4})");
        assert!(
            (val - reference).abs() <= GPT2_VAL_LOSS_TOLERANCE,
            "{precision} ends at {val}, fp32 at {reference}"
        );
        assert!(
            val <= 0.6 * initial,
            "{precision} did not learn: {initial} -> {val}"
        );
        assert_recorded(&doc, &fp32, precision);
        if precision == "fp16" {
            assert_loss_scaler_reported(&doc);
        }
    }
    assert_computed_in_half(deviation[0], deviation[1], "gpt2 grad_norm");
});

heavy_test!(hrm_tiny_in_bf16_and_fp16_learns_like_fp32, |tmp| {
    let fp32 = run_at("hrm-sudoku", "fp32", tmp.path(), &[]);
    let reference = metric(&fp32, "cell_accuracy");
    let mut deviation = Vec::new();
    for precision in ["bf16", "fp16"] {
        let doc = run_at("hrm-sudoku", precision, tmp.path(), &[]);
        deviation.push(first_step_deviation(&doc, &fp32, "lm_loss"));
        let cell = metric(&doc, "cell_accuracy");
        eprintln!("hrm tiny {precision}: blank-cell accuracy {cell:.4} (fp32 {reference:.4})");
        assert!(
            (cell - reference).abs() <= HRM_CELL_ACCURACY_TOLERANCE,
            "{precision} reaches {cell}, fp32 {reference}"
        );
        assert!(
            cell >= 0.30,
            "{precision}: blank-cell accuracy {cell} < 0.30"
        );
        assert_recorded(&doc, &fp32, precision);
        if precision == "fp16" {
            assert_loss_scaler_reported(&doc);
        }
    }
    assert_computed_in_half(deviation[0], deviation[1], "hrm lm_loss");
});

heavy_test!(a_bf16_run_resumed_midway_ends_on_the_same_bits, |tmp| {
    let short = [
        "--set",
        "train.steps=24",
        "--set",
        "train.checkpoint_every=8",
        "--set",
        "train.eval_every=8",
    ];
    let whole = run_at("gpt2", "bf16", tmp.path(), &short);
    let mut args = vec![
        "run",
        "gpt2",
        "--backend",
        "cpu",
        "--precision",
        "bf16",
        "--json",
        "--out",
        tmp.path().to_str().unwrap(),
        "--stop-after",
        "12",
    ];
    args.extend(short);
    let dir = stopped_after(&run(&args), 12);
    // No --precision on resume: the run keeps the manifest's.
    let resumed = resume("gpt2", &dir);
    assert_eq!(manifest_of(&resumed)["profile"]["precision"], "bf16");
    assert_resumed_identically(
        &whole,
        &resumed,
        &dir,
        &["final_train_loss", "final_val_loss", "initial_val_loss"],
        24,
    );
});

heavy_test!(an_unknown_precision_is_a_usage_error, || {
    let out = run(&["run", "gpt2", "--backend", "cpu", "--precision", "fp8"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fp8") && err.contains("bf16"), "{err}");
});
