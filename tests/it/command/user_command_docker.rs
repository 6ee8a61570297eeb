//! `envgen run --where docker -- CMD` (issue #25): through the Docker
//! launcher, the command's git repository is mounted read-only at
//! /workspace, the command runs in the same directory of it as a non-root
//! user, its output and metrics land in the run directory on the host, and
//! the manifest has the command, the commit, the diff hash and the image
//! digest. The image is this build's envgen plus `sh` and `cat` (a real
//! user image adds Python; the launcher does not care which).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::docker_base::require_docker_host;
use crate::common::docker_run::{import_rootfs, leftover_containers};
use crate::common::run::minimal_rootfs;
use crate::common::{envgen, git, git_init, heavy_test, json_of, read_json, run_dir_of, text};

/// Copy `program` (resolved) to `root/bin/NAME` with the libraries it links.
pub(crate) fn add_program(root: &Path, program: &str, name: &str) {
    let resolved = std::fs::canonicalize(program).unwrap();
    let target = root.join("bin").join(name);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(&resolved, &target).unwrap();
    let ldd = Command::new("ldd").arg(&resolved).output().expect("ldd");
    for word in String::from_utf8_lossy(&ldd.stdout).split_whitespace() {
        if word.starts_with('/') {
            let lib = root.join(word.trim_start_matches('/'));
            std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
            std::fs::copy(word, &lib).unwrap();
        }
    }
}

/// `envgen-test/run:TAG`: envgen, sh and cat (a tag per test: they run
/// side by side).
fn image_with_a_shell(tag: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    minimal_rootfs(root.path());
    add_program(root.path(), "/bin/sh", "sh");
    add_program(root.path(), "/bin/cat", "cat");
    import_rootfs(root.path(), tag)
}

const SCRIPT: &str = r#"echo "cwd $PWD"
while read -r line; do case $line in Uid:*) echo "$line";; esac; done < /proc/self/status
if (echo x > probe.txt) 2>/dev/null; then echo "workspace writable"; else echo "workspace read-only"; fi
echo '{"step": 1, "loss": 0.25}' >> "$ENVGEN_METRICS"
cat ../data.txt
while read -r line; do case $line in *" /dev/shm "*) echo "shm: $line";; esac; done < /proc/mounts
echo saved > "$ENVGEN_OUTPUT_DIR/checkpoint.txt"
"#;

