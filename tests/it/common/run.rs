//! Shared by the `envgen run --where …` tests: short gpt2 runs, reading run
//! directories, stopping runs midway, and a minimal container root filesystem.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{envgen, json_of, read_json};

/// A very short tiny-gpt2 run: 6 steps, checkpoint and eval every 2.
pub const SHORT: &[&str] = &[
    "--backend",
    "cpu",
    "--json",
    "--set",
    "train.steps=6",
    "--set",
    "train.checkpoint_every=2",
    "--set",
    "train.eval_every=2",
];

/// `envgen run gpt2 <SHORT> --out OUT <extra>`.
pub fn short_run(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["run", "gpt2"];
    args.extend(SHORT);
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(extra);
    envgen().args(&args).output().expect("spawn envgen")
}

pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON file `file` of the run directory `dir`.
pub fn read(dir: &Path, file: &str) -> Value {
    read_json(&dir.join(file))
}

/// Wait until the run has logged a training step at or past `step`.
pub fn wait_for_step(dir: &Path, step: u64, timeout: Duration) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap_or_default();
        let reached = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["step"].as_u64().is_some_and(|s| s >= step) && v.get("loss").is_some());
        if reached {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "{} did not reach step {step} within {timeout:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A minimal root filesystem holding this build's envgen and the shared
/// libraries it links (from `ldd`), an unprivileged `envgen` user (uid 1000)
/// and the files container runtimes bind over. The images work builds the
/// real profile images; these tests need only a container with this binary.
pub fn minimal_rootfs(root: &Path) {
    let envgen = Path::new(env!("CARGO_BIN_EXE_envgen"));
    let mut files: Vec<PathBuf> = vec![envgen.to_path_buf()];
    let ldd = Command::new("ldd").arg(envgen).output().expect("ldd");
    for word in String::from_utf8_lossy(&ldd.stdout).split_whitespace() {
        if word.starts_with('/') {
            files.push(PathBuf::from(word));
        }
    }
    for file in &files {
        let target = if file == envgen {
            root.join("usr/local/bin/envgen")
        } else {
            root.join(file.strip_prefix("/").unwrap())
        };
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(file, &target).unwrap();
    }
    for dir in ["tmp", "home/envgen", "dev", "proc", "sys", "mnt", "etc"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    // Sticky and world-writable, as in every Debian/Ubuntu image: the
    // daemon's tmpfs over /tmp takes the mode of the image's directory.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/false\nenvgen:x:1000:1000::/home/envgen:/bin/false\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nenvgen:x:1000:\n").unwrap();
    for file in ["etc/hosts", "etc/resolv.conf"] {
        std::fs::write(root.join(file), "").unwrap();
    }
}

/// `envgen run gpt2 --backend cpu --json --stop-after STEP --resume DIR`:
/// resume the CPU gpt2 run in `dir` and stop it (exit 130) after `step`.
pub fn resume_stopping_after(dir: &Path, step: u64) -> Output {
    envgen()
        .args(["run", "gpt2", "--backend", "cpu", "--json", "--stop-after"])
        .arg(step.to_string())
        .arg("--resume")
        .arg(dir)
        .output()
        .expect("spawn envgen")
}

/// The run in `dir` (of `steps` steps) ended interrupted with a checkpoint
/// (a hard kill may land between a step's metrics line and its checkpoint,
/// so at least step 1), and resumes from it: two more steps natively.
pub fn assert_interrupted_then_resume(dir: &Path, steps: u64) {
    let summary = read(dir, "summary.json");
    assert_eq!(summary["status"], "interrupted", "{summary}");
    let done = summary["steps_done"].as_u64().unwrap();
    assert!((1..steps).contains(&done), "{summary}");
    let resumed = resume_stopping_after(dir, done + 2);
    assert_eq!(resumed.status.code(), Some(130), "{resumed:?}");
    let resumed = json_of(&resumed);
    assert_eq!(resumed["summary"]["steps_done"], done + 2);
}

/// Spawn `envgen ARGS`, wait until its (only) run directory in `out` logged
/// step 2, send SIGINT; returns the run directory and the process output.
pub fn interrupt_after_two_steps(args: &[String], out: &Path) -> (PathBuf, Output) {
    stop_after_two_steps(args, out, |pid, _| send_signal(pid, "INT"))
}

/// `kill -SIGNAL PID`, asserting it was delivered.
pub fn send_signal(pid: u32, signal: &str) {
    let kill = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success(), "kill -{signal} {pid}");
}

/// Like [`interrupt_after_two_steps`], stopping the run with `stop(pid, run_dir)`.
pub fn stop_after_two_steps(
    args: &[String],
    out: &Path,
    stop: impl FnOnce(u32, &Path),
) -> (PathBuf, Output) {
    let child = envgen()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dir = run_dir_in(out);
    wait_for_step(&dir, 2, Duration::from_secs(120));
    stop(child.id(), &dir);
    (dir, child.wait_with_output().unwrap())
}

/// Arguments of a gpt2 run long enough to be stopped in the middle
/// (400 steps of ~0.1 s, a checkpoint after every step).
pub fn long_run_args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["run", "gpt2", "--backend", "cpu", "--json"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for set in [
        "train.steps=400",
        "train.checkpoint_every=1",
        "train.eval_every=400",
    ] {
        args.extend(["--set".to_string(), set.to_string()]);
    }
    args.extend(["--out".to_string(), out.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub fn assert_exit_130(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `envgen rerun --json --out OUT DIR`, which must succeed.
pub fn rerun_json(out: &Path, dir: &Path) -> Value {
    let rerun = envgen()
        .args(["rerun", "--json", "--out", out.to_str().unwrap()])
        .arg(dir)
        .output()
        .unwrap();
    assert_ok(&rerun, "rerun");
    json_of(&rerun)
}

/// The run directory the background run made in `out`.
pub fn run_dir_in(out: &Path) -> PathBuf {
    let start = Instant::now();
    loop {
        let found = std::fs::read_dir(out).ok().and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .find(|p| p.join("manifest.json").is_file())
        });
        if let Some(dir) = found {
            return dir;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no run directory"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
