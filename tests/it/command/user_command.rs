//! `envgen run -- CMD` (issue #25), natively, with real components: a
//! PyTorch script (the test venv's `ENVGEN_TEST_PYTHON`, torch CPU) trains
//! a tiny model from inside a git repository with a committed and an
//! uncommitted change; the manifest has its command line, commit, diff hash
//! (of the saved diff.patch) and the environment that matters, never a
//! secret's value; a failing command is a `failed` run (exit 1), Ctrl-C is
//! forwarded (`interrupted`, exit 130), bad flags exit 2.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::common::{envgen, git, git_init, heavy_test, json_of, read_json, run_dir_of, text};

/// Trains a linear model for 5 steps, logging each loss as a JSON line.
pub(crate) const TRAIN: &str = r#"
import json, os, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 4)
y = x.sum(1, keepdim=True)
with open(os.environ["ENVGEN_METRICS"], "a") as log:
    for step in range(1, 6):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.write(json.dumps({"step": step, "loss": loss.item()}) + "\n")
        print(f"step {step} loss {loss.item():.6f}", flush=True)
print(f"last loss {loss.item()!r} in {os.environ['ENVGEN_RUN_DIR']}", flush=True)
"#;

const SECRET: &str = "hf_do_not_record_me_42";

pub(crate) fn python() -> PathBuf {
    match std::env::var_os("ENVGEN_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "ENVGEN_TEST_PYTHON is not set: this test runs a PyTorch script. Run it through \
             scripts/test.sh (scripts/services/pyref.sh builds the venv), or set \
             ENVGEN_TEST_PYTHON to a python with torch"
        ),
    }
}

/// A repository with train.py committed, then changed (a comment) and an
/// untracked notes.txt beside it.
fn repo_with_changes(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    git_init(&repo);
    std::fs::write(repo.join("train.py"), TRAIN).unwrap();
    git(&repo, &["add", "train.py"]);
    git(&repo, &["commit", "-q", "-m", "train"]);
    std::fs::write(repo.join("train.py"), format!("{TRAIN}# tuned lr next\n")).unwrap();
    std::fs::write(repo.join("notes.txt"), "untracked\n").unwrap();
    repo
}

/// `envgen run --json --out OUT -- ARGS` in `dir`.
fn run_command(dir: &Path, out: &Path, argv: &[&str]) -> Output {
    envgen()
        .args(["run", "--json", "--out"])
        .arg(out)
        .arg("--")
        .args(argv)
        .current_dir(dir)
        .env_remove("ENVGEN_METRICS")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("HF_TOKEN", SECRET)
        .env("OMP_NUM_THREADS", "1")
        // Issue #39: a knob of any name is recorded, shell noise is not.
        .env("MICRO_BATCH_SIZE", "16")
        .env("SHLVL", "7")
        .output()
        .unwrap()
}

/// Every file under `dir`, as bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    files
}

