//! A new user's first steps, on committed content only: `git clone` of this
//! repository at HEAD into a temporary directory, envgen built there, then
//! `envgen image verify` (exit 0 for every profile: a base the registry
//! cannot confirm from here is "not re-checked: offline", not a failure),
//! `envgen image render cuda12.8` (FROM pinned by digest) and
//! `envgen image build cpu` with no flags, against the test dockerd that
//! scripts/test.sh starts.
//!
//! The build reuses the dependencies this test run already compiled: the
//! clone gets a private target directory seeded with hard links to the
//! dependency artifacts of this one (same filesystem: it lives inside it),
//! minus the workspace's own crates, which are compiled from the clone's
//! sources into new files. So the clone's envgen is a different build than
//! the one under test, which is the point: the lock must hold for any build.
//!
//! No registry is reachable here, so `debian:bookworm-slim@sha256:…` (the
//! committed pin) cannot be pulled: the build runs with
//! `ENVGEN_BASE_STAND_IN=debian:bookworm-slim`, the test daemon's debootstrap
//! stand-in (tests/it/common/docker_base.rs), and must say so and label it; without that
//! variable — a user's machine — it pulls the pinned digest, which here fails
//! fast with exit 3 and the fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::docker_base::{self, inspect, ok, run};
use crate::common::{heavy_test, text};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The target directory this test binary was built in (…/target/debug/deps/it-HASH).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .find(|dir| dir.file_name().is_some_and(|n| n == "debug"))
        .and_then(Path::parent)
        .expect("the test binary lives under TARGET/debug")
        .to_path_buf()
}

/// Is this artifact one of the workspace's own crates (or its tests)?
fn ours(name: &str) -> bool {
    name.starts_with("envgen") || name.starts_with("libenvgen")
}

/// A target directory for the clone: hard links to this run's dependency
/// artifacts (never written again: they are fresh), without the workspace's
/// own crates, test binaries and incremental state.
fn seeded_target(dest: &Path) {
    let source = target_dir().join("debug");
    let debug = dest.join("debug");
    std::fs::create_dir_all(&debug).unwrap();
    for sub in ["deps", "build", ".fingerprint"] {
        let from = source.join(sub);
        if !from.is_dir() {
            continue;
        }
        let to = debug.join(sub);
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_test_binary = sub == "deps"
                && entry.file_type().unwrap().is_file()
                && !name.contains('.')
                && !name.starts_with("lib");
            if ours(&name) || is_test_binary {
                continue;
            }
            ok(run(
                "cp",
                &["-al", entry.path().to_str().unwrap(), to.to_str().unwrap()],
            ));
        }
    }
}

/// A command with cargo's test-time variables removed (the clone's build
/// must not see this package's CARGO_MANIFEST_DIR and the like).
fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if (key.starts_with("CARGO_") && key != "CARGO_HOME") || key.starts_with("RUST_TEST") {
            command.env_remove(&key);
        }
    }
    command
}

/// `git clone` of REPO at `head` into `clone`, then `cargo build` there into
/// `target` (seeded with this run's dependencies). Returns the registry
/// crates cargo compiled again: none when `cargo build` resolves the same
/// features as `cargo test` (see `build_and_test_resolve_the_same_features`).
fn clone_and_build(head: &str, clone: &Path, target: &Path) -> Vec<String> {
    ok(run(
        "git",
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            REPO,
            clone.to_str().unwrap(),
        ],
    ));
    ok(run(
        "git",
        &["-C", clone.to_str().unwrap(), "checkout", "--quiet", head],
    ));
    seeded_target(target);
    let started = std::time::Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = clean_command(&cargo)
        .args(["build", "--workspace", "--locked", "--offline"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(clone)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    // "Compiling NAME vX.Y.Z" without "(path)": a registry crate.
    let rebuilt: Vec<String> = String::from_utf8_lossy(&built.stderr)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("Compiling "))
        .filter(|krate| !krate.contains('('))
        .map(str::to_string)
        .collect();
    eprintln!(
        "fresh clone {}: envgen built in {:.0} s; registry crates compiled again: {}",
        clone.display(),
        started.elapsed().as_secs_f64(),
        rebuilt.len()
    );
    rebuilt
}

