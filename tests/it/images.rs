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
use crate::common::{text, turn};
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

#[test]
fn cpu_image_builds_runs_doctor_as_non_root_and_reproduces_its_envgen_layer() {
    let _turn = turn!();
    let _daemon = daemon();
    let (containers, built) = locked_cpu_build("envgen-test/cpu:one", &[]);
    let image_id = built["image_id"].as_str().unwrap().to_string();
    assert!(image_id.starts_with("sha256:"), "{built}");
    assert_eq!(inspect("envgen-test/cpu:one", "{{.Id}}"), image_id);

    // The contract's labels, with the lock entry's hash.
    let labels: Value =
        serde_json::from_str(&inspect("envgen-test/cpu:one", "{{json .Config.Labels}}")).unwrap();
    for key in [
        "org.opencontainers.image.source",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.created",
        "org.opencontainers.image.version",
        "io.envgen.profile",
        "io.envgen.lock-sha256",
        "io.envgen.config-schema",
    ] {
        assert!(
            labels[key].as_str().is_some_and(|v| !v.is_empty()),
            "{key} missing: {labels}"
        );
    }
    assert_eq!(labels["io.envgen.profile"], "cpu");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    let lock_text = std::fs::read_to_string(containers.path().join("envgen.lock")).unwrap();
    let lock: toml::Value = toml::from_str(&lock_text).unwrap();
    let entry = &lock["profiles"]["cpu"];
    assert_eq!(
        entry["digest_source"].as_str(),
        Some("image-id"),
        "{lock_text}"
    );
    let expected_lock_sha = entry.clone().try_into::<LockEntry>().unwrap().sha256();
    assert_eq!(labels["io.envgen.lock-sha256"], expected_lock_sha.as_str());

    // Non-root user, entrypoint envgen; doctor runs inside and reports JSON.
    assert_eq!(
        inspect("envgen-test/cpu:one", "{{.Config.User}}"),
        "1000:1000"
    );
    let uid = ok(docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "/usr/bin/id",
        "envgen-test/cpu:one",
        "-u",
    ]));
    assert_eq!(stdout(&uid), "1000");
    // Not one setuid/setgid file (the Debian base has su, mount, passwd, …):
    // nothing in the image can gain privileges (issue #21). As root, so that
    // find reads every directory.
    let special = ok(docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--user",
        "0:0",
        "--entrypoint",
        "/usr/bin/find",
        "envgen-test/cpu:one",
        "/",
        "-xdev",
        "-perm",
        "/6000",
        "-type",
        "f",
    ]));
    assert_eq!(stdout(&special), "", "setuid/setgid files in the image");
    let doctor = ok(docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "envgen-test/cpu:one",
        "doctor",
        "--json",
    ]));
    let report: Value = serde_json::from_slice(&doctor.stdout)
        .unwrap_or_else(|err| panic!("doctor --json in the container: {err}\n{}", text(&doctor)));
    assert!(report["host"].is_object(), "{report}");
    let os = report["host"]["os"].to_string();
    assert!(
        os.contains("12") || os.to_lowercase().contains("debian"),
        "{os}"
    );

    // The host's doctor reads the built image from the daemon: an envgen CPU image.
    let host_doctor = Command::new(ENVGEN)
        .args([
            "doctor",
            "--image",
            "envgen-test/cpu:one",
            "--assume-gpu",
            "A30",
            "--assume-driver",
            "535.261.03",
            "--json",
        ])
        .output()
        .unwrap();
    let verdicts: Value = serde_json::from_slice(&host_doctor.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", text(&host_doctor)));
    let verdict = verdicts["verdicts"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["image"] == "envgen-test/cpu:one"))
        .unwrap_or_else(|| panic!("no verdict for the image: {verdicts}"));
    assert!(
        verdict.to_string().contains("cpu-only"),
        "a built cpu image is judged by its labels: {verdict}"
    );

    // A warm rebuild (cache hits) gives the very same image.
    let output = ok(envgen_image(
        containers.path(),
        "build",
        &["cpu", "--json", "--tag", "envgen-test/cpu:warm"],
    ));
    assert_eq!(build_result(&output)["image_id"], built["image_id"]);

    // Rebuilding from the same lock without the cache gives the same envgen layer.
    let output = ok(envgen_image(
        containers.path(),
        "build",
        &[
            "cpu",
            "--json",
            "--tag",
            "envgen-test/cpu:two",
            "--no-cache",
        ],
    ));
    let rebuilt = build_result(&output);
    assert!(built["envgen_layer"].as_str().is_some(), "{built}");
    assert_eq!(rebuilt["envgen_layer"], built["envgen_layer"]);
    let layer_count = |tag: &str| inspect(tag, "{{len .RootFS.Layers}}");
    assert_eq!(
        layer_count("envgen-test/cpu:two"),
        layer_count("envgen-test/cpu:one")
    );

    // ensure_built: the default tag is built once, then reused.
    let runtime = envgen::image::daemon::runtime().unwrap();
    let containers_at = envgen::image::Containers::locate(Some(containers.path())).unwrap();
    let binary = Path::new(ENVGEN);
    let (first, _) = runtime
        .block_on(envgen::image::ensure_built(
            &containers_at,
            "cpu",
            Some(binary),
        ))
        .unwrap();
    let started = Instant::now();
    let (again, _) = runtime
        .block_on(envgen::image::ensure_built(
            &containers_at,
            "cpu",
            Some(binary),
        ))
        .unwrap();
    assert_eq!(first, again);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the second call must not rebuild"
    );
    assert_eq!(
        inspect(&envgen::image::build::default_tag("cpu"), "{{.Id}}"),
        first
    );
}

