//! `envgen sudoku …` end to end: exit codes, outputs, files.

use std::process::Output;

use crate::common::run;

const EASY: &str =
    "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn solve_prints_solution_and_rating_as_json() {
    let out = run(&["sudoku", "solve", EASY, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &doc["puzzles"][0];
    assert_eq!(first["status"], "unique");
    assert!(first["solution"].as_str().unwrap().starts_with("534678912"));
    assert_eq!(first["rating"], 0);
}

#[test]
fn malformed_puzzles_exit_2_naming_the_problem() {
    let short = run(&["sudoku", "solve", "123"]);
    assert_eq!(short.status.code(), Some(2));
    assert!(
        stderr(&short).contains("puzzle 1") && stderr(&short).contains("81"),
        "{}",
        stderr(&short)
    );

    let bad_char = EASY.replacen('.', "x", 1);
    let out = run(&["sudoku", "solve", EASY, &bad_char]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("puzzle 2") && stderr(&out).contains("'x'"),
        "{}",
        stderr(&out)
    );

    let clash = format!("11{}", ".".repeat(79));
    let out = run(&["sudoku", "solve", &clash]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("given twice"), "{}", stderr(&out));
}

#[test]
fn unsolvable_and_multiple_are_reported_with_exit_1() {
    let unsolvable = format!("12345678.{}9{}", ".".repeat(8), ".".repeat(63));
    let out = run(&["sudoku", "solve", &unsolvable]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no solution"));

    let out = run(&["sudoku", "solve", &".".repeat(81)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("multiple solutions"));
}

#[test]
fn generate_then_solve_file_then_build_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("easy.csv");
    let csv_s = csv.to_str().unwrap();
    let out = run(&[
        "sudoku", "generate", "--count", "4", "--seed", "3", "--out", csv_s,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("source,q,a,rating\n"));
    assert_eq!(text.lines().count(), 5);

    let out = run(&["sudoku", "solve", "--file", csv_s, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["puzzles"].as_array().unwrap().len(), 4);

    let ds = dir.path().join("ds");
    let out = run(&[
        "sudoku",
        "build-dataset",
        "--train",
        csv_s,
        "--test",
        csv_s,
        "--subsample",
        "2",
        "--aug",
        "3",
        "--out",
        ds.to_str().unwrap(),
        "--seed",
        "1",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(meta["train"]["examples"], 8);
    assert_eq!(meta["test"]["examples"], 4);
    assert_eq!(
        std::fs::metadata(ds.join("train/labels.bin"))
            .unwrap()
            .len(),
        8 * 81
    );

    // A broken CSV names its line and column and exits 2.
    let broken = dir.path().join("broken.csv");
    std::fs::write(
        &broken,
        text.replacen(",4", ",x", 1)
            .replacen("rating\n", "rating\nsrc,abc,def,1\n", 1),
    )
    .unwrap();
    let out = run(&[
        "sudoku",
        "build-dataset",
        "--train",
        broken.to_str().unwrap(),
        "--test",
        csv_s,
        "--aug",
        "1",
        "--out",
        dir.path().join("ds2").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("line 2, column q"),
        "{}",
        stderr(&out)
    );
}
