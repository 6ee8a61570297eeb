//! Pushing to the loopback registry and exporting for HPC runtimes.

use super::*;

heavy_test!(
    push_to_the_loopback_registry_resolves_digests_and_rebuilds_from_a_pinned_base,
    || {
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
);

heavy_test!(
    exports_a_docker_archive_an_apptainer_definition_and_a_charliecloud_image,
    || {
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
);
