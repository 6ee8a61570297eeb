//! `envgen run --where slurm -- CMD` (issue #25) on the test cluster
//! (scripts/test.sh: munge + slurmctld + one slurmd on this machine, the
//! filesystem shared): the job's envgen runs the command — a shell script
//! that starts the PyTorch training script of `user_command` with the test
//! venv's python — on the node, in its directory, and the manifest has
//! the command, the commit, the diff hash and the Slurm job.

use crate::common::{
    envgen, git, git_init, heavy_test, json_of, read_json, require_slurm_cluster, run_dir_of, text,
};

const SCRIPT: &str = r#"echo "cwd $PWD"
echo "job ${SLURM_JOB_ID:-none}"
exec "$1" train.py
"#;

heavy_test!(a_command_runs_as_a_slurm_job_with_its_code_recorded, || {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    let python = super::user_command::python();
    std::fs::write(repo.join("job.sh"), SCRIPT).unwrap();
    std::fs::write(repo.join("train.py"), super::user_command::TRAIN).unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "one"]);
    std::fs::write(repo.join("job.sh"), format!("{SCRIPT}# changed\n")).unwrap();
    let out = envgen()
        .args(["run", "--where", "slurm", "--json", "--out"])
        .arg(tmp.path().join("runs"))
        .args(["--", "sh", "job.sh"])
        .arg(&python)
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let dir = run_dir_of(&json_of(&out));
    let manifest = read_json(&dir.join("manifest.json"));
    assert_eq!(manifest["where"], "slurm");
    assert_eq!(manifest["slurm"]["state"], "COMPLETED");
    let job = manifest["slurm"]["job"].as_str().unwrap().to_string();
    assert_eq!(
        manifest["command"]["argv"],
        serde_json::json!(["sh", "job.sh", python])
    );
    assert_eq!(
        manifest["command"]["git"]["commit"],
        git(&repo, &["rev-parse", "HEAD"])
    );
    assert!(manifest["command"]["git"]["diff_hash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    assert!(log.contains(&format!("cwd {}", repo.display())), "{log}");
    assert!(
        log.contains(&format!("job {job}")),
        "ran outside the job: {log}"
    );
    assert!(log.contains("step 5 loss"), "{log}");
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["steps_done"], 5);
    assert!(summary["metrics"]["loss"].as_f64().unwrap() > 0.0);
});

// `--detach`: the job is submitted and envgen returns; `runs watch`
// follows the command's run to its end.
heavy_test!(a_detached_command_job_is_followed_by_runs_watch, || {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let runs = tmp.path().join("runs");
    let script = "echo '{\"step\": 1, \"loss\": 0.75}' >> \"$ENVGEN_METRICS\"; echo detached-ok";
    let out = envgen()
        .args(["run", "--where", "slurm", "--detach", "--json", "--out"])
        .arg(&runs)
        .args(["--", "sh", "-c", script])
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // Detached: the job ID and the run directories, nothing trained yet.
    let doc = json_of(&out);
    assert!(doc["job_id"].as_str().is_some(), "{doc}");
    let dir = std::path::PathBuf::from(doc["run_dirs"][0].as_str().unwrap());
    let watched = envgen()
        .args(["runs", "watch", "--interval", "0.2"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(watched.status.code(), Some(0), "{}", text(&watched));
    let last = String::from_utf8_lossy(&watched.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    assert!(last.starts_with("status  completed"), "{}", text(&watched));
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["metrics"]["loss"], 0.75, "{summary}");
    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    assert!(log.contains("detached-ok"), "{log}");
});

// `--container charliecloud`: the command runs inside the image directory
// (its marker file is only there), in its own directory, which is bound
// into the container at the same path.
heavy_test!(a_command_runs_in_a_slurm_container, || {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("image");
    crate::common::run::minimal_rootfs(&image);
    super::user_command_docker::add_program(&image, "/bin/sh", "sh");
    super::user_command_docker::add_program(&image, "/bin/cat", "cat");
    std::fs::write(image.join("etc/only-in-the-image"), "inside the image\n").unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("input.txt"), "from the host\n").unwrap();
    let script = "cat /etc/only-in-the-image; cat input.txt; echo \"cwd $PWD\"";
    let out = envgen()
        .args([
            "run",
            "--where",
            "slurm",
            "--container",
            "charliecloud",
            "--image",
        ])
        .arg(&image)
        .args(["--json", "--out"])
        .arg(tmp.path().join("runs"))
        .args(["--", "sh", "-c", script])
        .current_dir(&work)
        .env("USER", "envgen")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let dir = run_dir_of(&json_of(&out));
    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    assert!(log.contains("inside the image"), "{log}");
    assert!(log.contains("from the host"), "{log}");
    assert!(log.contains(&format!("cwd {}", work.display())), "{log}");
    let job = std::fs::read_to_string(dir.join("job.sbatch")).unwrap();
    assert!(job.contains("srun ch-run -b "), "{job}");
    let manifest = read_json(&dir.join("manifest.json"));
    assert_eq!(manifest["image"]["runtime"], "charliecloud", "{manifest}");
    assert_eq!(read_json(&dir.join("summary.json"))["status"], "completed");
});
