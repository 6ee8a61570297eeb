//! Errors of the filesystem through the real binary: a full disk, a
//! read-only directory, a directory where a file must be (or a file where a
//! directory must be), a metrics file or lockfile that is not text. Each
//! ends with the contract's exit code (docs/cli.md: 3 for the environment,
//! 2 for what the user passed), the path it happened at and a fix, never a
//! panic, and no half-written file in place of a good one.
//!
//! The full disk and the read-only mount need root (a tiny tmpfs); without
//! it those cases are skipped with a note on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::experiment::stopped_after;
use crate::common::{envgen, heavy_test, is_root};

/// A tiny gpt2 run of 4 steps, a checkpoint every 2.
fn tiny(out: &Path, extra: &[&str]) -> Output {
    envgen()
        .args(["run", "gpt2", "--backend", "cpu", "--json"])
        .args([
            "--set",
            "train.steps=4",
            "--set",
            "train.checkpoint_every=2",
        ])
        .args(["--set", "train.eval_every=2", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("spawn envgen")
}

fn resume(dir: &Path) -> Output {
    envgen()
        .args(["run", "gpt2", "--backend", "cpu", "--resume"])
        .arg(dir)
        .output()
        .expect("spawn envgen")
}

/// A run directory interrupted after 2 of its 4 steps (one checkpoint).
fn interrupted_run(out: &Path) -> PathBuf {
    stopped_after(&tiny(out, &["--stop-after", "2"]), 2)
}

/// Exit `code`, `path` and a fix in stderr, and no panic.
fn assert_error(out: &Output, code: i32, path: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(
        stderr.contains(&path.display().to_string()),
        "no {} in: {stderr}",
        path.display()
    );
    assert!(stderr.contains("\n  fix: "), "no fix in: {stderr}");
    assert!(!stderr.contains("panicked at"), "{stderr}");
}

/// Files under `dir` whose name ends in `.tmp` (a write_atomic left behind).
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(temp_files(&path));
        } else if path.to_string_lossy().ends_with(".tmp") {
            found.push(path);
        }
    }
    found
}

/// A tmpfs mounted at a directory for the test's life (root only).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, options: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let mounted = is_root()
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", options, "tmpfs"])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!(
                "skipped: cannot mount a tmpfs at {} (not root?)",
                dir.display()
            );
        }
        mounted.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

heavy_test!(a_full_disk_names_the_file_and_exits_3, |tmp| {
    // 256 KiB: the config, manifest and metrics fit, the first checkpoint
    // (the model alone is ~480 KiB) does not.
    let Some(disk) = Tmpfs::mount(&tmp.path().join("disk"), "size=256k") else {
        return;
    };
    let out = disk.0.join("runs");
    let done = tiny(&out, &[]);
    assert_error(&done, 3, &out);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("model.safetensors"), "{stderr}");
    assert_eq!(temp_files(&out), Vec::<PathBuf>::new());
});

heavy_test!(
    a_read_only_run_directory_names_the_path_and_exits_3,
    |tmp| {
        let dir = interrupted_run(&tmp.path().join("runs"));
        // Root writes through 0555, so as root the directory is bind-mounted
        // read-only; otherwise its mode says it.
        let view = tmp.path().join("view");
        std::fs::create_dir(&view).unwrap();
        let mounted = is_root()
            && Command::new("mount")
                .arg("--bind")
                .arg(&dir)
                .arg(&view)
                .status()
                .is_ok_and(|s| s.success());
        let _unmount = mounted.then(|| Tmpfs(view.clone()));
        let target = if mounted {
            let ro = Command::new("mount")
                .args(["-o", "remount,ro,bind"])
                .arg(&view)
                .status()
                .unwrap();
            assert!(ro.success());
            view.clone()
        } else {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
            dir.clone()
        };
        let done = resume(&target);
        assert_error(&done, 3, &target);
        if !mounted {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
);

heavy_test!(a_file_or_directory_in_the_way_is_named_with_exit_2, |tmp| {
    // --out is a file.
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    assert_error(&tiny(&file, &[]), 2, &file);
    assert_error(&tiny(&file.join("below"), &[]), 2, &file);

    // A directory where the next checkpoint's weights must go.
    let dir = interrupted_run(&tmp.path().join("runs"));
    let weights = dir.join("checkpoints/step-00000004/model.safetensors");
    std::fs::create_dir_all(&weights).unwrap();
    assert_error(&resume(&dir), 2, &weights);
    std::fs::remove_dir_all(dir.join("checkpoints/step-00000004")).unwrap();

    // A directory where metrics.jsonl must be.
    let metrics = dir.join("metrics.jsonl");
    std::fs::remove_file(&metrics).unwrap();
    std::fs::create_dir(&metrics).unwrap();
    assert_error(&resume(&dir), 2, &metrics);
    assert_eq!(temp_files(&dir), Vec::<PathBuf>::new());
});

heavy_test!(
    metrics_that_are_not_utf8_are_refused_naming_the_line,
    |tmp| {
        let dir = interrupted_run(&tmp.path().join("runs"));
        let metrics = dir.join("metrics.jsonl");
        let mut bytes = std::fs::read(&metrics).unwrap();
        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
        bytes.extend_from_slice(b"\xff\xfe{\"step\": 2}\n");
        std::fs::write(&metrics, &bytes).unwrap();
        let line = format!("metrics.jsonl line {}", lines + 1);

        let report = envgen()
            .args(["runs", "report"])
            .arg(&dir)
            .arg("--out")
            .arg(tmp.path().join("report"))
            .output()
            .unwrap();
        assert_error(&report, 2, &metrics);
        assert!(String::from_utf8_lossy(&report.stderr).contains(&line));

        // A resume refuses it too, instead of dropping the run's history.
        let resumed = resume(&dir);
        assert_error(&resumed, 2, &metrics);
        assert!(String::from_utf8_lossy(&resumed.stderr).contains(&line));
        assert_eq!(std::fs::read(&metrics).unwrap(), bytes);
    }
);

#[test]
fn a_binary_lockfile_is_named_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let containers = tmp.path().join("containers");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(&source)
        .arg(&containers)
        .status()
        .unwrap();
    assert!(copied.success());
    let lock = containers.join("envgen.lock");
    std::fs::write(&lock, b"\x00\xff\xfe\x80binary\x00garbage\xc3").unwrap();
    for command in [&["image", "list"][..], &["image", "verify"]] {
        let out = envgen()
            .args(command)
            .arg("--containers")
            .arg(&containers)
            .output()
            .unwrap();
        assert_error(&out, 2, &lock);
    }
}
