//! The base image the Docker tests build on: nothing can be pulled here,
//! so `debian:bookworm-slim` is a `debootstrap --variant=minbase bookworm`
//! root filesystem imported into the test daemon (the tarball is cached
//! under $ENVGEN_TEST_STATE). Shared by tests/images.rs and tests/run_docker.rs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BASE: &str = "debian:bookworm-slim";

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

pub fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub fn ok(output: Output) -> Output {
    assert!(output.status.success(), "{}", text(&output));
    output
}

/// `debian:bookworm-slim` in the test daemon: a minbase debootstrap of
/// Debian 12, imported (glibc 2.36, like the real slim image).
pub fn ensure_base_image() {
    if run("docker", &["image", "inspect", BASE]).status.success() {
        return;
    }
    let tarball = state_dir().join("bookworm-minbase.tar");
    if !tarball.exists() {
        let rootfs = state_dir().join("bookworm-rootfs");
        let _ = std::fs::remove_dir_all(&rootfs);
        let rootfs_arg = rootfs.to_str().unwrap();
        ok(run(
            "debootstrap",
            &[
                "--variant=minbase",
                "bookworm",
                rootfs_arg,
                "http://deb.debian.org/debian",
            ],
        ));
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
    let runtime = envgen::image::docker::runtime().unwrap();
    runtime.block_on(async {
        let docker = envgen::image::docker::connect().await.unwrap();
        envgen::image::docker::import_rootfs(&docker, &tarball, "debian", "bookworm-slim")
            .await
            .unwrap();
    });
}
