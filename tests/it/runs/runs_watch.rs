//! `envgen runs watch` (issue #24): a real tiny gpt2 run followed in a
//! pseudo-terminal (`script`), the screen it leaves read back; a run that
//! already ended; a run killed under it (`lost`); no running run (exit 2);
//! hrm-sudoku's total and an interrupted run (exit 130); Slurm and Docker
//! runs, read from their directories.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::docker_base::require_docker_host;
use crate::common::docker_run::{container_name, import_image, remove_container};
use crate::common::run::{
    assert_ok, long_run_args, run_dir_in, send_signal, short_run, wait_for_step,
};
use crate::common::{
    envgen, heavy_test, json_of, read_json, require_slurm_cluster, run_dir_of, text,
};

const ENVGEN: &str = env!("CARGO_BIN_EXE_envgen");

/// A native gpt2 run of `steps` steps in the background (no checkpoints
/// on the way, one evaluation in the middle and one at the end).
fn spawn_run(out: &Path, steps: u64) -> Child {
    envgen()
        .args([
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--json",
            "--where",
            "native",
        ])
        .args(["--set", &format!("train.steps={steps}")])
        .args(["--set", &format!("train.eval_every={}", steps / 2)])
        .args(["--set", "train.checkpoint_every=0"])
        .args(["--out", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn envgen run")
}

/// Wait for `child` at most `limit`; kill it and fail when it overstays.
fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{what} did not end within {limit:?}\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The rows a terminal shows after `bytes`: enough of a VT100 for what
/// `runs watch` writes (CR, LF, cursor up, clear line, clear below); other
/// escape sequences are dropped.
fn screen(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut rows: Vec<String> = vec![String::new()];
    let (mut row, mut chars) = (0usize, text.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '\r' => {}
            '\n' => {
                row += 1;
                if row == rows.len() {
                    rows.push(String::new());
                }
            }
            '\x1b' if chars.peek() == Some(&'[') => {
                chars.next();
                let mut arg = String::new();
                while let Some(&d) = chars.peek() {
                    if d.is_ascii_digit() || d == ';' {
                        arg.push(d);
                        chars.next();
                    } else {
                        break;
                    }
                }
                let n: usize = arg.parse().unwrap_or(1);
                match chars.next() {
                    Some('A') => row = row.saturating_sub(n),
                    Some('K') => rows[row].clear(),
                    Some('J') => rows.truncate(row + 1),
                    _ => {}
                }
            }
            c => rows[row].push(c),
        }
    }
    rows.retain(|r| !r.trim().is_empty());
    rows
}

heavy_test!(
    watch_follows_a_live_run_in_a_terminal_and_exits_0_when_it_completes,
    |tmp| {
        let steps = 400;
        let run = spawn_run(tmp.path(), steps);
        let dir = run_dir_in(tmp.path());
        let started = Instant::now();
        // `script` gives watch a pseudo-terminal and copies what it writes.
        let command = format!("'{ENVGEN}' runs watch '{}' --interval 0.2", dir.display());
        let watch = Command::new("script")
            .args(["-qfec", &command, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn script (util-linux)");
        let ran = wait_within(run, Duration::from_secs(300), "the run");
        assert_ok(&ran, "envgen run");
        let run_ended = started.elapsed();
        let watched = wait_within(watch, Duration::from_secs(30), "runs watch");
        eprintln!(
            "run ended {:.1} s after watch started, watch {:.1} s",
            run_ended.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        let raw = String::from_utf8_lossy(&watched.stdout).into_owned();
        assert_eq!(watched.status.code(), Some(0), "{}", text(&watched));
        let rows = screen(&watched.stdout);
        let shown = rows.join("\n");
        eprintln!("the screen:\n{shown}");
        let run_id = read_json(&dir.join("manifest.json"))["run_id"].clone();
        assert_eq!(
            rows[0],
            format!("run     {} (native)", run_id.as_str().unwrap()),
            "{shown}"
        );
        let step = rows
            .iter()
            .find(|r| r.starts_with("step "))
            .expect("a step row");
        assert!(
            step.starts_with(&format!("step    {steps}/{steps} (100%)  loss ")),
            "{shown}"
        );
        assert!(step.contains(" tokens/s"), "{shown}");
        assert!(shown.contains("eval    val_loss "), "{shown}");
        // The loss and throughput of the last steps as sparklines (issue #44).
        let spark = |prefix: &str| {
            rows.iter()
                .find(|r| r.starts_with(prefix))
                .is_some_and(|r| r.chars().filter(|c| ('▁'..='█').contains(c)).count() >= 2)
        };
        assert!(spark("loss    ") && spark("speed   "), "{shown}");
        let status = rows.last().unwrap();
        assert!(
            status.starts_with(&format!("status  completed: {steps} steps in ")),
            "{shown}"
        );
        // One block, redrawn in place: the screen holds each row once.
        assert_eq!(
            rows.iter().filter(|r| r.starts_with("step ")).count(),
            1,
            "{shown}"
        );
        // It followed the run as it went, not only its end: the terminal was
        // sent steps before the last.
        let seen: std::collections::BTreeSet<&str> = raw
            .split("step    ")
            .skip(1)
            .filter_map(|s| s.split('/').next())
            .collect();
        assert!(seen.len() >= 3, "steps drawn: {seen:?}");
    }
);

heavy_test!(
    watch_of_a_run_that_ended_prints_its_final_state_at_once,
    |tmp| {
        let ran = short_run(tmp.path(), &[]);
        assert_ok(&ran, "envgen run");
        let dir = run_dir_of(&json_of(&ran));
        let started = Instant::now();
        let watched = envgen()
            .args(["runs", "watch", dir.to_str().unwrap()])
            .output()
            .unwrap();
        let took = started.elapsed();
        assert_eq!(watched.status.code(), Some(0), "{}", text(&watched));
        assert!(took < Duration::from_secs(5), "took {took:?}");
        let out = String::from_utf8_lossy(&watched.stdout);
        // Not a terminal: plain lines, no escape sequences.
        assert!(!out.contains('\x1b'), "{out}");
        assert!(out.contains("step    6/6 (100%)  loss "), "{out}");
        assert!(out.contains("eval    val_loss "), "{out}");
        let last = out.lines().last().unwrap_or_default();
        assert!(last.starts_with("status  completed: 6 steps in "), "{out}");

        // `--json`: one object, the run as it ended (issue #44).
        let json = envgen()
            .args(["runs", "watch", "--json", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(json.status.code(), Some(0), "{}", text(&json));
        let lines: Vec<Value> = String::from_utf8_lossy(&json.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let run_id = read_json(&dir.join("manifest.json"))["run_id"].clone();
        assert_eq!(lines[0]["run_id"], run_id);
        assert_eq!(lines[0]["status"], "completed");
        assert_eq!(
            (lines[0]["step"].clone(), lines[0]["total"].clone()),
            (6.into(), 6.into())
        );
        assert!(
            lines[0]["loss"].is_f64() && lines[0]["throughput"].is_f64(),
            "{lines:?}"
        );
        assert_eq!(lines[0]["eta_s"], Value::Null, "an ended run has no ETA");

        // A closed stdout (`runs watch RUN | head -1` once head is gone) is no panic and no error.
        let mut closed = envgen()
            .args(["runs", "watch", dir.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(closed.stdout.take());
        let mut stderr = String::new();
        closed
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = closed.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
);

heavy_test!(
    watch_ends_saying_lost_when_the_trainer_is_killed_under_it,
    |tmp| {
        let run = spawn_run(tmp.path(), 2000);
        let pid = run.id();
        let dir = run_dir_in(tmp.path());
        wait_for_step(&dir, 2, Duration::from_secs(120));
        let watch = envgen()
            .args(["runs", "watch", dir.to_str().unwrap(), "--interval", "0.2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(1));
        send_signal(pid, "KILL");
        let _ = wait_within(run, Duration::from_secs(30), "the killed run");
        let killed_at = Instant::now();
        let watched = wait_within(watch, Duration::from_secs(30), "runs watch");
        eprintln!(
            "watch ended {:.1} s after the kill",
            killed_at.elapsed().as_secs_f64()
        );
        let out = String::from_utf8_lossy(&watched.stdout);
        assert_eq!(watched.status.code(), Some(1), "{}", text(&watched));
        assert!(
            out.contains(&format!("status  lost (process {pid} on host ")),
            "{out}"
        );
    }
);

heavy_test!(
    watch_without_a_run_and_none_running_or_a_bad_interval_is_a_usage_error,
    |tmp| {
        // A run that ended is not a running run.
        assert_ok(&short_run(tmp.path(), &[]), "envgen run");
        for runs_dir in [tmp.path().to_path_buf(), tmp.path().join("none")] {
            let out = envgen()
                .args(["runs", "watch", "--runs-dir", runs_dir.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{}", text(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("no running run under {}", runs_dir.display())),
                "{err}"
            );
            assert!(
                err.contains("fix: name the run: `envgen runs watch RUN`"),
                "{err}"
            );
        }
        // An interval that would spin or never look again.
        for interval in ["0", "-1", "NaN", "99999"] {
            let out = envgen()
                .args(["runs", "watch", "--runs-dir"])
                .arg(tmp.path())
                .arg(format!("--interval={interval}"))
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{}", text(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("not between 0.05 and 3600 seconds"), "{err}");
        }
    }
);

// Slurm: a detached job says to follow it with `runs watch`, and watch
// follows it from the run directory to its end, as for a native run.
heavy_test!(watch_follows_a_detached_slurm_run_to_its_end, || {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let submitted = envgen()
        .args([
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--where",
            "slurm",
            "--detach",
        ])
        .args(["--set", "train.steps=200", "--set", "train.eval_every=100"])
        .args(["--set", "train.checkpoint_every=0"])
        .args(["--out", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_ok(&submitted, "detached submission");
    let said = String::from_utf8_lossy(&submitted.stdout);
    assert!(
        said.contains("follow with `envgen runs watch RUN`"),
        "{said}"
    );
    let dir = run_dir_in(tmp.path());
    let started = Instant::now();
    // Without RUN: the newest running run of --runs-dir (pending counts).
    let watch = envgen()
        .args(["runs", "watch", "--runs-dir", tmp.path().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let watched = wait_within(watch, Duration::from_secs(240), "runs watch");
    eprintln!(
        "watched the Slurm run for {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let out = String::from_utf8_lossy(&watched.stdout);
    assert_eq!(watched.status.code(), Some(0), "{}", text(&watched));
    let run_id = read_json(&dir.join("manifest.json"))["run_id"].clone();
    assert!(
        out.starts_with(&format!("run     {} (slurm)\n", run_id.as_str().unwrap())),
        "{out}"
    );
    assert!(out.contains("step    200/200 (100%)  loss "), "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("status  completed: 200 steps in "),
        "{out}"
    );
});

// hrm-sudoku's total comes from its dataset (its step-0 row carries it),
// and a run that ended `interrupted` makes watch exit 130, as `run` does.
heavy_test!(
    watch_shows_hrm_s_total_and_exits_130_for_an_interrupted_run,
    |tmp| {
        let ran = envgen()
            .args([
                "run",
                "hrm-sudoku",
                "--backend",
                "cpu",
                "--json",
                "--stop-after",
                "2",
            ])
            .args(["--out", tmp.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(ran.status.code(), Some(130), "{}", text(&ran));
        let doc = json_of(&ran);
        let total = doc["summary"]["metrics"]["total_steps"].as_u64().unwrap();
        let watched = envgen()
            .args(["runs", "watch", run_dir_of(&doc).to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(watched.status.code(), Some(130), "{}", text(&watched));
        let out = String::from_utf8_lossy(&watched.stdout);
        assert!(out.contains(&format!("\nstep    2/{total} (")), "{out}");
        assert!(!out.contains("ETA"), "an ended run has no ETA: {out}");
        let last = out.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("status  interrupted: 2 steps in "),
            "{out}"
        );
    }
);

// Docker: watch reads the run directory the container writes; the host's
// envgen dying does not end it (the container still trains), the
// container going does: `lost`, naming it (exit 1).
heavy_test!(
    watch_follows_a_docker_run_and_ends_lost_when_its_container_goes,
    || {
        require_docker_host();
        let image = import_image("runs-watch", "runs-watch");
        let tmp = tempfile::tempdir().unwrap();
        // 400 steps can end within the 12 s watched below on an idle machine:
        // this run is stopped by removing its container, never by its end.
        let args = long_run_args(
            tmp.path(),
            &[
                "--where",
                "docker",
                "--image",
                &image,
                "--set",
                "train.steps=100000",
            ],
        );
        let run = envgen()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let dir = run_dir_in(tmp.path());
        let name = container_name(&dir);
        // A failed assertion leaves no container training behind.
        struct Removed(String);
        impl Drop for Removed {
            fn drop(&mut self) {
                remove_container(&self.0);
            }
        }
        let _removed = Removed(name.clone());
        wait_for_step(&dir, 2, Duration::from_secs(120));
        let watch = envgen()
            .args(["runs", "watch", dir.to_str().unwrap(), "--interval", "0.2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        send_signal(run.id(), "KILL");
        let _ = wait_within(run, Duration::from_secs(30), "the host's envgen");
        // Longer than watch's two questions 5 s apart: it must still be watching.
        std::thread::sleep(Duration::from_secs(12));
        let mut watch = watch;
        if watch.try_wait().unwrap().is_some() {
            let ended = watch.wait_with_output().unwrap();
            panic!(
                "watch ended while container {name} still trained: {}",
                text(&ended)
            );
        }
        remove_container(&name);
        let removed_at = Instant::now();
        let watched = wait_within(watch, Duration::from_secs(30), "runs watch");
        eprintln!(
            "watch ended {:.1} s after the container went",
            removed_at.elapsed().as_secs_f64()
        );
        assert_eq!(watched.status.code(), Some(1), "{}", text(&watched));
        let out = String::from_utf8_lossy(&watched.stdout);
        assert!(
            out.starts_with("run     ") && out.contains(" (docker)\n"),
            "{out}"
        );
        assert!(out.contains("step    "), "{out}");
        let last = out.lines().last().unwrap_or_default();
        assert_eq!(
            last,
            format!("status  lost (container {name} no longer exists)"),
            "{out}"
        );
    }
);