/// Each package's features as `cargo tree` resolves them, keyed by
/// "NAME vVERSION (SOURCE)".
fn resolved_features(edges: &str) -> std::collections::BTreeMap<String, String> {
    let manifest = format!("{REPO}/Cargo.toml");
    let out = ok(run(
        "cargo",
        &[
            "tree",
            "--manifest-path",
            &manifest,
            "--workspace",
            "--locked",
            "--offline",
            "--prefix",
            "none",
            "-e",
            edges,
            "-f",
            "{p}|{f}",
        ],
    ));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.trim_end_matches(" (*)").split_once('|'))
        .map(|(package, features)| (package.to_string(), features.to_string()))
        .collect()
}

/// The clone's build must reuse every dependency this test run compiled:
/// a dependency compiled again in the clone's own target directory embeds
/// that directory (build scripts' OUT_DIR) and the binary depends on where
/// it was built. Resolver 2 resolves features without dev-dependencies for
/// `cargo build`, so a dev-dependency that turns on a feature of a shared
/// crate splits the two builds (png did: crc32fast, simd-adler32, hence
/// all of Burn). experiments/Cargo.toml turns such features on for both.
#[test]
fn build_and_test_resolve_the_same_features() {
    let built = resolved_features("normal,build");
    let tested = resolved_features("normal,build,dev");
    assert!(
        built.len() > 100,
        "cargo tree printed {} packages",
        built.len()
    );
    let split: Vec<String> = built
        .iter()
        .filter_map(|(package, features)| {
            let with_dev = tested.get(package)?;
            (with_dev != features)
                .then(|| format!("{package}: build [{features}], test [{with_dev}]"))
        })
        .collect();
    assert!(
        split.is_empty(),
        "features differ between `cargo build` and `cargo test`; turn them on in \
         experiments/Cargo.toml's feature-unification shim:\n{}",
        split.join("\n")
    );
}

/// sha256 of `binary` as `envgen image build` stages it into the image.
fn staged_sha256(binary: &Path) -> String {
    let staging = tempfile::tempdir().unwrap();
    envgen::image::build::stage_binary(binary, staging.path()).unwrap();
    let staged = staging.path().join(envgen::image::build::STAGED_BINARY);
    envgen::image::lock::sha256_hex(&std::fs::read(staged).unwrap())
}

fn envgen_in(clone: &Path, binary: &Path, args: &[&str]) -> Output {
    clean_command(binary)
        .args(args)
        .current_dir(clone)
        .output()
        .unwrap()
}

