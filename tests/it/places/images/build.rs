//! Building, rendering and locking the CPU image against the test daemon.

use super::*;

heavy_test!(
    cpu_image_builds_runs_doctor_as_non_root_and_reproduces_its_envgen_layer,
    || {
        let _daemon = daemon();
        let (containers, built) = locked_cpu_build("envgen-test/cpu:one", &[]);
        let image_id = built["image_id"].as_str().unwrap().to_string();
        assert!(image_id.starts_with("sha256:"), "{built}");
        assert_eq!(inspect("envgen-test/cpu:one", "{{.Id}}"), image_id);

        // The contract's labels, with the lock entry's hash.
        let labels: Value =
            serde_json::from_str(&inspect("envgen-test/cpu:one", "{{json .Config.Labels}}"))
                .unwrap();
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
        let report: Value = serde_json::from_slice(&doctor.stdout).unwrap_or_else(|err| {
            panic!("doctor --json in the container: {err}\n{}", text(&doctor))
        });
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
);

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

heavy_test!(
    lock_verify_names_drift_and_gpu_profiles_lock_without_their_bases,
    || {
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
        let lock: toml::Value =
            toml::from_str(&std::fs::read_to_string(&lock_path).unwrap()).unwrap();
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
);
