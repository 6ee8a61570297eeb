//! Data-parallel training through the real binary on the CPU: `envgen run
//! --ranks 2` on this machine, two processes averaging gradients through
//! Burn's collective all-reduce (vendored with the fixes in
//! vendor/PATCHES.md). The Slurm twin is in tests/it/places/run_slurm.rs.
//!
//! Tolerance of "the same loss as one rank": two ranks sum the gradient of
//! each half of the batch, then average the halves; one rank sums the whole
//! batch at once. The two differ only in f32 rounding (one reassociation per
//! reduction, ~6e-8 relative), which AdamW carries from step to step. The
//! training loss of a step is averaged the same way, and the weights at step
//! 0 are the same bits on both. Measured on tiny gpt2 (2026-11-25): after 24
//! steps the losses agree to ~1e-6; after the whole preset (300 steps) final
//! val loss 1.92523 (1 rank) vs 1.92480 (2 ranks), 4e-4 apart, while seeds
//! spread it by 0.03 (tests/it/train/precision_cli.rs). Hence 1e-4 at 24 steps.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::experiment::*;
use crate::common::{envgen, expect_success, heavy_test, json_of, read_json, run_dir_of};

const TOLERANCE: f64 = 1e-4;

/// 24 tiny-gpt2 steps with a checkpoint and an evaluation every 8.
fn tiny(out: &Path, extra: &[&str]) -> Command {
    let mut command = envgen();
    command
        .args(["run", "gpt2", "--backend", "cpu", "--json"])
        .args(["--set", "train.steps=24", "--set", "train.eval_every=8"])
        .args(["--set", "train.checkpoint_every=8"])
        .args(["--out", out.to_str().unwrap()])
        .args(extra);
    command
}

fn output(mut command: Command) -> Output {
    command.output().expect("spawn envgen")
}

fn assert_close(a: &Value, b: &Value, key: &str) {
    let (x, y) = (metric(a, key), metric(b, key));
    assert!(
        (x - y).abs() <= TOLERANCE,
        "{key}: {x} vs {y} differ by more than {TOLERANCE}"
    );
}

heavy_test!(two_ranks_train_the_same_science_as_one, |tmp| {
    // HellaSwag at every evaluation, shared out over the ranks.
    let hellaswag = format!(
        "eval.hellaswag={}/tests/fixtures/hellaswag/hellaswag_val_sample.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let one = json_of(&expect_success(output(tiny(
        tmp.path(),
        &["--set", &hellaswag],
    ))));
    let two = json_of(&expect_success(output(tiny(
        tmp.path(),
        &["--ranks", "2", "--set", &hellaswag],
    ))));
    assert_eq!(two["summary"]["status"], "completed");
    assert_eq!(
        metric(&one, "initial_val_loss").to_bits(),
        metric(&two, "initial_val_loss").to_bits(),
        "both start from the same weights"
    );
    for key in ["final_train_loss", "final_val_loss"] {
        assert_close(&one, &two, key);
    }
    assert!(metric(&two, "final_val_loss") < 0.9 * metric(&two, "initial_val_loss"));
    // Each rank scored its groups of items (4 and 1 of the fixture's 5) and
    // the counts were summed: the same score as one rank's on the same
    // step-0 weights.
    let step_zero = |doc: &Value| -> Value {
        let text = std::fs::read_to_string(run_dir_of(doc).join("metrics.jsonl")).unwrap();
        serde_json::from_str(text.lines().next().unwrap()).unwrap()
    };
    let (zero_one, zero_two) = (step_zero(&one), step_zero(&two));
    assert_eq!(zero_two["hellaswag_items"], 5, "{zero_two}");
    for key in ["hellaswag_acc", "hellaswag_acc_norm", "hellaswag_items"] {
        assert_eq!(
            zero_one[key], zero_two[key],
            "{key}: {zero_one} vs {zero_two}"
        );
    }

    let (m1, m2) = (manifest_of(&one), manifest_of(&two));
    assert_eq!(m1["config_hash"], m2["config_hash"], "same science");
    assert_eq!(
        (m1["world_size"].clone(), m2["world_size"].clone()),
        (1.into(), 2.into())
    );
    let dist = &m2["distributed"];
    assert_eq!(dist["reduction"], "collective");
    assert_eq!(dist["ranks_per_node"], 2);
    assert_eq!(dist["nodes"].as_array().unwrap().len(), 1);
    // Each rank trains on half of each global batch.
    let rows = |m: &Value| {
        m["profile"]["micro_batch"].as_u64().unwrap() * m["profile"]["grad_accum"].as_u64().unwrap()
    };
    assert_eq!(2 * rows(&m2), rows(&m1), "{m1} {m2}");
    assert_eq!(m2["launch_args"], serde_json::json!(["--ranks", "2"]));
    // Rank 0 alone wrote the run's files: each step once.
    assert_eq!(
        logged_steps(&run_dir_of(&two)),
        (1..=24).collect::<Vec<_>>()
    );
    assert!(run_dir_of(&two).join("model.safetensors").is_file());

    // `runs compare`: the same science, world size named as what differs.
    let compare = expect_success(output({
        let mut c = envgen();
        c.args(["runs", "compare", "--json"])
            .arg(run_dir_of(&one))
            .arg(run_dir_of(&two));
        c
    }));
    let compare = json_of(&compare);
    assert_eq!(compare["same_config"], true, "{compare}");
    let fields: Vec<&str> = compare["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    assert!(fields.contains(&"world_size"), "{fields:?}");
});

