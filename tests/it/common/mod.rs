//! Helpers shared by the test modules: the real `envgen` binary and what it
//! prints (here), and per area: [`doctor`] (FAKE nvidia-smi hosts),
//! [`experiment`] (runs, resume, quantize), [`run`] (`envgen run --where …`),
//! [`docker_base`] (the test daemon's base image), [`docker_run`] (a test
//! image with this envgen, a run's containers), [`turns`] (which areas
//! may run beside each other).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub mod docker_base;
pub mod docker_run;
pub mod doctor;
pub mod experiment;
pub mod reference;
pub mod run;
pub mod turns;

pub(crate) use turns::{heavy_test, turn};

/// This build's `envgen`, without the caller's ENVGEN_RUN_IMAGE (which
/// would pick the image of `--where docker` runs).
pub fn envgen() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_envgen"));
    command.env_remove("ENVGEN_RUN_IMAGE");
    command
}

/// `envgen ARGS`, whatever its exit status.
pub fn run(args: &[&str]) -> Output {
    envgen().args(args).output().expect("spawn envgen")
}

/// `envgen ARGS`, which must succeed.
pub fn run_ok(args: &[&str]) -> Output {
    expect_success(run(args))
}

/// The output of an `envgen` that must have succeeded.
pub fn expect_success(out: Output) -> Output {
    assert!(
        out.status.success(),
        "envgen failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// stdout as the one JSON document `--json` promises.
pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A process's exit code, stdout and stderr, for failure messages.
pub fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `run_dir` of an `envgen run --json` document.
pub fn run_dir_of(doc: &Value) -> PathBuf {
    PathBuf::from(doc["run_dir"].as_str().expect("run_dir"))
}

/// The run directories in an `--out` folder (its subdirectories, sorted):
/// the folder also holds envgen's `.gitignore` and `CACHEDIR.TAG`.
pub fn run_dirs(out: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The Slurm tests never skip: without the cluster they fail and say how
/// to start it.
pub fn require_slurm_cluster() {
    assert!(
        std::env::var_os("ENVGEN_TEST_SLURM").is_some() && std::env::var_os("SLURM_CONF").is_some(),
        "these tests need the private Slurm cluster: run ./scripts/test.sh (it starts munge, slurmctld and slurmd)"
    );
}

/// `git -C DIR ARGS…`, which must succeed; its trimmed stdout.
/// `git init` in `dir` with a committer identity (for test repositories).
pub fn git_init(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.email", "t@example.com"]);
    git(dir, &["config", "user.name", "test"]);
}

pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether the tests run as root (the suite does; tests that switch to an
/// unprivileged uid with `setpriv` need it).
pub fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
}

/// `chmod MODE PATH`.
pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