heavy_test!(
    a_pytorch_script_runs_with_its_code_and_environment_recorded,
    || {
        let python = python();
        let tmp = tempfile::tempdir().unwrap();
        let repo = repo_with_changes(tmp.path());
        // runs/ inside the repository, where a researcher's runs land.
        let out_dir = repo.join("runs");
        let py = python.to_str().unwrap();
        let started = Instant::now();
        let out = run_command(&repo, &out_dir, &[py, "train.py"]);
        assert!(out.status.success(), "{}", text(&out));
        eprintln!("user command run: {:.1}s", started.elapsed().as_secs_f64());
        let doc = json_of(&out);
        let dir = run_dir_of(&doc);
        let manifest = read_json(&dir.join("manifest.json"));
        assert_eq!(manifest["experiment"], "command");
        let command = &manifest["command"];
        assert_eq!(command["argv"], serde_json::json!([py, "train.py"]));
        assert_eq!(
            Path::new(command["workdir"].as_str().unwrap())
                .canonicalize()
                .unwrap(),
            repo.canonicalize().unwrap()
        );
        let git_record = &command["git"];
        assert_eq!(git_record["commit"], git(&repo, &["rev-parse", "HEAD"]));
        let diff = std::fs::read(dir.join("diff.patch")).expect("diff.patch saved");
        assert!(String::from_utf8_lossy(&diff).contains("+# tuned lr next"));
        assert_eq!(
            git_record["diff_hash"],
            format!("sha256:{}", hex::encode(Sha256::digest(&diff)))
        );
        assert_eq!(git_record["untracked"], serde_json::json!(["notes.txt"]));
        let env = &command["env"];
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(env["OMP_NUM_THREADS"], "1");
        assert_eq!(env["HF_TOKEN"], "<set>");
        assert_eq!(env["MICRO_BATCH_SIZE"], "16");
        assert!(env.get("SHLVL").is_none(), "{env}");
        assert!(
            dir.join("outputs").is_dir(),
            "ENVGEN_OUTPUT_DIR is made for the command"
        );
        for (path, bytes) in files_under(&dir) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(SECRET),
                "{} holds the token's value",
                path.display()
            );
        }
        // The script's output, teed to the run directory; and the exported run dir.
        let stdout_log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
        assert!(stdout_log.contains("step 5 loss"), "{stdout_log}");
        let last_line = stdout_log
            .lines()
            .find(|l| l.starts_with("last loss "))
            .unwrap();
        let logged_dir = last_line.rsplit(" in ").next().unwrap();
        assert_eq!(
            Path::new(logged_dir).canonicalize().unwrap(),
            dir.canonicalize().unwrap()
        );
        let last_loss: f64 = last_line["last loss ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(summary["status"], "completed");
        assert_eq!(summary["steps_done"], 5);
        assert_eq!(summary["metrics"]["exit_code"], 0);
        assert_eq!(summary["metrics"]["loss"].as_f64(), Some(last_loss));
        assert!(summary["wall_s"].as_f64().unwrap() > 0.0);
        // TensorBoard follows the logged numbers, as for the experiments.
        let events = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("tfevents"))
            .expect("an event file in the run directory");
        let bytes = std::fs::read(&events).unwrap();
        assert!(
            bytes.windows(4).any(|w| w == b"loss"),
            "no loss scalar in {}",
            events.display()
        );

        // runs/ is git's to ignore and tagged for backup tools; the next run
        // does not count the previous one's files as untracked work, even with
        // the .gitignore deleted (issue #39).
        let ignore = std::fs::read_to_string(out_dir.join(".gitignore")).unwrap();
        assert!(ignore.lines().any(|l| l == "*"), "{ignore}");
        let tag = std::fs::read_to_string(out_dir.join("CACHEDIR.TAG")).unwrap();
        assert!(tag.starts_with("Signature: 8a477f597d28d172789f06886806bc55\n"));
        assert_eq!(
            git(&repo, &["status", "--porcelain"]),
            "M train.py\n?? notes.txt"
        );
        std::fs::remove_file(out_dir.join(".gitignore")).unwrap();
        let dry = envgen()
            .args(["run", "--dry-run", "--json", "--out"])
            .arg(&out_dir)
            .args(["--", py, "train.py"])
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(dry.status.success(), "{}", text(&dry));
        assert_eq!(
            json_of(&dry)["git"]["untracked"],
            serde_json::json!(["notes.txt"])
        );
        // Its small files packed for git: no weights, no links.
        let packed = tmp.path().join("results");
        let pack = envgen()
            .args(["runs", "pack", "--runs-dir"])
            .arg(&out_dir)
            .arg(dir.file_name().unwrap())
            .arg("--to")
            .arg(&packed)
            .output()
            .unwrap();
        assert!(pack.status.success(), "{}", text(&pack));
        let packed_run = packed.join(dir.file_name().unwrap());
        for name in [
            "manifest.json",
            "config.toml",
            "summary.json",
            "stdout.log",
            "diff.patch",
        ] {
            assert!(
                packed_run.join(name).is_file(),
                "{name} not packed: {}",
                text(&pack)
            );
        }

        let listed = envgen()
            .args(["runs", "list", "--json", "--out"])
            .arg(&out_dir)
            .output()
            .unwrap();
        let listed = json_of(&listed);
        let row = &listed["runs"][0];
        assert_eq!(row["experiment"], "command");
        assert_eq!(row["status"], "completed");
        assert_eq!(row["final_metric"]["name"], "loss");
    }
);

#[test]
fn a_failing_command_is_a_failed_run_with_its_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("runs");
    // A variable that is not UTF-8 (recorded lossily, never a panic).
    let not_utf8 = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff");
    let out = envgen()
        .args(["run", "--json", "--out"])
        .arg(&out_dir)
        .args(["--", "sh", "-c", "echo oops >&2; exit 3"])
        .current_dir(tmp.path())
        .env("CUDA_NOT_UTF8", not_utf8)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let dir = run_dir_of(&json_of(&out));
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["status"], "failed");
    assert_eq!(summary["metrics"]["exit_code"], 3);
    let stderr_log = std::fs::read_to_string(dir.join("stderr.log")).unwrap();
    assert_eq!(stderr_log, "oops\n");
    // Outside a git repository: recorded as such, not an error.
    let manifest = read_json(&dir.join("manifest.json"));
    assert_eq!(manifest["command"]["git"], Value::Null);
    assert!(manifest["finished_at"].is_string());
    // --resume runs the command again in the same run directory: the first
    // attempt's summary is kept aside, its output appended to.
    let again = envgen()
        .args(["run", "command", "--resume"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("running the command of"));
    let kept = read_json(&dir.join("attempts/summary-1.json"));
    assert_eq!(kept["metrics"]["exit_code"], 3);
    let stderr_log = std::fs::read_to_string(dir.join("stderr.log")).unwrap();
    assert_eq!(stderr_log, "oops\noops\n");
}