// Stopped at step 8 on two ranks; resumed on two ranks it ends on the
// bits of an uninterrupted two-rank run; resumed on one rank and then on
// two again, within the tolerance of a world-size change.
heavy_test!(
    a_two_rank_run_resumes_exactly_and_on_another_world_size,
    |tmp| {
        let whole = json_of(&expect_success(output(tiny(tmp.path(), &["--ranks", "2"]))));

        let stopped = output(tiny(tmp.path(), &["--ranks", "2", "--stop-after", "8"]));
        let dir = stopped_after(&stopped, 8);
        let resume = |dir: &Path, extra: &[&str]| {
            let mut c = envgen();
            c.args(["run", "gpt2", "--backend", "cpu", "--json", "--resume"])
                .arg(dir)
                .args(extra);
            output(c)
        };
        let resumed = json_of(&expect_success(resume(&dir, &["--ranks", "2"])));
        assert_resumed_identically(
            &whole,
            &resumed,
            &dir,
            &["final_train_loss", "final_val_loss"],
            24,
        );

        let stopped = output(tiny(tmp.path(), &["--ranks", "2", "--stop-after", "8"]));
        let dir = stopped_after(&stopped, 8);
        let on_one = resume(&dir, &["--stop-after", "16"]);
        stopped_after(&on_one, 16);
        assert_eq!(read_json(&dir.join("manifest.json"))["world_size"], 1);
        let back = json_of(&expect_success(resume(&dir, &["--ranks", "2"])));
        assert_eq!(back["summary"]["steps_done"], 24);
        assert_eq!(logged_steps(&dir), (1..=24).collect::<Vec<_>>());
        for key in ["final_train_loss", "final_val_loss"] {
            assert_close(&whole, &back, key);
        }
    }
);

/// The pid of the child of `parent` whose environment says ENVGEN_RANK=`rank`.
fn rank_pid(parent: u32, rank: usize) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .find(|pid: &u32| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    env.split(|&b| b == 0)
                        .any(|kv| kv == format!("ENVGEN_RANK={rank}").as_bytes())
                })
                .unwrap_or(false)
        })
}