heavy_test!(
    in_docker_the_repo_is_mounted_read_only_and_the_command_runs_non_root,
    || {
        require_docker_host();
        let image = image_with_a_shell("command");
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let sub = repo.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        git_init(&repo);
        std::fs::write(sub.join("run.sh"), SCRIPT).unwrap();
        std::fs::write(repo.join("data.txt"), "data v1\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "one"]);
        std::fs::write(repo.join("data.txt"), "data v2\n").unwrap();
        // The repository readable by the container's (non-root) user, and sub/
        // writable by anyone: only the read-only mount keeps the command out.
        use std::os::unix::fs::PermissionsExt;
        for (dir, mode) in [(tmp.path(), 0o755), (&repo, 0o755), (&sub, 0o777)] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let out_dir: PathBuf = tmp.path().join("runs");
        // Issue #39: two knobs relaxed, the rest (network, code) kept hardened.
        let out = envgen()
            .args([
                "run", "--where", "docker", "--image", &image, "--json", "--out",
            ])
            .arg(&out_dir)
            .args(["--shm-size", "128m", "--ipc", "shareable"])
            .args(["--", "sh", "run.sh"])
            .current_dir(&sub)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("envgen: docker: relaxed: ipc shareable, /dev/shm 128 MiB"),
            "{}",
            text(&out)
        );
        let dir = run_dir_of(&json_of(&out));
        let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
        let shm = log.lines().find(|l| l.starts_with("shm: ")).unwrap();
        assert!(shm.contains("size=131072k"), "{log}");
        assert_eq!(
            std::fs::read_to_string(dir.join("outputs/checkpoint.txt")).unwrap(),
            "saved\n",
            "ENVGEN_OUTPUT_DIR is writable and back on the host"
        );
        assert!(log.contains("cwd /workspace/sub"), "{log}");
        assert!(log.contains("workspace read-only"), "{log}");
        assert!(
            log.contains("data v2"),
            "the working tree, not the commit: {log}"
        );
        let uid_line = log.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert_ne!(
            uid_line.split_whitespace().nth(1),
            Some("0"),
            "the command must not run as root: {uid_line}"
        );
        assert!(!repo.join("sub/probe.txt").exists());
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(summary["status"], "completed");
        assert_eq!(summary["metrics"]["loss"], 0.25);
        let manifest = read_json(&dir.join("manifest.json"));
        assert_eq!(manifest["where"], "docker");
        assert_eq!(
            manifest["command"]["argv"],
            serde_json::json!(["sh", "run.sh"])
        );
        assert_eq!(
            manifest["command"]["git"]["commit"],
            git(&repo, &["rev-parse", "HEAD"])
        );
        assert!(manifest["command"]["git"]["diff_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        assert!(manifest["image"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        let options = &manifest["docker"]["options"];
        assert_eq!(options["network"], "none");
        assert_eq!(options["ipc"], "shareable");
        assert_eq!(options["shm_size_bytes"], 128 << 20);
        assert_eq!(options["writable_workspace"], false);
        let shown = envgen().args(["runs", "show"]).arg(&dir).output().unwrap();
        assert!(
            String::from_utf8_lossy(&shown.stdout)
                .contains("container   relaxed: ipc shareable, /dev/shm 128 MiB"),
            "{}",
            text(&shown)
        );
        assert!(leftover_containers(&dir).is_empty());
    }
);

heavy_test!(
    ctrl_c_stops_the_container_and_the_command_sees_sigint,
    || {
        require_docker_host();
        let image = image_with_a_shell("command-ctrl-c");
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for dir in [tmp.path(), &work] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // Busy, with shell builtins only (the image has no sleep).
        let script = "trap 'echo got-sigint; exit 7' INT; echo started; while :; do :; done";
        let out_dir = tmp.path().join("runs");
        let mut child = envgen()
            .args(["run", "--where", "docker", "--image", &image, "--out"])
            .arg(&out_dir)
            .args(["--", "sh", "-c", script])
            .current_dir(&work)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let dir = loop {
            let started = crate::common::run_dirs(&out_dir)
                .into_iter()
                .next()
                .filter(|d| {
                    std::fs::read_to_string(d.join("stdout.log"))
                        .is_ok_and(|s| s.contains("started"))
                });
            if let Some(dir) = started {
                break dir;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the command never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        // SAFETY: kill(2) on the envgen this test started.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline + std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("envgen did not stop after SIGINT");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        assert_eq!(status.code(), Some(130));
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(summary["status"], "interrupted");
        assert_eq!(summary["metrics"]["exit_code"], 7);
        let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
        assert!(log.contains("got-sigint"), "{log}");
        assert!(leftover_containers(&dir).is_empty());
    }
);

// An image without envgen, as NGC's PyTorch image is: the launching
// envgen is mounted read-only into the container and runs the command
// there; the manifest says so and records that binary's hash.
heavy_test!(
    an_image_without_envgen_runs_the_command_with_this_envgen_mounted,
    || {
        require_docker_host();
        crate::common::docker_base::ensure_base_image();
        let image = crate::common::docker_base::BASE;
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for dir in [tmp.path(), &work] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let script = r#"echo "image envgen: $(command -v envgen || echo none)"
test -x /opt/envgen/bin/envgen && echo "envgen mounted"
(: > /opt/envgen/bin/envgen) 2>/dev/null || echo "mount read-only"
echo '{"step": 1, "loss": 0.5}' >> "$ENVGEN_METRICS""#;
        let out_dir = tmp.path().join("runs");
        let out = envgen()
            .args([
                "run", "--where", "docker", "--image", image, "--json", "--out",
            ])
            .arg(&out_dir)
            .args(["--", "sh", "-c", script])
            .current_dir(&work)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let dir = run_dir_of(&json_of(&out));
        let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
        for line in ["image envgen: none", "envgen mounted", "mount read-only"] {
            assert!(log.contains(line), "{line}: {log}");
        }
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(summary["status"], "completed", "{summary}");
        assert_eq!(summary["metrics"]["loss"], 0.5);
        let manifest = read_json(&dir.join("manifest.json"));
        assert_eq!(manifest["image"]["envgen_mounted"], true, "{manifest}");
        let ours =
            envgen::image::lock::sha256_hex(&std::fs::read(env!("CARGO_BIN_EXE_envgen")).unwrap());
        assert_eq!(manifest["image"]["envgen_binary_sha256"], ours.as_str());
        assert!(leftover_containers(&dir).is_empty());
    }
);
