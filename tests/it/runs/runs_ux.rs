//! `envgen runs` as a user lives with it (issue #24, "runs UX"): the ids
//! `runs list` prints are what `runs show|compare|report` take (or a unique
//! prefix), from any directory through `ENVGEN_RUNS_DIR`; the list is an
//! aligned table with filters; `runs compare` names the science keys that
//! differ first; and no command panics when its reader closes stdout.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::run::*;
use crate::common::{envgen, json_of, text};

/// `envgen ARGS…` run in `cwd` with `ENVGEN_RUNS_DIR=runs_dir`.
fn in_dir(cwd: &Path, runs_dir: &Path, args: &[&str]) -> Output {
    envgen()
        .current_dir(cwd)
        .env("ENVGEN_RUNS_DIR", runs_dir)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cmd` with a standard output whose reader is already gone: every write
/// fails with a broken pipe. It must end as it would otherwise, without a
/// panic (exit 101).
fn with_closed_stdout(mut cmd: Command) -> Output {
    // libc's pipe(2), not std::io::pipe (Rust 1.87; the MSRV is 1.85).
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe(2)");
    // SAFETY: both descriptors were just made and are owned here only.
    let (reader, writer) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(reader);
    let child = cmd
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The parent's copy of the write end went into `cmd`; drop it with it.
    drop(cmd);
    child.wait_with_output().unwrap()
}

#[test]
fn runs_are_named_by_listed_id_filtered_and_compared_by_science_key() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();

    // A config error is exit 2 and leaves no run directory behind.
    let bad = in_dir(
        &elsewhere,
        &runs,
        &["run", "gpt2", "--backend", "cpu", "--set", "train.bogus=1"],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(!runs.exists(), "a refused config made {}", runs.display());

    // Two short runs that differ in one science key; the first with its
    // stdout closed (`envgen run … | true`): it still trains to the end.
    let mut first = envgen();
    first
        .current_dir(&elsewhere)
        .env("ENVGEN_RUNS_DIR", &runs)
        .args(["run", "gpt2"])
        .args(SHORT);
    let first = with_closed_stdout(first);
    assert_ok(&first, "run with a closed stdout");
    assert!(!String::from_utf8_lossy(&first.stderr).contains("panicked"));
    let second = short_run(&runs, &["--set", "train.steps=4"]);
    assert_ok(&second, "second run");
    let ids: Vec<String> = crate::common::run_dirs(&runs)
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");

    // `runs list` from another directory: a header and aligned rows.
    let list = in_dir(&elsewhere, &runs, &["runs", "list"]);
    assert_ok(&list, "runs list");
    let table = stdout(&list);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    for column in [
        "ID",
        "EXPERIMENT",
        "PRESET",
        "STATUS",
        "WHERE",
        "PROFILE",
        "STEPS",
        "FINAL METRIC",
        "STARTED",
    ] {
        assert!(lines[0].contains(column), "{table}");
    }
    let at = |col: &str| lines[0].find(col).unwrap();
    for row in &lines[1..] {
        assert_eq!(&row[at("STATUS")..at("STATUS") + 9], "completed", "{table}");
        assert!(
            row[at("FINAL METRIC")..].starts_with("final_val_loss "),
            "{table}"
        );
    }
    let steps: Vec<&str> = lines[1..]
        .iter()
        .map(|r| r[at("STEPS")..].split_whitespace().next().unwrap())
        .collect();
    assert_eq!(steps, ["6", "4"], "oldest first: {table}");
    let listed_id = lines[2].split_whitespace().next().unwrap();

    // Filters.
    let count = |extra: &[&str]| {
        let mut args = vec!["runs", "list", "--json"];
        args.extend(extra);
        let out = in_dir(&elsewhere, &runs, &args);
        assert_ok(&out, "runs list filtered");
        json_of(&out)["runs"].as_array().unwrap().len()
    };
    assert_eq!(count(&["--experiment", "gpt2"]), 2);
    assert_eq!(count(&["--experiment", "rft"]), 0);
    assert_eq!(count(&["--status", "completed", "--since", "1h"]), 2);
    assert_eq!(count(&["--status", "failed"]), 0);
    assert_eq!(count(&["--since", "2099-01-01"]), 0);
    let bogus = in_dir(&elsewhere, &runs, &["runs", "list", "--since", "yesterday"]);
    assert_eq!(bogus.status.code(), Some(2), "{}", text(&bogus));
    assert!(
        text(&bogus).contains("--since yesterday"),
        "{}",
        text(&bogus)
    );

    // The listed id, and a unique prefix of it, are what `runs show` takes.
    let show = in_dir(&elsewhere, &runs, &["runs", "show", listed_id, "--json"]);
    assert_ok(&show, "runs show ID");
    assert_eq!(json_of(&show)["run_id"], listed_id);
    let prefix = &listed_id[..listed_id.len() - 3];
    let by_prefix = in_dir(&elsewhere, &runs, &["runs", "show", prefix, "--json"]);
    assert_ok(&by_prefix, "runs show PREFIX");
    assert_eq!(json_of(&by_prefix)["run_id"], listed_id);
    // Any unique part of an id (issue #44): the config hash at its end.
    let tail = &listed_id[listed_id.len() - 8..];
    let by_part = in_dir(&elsewhere, &runs, &["runs", "show", tail, "--json"]);
    assert_ok(&by_part, "runs show PART");
    assert_eq!(json_of(&by_part)["run_id"], listed_id);
    // … and so are `sample` and `export hf` (they took paths only).
    let sampled = in_dir(
        &elsewhere,
        &runs,
        &["sample", tail, "--prompt", "ab", "--tokens", "2", "--json"],
    );
    assert_ok(&sampled, "sample PART");
    assert_eq!(json_of(&sampled)["prompt"], "ab");
    let hf = tmp.path().join("hf");
    let exported = in_dir(
        &elsewhere,
        &runs,
        &["export", "hf", tail, "--out", hf.to_str().unwrap()],
    );
    assert_ok(&exported, "export hf PART");
    assert!(hf.join("model.safetensors").is_file());
    let evaluated = in_dir(
        &elsewhere,
        &runs,
        &[
            "eval",
            "gpt2",
            "--checkpoint",
            "no-such-run",
            "--val",
            "x.bin",
        ],
    );
    assert_eq!(evaluated.status.code(), Some(2), "{}", text(&evaluated));
    assert!(
        text(&evaluated).contains("no run `no-such-run`"),
        "{}",
        text(&evaluated)
    );
    // A mistyped experiment is pointed at the right one.
    let typo = in_dir(&elsewhere, &runs, &["run", "gtp2", "--dry-run"]);
    assert_eq!(typo.status.code(), Some(2), "{}", text(&typo));
    assert!(
        text(&typo).contains("did you mean gpt2?"),
        "{}",
        text(&typo)
    );
    let ambiguous = in_dir(&elsewhere, &runs, &["runs", "show", "gpt2-tiny"]);
    assert_eq!(ambiguous.status.code(), Some(2), "{}", text(&ambiguous));
    assert!(
        text(&ambiguous).contains("names 2 runs"),
        "{}",
        text(&ambiguous)
    );

    // compare by id: the science key first, as `old → new`.
    let (a, b) = (lines[1].split_whitespace().next().unwrap(), listed_id);
    let compare = in_dir(&elsewhere, &runs, &["runs", "compare", a, b]);
    assert_ok(&compare, "runs compare");
    let said = stdout(&compare);
    assert!(said.contains("same science config: NO"), "{said}");
    let science = said
        .find("science config (config.toml) differs:\n  train.steps")
        .expect(&said);
    assert!(said.contains("train.steps  6 → 4"), "{said}");
    if let Some(env) = said.find("environment differs:") {
        assert!(science < env, "{said}");
    }

    // No command panics on a closed stdout; each still exits 0.
    let report_dir = tmp.path().join("report");
    let commands: Vec<Vec<&str>> = vec![
        vec!["runs", "list"],
        vec!["runs", "list", "--json"],
        vec!["runs", "show", listed_id],
        vec!["runs", "show", listed_id, "--json"],
        vec!["runs", "compare", a, b],
        vec!["runs", "compare", a, b, "--json"],
        vec!["runs", "report", a, b, "-o", report_dir.to_str().unwrap()],
        vec!["doctor"],
        vec!["doctor", "--json"],
        vec!["experiments", "list"],
        vec!["experiments", "describe", "gpt2", "--json"],
        vec!["run", "gpt2", "--backend", "cpu", "--dry-run"],
        vec!["--help"],
    ];
    for args in commands {
        let mut cmd = envgen();
        cmd.current_dir(&elsewhere)
            .env("ENVGEN_RUNS_DIR", &runs)
            .args(&args);
        let out = with_closed_stdout(cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked"),
            "envgen {} with a closed stdout: {}\n{stderr}",
            args.join(" "),
            out.status
        );
    }
    assert!(report_dir.join("report.html").is_file());

    // Outside any runs directory, `runs list` says where it looked.
    let nowhere = envgen()
        .current_dir(&elsewhere)
        .env_remove("ENVGEN_RUNS_DIR")
        .args(["runs", "list"])
        .output()
        .unwrap();
    assert_ok(&nowhere, "runs list without runs");
    assert!(
        text(&nowhere).contains("no run directories in runs"),
        "{}",
        text(&nowhere)
    );
}

/// A run directory written before issue #41 (manifest_version 2, `"where"`
/// a string; tests/fixtures/run-v2) is listed, shown, compared and refused
/// a cancel (it ended) by today's envgen, which reads its place typed.
#[test]
fn a_version_two_run_directory_still_lists_shows_compares_and_cancels() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run-v2");
    let id = "gpt2-tiny-20261127-233332-a8268a0a";
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for copy in [id, "copy"] {
        let dir = runs.join(copy);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(fixture.join(id)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let list = in_dir(tmp.path(), &runs, &["runs", "list", "--json"]);
    assert!(list.status.success(), "{}", text(&list));
    let listed = json_of(&list);
    assert!(listed.to_string().contains(id), "{listed}");
    assert!(listed.to_string().contains("\"native\""), "{listed}");
    let show = in_dir(tmp.path(), &runs, &["runs", "show", id]);
    assert!(show.status.success(), "{}", text(&show));
    assert!(stdout(&show).contains("native"), "{}", stdout(&show));
    let compare = in_dir(tmp.path(), &runs, &["runs", "compare", id, "copy"]);
    assert!(compare.status.success(), "{}", text(&compare));
    let cancel = in_dir(tmp.path(), &runs, &["runs", "cancel", id]);
    assert_eq!(cancel.status.code(), Some(2), "{}", text(&cancel));
    assert!(text(&cancel).contains("already ended"), "{}", text(&cancel));
}