#[test]
fn ctrl_c_is_forwarded_and_the_run_is_interrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("runs");
    let script = "trap 'echo got-sigint; exit 7' INT; echo started; while :; do sleep 0.1; done";
    let mut child = envgen()
        .args(["run", "--out"])
        .arg(&out_dir)
        .args(["--", "sh", "-c", script])
        .current_dir(tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dir = loop {
        let started = crate::common::run_dirs(&out_dir)
            .into_iter()
            .next()
            .filter(|d| {
                std::fs::read_to_string(d.join("stdout.log")).is_ok_and(|s| s.contains("started"))
            });
        if let Some(dir) = started {
            break dir;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: kill(2) on the envgen this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline + Duration::from_secs(30) {
            let _ = child.kill();
            panic!("envgen did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["status"], "interrupted");
    assert_eq!(summary["metrics"]["exit_code"], 7);
    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    assert!(
        log.contains("got-sigint"),
        "the command saw no SIGINT: {log}"
    );
}

#[test]
fn bad_flags_exit_2_and_make_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("runs");
    let out = out_dir.to_str().unwrap();
    for (args, says) in [
        (
            &["run", "gpt2", "--out", out, "--", "python", "x.py"][..],
            "cannot be used with",
        ),
        (
            &["run", "--out", out, "--"][..],
            "no experiment and no command",
        ),
        (&["run", "--out", out][..], "no experiment and no command"),
        (
            &["run", "command", "--out", out][..],
            "the command is missing",
        ),
        (
            &[
                "run",
                "--precision",
                "bf16",
                "--micro-batch",
                "2",
                "--out",
                out,
                "--",
                "true",
            ][..],
            "--micro-batch, --precision are",
        ),
        (
            &["run", "--preset", "tiny", "--out", out, "--", "true"][..],
            "cannot be used with",
        ),
        (
            &["run", "--ranks", "2", "--out", out, "--", "true"][..],
            "--ranks is one of",
        ),
    ] {
        let got = envgen()
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_eq!(got.status.code(), Some(2), "{args:?}: {}", text(&got));
        let stderr = String::from_utf8_lossy(&got.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(
        !out_dir.exists(),
        "a refused run made {}",
        out_dir.display()
    );
    // The dry run names the command and makes nothing either.
    let dry = envgen()
        .args([
            "run",
            "--dry-run",
            "--json",
            "--out",
            out,
            "--",
            "python",
            "train.py",
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(dry.status.success(), "{}", text(&dry));
    assert_eq!(
        json_of(&dry)["argv"],
        serde_json::json!(["python", "train.py"])
    );
    assert!(!out_dir.exists());
}

#[test]
fn rerun_replays_the_command_and_warns_when_the_code_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "one"]);
    let out_dir = tmp.path().join("runs");
    let first = run_command(&repo, &out_dir, &["cat", "a.txt"]);
    assert!(first.status.success(), "{}", text(&first));
    let first_dir = run_dir_of(&json_of(&first));
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "two"]);
    // From elsewhere: the command runs in its recorded directory.
    let again = envgen()
        .args(["rerun", "--json", "--out"])
        .arg(&out_dir)
        .arg(&first_dir)
        .current_dir(tmp.path())
        .env("MICRO_BATCH_SIZE", "64")
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", text(&again));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("ran at commit"), "{stderr}");
    let dir = run_dir_of(&json_of(&again));
    assert_eq!(
        std::fs::read_to_string(dir.join("stdout.log")).unwrap(),
        "two\n"
    );
    let manifest = read_json(&dir.join("manifest.json"));
    assert_eq!(
        manifest["command"]["argv"],
        serde_json::json!(["cat", "a.txt"])
    );
    assert_eq!(
        manifest["rerun_of"].as_str().map(PathBuf::from),
        Some(first_dir.clone())
    );
    // Side by side: the same command line, another commit.
    let compared = envgen()
        .args(["runs", "compare", "--json"])
        .arg(&first_dir)
        .arg(&dir)
        .output()
        .unwrap();
    let compared = json_of(&compared);
    assert_eq!(compared["same_config"], true);
    let fields: Vec<&str> = compared["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    assert!(fields.contains(&"command.git.commit"), "{fields:?}");
    // Issue #39: the knob the environment changed is listed as such.
    let knob = compared["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["field"] == "command.env.MICRO_BATCH_SIZE")
        .unwrap_or_else(|| panic!("{compared}"));
    assert_eq!(knob["kind"], "command_env");
    assert_eq!(knob["values"], serde_json::json!(["16", "64"]));
    let said = envgen()
        .args(["runs", "compare"])
        .arg(&first_dir)
        .arg(&dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.contains("but the command's environment differs:")
            && said.lines().any(
                |l| l.trim_start().starts_with("command.env.MICRO_BATCH_SIZE ")
                    && l.ends_with("16 → 64")
            ),
        "{said}"
    );
    let shown = envgen().args(["runs", "show"]).arg(&dir).output().unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(r#"command     ["cat", "a.txt"]"#), "{shown}");
}
