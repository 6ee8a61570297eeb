//! HRM on Sudoku through the real `envgen` binary: the tiny preset learns
//! on held-out puzzles, resume is exact, bad configs exit 2, and the paper
//! preset's parameter count. Real Burn training on CPU.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn envgen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_envgen"))
}

fn run_ok(args: &[&str]) -> Output {
    let out = envgen().args(args).output().expect("spawn envgen");
    assert!(
        out.status.success(),
        "envgen {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn run_dir_of(doc: &Value) -> PathBuf {
    PathBuf::from(doc["run_dir"].as_str().expect("run_dir"))
}

fn metric(doc: &Value, key: &str) -> f64 {
    doc["summary"]["metrics"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} in {doc}"))
}

/// The default preset, end to end: ≥ 0.30 accuracy on the blank cells of
/// held-out puzzles (chance is 1/9), from ≈ chance at step 0.
#[test]
fn tiny_preset_learns_on_held_out_puzzles() {
    let tmp = tempfile::tempdir().unwrap();
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
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["experiment"], "hrm-sudoku");
    assert_eq!(manifest["preset"], "tiny");
    assert!(manifest["finished_at"].is_string());
    let lines = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let evals = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["cell_accuracy"].is_number())
        .count();
    assert!(evals >= 3, "only {evals} evaluations in metrics.jsonl");
}

/// A very short run: 64 train puzzles, batch 8, 16 steps, eval every 8.
const SHORT: &[&str] = &[
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

#[test]
fn stop_then_resume_matches_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
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
    assert_eq!(
        stopped.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let stopped = json_of(&stopped);
    assert_eq!(stopped["summary"]["status"], "interrupted");
    assert_eq!(stopped["summary"]["steps_done"], 6);
    let dir = run_dir_of(&stopped);
    assert!(dir
        .join("checkpoints/step-00000006/act.safetensors")
        .exists());
    let resumed = json_of(&run_ok(&[
        "run",
        "hrm-sudoku",
        "--backend",
        "cpu",
        "--json",
        "--resume",
        dir.to_str().unwrap(),
    ]));
    assert_eq!(resumed["summary"]["status"], "completed");
    assert_eq!(resumed["summary"]["steps_done"], 16);
    for key in [
        "exact_accuracy",
        "cell_accuracy",
        "mean_act_steps",
        "final_train_loss",
        "initial_cell_accuracy",
    ] {
        assert_eq!(
            metric(&whole, key).to_bits(),
            metric(&resumed, key).to_bits(),
            "{key} differs after resume"
        );
    }
    let weights = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(
        weights(&run_dir_of(&whole)) == weights(&dir),
        "final weights differ after resume"
    );
    let steps: Vec<u64> = std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["step"].as_u64())
        .filter(|&s| s > 0)
        .collect();
    assert_eq!(steps, (1..=16).collect::<Vec<_>>());
}

#[test]
fn bad_configs_exit_2_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
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
}

#[test]
fn describe_reports_the_paper_parameter_count() {
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
}