/// The diff_id of an image's last layer (the envgen layer).
fn inspect_last_layer(tag: &str) -> String {
    let layers: Vec<String> =
        serde_json::from_str(&inspect(tag, "{{json .RootFS.Layers}}")).unwrap();
    layers.last().unwrap().clone()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

heavy_test!(
    a_fresh_clone_verifies_renders_pinned_and_builds_cpu_without_flags,
    || {
        docker_base::require_test_daemon();
        docker_base::ensure_base_image();
        let head = String::from_utf8(ok(run("git", &["-C", REPO, "rev-parse", "HEAD"])).stdout)
            .unwrap()
            .trim()
            .to_string();
        let work = tempfile::Builder::new()
            .prefix("fresh-clone-")
            .tempdir_in(target_dir())
            .unwrap();
        let clone = work.path().join("envgen");
        let target = work.path().join("target");
        let rebuilt = clone_and_build(&head, &clone, &target);
        let binary = target.join("debug/envgen");
        // verify: every profile matches the committed lock, with this binary.
        let verified = envgen_in(&clone, &binary, &["image", "verify"]);
        assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
        let report = stdout(&verified);
        assert!(report.contains("ok: 3 profile(s)"), "{report}");
        for profile in ["cpu", "cuda12.8", "ngc-pytorch-25.06"] {
            assert!(
                report.contains(&format!("note: {profile}: base"))
                    && report
                        .lines()
                        .any(|l| l.contains(&format!("{profile}: base"))
                            && l.contains("not re-checked: offline")),
                "{profile}: {report}"
            );
        }
        assert!(!report.contains("drift:"), "{report}");
        // Without a daemon at all, the same.
        let offline = clean_command(&binary)
            .args(["image", "verify", "--json"])
            .current_dir(&clone)
            .env("DOCKER_HOST", "unix:///nonexistent/envgen-test.sock")
            .output()
            .unwrap();
        assert_eq!(offline.status.code(), Some(0), "{}", text(&offline));
        let json: serde_json::Value = serde_json::from_slice(&offline.stdout).unwrap();
        assert_eq!(json["ok"], true, "{json}");

        // render: the CUDA recipe is pinned by content.
        let rendered = stdout(&ok(envgen_in(
            &clone,
            &binary,
            &["image", "render", "cuda12.8"],
        )));
        assert!(
        rendered.contains(
            "FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04@sha256:ebef3c171eeef0298e4eb2e4be843105edf3b8b0ac45e0b43acee358e8046867\n"
        ),
        "{rendered}"
    );

        // build cpu, no flags. A user's machine (no stand-in): pulls the pinned
        // digest — which cannot work here, and says how to fix it.
        let pinned = clean_command(&binary)
            .args(["image", "build", "cpu"])
            .current_dir(&clone)
            .env_remove("ENVGEN_BASE_STAND_IN")
            .output()
            .unwrap();
        assert_eq!(pinned.status.code(), Some(3), "{}", text(&pinned));
        assert!(
        text(&pinned).contains("debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241"),
        "{}",
        text(&pinned)
    );
        // This machine's test daemon: the labelled stand-in.
        let build = clean_command(&binary)
            .args(["image", "build", "cpu"])
            .current_dir(&clone)
            .env("ENVGEN_BASE_STAND_IN", "debian:bookworm-slim")
            .output()
            .unwrap();
        assert_eq!(build.status.code(), Some(0), "{}", text(&build));
        assert!(
            text(&build).contains("LOCAL STAND-IN debian:bookworm-slim"),
            "{}",
            text(&build)
        );
        let tag = format!("envgen/cpu:{}", env!("CARGO_PKG_VERSION"));
        let labels: serde_json::Value =
            serde_json::from_str(&inspect(&tag, "{{json .Config.Labels}}")).unwrap();
        assert_eq!(labels["org.opencontainers.image.revision"], head.as_str());
        assert_eq!(labels["io.envgen.profile"], "cpu");
        assert!(
            labels["io.envgen.base-stand-in"]
                .as_str()
                .is_some_and(|s| s.contains("in place of debian:bookworm-slim@sha256:abd67ffc")),
            "{labels}"
        );
        assert_eq!(
            labels["io.envgen.binary-sha256"].as_str(),
            Some(envgen::image::lock::sha256_hex(&std::fs::read(&binary).unwrap()).as_str())
        );
        let version = ok(run(
            "docker",
            &["run", "--rm", "--network", "none", &tag, "--version"],
        ));
        let envgen_layer = inspect_last_layer(&tag);
        // The first clone's build (GBs of debug artifacts) is not needed any
        // more: free it before the second build, on a CI disk of unknown size.
        let first_staged = staged_sha256(&binary);
        std::fs::remove_dir_all(&target).unwrap();

        // The same commit built in another directory (other path, other depth)
        // gives the same stripped binary, hence the same envgen layer.
        let other = tempfile::Builder::new()
            .prefix("fresh-clone-other-directory-")
            .tempdir_in(target_dir())
            .unwrap();
        let other_clone = other.path().join("a/b/envgen-elsewhere");
        let other_target = other.path().join("target");
        let other_rebuilt = clone_and_build(&head, &other_clone, &other_target);
        let other_binary = other_target.join("debug/envgen");
        assert_eq!(
            staged_sha256(&other_binary),
            first_staged,
            "one commit, two directories: the envgen that goes into images must be the same bytes \
         (registry crates compiled again: {rebuilt:?} and {other_rebuilt:?})"
        );
        let rebuilt = clean_command(&other_binary)
            .args([
                "image",
                "build",
                "cpu",
                "--tag",
                "envgen-test/cpu:other-directory",
            ])
            .current_dir(&other_clone)
            .env("ENVGEN_BASE_STAND_IN", "debian:bookworm-slim")
            .output()
            .unwrap();
        assert_eq!(rebuilt.status.code(), Some(0), "{}", text(&rebuilt));
        assert_eq!(
            inspect_last_layer("envgen-test/cpu:other-directory"),
            envgen_layer,
            "the envgen layer's diff_id is the same for a given commit"
        );
        assert!(
            stdout(&version).contains(&format!("envgen {}", env!("CARGO_PKG_VERSION"))),
            "{}",
            text(&version)
        );
    }
);