/// Rendered recipes pin their base by the committed lock's digest — from the
/// repository's containers/ and from the copy embedded in the binary (any
/// other directory), where they once said the bare `FROM debian:bookworm-slim`
/// (issue #21). No daemon needed.
#[test]
fn rendered_recipes_carry_the_locked_digest_in_and_outside_the_repository() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers");
    let lock = Lockfile::read(&repo.join("envgen.lock")).unwrap();
    let digest = &lock.profiles["cpu"].digest;
    assert!(digest.starts_with("sha256:"), "{digest}");
    let pinned = format!("{BASE}@{digest}\n");
    let anywhere = tempfile::tempdir().unwrap();
    for containers in [Some(repo.as_path()), None] {
        let mut command = Command::new(ENVGEN);
        command
            .current_dir(anywhere.path())
            .env_remove("ENVGEN_CONTAINERS_DIR")
            .args(["image", "render", "cpu"]);
        if let Some(dir) = containers {
            command.arg("--containers").arg(dir);
        }
        let output = ok(command.output().unwrap());
        let rendered = String::from_utf8_lossy(&output.stdout);
        for line in [format!("FROM {pinned}"), format!("From: {pinned}")] {
            assert!(rendered.contains(&line), "{containers:?}: {line}{rendered}");
        }
        // Dockerfile, apptainer.def, charliecloud.Dockerfile: no bare tag.
        assert_eq!(rendered.matches(&pinned).count(), 3, "{rendered}");
        assert!(!text(&output).contains("NOT pinned"), "{}", text(&output));
    }
}

