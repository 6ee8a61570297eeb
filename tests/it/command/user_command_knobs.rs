//! A command run's knobs (issue #39): Docker's container flags and
//! `--sweep` over a command's variable or arguments, refused where they
//! cannot apply and planned by `--dry-run` — all before anything is made.

use crate::common::{envgen, json_of, text};

#[test]
fn knobs_where_they_cannot_apply_exit_2_and_make_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("runs");
    let out = out_dir.to_str().unwrap();
    for (args, says) in [
        (
            &["run", "--shm-size", "2x", "--out", out, "--", "true"][..],
            "\"2x\" is not a size: write a whole number of bytes with k, m or g",
        ),
        (
            &["run", "--network", "a b", "--out", out, "--", "true"][..],
            "is not none, bridge, host or a Docker network's name",
        ),
        (
            &[
                "run",
                "--where",
                "native",
                "--network",
                "bridge",
                "--shm-size",
                "1g",
                "--out",
                out,
                "--",
                "true",
            ][..],
            "--network, --shm-size are Docker's container knobs, but this run goes to native",
        ),
        (
            &[
                "run",
                "--where",
                "docker",
                "--ipc",
                "host",
                "--shm-size",
                "1g",
                "--out",
                out,
                "--",
                "true",
            ][..],
            "--shm-size with --ipc host",
        ),
        (
            &[
                "run",
                "gpt2",
                "--where",
                "docker",
                "--writable-workspace",
                "--out",
                out,
            ][..],
            "--writable-workspace is for your own command's code",
        ),
        (
            &[
                "run", "--where", "slurm", "--sweep", "bs=1,2", "--out", out, "--", "python",
                "t.py", "--lr", "{lr}",
            ][..],
            "--sweep bs=…: the command has no {bs} to fill",
        ),
        (
            &[
                "run",
                "gpt2",
                "--where",
                "slurm",
                "--sweep",
                "ENV:X=1,2",
                "--out",
                out,
            ][..],
            "a variable sweep is for your own command",
        ),
    ] {
        let got = envgen()
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_eq!(got.status.code(), Some(2), "{args:?}: {}", text(&got));
        let stderr = String::from_utf8_lossy(&got.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(
        !out_dir.exists(),
        "a refused run made {}",
        out_dir.display()
    );
}

/// Issue #39: `--sweep` over a command's variable or argument plans one
/// command line per array task (dry run: nothing is submitted or made).
#[test]
fn a_command_sweep_plans_one_line_per_value() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("runs");
    for (sweep, first) in [
        (
            "ENV:MICRO_BATCH_SIZE=4,16",
            &[
                "env",
                "MICRO_BATCH_SIZE=4",
                "python",
                "t.py",
                "--lr",
                "{lr}",
            ][..],
        ),
        ("lr=1e-3,3e-4", &["python", "t.py", "--lr", "1e-3"][..]),
    ] {
        let dry = envgen()
            .args([
                "run",
                "--where",
                "slurm",
                "--sweep",
                sweep,
                "--dry-run",
                "--json",
                "--out",
            ])
            .arg(&out_dir)
            .args(["--", "python", "t.py", "--lr", "{lr}"])
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(dry.status.success(), "{}", text(&dry));
        let plan = json_of(&dry);
        let lines = plan["sweep"].as_array().unwrap();
        assert_eq!(lines.len(), 2, "{plan}");
        assert_eq!(lines[0]["argv"], serde_json::json!(first), "{plan}");
    }
    assert!(!out_dir.exists());
}
