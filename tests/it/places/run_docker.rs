//! `envgen run --where docker` and `envgen rerun` against the private Docker
//! daemon scripts/test.sh starts. The image is this build's envgen in a
//! minimal root filesystem (imported through bollard); real training inside.

use std::path::Path;

use bollard::query_parameters::RemoveImageOptionsBuilder;

use crate::common::docker_base::{self, require_docker_host};
use crate::common::docker_run::{
    block_on, container_name, import_image, leftover_containers, make_container, remove_container,
};
use crate::common::experiment::metric_bits;
use crate::common::run::*;
use crate::common::{envgen, heavy_test, is_root, json_of, run_dir_of, set_mode, text};

fn image_id(reference: &str) -> String {
    block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        docker.inspect_image(reference).await.unwrap().id.unwrap()
    })
}

heavy_test!(
    docker_run_trains_the_same_bits_as_native_and_rerun_reproduces_them,
    || {
        require_docker_host();
        let image = import_image("same-bits", "same-bits");
        let tmp = tempfile::tempdir().unwrap();
        let native = short_run(tmp.path(), &["--where", "native"]);
        assert_ok(&native, "native run");
        let native = json_of(&native);
        let docker = short_run(tmp.path(), &["--where", "docker", "--image", &image]);
        assert_ok(&docker, "docker run");
        let docker = json_of(&docker);
        let dir = run_dir_of(&docker);
        for key in ["final_train_loss", "final_val_loss"] {
            assert_eq!(
                metric_bits(&native, key),
                metric_bits(&docker, key),
                "{key}: the container must train exactly as the native run"
            );
        }
        let manifest = read(&dir, "manifest.json");
        let native_manifest = read(&run_dir_of(&native), "manifest.json");
        assert_eq!(manifest["config_hash"], native_manifest["config_hash"]);
        assert_eq!(manifest["where"], "docker");
        assert_eq!(manifest["image"]["ref"], image);
        assert_eq!(manifest["image"]["id"], image_id(&image));
        assert!(manifest["image"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        // The container's envgen recorded the host it saw and ran as non-root.
        assert!(manifest["host"].is_object());
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata(dir.join("summary.json")).unwrap(),
        );
        assert_ne!(owner, 0, "the container must not run as root");
        assert!(
            leftover_containers(&dir).is_empty(),
            "{:?}",
            leftover_containers(&dir)
        );

        let rerun = rerun_json(tmp.path(), &dir);
        let rerun_manifest = read(&run_dir_of(&rerun), "manifest.json");
        assert_eq!(rerun_manifest["where"], "docker");
        assert_eq!(rerun_manifest["image"]["id"], manifest["image"]["id"]);
        assert_eq!(rerun_manifest["config_hash"], manifest["config_hash"]);
        assert_eq!(
            metric_bits(&rerun, "final_val_loss"),
            metric_bits(&docker, "final_val_loss")
        );
    }
);

/// envgen exited 130, removed its container, and the run resumes.
fn interrupted_without_container(dir: &Path, out: &std::process::Output) {
    assert_exit_130(out);
    assert!(
        leftover_containers(dir).is_empty(),
        "{:?}",
        leftover_containers(dir)
    );
    assert_interrupted_then_resume(dir, 400);
}

/// The live container `name` cannot write to its root filesystem (issue
/// #21): read-only, with a size-limited tmpfs at /tmp as its one scratch
/// place — checked by the daemon's record and by writing from inside (the
/// image's envgen renders recipes into a directory it creates).
fn assert_read_only_but_scratch(
    name: &str,
    readonly_rootfs: &Option<bool>,
    mounts: &Option<Vec<bollard::models::Mount>>,
) {
    assert_eq!(*readonly_rootfs, Some(true));
    let scratch = mounts
        .iter()
        .flatten()
        .find(|m| m.target.as_deref() == Some("/tmp"))
        .expect("a scratch mount at /tmp");
    assert_eq!(scratch.typ, Some(bollard::models::MountType::TMPFS));
    let size = scratch.tmpfs_options.as_ref().and_then(|t| t.size_bytes);
    assert!(size.is_some_and(|n| n > 0), "{scratch:?}");
    let write = |dir: &str| write_inside(name, dir);
    // EROFS, not EACCES: the mount refuses the write before any permission check.
    let root = write("/envgen-rootfs-write");
    assert!(!root.status.success(), "{}", crate::common::text(&root));
    assert!(
        crate::common::text(&root).contains("Read-only file system"),
        "{}",
        crate::common::text(&root)
    );
    let tmp = write("/tmp/envgen-scratch-write");
    assert!(tmp.status.success(), "{}", crate::common::text(&tmp));
}

/// Make the directory `dir` inside the live container `name` and write
/// files into it: the image's envgen renders the cpu profile's recipes there.
fn write_inside(name: &str, dir: &str) -> std::process::Output {
    crate::common::docker_base::docker(&[
        "exec",
        name,
        "/usr/local/bin/envgen",
        "image",
        "render",
        "cpu",
        "-o",
        dir,
    ])
}

/// The data directory is mounted read-only in the live container (issue
/// #26: the test named "read_only" once checked a mount it built itself):
/// the daemon's record says so, and a write from inside is refused.
fn assert_data_read_only(name: &str, mounts: &Option<Vec<bollard::models::Mount>>, data: &Path) {
    let mount = mounts
        .iter()
        .flatten()
        .find(|m| m.source.as_deref() == Some(data.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no mount of {} in {mounts:?}", data.display()));
    assert_eq!(mount.read_only, Some(true), "{mount:?}");
    let target = format!("{}/envgen-write", mount.target.as_deref().unwrap());
    let write = write_inside(name, &target);
    let text = crate::common::text(&write);
    assert!(
        !write.status.success() && text.contains("Read-only file system"),
        "{text}"
    );
}

heavy_test!(
    ctrl_c_stops_and_removes_the_container_and_the_run_resumes,
    || {
        require_docker_host();
        let image = import_image("ctrl-c", "ctrl-c");
        let tmp = tempfile::tempdir().unwrap();
        // A `:` in --out once split the bind-mount string (issue #21).
        let runs = tmp.path().join("runs:v2");
        // A data file, so the live container has a data mount to inspect.
        let data = tempfile::tempdir().unwrap();
        set_mode(data.path(), 0o755);
        let corpus = corpus_in(data.path());
        let source = format!("data.path={}", corpus.display());
        let args = long_run_args(
            &runs,
            &[
                "--where",
                "docker",
                "--image",
                &image,
                "--set",
                "data.source=text",
                "--set",
                &source,
            ],
        );
        let (dir, out) = stop_after_two_steps(&args, &runs, |pid, dir| {
            // The training container as the daemon runs it (issue #21's hardening).
            let name = envgen::launch::docker::container_name(dir);
            let container = block_on(async {
                let docker = envgen::image::daemon::connect().await.unwrap();
                docker.inspect_container(&name, None).await.unwrap()
            });
            let host = container.host_config.unwrap();
            assert_eq!(host.privileged, Some(false));
            assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
            assert_eq!(
                host.security_opt,
                Some(vec!["no-new-privileges".to_string()])
            );
            assert!(host.pids_limit.is_some_and(|n| n > 0));
            assert_eq!(host.network_mode.as_deref(), Some("none"));
            let run_mount = host
                .mounts
                .clone()
                .unwrap_or_default()
                .into_iter()
                .find(|m| m.target.as_deref() == Some("/run/envgen/run"))
                .expect("the run directory is mounted");
            assert!(run_mount.source.unwrap().contains("runs:v2"));
            // The daemon leaves `ReadOnly` out when false.
            assert_ne!(run_mount.read_only, Some(true));
            let user = container.config.unwrap().user.unwrap_or_default();
            assert!(!user.is_empty() && !user.starts_with("0"), "user {user:?}");
            assert_read_only_but_scratch(&name, &host.readonly_rootfs, &host.mounts);
            assert_data_read_only(&name, &host.mounts, corpus.parent().unwrap());
            crate::common::run::send_signal(pid, "INT");
        });
        interrupted_without_container(&dir, &out);
    }
);

heavy_test!(rerun_refuses_when_the_image_is_gone, || {
    require_docker_host();
    let image = import_image("gone", "gone");
    let tmp = tempfile::tempdir().unwrap();
    let out = short_run(
        tmp.path(),
        &[
            "--where",
            "docker",
            "--image",
            &image,
            "--set",
            "train.steps=1",
        ],
    );
    assert_ok(&out, "docker run");
    let dir = run_dir_of(&json_of(&out));
    block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        let options = RemoveImageOptionsBuilder::default().force(true).build();
        docker
            .remove_image(&image, Some(options), None)
            .await
            .unwrap();
    });
    let rerun = envgen()
        .args(["rerun", "--out", tmp.path().to_str().unwrap()])
        .arg(dir.join("manifest.json"))
        .output()
        .unwrap();
    assert_eq!(rerun.status.code(), Some(3), "{rerun:?}");
    let stderr = String::from_utf8_lossy(&rerun.stderr);
    assert!(
        stderr.contains("is gone from the Docker daemon"),
        "{stderr}"
    );
    assert!(Path::new(&dir).join("summary.json").is_file());
});

heavy_test!(
    without_image_the_cpu_profile_image_is_built_on_demand,
    || {
        require_docker_host();
        docker_base::ensure_base_image();
        let tmp = tempfile::tempdir().unwrap();
        let out = short_run(tmp.path(), &["--where", "docker"]);
        assert_ok(&out, "docker run with the cpu profile image");
        let doc = json_of(&out);
        assert_eq!(doc["summary"]["status"], "completed");
        // The real profile image (its own Debian userland, not this host's
        // libraries as the imported test images have) trains the same bits as
        // this machine does natively (issue #26).
        let native = short_run(tmp.path(), &["--where", "native"]);
        assert_ok(&native, "native run");
        assert_same_bits(&json_of(&native), &doc);
        let manifest = read(&run_dir_of(&doc), "manifest.json");
        let tag = format!("envgen/cpu:{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(manifest["image"]["ref"], tag);
        assert_eq!(manifest["image"]["id"], image_id(&tag));
        // The profile image carries this very binary (the images work's label).
        let labels = block_on(async {
            let docker = envgen::image::daemon::connect().await.unwrap();
            docker
                .inspect_image(&tag)
                .await
                .unwrap()
                .config
                .unwrap()
                .labels
                .unwrap()
        });
        assert_eq!(labels["io.envgen.profile"], "cpu");
    }
);

// `--where auto` without a Slurm cluster (SLURM_CONF names none) picks the
// Docker daemon, and with neither, runs natively — saying why each time.
heavy_test!(auto_falls_back_to_docker_then_native_and_says_why, || {
    require_docker_host();
    let image = import_image("auto", "auto");
    let tmp = tempfile::tempdir().unwrap();
    let auto_run = |docker_host: &str| {
        let mut args = vec!["run", "gpt2"];
        args.extend(SHORT);
        let out_dir = tmp.path().to_str().unwrap();
        args.extend([
            "--set",
            "train.steps=2",
            "--where",
            "auto",
            "--image",
            &image,
            "--out",
            out_dir,
        ]);
        let out = envgen()
            .args(&args)
            .env("SLURM_CONF", tmp.path().join("no-cluster.conf"))
            .env("DOCKER_HOST", docker_host)
            .output()
            .unwrap();
        assert_ok(&out, "--where auto");
        let manifest = read(&run_dir_of(&json_of(&out)), "manifest.json");
        (String::from_utf8_lossy(&out.stderr).into_owned(), manifest)
    };
    let (stderr, manifest) = auto_run(&std::env::var("DOCKER_HOST").unwrap());
    assert!(
        stderr.contains("--where auto: docker (no Slurm ("),
        "{stderr}"
    );
    assert_eq!(manifest["where"], "docker");
    assert!(manifest["where_reason"]
        .as_str()
        .unwrap()
        .contains("a Docker daemon answers"));
    let (stderr, manifest) = auto_run("unix:///nonexistent/docker.sock");
    assert!(
        stderr.contains("--where auto: native (no Slurm ("),
        "{stderr}"
    );
    assert_eq!(manifest["where"], "native");
    assert!(manifest["where_reason"]
        .as_str()
        .unwrap()
        .contains("no Docker daemon"));
});

// Provenance of data: a text file read natively and inside the container
// (mounted read-only at the same path) is hashed into both manifests.
heavy_test!(
    data_files_are_mounted_read_only_and_hashed_into_the_manifest,
    || {
        require_docker_host();
        use sha2::Digest as _;
        use std::os::unix::fs::PermissionsExt as _;
        let image = import_image("data", "data");
        let data = tempfile::tempdir().unwrap();
        // The container runs as uid 1000 when the tests run as root: let it read.
        std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = data.path().join("corpus.txt");
        let text: String = (0..400)
            .map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog.\n"))
            .collect();
        std::fs::write(&file, &text).unwrap();
        let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let source = format!("data.path={}", file.display());
        let tmp = tempfile::tempdir().unwrap();
        let mut manifests = Vec::new();
        let mut losses = Vec::new();
        for place in [
            &["--where", "native"][..],
            &["--where", "docker", "--image", &image],
        ] {
            let mut extra = vec![
                "--set",
                "data.source=text",
                "--set",
                &source,
                "--set",
                "train.steps=2",
            ];
            extra.extend(place);
            let out = short_run(tmp.path(), &extra);
            assert_ok(&out, &format!("{place:?} run on a text file"));
            let doc = json_of(&out);
            losses.push(metric_bits(&doc, "final_train_loss"));
            manifests.push(read(&run_dir_of(&doc), "manifest.json"));
        }
        for manifest in &manifests {
            let files = manifest["data_files"].as_array().expect("data_files");
            assert!(!files.is_empty(), "{manifest}");
            assert!(
                files.iter().all(|f| f["sha256"] == sha.as_str()),
                "{files:?}"
            );
        }
        assert_eq!(losses[0], losses[1]);
    }
);

// `docker kill` from elsewhere mid-run: envgen reports the run interrupted
// (exit 130), removes the container, and the run resumes from its checkpoint.
heavy_test!(
    docker_kill_leaves_an_interrupted_resumable_run_and_no_container,
    || {
        require_docker_host();
        let image = import_image("kill", "kill");
        let tmp = tempfile::tempdir().unwrap();
        let args = long_run_args(tmp.path(), &["--where", "docker", "--image", &image]);
        let (dir, out) = stop_after_two_steps(&args, tmp.path(), |_, dir| {
            let names = leftover_containers(dir);
            assert_eq!(names.len(), 1, "{names:?}");
            block_on(async {
                let docker = envgen::image::daemon::connect().await.unwrap();
                docker
                    .kill_container(names[0].trim_start_matches('/'), None)
                    .await
                    .unwrap();
            });
        });
        interrupted_without_container(&dir, &out);
    }
);

// A dockerd stopped under a Docker run leaves its container behind. A
// resume removes such a stopped container (before, creating the new one
// failed with 409 Conflict) and keeps the earlier summary under
// attempts/; a running one is a second writer: refused (exit 2) naming it
// and `envgen runs cancel`, with nothing of the run changed.
heavy_test!(
    a_resume_removes_a_stopped_leftover_container_and_refuses_a_running_one,
    || {
        require_docker_host();
        docker_base::ensure_base_image();
        let image = import_image("leftover", "leftover");
        let tmp = tempfile::tempdir().unwrap();
        let first = short_run(
            tmp.path(),
            &["--where", "docker", "--image", &image, "--stop-after", "2"],
        );
        assert_exit_130(&first);
        let dir = run_dir_of(&json_of(&first));
        let name = container_name(&dir);
        let resume = || {
            let mut args = vec!["run", "gpt2", "--backend", "cpu", "--json"];
            args.extend(["--where", "docker", "--image", &image]);
            args.extend(["--resume", dir.to_str().unwrap()]);
            envgen().args(&args).output().unwrap()
        };

        make_container(&name, docker_base::BASE, &["sleep", "300"], true);
        let before = std::fs::read(dir.join("summary.json")).unwrap();
        let refused = resume();
        remove_container(&name);
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains(&format!("container {name} still runs"))
                && stderr.contains("envgen runs cancel"),
            "{stderr}"
        );
        assert_eq!(std::fs::read(dir.join("summary.json")).unwrap(), before);
        assert!(!dir.join("attempts").exists());

        make_container(
            &name,
            &image,
            &["/usr/local/bin/envgen", "--version"],
            false,
        );
        let resumed = resume();
        assert_ok(&resumed, "resume over a stopped left-over container");
        assert_eq!(json_of(&resumed)["summary"]["status"], "completed");
        let earlier = read(&dir, "attempts/summary-1.json");
        assert_eq!(earlier["status"], "interrupted", "{earlier}");
        assert_eq!(earlier["steps_done"], 2);
        assert!(
            leftover_containers(&dir).is_empty(),
            "{:?}",
            leftover_containers(&dir)
        );
    }
);

// A container that cannot start (here: `--gpus all` on the test daemon,
// which has no GPU runtime) ends the run `failed` with the daemon's
// reason, instead of leaving it "running" forever; no container is left.
heavy_test!(a_container_that_does_not_start_fails_the_run, || {
    require_docker_host();
    let image = import_image("no-start", "no-start");
    let tmp = tempfile::tempdir().unwrap();
    let out = short_run(
        tmp.path(),
        &["--where", "docker", "--image", &image, "--gpus", "all"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let dir = crate::common::run_dirs(tmp.path())[0].clone();
    let summary = read(&dir, "summary.json");
    assert_eq!(summary["status"], "failed", "{summary}");
    let why = summary["metrics"]["reason"].as_str().unwrap();
    assert!(why.starts_with("the container did not start: "), "{why}");
    assert!(leftover_containers(&dir).is_empty());
});

heavy_test!(detach_is_for_slurm_only, |tmp| {
    let out = short_run(tmp.path(), &["--where", "docker", "--detach"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--detach is for Slurm"));
    assert_eq!(
        crate::common::run_dirs(tmp.path()).len(),
        0,
        "no run directory"
    );
});

/// A text corpus under `dir` (its own directory 0755, files 0644).
fn corpus_in(dir: &Path) -> std::path::PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    set_mode(&data, 0o755);
    let file = data.join("corpus.txt");
    let text: String = (0..300)
        .map(|i| format!("line {i}: a private home is no obstacle to a container.\n"))
        .collect();
    std::fs::write(&file, text).unwrap();
    set_mode(&file, 0o644);
    file
}

/// Native and Docker runs of the same config give the same bits.
fn assert_same_bits(native: &serde_json::Value, docker: &serde_json::Value) {
    for key in ["final_train_loss", "final_val_loss"] {
        assert_eq!(
            metric_bits(native, key),
            metric_bits(docker, key),
            "{key}: the container must train exactly as the native run"
        );
    }
}

// envgen as root, its run directory and data under root's 0700 home (as in
// `--out ~/.cache/x/runs` for root): the container's user (uid 1000) gets
// them at neutral paths, reads and writes them, and trains the same bits.
// (Mounted at the same path, the run directory sat under the image's own
// 0700 /root, which uid 1000 cannot enter: "Permission denied".)
heavy_test!(
    as_root_under_a_0700_home_the_container_trains_the_same_bits,
    || {
        require_docker_host();
        assert!(
            is_root(),
            "this test is about envgen running as root (the suite runs as root)"
        );
        let image = import_image("private-home", "private-home");
        let home = tempfile::Builder::new()
            .prefix("envgen-test-home-")
            .tempdir_in("/root")
            .unwrap();
        set_mode(home.path(), 0o700);
        std::fs::create_dir_all(home.path().join(".cache/x")).unwrap();
        set_mode(&home.path().join(".cache"), 0o700);
        let out = home.path().join(".cache/x/runs");
        let corpus = corpus_in(home.path());
        let source = format!("data.path={}", corpus.display());
        let mut docs = Vec::new();
        for place in [
            &["--where", "native"][..],
            &["--where", "docker", "--image", &image],
        ] {
            let mut extra = vec!["--set", "data.source=text", "--set", &source];
            extra.extend(place);
            let run = short_run(&out, &extra);
            assert_ok(&run, &format!("{place:?} under a 0700 home"));
            docs.push(json_of(&run));
        }
        assert_same_bits(&docs[0], &docs[1]);
        let dir = run_dir_of(&docs[1]);
        assert!(dir.starts_with(&out), "{}", dir.display());
        let manifest = read(&dir, "manifest.json");
        assert_eq!(manifest["where"], "docker");
        let native_manifest = read(&run_dir_of(&docs[0]), "manifest.json");
        assert_eq!(manifest["config_hash"], native_manifest["config_hash"]);
        // The config keeps the host path; the data hash is the same on both sides.
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        assert!(config.contains(&corpus.display().to_string()), "{config}");
        assert_eq!(
            manifest["data_files"][0]["sha256"], native_manifest["data_files"][0]["sha256"],
            "{manifest}"
        );
        assert_eq!(
            manifest["data_files"][0]["path"].as_str(),
            Some(corpus.to_str().unwrap()),
            "the manifest names the host file, not its mount: {manifest}"
        );
        let summary = read(&dir, "summary.json");
        assert_eq!(
            summary["metrics"]["data_files"][0]["path"].as_str(),
            Some(corpus.to_str().unwrap())
        );
        // Written by the container's unprivileged user.
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata(dir.join("summary.json")).unwrap(),
        );
        assert_eq!(owner, 1000);
        assert!(leftover_containers(&dir).is_empty());
    }
);

/// The uid the unprivileged test runs envgen as (no passwd entry is needed).
const OTHER_UID: u32 = 4242;

// envgen run by an unprivileged user (uid 4242, in the socket's group):
// the container runs as that user, writes the run directory under its
// 0700 home, and trains the same bits as that user's native run.
heavy_test!(
    an_unprivileged_user_runs_in_docker_with_the_same_bits,
    || {
        require_docker_host();
        assert!(
            is_root(),
            "the test switches to an unprivileged uid with setpriv (the suite runs as root)"
        );
        use std::os::unix::fs::MetadataExt as _;
        let image = import_image("unprivileged", "unprivileged");
        let socket = std::env::var("DOCKER_HOST").unwrap();
        let socket = socket.trim_start_matches("unix://");
        let socket_gid = std::fs::metadata(socket).unwrap().gid();
        assert_ne!(
        socket_gid, 0,
        "the test daemon's socket must belong to a group (scripts/services/docker.sh passes --group docker)"
    );
        // A copy of envgen the user can execute wherever the checkout is.
        let bin_dir = tempfile::tempdir().unwrap();
        set_mode(bin_dir.path(), 0o755);
        let binary = bin_dir.path().join("envgen");
        std::fs::copy(env!("CARGO_BIN_EXE_envgen"), &binary).unwrap();
        set_mode(&binary, 0o755);
        let home = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(home.path(), Some(OTHER_UID), Some(OTHER_UID)).unwrap();
        set_mode(home.path(), 0o700);
        let out = home.path().join("runs");
        let run_as_user = |place: &[&str]| {
            let mut args = vec!["run", "gpt2"];
            args.extend(SHORT);
            args.extend(["--out", out.to_str().unwrap()]);
            args.extend(place);
            std::process::Command::new("setpriv")
                .arg(format!("--reuid={OTHER_UID}"))
                .arg(format!("--regid={OTHER_UID}"))
                .arg(format!("--groups={socket_gid}"))
                .arg(&binary)
                .args(&args)
                .current_dir(home.path())
                .env("HOME", home.path())
                .env_remove("ENVGEN_RUN_IMAGE")
                .output()
                .unwrap()
        };
        let native = run_as_user(&["--where", "native"]);
        assert_ok(&native, "native run as uid 4242");
        let docker = run_as_user(&["--where", "docker", "--image", &image]);
        assert_ok(&docker, "docker run as uid 4242");
        let (native, docker) = (json_of(&native), json_of(&docker));
        assert_same_bits(&native, &docker);
        let dir = run_dir_of(&docker);
        let summary = std::fs::metadata(dir.join("summary.json")).unwrap();
        assert_eq!(summary.uid(), OTHER_UID, "the container ran as the caller");
        assert_eq!(dir.metadata().unwrap().uid(), OTHER_UID);
        assert!(leftover_containers(&dir).is_empty());
    }
);