#[test]
fn lock_verify_names_drift_and_gpu_profiles_lock_without_their_bases() {
    let _turn = turn!();
    let _daemon = daemon();
    let containers = containers_copy();
    let dir = containers.path();
    let lock_path = dir.join("envgen.lock");

    // Unlocked: build refuses and says how to lock.
    let refused = envgen_image(dir, "build", &["cpu"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("envgen image lock cpu"),
        "{}",
        text(&refused)
    );

    // Lock everything: cpu pins the local base by image ID; the CUDA bases
    // cannot be resolved here (no registry, not in the daemon) and say so.
    let locked = ok(envgen_image(dir, "lock", &[]));
    let stderr = String::from_utf8_lossy(&locked.stderr);
    assert!(
        stderr.contains("cuda12.8: nvidia/cuda:12.8.1-runtime-ubuntu24.04 unresolved"),
        "{stderr}"
    );
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(&lock_path).unwrap()).unwrap();
    for name in ["cpu", "cuda12.8", "ngc-pytorch-25.06"] {
        let entry = &lock["profiles"][name];
        for file in ["Dockerfile", "apptainer.def", "charliecloud.Dockerfile"] {
            assert_eq!(
                entry["files"][file].as_str().map(str::len),
                Some(64),
                "{name} {file}"
            );
        }
        // The binary is derived, not locked: another build of envgen matches the same lock.
        assert!(entry.get("binary_sha256").is_none(), "{name}");
    }
    assert_eq!(
        lock["profiles"]["cuda12.8"]["digest"].as_str(),
        Some("unresolved")
    );
    assert_eq!(
        lock["profiles"]["cuda12.8"]["apt"]["cuda-nvrtc-12-8"].as_str(),
        Some("12.8.93-1")
    );
    let verified = ok(envgen_image(dir, "verify", &[]));
    assert!(
        stdout(&verified).contains("ok: 3 profile(s)"),
        "{}",
        text(&verified)
    );
    assert!(
        stdout(&verified)
            .contains("ngc-pytorch-25.06: base nvcr.io/nvidia/pytorch:25.06-py3 is not pinned"),
        "{}",
        text(&verified)
    );

    // A digest locked where the registry was reachable survives re-locking
    // here, and every recipe pins FROM to it.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let mut lockfile = Lockfile::read(&lock_path).unwrap();
    let entry = lockfile.profiles.get_mut("cuda12.8").unwrap();
    entry.digest = digest.clone();
    entry.digest_source = DigestSource::Registry;
    entry.unresolved_reason = None;
    lockfile.write(&lock_path).unwrap();
    ok(envgen_image(dir, "lock", &["cuda12.8"]));
    let relocked = std::fs::read_to_string(&lock_path).unwrap();
    assert!(relocked.contains(&digest), "{relocked}");
    let rendered = stdout(&ok(envgen_image(dir, "render", &["cuda12.8"])));
    assert!(
        rendered.contains(&format!(
            "FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04@{digest}"
        )),
        "{rendered}"
    );
    assert!(rendered.contains(&format!(
        "From: nvidia/cuda:12.8.1-runtime-ubuntu24.04@{digest}"
    )));
    assert!(
        rendered.contains("ENV NVIDIA_REQUIRE_CUDA=\"cuda>=12.8 "),
        "{rendered}"
    );
    assert!(
        rendered.contains("USER 1000:1000")
            && rendered.contains("ENTRYPOINT [\"/usr/local/bin/envgen\"]")
    );
    let ngc = stdout(&ok(envgen_image(dir, "render", &["ngc-pytorch-25.06"])));
    assert!(
        ngc.contains("ENV NVIDIA_REQUIRE_CUDA=\"cuda>=12.9\""),
        "{ngc}"
    );
    let verified = ok(envgen_image(dir, "verify", &["cuda12.8"]));
    assert!(
        stdout(&verified).contains(&format!(
            "locked at {digest} (read from the registry), not re-checked: offline"
        )),
        "{}",
        text(&verified)
    );

    // Building the pinned CUDA profile fails fast: the base cannot be pulled here.
    let started = Instant::now();
    let missing = envgen_image(
        dir,
        "build",
        &["cuda12.8", "--tag", "envgen-test/cuda:missing"],
    );
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing));
    assert!(text(&missing).contains("docker load"), "{}", text(&missing));
    assert!(started.elapsed() < Duration::from_secs(60));

    // Tampering: a template and a package pin change; verify names each entry.
    let template = dir.join("templates/Dockerfile.hbs");
    let original = std::fs::read_to_string(&template).unwrap();
    std::fs::write(&template, format!("{original}# tampered\n")).unwrap();
    let profile = dir.join("profiles/cuda12.8.toml");
    let pins = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(
        &profile,
        pins.replace(
            "cuda-nvrtc-12-8 = \"12.8.93-1\"",
            "cuda-nvrtc-12-8 = \"12.8.61-1\"",
        ),
    )
    .unwrap();
    let drifted = envgen_image(dir, "verify", &["--json"]);
    assert_eq!(drifted.status.code(), Some(1), "{}", text(&drifted));
    let report: Value = serde_json::from_slice(&drifted.stdout).unwrap();
    let entries: Vec<String> = report["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{}:{}",
                d["profile"].as_str().unwrap(),
                d["entry"].as_str().unwrap()
            )
        })
        .collect();
    for expected in [
        "cpu:files.Dockerfile",
        "cuda12.8:files.Dockerfile",
        "ngc-pytorch-25.06:files.Dockerfile",
        "cuda12.8:apt.cuda-nvrtc-12-8",
        "cuda12.8:profile_sha256",
    ] {
        assert!(
            entries.contains(&expected.to_string()),
            "{expected} not in {entries:?}"
        );
    }
    // The cpu profile's own recipes for Apptainer/charliecloud did not change.
    assert!(
        !entries.iter().any(|e| e.starts_with("cpu:files.apptainer")),
        "{entries:?}"
    );
    let refused = envgen_image(dir, "build", &["cpu"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("files.Dockerfile (templates/Dockerfile.hbs)"),
        "{}",
        text(&refused)
    );

    // Another envgen binary is not drift: the lock pins inputs, and the
    // binary goes into the labels (a build with it is not refused).
    std::fs::write(&template, original).unwrap();
    let other_binary = dir.join("other-envgen");
    std::fs::copy(ENVGEN, &other_binary).unwrap();
    let mut bytes = std::fs::read(&other_binary).unwrap();
    bytes.extend_from_slice(b"envgen-test");
    std::fs::write(&other_binary, bytes).unwrap();
    let reverted = ok(envgen_image(dir, "verify", &["cpu"]));
    assert!(!stdout(&reverted).contains("drift:"), "{}", text(&reverted));
    let other = ok(envgen_image(
        dir,
        "build",
        &[
            "cpu",
            "--json",
            "--tag",
            "envgen-test/cpu:other-binary",
            "--binary",
            other_binary.to_str().unwrap(),
        ],
    ));
    let labels = &build_result(&other)["labels"];
    assert_eq!(
        labels["io.envgen.binary-sha256"].as_str(),
        Some(envgen::image::lock::sha256_hex(&std::fs::read(&other_binary).unwrap()).as_str())
    );
}

