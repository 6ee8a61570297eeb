//! What the Docker tests share: the checks that the test daemon is there,
//! the docker CLI, and the base image they build on. Nothing can be pulled
//! here, so `debian:bookworm-slim` is a `debootstrap --variant=minbase
//! bookworm` root filesystem imported into the test daemon (the tarball is
//! cached under $ENVGEN_TEST_STATE).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::text;

pub const BASE: &str = "debian:bookworm-slim";

/// The private daemon scripts/test.sh starts (ENVGEN_TEST_DOCKER says so)
/// and DOCKER_HOST naming it: these tests never skip, they fail and say
/// how to start it.
pub fn require_test_daemon() {
    assert!(
        std::env::var_os("ENVGEN_TEST_DOCKER").is_some() && std::env::var_os("DOCKER_HOST").is_some(),
        "these tests need the private Docker daemon: run ./scripts/test.sh (it starts dockerd with its own data root and socket, and exports DOCKER_HOST)"
    );
}

/// A Docker daemon named by DOCKER_HOST (scripts/test.sh exports its own).
pub fn require_docker_host() {
    assert!(
        std::env::var_os("DOCKER_HOST").is_some(),
        "these tests need the private Docker daemon: run ./scripts/test.sh (it starts dockerd and exports DOCKER_HOST)"
    );
}

pub fn state_dir() -> PathBuf {
    let dir = std::env::var_os("ENVGEN_TEST_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".envgen-test"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("{program} {args:?}: {err}"))
}

/// The docker CLI, for the tests' own checks and fixtures (envgen itself
/// talks to the Engine API through bollard only).
pub fn docker(args: &[&str]) -> Output {
    run("docker", args)
}

/// stdout, trimmed.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// `docker image inspect --format FORMAT IMAGE`, which must succeed.
pub fn inspect(image: &str, format: &str) -> String {
    stdout(&ok(docker(&[
        "image", "inspect", "--format", format, image,
    ])))
}

pub fn ok(output: Output) -> Output {
    assert!(output.status.success(), "{}", text(&output));
    output
}

/// `debian:bookworm-slim` in the test daemon: a minbase debootstrap of
/// Debian 12, imported (glibc 2.36, like the real slim image).
pub fn ensure_base_image() {
    ensure_debootstrap_image("debian", "bookworm-slim", "bookworm-minbase.tar", &[]);
}

/// A base with Debian 12's python3 (3.11) and pip, for the images with a
/// profile's own Python dependencies (`image_requirements`).
pub const PYTHON_BASE: &str = "envgen-test/python:bookworm";

/// [`PYTHON_BASE`] in the test daemon: minbase plus python3 and
/// python3-pip (made once, cached like the plain base; a minute and a half).
pub fn ensure_python_base_image() {
    let (repository, tag) = PYTHON_BASE.split_once(':').unwrap();
    ensure_debootstrap_image(
        repository,
        tag,
        "bookworm-python3-pip.tar",
        &["python3", "python3-pip"],
    );
}

/// `REPOSITORY:TAG` in the test daemon: a `debootstrap --variant=minbase
/// bookworm` with `include`d packages, imported; the tarball cached under
/// the state directory as `tarball_name`.
fn ensure_debootstrap_image(repository: &str, tag: &str, tarball_name: &str, include: &[&str]) {
    if docker(&["image", "inspect", &format!("{repository}:{tag}")])
        .status
        .success()
    {
        return;
    }
    let tarball = state_dir().join(tarball_name);
    if !tarball.exists() {
        let rootfs = state_dir().join(format!("{tarball_name}.rootfs"));
        let _ = std::fs::remove_dir_all(&rootfs);
        let rootfs_arg = rootfs.to_str().unwrap();
        let include = format!("--include={}", include.join(","));
        let mut args = vec!["--variant=minbase"];
        if include != "--include=" {
            args.push(&include);
        }
        args.extend(["bookworm", rootfs_arg, "http://deb.debian.org/debian"]);
        ok(run("debootstrap", &args));
        // What debian:bookworm-slim leaves out too: package caches and lists.
        for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
            let _ = run(
                "find",
                &[rootfs.join(dir).to_str().unwrap(), "-type", "f", "-delete"],
            );
        }
        let partial = tarball.with_extension("partial");
        ok(run(
            "tar",
            &[
                "--numeric-owner",
                "--sort=name",
                "-C",
                rootfs_arg,
                "-cf",
                partial.to_str().unwrap(),
                ".",
            ],
        ));
        std::fs::rename(&partial, &tarball).unwrap();
        std::fs::remove_dir_all(&rootfs).unwrap();
    }
    let runtime = envgen::image::daemon::runtime().unwrap();
    runtime.block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        envgen::image::daemon::import_rootfs(&docker, &tarball, repository, tag)
            .await
            .unwrap();
    });
}
