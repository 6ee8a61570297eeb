//! `envgen runs list | show | cancel` on runs that did not end by
//! themselves (issue #21, "records survive"): a run whose trainer is gone
//! without a summary (kill -9, its container removed) is shown `lost` with
//! the reason, `runs cancel` ends it for good, and a run still training is
//! stopped by `runs cancel` like Ctrl-C would (natively, in Docker) —
//! each time resumable.

use std::path::Path;

use serde_json::Value;

use crate::common::docker_base::require_docker_host;
use crate::common::docker_run::{
    block_on, container_name, import_image, leftover_containers, remove_container,
};
use crate::common::run::*;
use crate::common::{envgen, heavy_test, json_of, text};

/// `envgen runs ARGS…`, whatever its exit status.
fn runs(args: &[&str]) -> std::process::Output {
    envgen().arg("runs").args(args).output().unwrap()
}

/// The one run of `runs list --json --out OUT`.
fn listed(out: &Path) -> Value {
    let list = runs(&["list", "--json", "--out", out.to_str().unwrap()]);
    assert_ok(&list, "runs list");
    let doc = json_of(&list);
    assert_eq!(doc["runs"].as_array().unwrap().len(), 1, "{doc}");
    doc["runs"][0].clone()
}

/// `runs cancel DIR`, which must succeed; its stdout.
fn cancel(dir: &Path) -> String {
    let out = runs(&["cancel", dir.to_str().unwrap()]);
    assert_ok(&out, "runs cancel");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A cancelled run says how it ended and how to resume; cancelling it
/// again is refused (exit 2) as for any run that ended.
fn assert_cancelled(dir: &Path, stdout: &str, resume: &str) {
    assert!(stdout.contains(": interrupted after "), "{stdout}");
    assert!(stdout.contains(resume), "{stdout}");
    let again = runs(&["cancel", dir.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
}

heavy_test!(
    a_killed_native_run_is_lost_then_cancel_ends_it_and_it_resumes,
    |tmp| {
        let args = long_run_args(tmp.path(), &["--where", "native"]);
        let mut killed = 0;
        let (dir, _) = stop_after_two_steps(&args, tmp.path(), |pid, _| {
            killed = pid;
            send_signal(pid, "KILL");
        });
        let gone = format!("process {killed} on host ");
        let run = listed(tmp.path());
        assert_eq!(run["status"], "lost", "{run}");
        let reason = run["status_reason"].as_str().unwrap();
        assert!(
            reason.contains(&gone) && reason.contains("is gone"),
            "{run}"
        );
        let list = runs(&["list", "--out", tmp.path().to_str().unwrap()]);
        let list = String::from_utf8_lossy(&list.stdout);
        assert!(list.contains("  lost  ") && list.contains(&gone), "{list}");
        let show = runs(&["show", dir.to_str().unwrap()]);
        let show = String::from_utf8_lossy(&show.stdout);
        assert!(show.contains("status      lost (process "), "{show}");
        // Only derived: nothing was written into the run.
        assert!(!dir.join("summary.json").exists());

        let stdout = cancel(&dir);
        let resume = format!("resume with `envgen run gpt2 --resume {}`", dir.display());
        assert_cancelled(&dir, &stdout, &resume);
        let summary = read(&dir, "summary.json");
        let why = summary["metrics"]["reason"].as_str().unwrap();
        assert!(
            why.starts_with("lost: ") && why.contains(&gone),
            "{summary}"
        );
        assert_eq!(listed(tmp.path())["status"], "interrupted");
        assert_interrupted_then_resume(&dir, 400);
    }
);

heavy_test!(cancel_stops_a_live_native_run_which_resumes, |tmp| {
    let args = long_run_args(tmp.path(), &["--where", "native"]);
    let mut stdout = String::new();
    let (dir, out) = stop_after_two_steps(&args, tmp.path(), |_, dir| {
        let run = listed(dir.parent().unwrap());
        assert_eq!(run["status"], "running", "{run}");
        stdout = cancel(dir);
    });
    // Stopped as by Ctrl-C: checkpoint, `interrupted`, exit 130.
    assert_exit_130(&out);
    let resume = format!("resume with `envgen run gpt2 --resume {}`", dir.display());
    assert_cancelled(&dir, &stdout, &resume);
    assert_interrupted_then_resume(&dir, 400);
});

// `--ranks 2`: rank 0 holds the lock, and names its launcher there;
// cancel signals the launcher, which stops every rank at one checkpoint.
heavy_test!(cancel_stops_every_rank_of_a_ranks_run, |tmp| {
    let args = long_run_args(tmp.path(), &["--ranks", "2"]);
    let mut stdout = String::new();
    let (dir, out) = stop_after_two_steps(&args, tmp.path(), |launcher, dir| {
        let lock = std::fs::read_to_string(dir.join(".envgen.lock")).unwrap();
        let lock: Value = serde_json::from_str(&lock).unwrap();
        assert_eq!(lock["launcher_pid"], launcher, "{lock}");
        stdout = cancel(dir);
    });
    assert_exit_130(&out);
    let resume = format!(
        "resume with `envgen run gpt2 --ranks 2 --resume {}`",
        dir.display()
    );
    assert_cancelled(&dir, &stdout, &resume);
});

heavy_test!(
    a_docker_run_whose_container_is_gone_is_lost_and_cancel_ends_it,
    || {
        require_docker_host();
        let image = import_image("runs-lost", "runs-lost");
        let tmp = tempfile::tempdir().unwrap();
        let args = long_run_args(tmp.path(), &["--where", "docker", "--image", &image]);
        // The envgen following the container dies first: nobody writes a
        // summary when the container goes.
        let (dir, _) = stop_after_two_steps(&args, tmp.path(), |pid, _| send_signal(pid, "KILL"));
        let name = container_name(&dir);
        let run = listed(tmp.path());
        assert_eq!(
            run["status"], "running",
            "the container still trains: {run}"
        );
        remove_container(&name);
        let run = listed(tmp.path());
        assert_eq!(run["status"], "lost", "{run}");
        assert_eq!(
            run["status_reason"],
            format!("container {name} no longer exists")
        );
        // Without the daemon nobody can tell: unknown, not lost.
        let list = envgen()
            .args([
                "runs",
                "list",
                "--json",
                "--out",
                tmp.path().to_str().unwrap(),
            ])
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .output()
            .unwrap();
        assert_eq!(json_of(&list)["runs"][0]["status"], "unknown");

        let stdout = cancel(&dir);
        assert_cancelled(
            &dir,
            &stdout,
            "resume with `envgen run gpt2 --where docker --image",
        );
        assert_interrupted_then_resume(&dir, 400);
    }
);

heavy_test!(
    cancel_stops_a_live_docker_run_and_removes_its_container,
    || {
        require_docker_host();
        let image = import_image("runs-cancel", "runs-cancel");
        let tmp = tempfile::tempdir().unwrap();
        let args = long_run_args(tmp.path(), &["--where", "docker", "--image", &image]);
        let mut stdout = String::new();
        let (dir, out) = stop_after_two_steps(&args, tmp.path(), |_, dir| {
            stdout = cancel(dir);
            // Stopped and removed through the daemon before cancel returned.
            let gone = block_on(async {
                let docker = envgen::image::daemon::connect().await.unwrap();
                docker.inspect_container(&container_name(dir), None).await
            });
            assert!(gone.is_err(), "{gone:?}");
        });
        assert_exit_130(&out);
        assert!(leftover_containers(&dir).is_empty());
        assert_cancelled(&dir, &stdout, "--resume");
        assert_interrupted_then_resume(&dir, 400);
    }
);
