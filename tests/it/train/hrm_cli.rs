//! HRM on Sudoku through the real `envgen` binary: the tiny preset learns
//! on held-out puzzles (and its model quantizes), resume is exact, bad
//! configs exit 2, and the paper preset's parameter count. Real Burn
//! training on CPU.

use std::path::Path;
use std::process::Output;

use crate::common::experiment::*;
use crate::common::{envgen, expect_success, heavy_test, json_of, read_json, run_dir_of, run_ok};

// The default preset, end to end: ≥ 0.30 accuracy on the blank cells of
// held-out puzzles (chance is 1/9), from ≈ chance at step 0.
heavy_test!(tiny_preset_learns_on_held_out_puzzles, |tmp| {
    let out = run_ok(&[
        "run",
        "hrm-sudoku",
        "--backend",
        "cpu",
        "--json",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    let doc = json_of(&out);
    assert_eq!(doc["summary"]["status"], "completed");
    let initial = metric(&doc, "initial_cell_accuracy");
    let cell = metric(&doc, "cell_accuracy");
    let exact = metric(&doc, "exact_accuracy");
    let act = metric(&doc, "mean_act_steps");
    eprintln!(
        "tiny: blank-cell accuracy {initial:.3} -> {cell:.3}, exact {exact:.3}, \
         mean ACT steps {act:.2}, {:.2} steps/s",
        metric(&doc, "steps_per_s")
    );
    assert!(
        initial < 0.2,
        "initial accuracy {initial} is not near chance"
    );
    assert!(cell >= 0.30, "blank-cell accuracy {cell} < 0.30");
    assert!((0.0..=1.0).contains(&exact));
    assert!(act >= 1.0, "mean ACT steps {act}");
    assert!(metric(&doc, "test_puzzles") >= 100.0);

    let dir = run_dir_of(&doc);
    for file in [
        "config.toml",
        "manifest.json",
        "metrics.jsonl",
        "summary.json",
        "model.safetensors",
        "checkpoints/latest",
        "dataset/dataset.json",
    ] {
        assert!(
            dir.join(file).exists(),
            "{file} missing in {}",
            dir.display()
        );
    }
    let manifest = read_json(&dir.join("manifest.json"));
    assert_eq!(manifest["experiment"], "hrm-sudoku");
    assert_eq!(manifest["preset"], "tiny");
    assert!(manifest["finished_at"].is_string());
    let lines = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let evals = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["cell_accuracy"].is_number())
        .count();
    assert!(evals >= 3, "only {evals} evaluations in metrics.jsonl");

    // The trained HRM quantizes: its packed files are scored on the same
    // held-out puzzles (blank-cell accuracy, exact accuracy alongside).
    let q = json_of(&expect_success(quantize(
        tmp.path(),
        &dir,
        &["schemes=[\"int8\",\"int4-sym-g32\",\"burn-q8-block32\"]"],
    )));
    for r in q["summary"]["metrics"]["schemes"].as_array().unwrap() {
        eprintln!("{r}");
    }
    let base = scheme_row(&q, "f32");
    assert_eq!(base["metric"], "cell_accuracy");
    let f32_cell = base["metric_value"].as_f64().unwrap();
    assert!((f32_cell - cell).abs() < 0.01, "{f32_cell} vs {cell}");
    assert!(base["exact_accuracy"].is_number());
    let int8 = scheme_row(&q, "int8");
    let delta = int8["metric_delta_pct"].as_f64().unwrap();
    assert!(delta.abs() <= 2.0, "INT8 changed cell accuracy by {delta}%");
    let int4 = scheme_row(&q, "int4-sym-g32");
    assert!(int4["compression"].as_f64().unwrap() >= 3.5, "{int4}");
    let burn = scheme_row(&q, "burn-q8-block32");
    // Burn's own Q8 must work and keep the accuracy as our INT8 does.
    let burn_delta = burn["metric_delta_pct"]
        .as_f64()
        .unwrap_or_else(|| panic!("{burn}"));
    assert!(
        burn_delta.abs() <= 2.0,
        "Burn Q8 changed cell accuracy by {burn_delta}%"
    );
    // The file on disk is what was scored.
    let source = envgen_experiments::quant::run::open_source(&dir, 16).unwrap();
    let file = run_dir_of(&q).join(int8["file"].as_str().unwrap());
    let again = envgen_experiments::quant::run::evaluate_packed(&*source, &file).unwrap();
    assert_reported(again.value, int8["metric_value"].as_f64().unwrap(), "int8");
    // Structured pruning knows GPTs only: refused before anything runs.
    let out = quantize(tmp.path(), &dir, &["prune={mlp_fraction=0.5}"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is an hrm-sudoku run"), "{stderr}");
});

/// A very short run: 64 train puzzles, batch 8, 16 steps, eval every 8.
pub(crate) const SHORT: &[&str] = &[
    "run",
    "hrm-sudoku",
    "--backend",
    "cpu",
    "--json",
    "--set",
    "data.train_puzzles=64",
    "--set",
    "data.test_puzzles=16",
    "--set",
    "data.augmentations=2",
    "--set",
    "train.global_batch_size=8",
    "--set",
    "train.epochs=2",
    "--set",
    "train.eval_interval=1",
    "--set",
    "train.checkpoint_every=4",
];

fn short_run(out: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&str> = SHORT.to_vec();
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    envgen().args(&args).output().expect("spawn envgen")
}

heavy_test!(stop_then_resume_matches_an_uninterrupted_run, |tmp| {
    let whole = short_run(tmp.path(), &[]);
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    let whole = json_of(&whole);
    assert_eq!(whole["summary"]["steps_done"], 16);

    // Interrupted after 6 steps (checkpoint at 4 and 6), resumed with a
    // different micro-batch: the ACT carry is saved for the global batch.
    let stopped = short_run(tmp.path(), &["--stop-after", "6"]);
    let dir = stopped_after(&stopped, 6);
    assert!(dir
        .join("checkpoints/step-00000006/act.safetensors")
        .exists());
    let resumed = resume("hrm-sudoku", &dir);
    assert_eq!(resumed["summary"]["steps_done"], 16);
    assert_resumed_identically(
        &whole,
        &resumed,
        &dir,
        &[
            "exact_accuracy",
            "cell_accuracy",
            "mean_act_steps",
            "final_train_loss",
            "initial_cell_accuracy",
        ],
        16,
    );
});

heavy_test!(bad_configs_exit_2_naming_the_key, |tmp| {
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "model.hedas=4"], "hedas"),
        (
            &["--set", "data.train_csv=/nonexistent/train.csv"],
            "test_csv",
        ),
        (&["--set", "train.global_batch_size=0"], "global_batch_size"),
        (&["--set", "model.heads=3"], "model.heads"),
        (
            &[
                "--set",
                "data.train_csv=/nonexistent/train.csv",
                "--set",
                "data.test_csv=/nonexistent/test.csv",
            ],
            "/nonexistent/train.csv",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec![
            "run",
            "hrm-sudoku",
            "--backend",
            "cpu",
            "--out",
            tmp.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = envgen().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
    }
});

heavy_test!(describe_reports_the_paper_parameter_count, || {
    let doc = json_of(&run_ok(&[
        "experiments",
        "describe",
        "hrm-sudoku",
        "--preset",
        "sudoku-extreme-1k",
        "--json",
    ]));
    let text = doc.to_string();
    assert!(text.contains("27275778"), "{text}");
    let list = String::from_utf8_lossy(&run_ok(&["experiments", "list"]).stdout).to_string();
    assert!(list.contains("hrm-sudoku"), "{list}");
});

// A learning rate that blows the weights up (finite and positive, so the
// config is accepted) makes the loss not a number: the run fails at that
// step (exit 1, status `failed`, the step and `train.lr` in the error)
// instead of "completing" (issue #21). Out-of-range optimizer numbers are
// refused before the run (exit 2), as gpt2's are.
heavy_test!(a_diverging_run_fails_at_the_step_it_diverged, |tmp| {
    let out = short_run(tmp.path(), &["--set", "train.lr=1e6"]);
    let doc = assert_diverged(&out, 16, "train.lr");
    let dir = run_dir_of(&doc);
    assert!(
        !dir.join("model.safetensors").exists(),
        "a diverged run exported its weights"
    );

    for (key, value) in [
        ("train.beta1", "1"),
        ("train.lr", "inf"),
        ("train.weight_decay", "-1"),
    ] {
        let set = format!("{key}={value}");
        let out = short_run(&tmp.path().join("refused"), &["--set", &set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{set}: {stderr}");
        assert!(stderr.contains(&format!("{key} = ")), "{set}: {stderr}");
        assert!(
            !tmp.path().join("refused").exists(),
            "{set}: a run directory"
        );
    }
});

// A model or puzzle set no memory can hold is refused before anything is
// made (exit 2: the key, the estimate, the limit, a fix), not killed by
// the allocator (SIGABRT) halfway through (issue #21).
heavy_test!(
    a_run_too_big_for_memory_is_refused_before_it_starts,
    |tmp| {
        for (set, key) in [
            ("model.hidden=4000000", "model.hidden = 4000000"),
            (
                "data.train_puzzles=100000000000000",
                "data.train_puzzles = ",
            ),
        ] {
            let out = short_run(tmp.path(), &["--set", set]);
            assert_too_big(&out, set, key, tmp.path());
        }
    }
);