#[test]
fn push_to_the_loopback_registry_resolves_digests_and_rebuilds_from_a_pinned_base() {
    let _turn = turn!();
    let _daemon = daemon();
    let registry = registry();
    let base = format!("{registry}/envgen-test/debian:bookworm-slim");
    ok(docker(&["tag", BASE, &base]));
    ok(docker(&["push", &base]));
    let repo_digest = inspect(&base, "{{json .RepoDigests}}");

    // lock resolves the base through the registry (distribution inspect).
    let containers = containers_copy();
    let dir = containers.path();
    ok(envgen_image(dir, "lock", &["cpu", "--base", &base]));
    let lock: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("envgen.lock")).unwrap()).unwrap();
    let entry = &lock["profiles"]["cpu"];
    assert_eq!(entry["digest_source"].as_str(), Some("registry"), "{entry}");
    let digest = entry["digest"].as_str().unwrap().to_string();
    assert!(repo_digest.contains(&digest), "{digest} vs {repo_digest}");
    // --check-remote: the registry still has that digest for the tag.
    let checked = ok(envgen_image(dir, "lock", &["cpu", "--check-remote"]));
    assert!(
        stdout(&checked).contains(&format!("ok: cpu: {base} is {digest} at the registry")),
        "{}",
        text(&checked)
    );

    // Build from FROM …@sha256 with the base only in the registry, and push.
    ok(docker(&["rmi", &base]));
    let _ = docker(&["rmi", &format!("{registry}/envgen-test/debian@{digest}")]);
    let tag = format!("{registry}/envgen-test/cpu:pinned");
    let output = ok(envgen_image(
        dir,
        "build",
        &["cpu", "--base", &base, "--tag", &tag, "--push", "--json"],
    ));
    let built = build_result(&output);
    assert_eq!(
        built["from"].as_str(),
        Some(format!("{base}@{digest}").as_str()),
        "{built}"
    );
    // The same binary gives the same envgen layer on the registry-pinned base.
    let (_local, local_build) = locked_cpu_build("envgen-test/cpu:local", &[]);
    assert_eq!(built["envgen_layer"], local_build["envgen_layer"]);
    let pushed = built["repo_digest"].as_str().unwrap().to_string();
    let (repository, manifest_digest) = pushed.split_once('@').unwrap();
    assert_eq!(repository, format!("{registry}/envgen-test/cpu"));
    // The registry serves that manifest.
    let manifest = run(
        "curl",
        &[
            "-fsS",
            "-H",
            "Accept: application/vnd.docker.distribution.manifest.v2+json",
            &format!("http://{registry}/v2/envgen-test/cpu/manifests/{manifest_digest}"),
        ],
    );
    let manifest: Value = serde_json::from_slice(&ok(manifest).stdout).unwrap();
    assert!(
        manifest["layers"].as_array().is_some_and(|l| l.len() >= 2),
        "{manifest}"
    );
    // The tag moves (another image pushed under it): --check-remote and
    // verify report it as drift, and --check-remote wrote nothing.
    let lock_before = std::fs::read_to_string(dir.join("envgen.lock")).unwrap();
    ok(docker(&["tag", &tag, &base]));
    ok(docker(&["push", &base]));
    let moved = envgen_image(dir, "lock", &["cpu", "--check-remote"]);
    assert_eq!(moved.status.code(), Some(1), "{}", text(&moved));
    assert!(
        stdout(&moved).contains(&format!("drift: cpu: digest — locked {digest}")),
        "{}",
        text(&moved)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("envgen.lock")).unwrap(),
        lock_before
    );
    let verify_moved = envgen_image(dir, "verify", &["cpu"]);
    assert_eq!(
        verify_moved.status.code(),
        Some(1),
        "{}",
        text(&verify_moved)
    );
    // The committed lock, where Docker Hub and nvcr.io cannot be reached:
    // nothing re-checked, nothing failed.
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers");
    let offline = ok(envgen_image(&committed, "lock", &["--check-remote"]));
    for name in ["cpu", "cuda12.8", "ngc-pytorch-25.06"] {
        assert!(
            stdout(&offline)
                .lines()
                .any(|l| l.starts_with(&format!("note: {name}: "))
                    && l.contains("not re-checked: offline")),
            "{name}: {}",
            text(&offline)
        );
    }
    // And digest resolution now finds the pushed image in the registry.
    let relock = containers_copy();
    ok(envgen_image(
        relock.path(),
        "lock",
        &["cpu", "--base", &tag],
    ));
    let lock: toml::Value =
        toml::from_str(&std::fs::read_to_string(relock.path().join("envgen.lock")).unwrap())
            .unwrap();
    assert_eq!(
        lock["profiles"]["cpu"]["digest"].as_str(),
        Some(manifest_digest)
    );
}

