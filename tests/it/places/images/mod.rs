//! Real Docker: the private dockerd (own --data-root and socket) and the
//! loopback registry that scripts/test.sh starts (scripts/services/docker.sh,
//! registry.sh). Nothing can be pulled here, so the base image
//! `debian:bookworm-slim` is made by the tests themselves: a
//! `debootstrap --variant=minbase bookworm` root filesystem imported into
//! the test daemon (the tarball is cached under $ENVGEN_TEST_STATE).
//! These tests never skip: without the services they fail and say how to
//! start them.
//!
//! One test at a time talks to the daemon (the `DAEMON` lock): builds on two
//! cores gain nothing from overlapping, and the leftover checks stay exact.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use envgen::image::lock::{DigestSource, LockEntry, Lockfile};
use serde_json::Value;

use crate::common::docker_base::{self, docker, inspect, ok, run, stdout, BASE};
use crate::common::{heavy_test, text};

mod build;
mod cuda_bases;
mod export;
mod failures;
const ENVGEN: &str = env!("CARGO_BIN_EXE_envgen");

static DAEMON: Mutex<bool> = Mutex::new(false);

/// Take the daemon for this test; the first caller makes sure the base image exists.
fn daemon() -> MutexGuard<'static, bool> {
    docker_base::require_test_daemon();
    let mut guard = DAEMON
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !*guard {
        docker_base::ensure_base_image();
        *guard = true;
    }
    guard
}

fn registry() -> String {
    std::env::var("ENVGEN_TEST_REGISTRY").expect(
        "these tests need the loopback registry: run ./scripts/test.sh (it starts docker-registry on 127.0.0.1 and exports ENVGEN_TEST_REGISTRY)",
    )
}

/// A private copy of the repository's profiles and templates (no lock), so
/// tests can lock, tamper and re-lock without touching containers/.
pub(crate) fn containers_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers");
    for sub in ["profiles", "templates"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        for entry in std::fs::read_dir(source.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.path().join(sub).join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

/// `envgen image SUBCOMMAND ARGS… --containers DIR`, from the repository root
/// (the labels read the git revision there).
fn envgen_image(containers: &Path, subcommand: &str, args: &[&str]) -> Output {
    envgen_image_with(containers, subcommand, args, |_| {})
}

fn envgen_image_with(
    containers: &Path,
    subcommand: &str,
    args: &[&str],
    adjust: impl FnOnce(&mut Command),
) -> Output {
    let mut command = Command::new(ENVGEN);
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("image")
        .arg(subcommand)
        .args(args)
        .arg("--containers")
        .arg(containers);
    adjust(&mut command);
    command.output().unwrap()
}

/// The `done` event of `envgen image build --json`.
fn build_result(output: &Output) -> Value {
    let done = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| event["event"] == "done")
        .unwrap_or_else(|| panic!("no done event: {}", text(output)));
    done["result"].clone()
}

fn image_exists(image: &str) -> bool {
    docker(&["image", "inspect", image]).status.success()
}

/// The `event` names of `--json` output, in order.
fn events(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|event| event["event"].as_str().map(str::to_string))
        .collect()
}

/// Lock `cpu` in a fresh copy and build it; returns (copy, build result).
fn locked_cpu_build(tag: &str, extra: &[&str]) -> (tempfile::TempDir, Value) {
    let containers = containers_copy();
    ok(envgen_image(containers.path(), "lock", &["cpu"]));
    let mut args = vec!["cpu", "--json", "--tag", tag];
    args.extend_from_slice(extra);
    let output = ok(envgen_image(containers.path(), "build", &args));
    let names = events(&output);
    assert_eq!(
        names.first().map(String::as_str),
        Some("start"),
        "{names:?}"
    );
    assert!(
        names.iter().filter(|n| *n == "step").count() >= 5,
        "{names:?}"
    );
    assert_eq!(names.last().map(String::as_str), Some("done"), "{names:?}");
    (containers, build_result(&output))
}