fn wait_for_step(dir: &Path, step: u64, child: &mut Child) {
    let start = Instant::now();
    while logged_steps_or_none(dir).is_none_or(|s| s.last().copied().unwrap_or(0) < step) {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no step {step} logged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn logged_steps_or_none(dir: &Path) -> Option<Vec<u64>> {
    dir.join("metrics.jsonl")
        .is_file()
        .then(|| logged_steps(dir))
}

/// Waits for `child` at most `limit`; its output.
fn finish_within(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("still running after {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// The run directory a starting run makes under `out`, once it exists.
fn wait_for_run_dir(out: &Path) -> PathBuf {
    let start = Instant::now();
    while crate::common::run_dirs(out).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no run directory in {}",
            out.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    only_run_dir(out)
}

fn only_run_dir(out: &Path) -> PathBuf {
    let dirs = crate::common::run_dirs(out);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

// A rank killed mid-run (SIGKILL: no goodbye) fails the whole run with
// a message naming it, within the launcher's grace period; the run keeps
// its checkpoints and resumes.
heavy_test!(a_killed_rank_fails_the_run_with_a_clear_message, |tmp| {
    let out = tmp.path().join("runs");
    let mut command = envgen();
    command
        .args(["run", "gpt2", "--backend", "cpu", "--ranks", "2"])
        .args([
            "--set",
            "train.steps=100000",
            "--set",
            "train.checkpoint_every=2",
        ])
        .args(["--set", "train.eval_every=1000"])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let dir = wait_for_run_dir(&out);
    wait_for_step(&dir, 4, &mut child);
    let victim = rank_pid(child.id(), 1).expect("rank 1 among the launcher's children");
    // SAFETY: kill(2) on a pid we just read; at worst it is already gone.
    unsafe {
        libc::kill(victim as libc::pid_t, libc::SIGKILL);
    }
    let done = finish_within(child, Duration::from_secs(90));
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("rank 1 of 2 was killed by signal 9"),
        "{stderr}"
    );
    assert!(stderr.contains("--resume"), "{stderr}");
    // The survivor's own error, not the collective's panics (patch C7).
    assert!(!stderr.contains("panicked at"), "{stderr}");
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["status"], "failed", "{summary}");
    assert!(dir.join("checkpoints/latest").is_file());
});

// SIGTERM to the launcher (what Ctrl-C or a scheduler does) reaches every
// rank; they stop in the same step, rank 0 checkpoints, the run is
// `interrupted` (exit 130), and a resume completes it with every step
// logged once.
heavy_test!(
    a_stopped_launcher_stops_every_rank_at_one_checkpoint,
    |tmp| {
        let out = tmp.path().join("runs");
        let mut child = envgen()
            .args(["run", "gpt2", "--backend", "cpu", "--ranks", "2", "--json"])
            .args(["--set", "train.steps=200", "--set", "train.eval_every=1000"])
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let dir = wait_for_run_dir(&out);
        wait_for_step(&dir, 3, &mut child);
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let done = finish_within(child, Duration::from_secs(60));
        let stopped = interrupted(&done);
        let steps = stopped["summary"]["steps_done"].as_u64().unwrap();
        assert!((3..200).contains(&steps), "{stopped}");
        assert_eq!(logged_steps(&dir), (1..=steps).collect::<Vec<_>>());
        let resumed = expect_success(output({
            let mut c = envgen();
            c.args([
                "run",
                "gpt2",
                "--backend",
                "cpu",
                "--json",
                "--ranks",
                "2",
                "--resume",
            ])
            .arg(&dir);
            c
        }));
        assert_eq!(json_of(&resumed)["summary"]["status"], "completed");
        assert_eq!(logged_steps(&dir), (1..=200).collect::<Vec<_>>());
    }
);

// Without a launcher to notice: a rank that hangs (here: SIGSTOP; in life
// a stuck GPU or a network partition) keeps its connections open, so only
// a timeout can tell. The surviving rank's next collective wait times out
// (ENVGEN_COLLECTIVE_TIMEOUT_S) and it fails with that message instead of
// waiting forever: the timeout patch to burn-collective.
heavy_test!(a_lost_peer_times_out_instead_of_hanging, |tmp| {
    // A two-rank run directory, stopped after one step.
    let stopped = output(tiny(tmp.path(), &["--ranks", "2", "--stop-after", "1"]));
    let dir = stopped_after(&stopped, 1);
    let ports: Vec<u16> = {
        let listeners: Vec<_> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect()
    };
    let rank = |r: usize| {
        let mut c = envgen();
        c.args([
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--threads",
            "1",
            "--launched",
            "--resume",
        ])
        .arg(&dir)
        .env("ENVGEN_RENDEZVOUS", format!("127.0.0.1:{}", ports[0]))
        .env("ENVGEN_RANK", r.to_string())
        .env("ENVGEN_WORLD_SIZE", "2")
        .env("ENVGEN_DATA_PORT", ports[1 + r].to_string())
        // Long enough for both ranks to start and register on a loaded
        // CI machine (registering waits under the same timeout).
        .env("ENVGEN_COLLECTIVE_TIMEOUT_S", "8")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let mut leader = rank(0);
    let mut other = rank(1);
    wait_for_step(&dir, 3, &mut leader);
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe {
        libc::kill(other.id() as libc::pid_t, libc::SIGSTOP);
    }
    let started = Instant::now();
    let done = finish_within(leader, Duration::from_secs(60));
    other.kill().unwrap();
    other.wait().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("rank 0 of 2")
            && stderr.contains("no answer from the other ranks within 8 s"),
        "{stderr}"
    );
    eprintln!(
        "rank 0 gave up {:.1} s after rank 1 died",
        started.elapsed().as_secs_f64()
    );
});

/// Ranks 0 and 1 of `dir`, started by hand as the launcher does (so no
/// launcher stops the survivor), with `timeout_s` on every collective wait.
fn start_ranks(dir: &Path, timeout_s: u32) -> [Child; 2] {
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    drop(listeners);
    [0, 1].map(|r| {
        envgen()
            .args(["run", "gpt2", "--backend", "cpu", "--threads", "1"])
            .args(["--launched", "--resume"])
            .arg(dir)
            .env("ENVGEN_RENDEZVOUS", format!("127.0.0.1:{}", ports[0]))
            .env("ENVGEN_RANK", r.to_string())
            .env("ENVGEN_WORLD_SIZE", "2")
            .env("ENVGEN_DATA_PORT", ports[1 + r].to_string())
            .env("ENVGEN_COLLECTIVE_TIMEOUT_S", timeout_s.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    })
}

// A peer killed outright (SIGKILL: its sockets reset, no goodbye), with
// no launcher to stop the survivor: the survivor ends with an error
// naming the lost rank, not with the collective's worker tasks panicking
// (patch C7). Rank 1 killed: rank 0 notices at once and marks the run
// failed; rank 0 killed (and the orchestrator with it): rank 1 ends too.
heavy_test!(
    a_killed_peer_is_an_error_of_the_survivor_not_a_panic,
    |tmp| {
        let stopped = output(tiny(
            tmp.path(),
            &[
                "--ranks",
                "2",
                "--stop-after",
                "1",
                "--set",
                "train.steps=100000",
            ],
        ));
        let dir = stopped_after(&stopped, 1);
        for victim in [1, 0] {
            let survivor = 1 - victim;
            let mut ranks = start_ranks(&dir, 20).map(Some);
            let at = logged_steps(&dir).last().copied().unwrap_or(0) + 2;
            wait_for_step(&dir, at, ranks[0].as_mut().unwrap());
            let mut killed = ranks[victim].take().unwrap();
            killed.kill().unwrap();
            killed.wait().unwrap();
            let done = finish_within(ranks[survivor].take().unwrap(), Duration::from_secs(60));
            let stderr = String::from_utf8_lossy(&done.stderr);
            assert!(!stderr.contains("panicked at"), "{stderr}");
            assert_eq!(done.status.code(), Some(3), "{stderr}");
            assert!(
                stderr.contains(&format!("peer rank {victim} is gone")),
                "{stderr}"
            );
            if survivor == 0 {
                let summary = read_json(&dir.join("summary.json"));
                assert_eq!(summary["status"], "failed", "{summary}");
            }
        }
    }
);

// `--ranks` is refused, before anything is written, where it cannot work.
heavy_test!(ranks_are_refused_where_they_cannot_work, |tmp| {
    let out = tmp.path().join("runs");
    let cases: [(&[&str], &str); 3] = [
        (
            &["run", "hrm-sudoku", "--ranks", "2"],
            "does not train data-parallel",
        ),
        (
            &["run", "gpt2", "--ranks", "3"],
            "does not split over 3 ranks",
        ),
        (
            &["run", "gpt2", "--ranks", "2", "--devices", "0"],
            "--devices names 1 GPUs for 2 ranks",
        ),
    ];
    for (args, message) in cases {
        let done = output({
            let mut c = envgen();
            c.args(args).args(["--backend", "cpu", "--out"]).arg(&out);
            c
        });
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());
});