#[test]
fn exports_a_docker_archive_an_apptainer_definition_and_a_charliecloud_image() {
    let _turn = turn!();
    let _daemon = daemon();
    let (containers, built) = locked_cpu_build("envgen-test/cpu:export", &[]);
    let dir = containers.path();
    let out = tempfile::tempdir().unwrap();

    let export = |format: &str, out: &Path, adjust: fn(&mut Command)| {
        envgen_image_with(
            dir,
            "export",
            &[
                "cpu",
                "--tag",
                "envgen-test/cpu:export",
                "--format",
                format,
                "-o",
                out.to_str().unwrap(),
            ],
            adjust,
        )
    };

    // docker-archive, loaded back under its tag: the same image.
    let archive = out.path().join("cpu.tar");
    ok(export("docker-archive", &archive, |_| {}));
    ok(docker(&["rmi", "envgen-test/cpu:export"]));
    assert!(!image_exists("envgen-test/cpu:export"));
    let loaded = ok(docker(&["load", "-i", archive.to_str().unwrap()]));
    assert!(
        stdout(&loaded).contains("envgen-test/cpu:export"),
        "{}",
        text(&loaded)
    );
    assert_eq!(
        inspect("envgen-test/cpu:export", "{{.Id}}"),
        built["image_id"].as_str().unwrap()
    );

    // apptainer-def: a definition over the archive next to it.
    let def = out.path().join("cpu.def");
    ok(export("apptainer-def", &def, |_| {}));
    let def_text = std::fs::read_to_string(&def).unwrap();
    assert!(
        def_text.contains("Bootstrap: docker-archive\nFrom: cpu.tar\n"),
        "{def_text}"
    );
    assert!(def_text.contains("exec /usr/local/bin/envgen \"$@\""));
    assert!(out.path().join("cpu.tar").is_file());

    // charliecloud: a directory image through ch-convert, run with ch-run.
    let ch_dir = out.path().join("cpu-ch");
    ok(export("charliecloud", &ch_dir, |_| {}));
    assert!(ch_dir.join("usr/local/bin/envgen").is_file());
    let ch_run = Command::new("ch-run")
        .env(
            "USER",
            std::env::var("USER").unwrap_or_else(|_| "root".into()),
        )
        .arg(&ch_dir)
        .args(["--", "/usr/local/bin/envgen", "--version"])
        .output()
        .unwrap();
    assert!(stdout(&ok(ch_run)).contains(&format!("envgen {}", env!("CARGO_PKG_VERSION"))));

    // Without ch-convert the message says what to install.
    let refused = export("charliecloud", &out.path().join("nope"), |command| {
        command.env("PATH", "/nonexistent");
    });
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    assert!(
        text(&refused).contains("apt-get install charliecloud"),
        "{}",
        text(&refused)
    );
}

/// A containers copy whose Dockerfile template runs `step` after the user is made.
fn containers_with_step(step: &str) -> tempfile::TempDir {
    let containers = containers_copy();
    let template = containers.path().join("templates/Dockerfile.hbs");
    let text = std::fs::read_to_string(&template).unwrap();
    let text = text.replacen("WORKDIR ", &format!("{step}\nWORKDIR "), 1);
    std::fs::write(&template, text).unwrap();
    containers
}

