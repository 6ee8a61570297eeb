//! `envgen run --where slurm -- CMD` (issue #25) on the test cluster
//! (scripts/test.sh: munge + slurmctld + one slurmd on this machine, the
//! filesystem shared): the job's envgen runs the command on the node, in
//! its directory, and the manifest has the command, the commit, the diff
//! hash and the Slurm job.

use std::path::Path;
use std::process::Command;

use crate::common::{envgen, json_of, read_json, require_slurm_cluster, run_dir_of, text, turn};

const SCRIPT: &str = r#"echo "cwd $PWD on $(hostname)"
echo "job ${SLURM_JOB_ID:-none}"
echo '{"step": 2, "loss": 0.125}' >> "$ENVGEN_METRICS"
exit 0
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_command_runs_as_a_slurm_job_with_its_code_recorded() {
    let _turn = turn!();
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["config", "user.name", "test"]);
    std::fs::write(repo.join("job.sh"), SCRIPT).unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "one"]);
    std::fs::write(repo.join("job.sh"), format!("{SCRIPT}# changed\n")).unwrap();
    let out = envgen()
        .args(["run", "--where", "slurm", "--json", "--out"])
        .arg(tmp.path().join("runs"))
        .args(["--", "sh", "job.sh"])
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
        serde_json::json!(["sh", "job.sh"])
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
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["metrics"]["loss"], 0.125);
}