/// Short image/container IDs a classic-builder log names ("---> 3f2a…", "Running in 9c1b…").
fn ids_in(log: &str, prefix: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| line.trim().strip_prefix("---> "))
        .filter_map(|rest| match prefix {
            "" => Some(rest),
            prefix => rest.strip_prefix(prefix),
        })
        .map(str::trim)
        .filter(|id| id.len() >= 12 && id.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

fn container_exists(id: &str) -> bool {
    docker(&["container", "inspect", id]).status.success()
}

fn assert_nothing_left(log: &str, tag: &str) {
    assert!(!image_exists(tag), "{tag} must not be tagged");
    let base_id = inspect(BASE, "{{.Id}}");
    for id in ids_in(log, "") {
        if !base_id.trim_start_matches("sha256:").starts_with(&id) {
            assert!(
                !image_exists(&id),
                "intermediate image {id} left behind\n{log}"
            );
        }
    }
    let containers = ids_in(log, "Running in ");
    for id in &containers {
        assert!(!container_exists(id), "container {id} left behind\n{log}");
    }
}

#[test]
fn a_failing_run_exits_1_with_the_step_output_and_leaves_nothing() {
    let _turn = turn!();
    let _daemon = daemon();
    let containers = containers_with_step("RUN echo envgen-test-failing-step-output && exit 7");
    let output = envgen_image(
        containers.path(),
        "build",
        &[
            "cpu",
            "--unlocked",
            "--no-cache",
            "--tag",
            "envgen-test/fail:1",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let log = String::from_utf8_lossy(&output.stderr).to_string();
    let headline = log
        .lines()
        .find(|l| l.contains("failed at Step"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        headline.contains("RUN echo envgen-test-failing-step-output"),
        "{headline}"
    );
    assert!(log.contains("    envgen-test-failing-step-output"), "{log}");
    assert!(log.contains("returned a non-zero code: 7"), "{log}");
    assert!(
        !ids_in(&log, "").is_empty() && !ids_in(&log, "Running in ").is_empty(),
        "{log}"
    );
    assert_nothing_left(&log, "envgen-test/fail:1");
}

#[test]
fn ctrl_c_stops_the_build_and_tags_nothing() {
    let _turn = turn!();
    let _daemon = daemon();
    let containers = containers_with_step("RUN echo envgen-test-slow-step && sleep 120");
    let mut child = Command::new(ENVGEN)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "image",
            "build",
            "cpu",
            "--unlocked",
            "--no-cache",
            "--tag",
            "envgen-test/interrupted:1",
        ])
        .arg("--containers")
        .arg(containers.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut log = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(|l| l.ok())
        {
            log.push_str(&line);
            log.push('\n');
            let _ = lines_tx.send(line);
        }
        log
    });
    // Wait until the slow step runs (its echo is printed), then Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = lines_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the slow step never started");
        if line.trim() == "envgen-test-slow-step" {
            break;
        }
    }
    let interrupted_at = Instant::now();
    ok(run("kill", &["-INT", &child.id().to_string()]));
    let status = child.wait().unwrap();
    let log = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(interrupted_at.elapsed() < Duration::from_secs(30), "{log}");
    assert!(log.contains("was interrupted"), "{log}");
    assert!(!ids_in(&log, "Running in ").is_empty(), "{log}");
    assert_nothing_left(&log, "envgen-test/interrupted:1");
}

#[test]
fn an_unreachable_daemon_exits_3_and_says_how_to_fix_it() {
    let _turn = turn!();
    let containers = containers_copy();
    let output = envgen_image_with(
        containers.path(),
        "build",
        &["cpu", "--unlocked"],
        |command| {
            command.env("DOCKER_HOST", "unix:///nonexistent/envgen-test.sock");
        },
    );
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    let message = text(&output);
    assert!(
        message.contains("unix:///nonexistent/envgen-test.sock"),
        "{message}"
    );
    assert!(
        message.contains("start dockerd") && message.contains("DOCKER_HOST"),
        "{message}"
    );
}

/// What NVIDIA's CUDA 12.8 packages install that envgen's CUDA backend needs
/// (paths under /usr/local/cuda-12.8), which the FAKE packages carry as empty
/// files: the split of NVIDIA's CUDA 13.0 wheels (nvidia-cuda-runtime:
/// cuda_*.h and mma.h; nvidia-cuda-crt: crt/; nvidia-cuda-cccl: CCCL;
/// their RECORD files), with CCCL in include/ as CUDA 12 lays it out. A
/// profile that forgets one of these packages then fails the headers check
/// of `envgen doctor` inside its image.
const NVIDIA_PACKAGE_FILES: &[(&str, &[&str])] = &[
    (
        "cuda-cudart-dev-12-8",
        &[
            "include/cuda_runtime.h",
            "include/cuda_fp16.h",
            "include/cuda_bf16.h",
            "include/mma.h",
        ],
    ),
    ("cuda-crt-12-8", &["include/crt/host_config.h"]),
    (
        "cuda-cccl-12-8",
        &["include/nv/target", "include/cuda/barrier"],
    ),
    (
        "cuda-nvrtc-12-8",
        &["lib64/libnvrtc.so.12", "lib64/libnvrtc-builtins.so.12.8"],
    ),
];

/// A FAKE Debian package (its control data and, for the packages in
/// [`NVIDIA_PACKAGE_FILES`], empty files where the real one has them), for
/// the stand-in apt repository: (name, version) → `name_version_all.deb` in `dir`.
fn fake_deb(dir: &Path, name: &str, version: &str) -> std::path::PathBuf {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("DEBIAN")).unwrap();
    for (package, files) in NVIDIA_PACKAGE_FILES {
        if *package != name {
            continue;
        }
        for file in *files {
            let path = root.path().join("usr/local/cuda-12.8").join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
    }
    std::fs::write(
        root.path().join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: envgen tests <envgen@example.invalid>\nDescription: FAKE stand-in for NVIDIA's {name} (envgen tests; empty files only)\n"
        ),
    )
    .unwrap();
    let deb = dir.join(format!("{name}_{version}_all.deb"));
    ok(run(
        "dpkg-deb",
        &[
            "--root-owner-group",
            "--build",
            root.path().to_str().unwrap(),
            deb.to_str().unwrap(),
        ],
    ));
    deb
}

/// A flat apt repository (`deb [trusted=yes] file:/… ./`) of FAKE packages.
fn fake_apt_repo(dir: &Path, packages: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut index = String::new();
    for (name, version) in packages {
        let deb = fake_deb(dir, name, version);
        let bytes = std::fs::read(&deb).unwrap();
        let control = ok(run("dpkg-deb", &["--field", deb.to_str().unwrap()]));
        index.push_str(&String::from_utf8_lossy(&control.stdout));
        index.push_str(&format!(
            "Filename: ./{}\nSize: {}\nSHA256: {}\n\n",
            deb.file_name().unwrap().to_string_lossy(),
            bytes.len(),
            envgen::image::lock::sha256_hex(&bytes)
        ));
    }
    std::fs::write(dir.join("Packages"), index).unwrap();
}

/// Build a stand-in base `tag` from the Debian stand-in: the CUDA layout
/// (`/usr/local/cuda` → `cuda-12.x`), the base's env and, when `apt` is not
/// empty, a local apt repository of FAKE packages in place of NVIDIA's. The
/// Debian sources are removed, so its apt sees only the FAKE repository.
fn stand_in_base(tag: &str, cuda: &str, env: &[(&str, &str)], apt: &[(&str, &str)]) {
    let context = tempfile::tempdir().unwrap();
    fake_apt_repo(&context.path().join("fake-repo"), apt);
    let mut dockerfile = format!(
        "FROM {BASE}\n\
         LABEL io.envgen.test.stand-in=\"FAKE: Debian 12 with the layout of {tag}; not NVIDIA's image\"\n\
         RUN mkdir -p /usr/local/cuda-{cuda}/lib64 /usr/local/cuda-{cuda}/include \
          && ln -s cuda-{cuda} /usr/local/cuda \
          && echo 'FAKE stand-in (envgen tests)' > /usr/local/cuda-{cuda}/FAKE-STAND-IN \
          && rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*\n\
         COPY fake-repo /var/local/fake-nvidia-repo\n\
         RUN echo 'deb [trusted=yes] file:/var/local/fake-nvidia-repo ./' > /etc/apt/sources.list.d/fake-nvidia.list\n"
    );
    for (key, value) in env {
        dockerfile.push_str(&format!("ENV {key}=\"{value}\"\n"));
    }
    std::fs::write(context.path().join("Dockerfile"), dockerfile).unwrap();
    ok(docker(&[
        "build",
        "--network",
        "host",
        "-t",
        tag,
        context.path().to_str().unwrap(),
    ]));
}

/// The cuda12.8 and NGC recipes, rendered from the committed lock (FROM
/// pinned by digest), built on labelled local stand-ins for their bases
/// (the real ones cannot be pulled here): every RUN/ENV/COPY/USER step runs,
/// the apt step installs the pinned versions from a FAKE repository (the
/// packages are empty: what NVRTC needs at run time is not tested here), and
/// the image carries the profile's CUDA rule, its labels and a working envgen.
#[test]
fn cuda_and_ngc_recipes_build_on_labelled_stand_in_bases() {
    let _turn = turn!();
    let _daemon = daemon();
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers");
    let cuda = envgen::image::Containers::locate(Some(&profiles))
        .unwrap()
        .profile("cuda12.8")
        .unwrap();
    let apt: Vec<(&str, &str)> = cuda
        .apt
        .iter()
        .map(|(name, version)| (name.as_str(), version.as_str()))
        .collect();
    let base_rule = cuda.cuda.as_ref().unwrap().require.clone();
    stand_in_base(
        "envgen-test/stand-in-cuda:12.8.1-runtime-ubuntu24.04",
        "12.8",
        &[
            ("CUDA_VERSION", "12.8.1"),
            ("NVIDIA_REQUIRE_CUDA", &base_rule),
        ],
        &apt,
    );
    stand_in_base(
        "envgen-test/stand-in-ngc:25.06-py3",
        "12.9",
        &[
            ("CUDA_VERSION", "12.9.1.010"),
            ("NVIDIA_REQUIRE_CUDA", "cuda>=9.0"),
            ("PYTORCH_VERSION", "2.8.0a0+5228986c39"),
        ],
        &[],
    );
    let stand_ins = "nvidia/cuda:12.8.1-runtime-ubuntu24.04=envgen-test/stand-in-cuda:12.8.1-runtime-ubuntu24.04,\
                     nvcr.io/nvidia/pytorch:25.06-py3=envgen-test/stand-in-ngc:25.06-py3";
    for (profile, tag, require, pinned) in [
        (
            "cuda12.8",
            "envgen-test/cuda12.8:stand-in",
            base_rule.as_str(),
            "nvidia/cuda:12.8.1-runtime-ubuntu24.04@sha256:ebef3c17",
        ),
        (
            "ngc-pytorch-25.06",
            "envgen-test/ngc:stand-in",
            "cuda>=12.9",
            "nvcr.io/nvidia/pytorch:25.06-py3@sha256:025d9b10",
        ),
    ] {
        let output = envgen_image_with(
            &profiles,
            "build",
            &[profile, "--json", "--tag", tag],
            |command| {
                command.env("ENVGEN_BASE_STAND_IN", stand_ins);
            },
        );
        assert!(output.status.success(), "{profile}: {}", text(&output));
        let built = build_result(&output);
        let labels = &built["labels"];
        assert_eq!(labels["io.envgen.profile"], profile);
        assert!(
            labels["io.envgen.base-stand-in"]
                .as_str()
                .is_some_and(|s| s.contains(&format!("in place of {pinned}"))),
            "{profile}: {labels}"
        );
        let env: Vec<String> = serde_json::from_str(&inspect(tag, "{{json .Config.Env}}")).unwrap();
        assert!(
            env.contains(&format!("NVIDIA_REQUIRE_CUDA={require}")),
            "{profile}: {env:?}"
        );
        assert!(env.contains(&"CUDA_PATH=/usr/local/cuda".to_string()));
        assert_eq!(inspect(tag, "{{.Config.User}}"), "1000:1000");
        let cuda_dir = ok(docker(&[
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "/bin/cat",
            tag,
            "/usr/local/cuda/FAKE-STAND-IN",
        ]));
        assert!(stdout(&cuda_dir).contains("FAKE"));
        let doctor = ok(docker(&[
            "run",
            "--rm",
            "--network",
            "none",
            tag,
            "doctor",
            "--json",
        ]));
        let report: Value = serde_json::from_slice(&doctor.stdout)
            .unwrap_or_else(|err| panic!("{profile}: {err}\n{}", text(&doctor)));
        assert!(report["host"].is_object(), "{report}");
        if profile == "cuda12.8" {
            // The profile's packages bring every header the backend's
            // kernels include (CCCL too) and NVRTC's files; the driver comes
            // from the host at run time.
            let parts = &report["cuda_backend"]["parts"];
            assert_eq!(
                parts["headers"], "ok",
                "{profile}: {}",
                report["cuda_backend"]
            );
            assert_ne!(
                parts["nvrtc"], "no-nvrtc",
                "{profile}: {}",
                report["cuda_backend"]
            );
            assert_eq!(parts["driver"], "no-libcuda", "{}", report["cuda_backend"]);
        }
    }
    // The apt step installed exactly the pinned (FAKE) versions.
    let installed = ok(docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "/usr/bin/dpkg-query",
        "envgen-test/cuda12.8:stand-in",
        "-W",
        "-f",
        "${Package}=${Version}\\n",
    ]));
    for (name, version) in &apt {
        assert!(
            stdout(&installed).contains(&format!("{name}={version}")),
            "{name}: {}",
            text(&installed)
        );
    }
}
