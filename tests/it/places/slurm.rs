//! Real Slurm: a one-node cluster started by scripts/test.sh
//! (scripts/services/slurm.sh). These tests never skip: without the
//! cluster they fail and say how to start it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use envgen::launch::slurm::sbatch::{self as slurm, JobSpec, Runtime};

use crate::common::{heavy_test, require_slurm_cluster};

fn job(dir: &Path, name: &str, command: &[&str]) -> JobSpec {
    JobSpec {
        job_name: name.into(),
        workdir: dir.to_path_buf(),
        output: "slurm-%A_%a.out".into(),
        partition: None,
        account: None,
        time: Some("00:05:00".into()),
        nodes: 1,
        tasks_per_node: 1,
        cpus_per_task: 1,
        mem: None,
        gpus_per_node: None,
        qos: None,
        constraint: None,
        gres: None,
        extra: vec![],
        runtime: Runtime::Native,
        binds: vec![],
        env: BTreeMap::from([("ENVGEN_TEST_MARK".to_string(), "it's here".to_string())]),
        command: command.iter().map(|s| s.to_string()).collect(),
        array_tasks: vec![],
    }
}

fn submit(dir: &Path, spec: &JobSpec) -> String {
    let script = dir.join("job.sbatch");
    std::fs::write(&script, slurm::render(spec).unwrap()).unwrap();
    slurm::submit(spec, &script, dir).unwrap()
}

fn outputs(dir: &Path) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "out"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect()
}

heavy_test!(runs_envgen_natively_and_collects_its_output, || {
    require_slurm_cluster();
    let dir = tempfile::tempdir().unwrap();
    let envgen = env!("CARGO_BIN_EXE_envgen");
    let id = submit(
        dir.path(),
        &job(dir.path(), "version", &[envgen, "--version"]),
    );
    let state = slurm::wait(&id, Duration::from_secs(120)).unwrap();
    assert!(state.all_completed(), "{state:?}");
    let out = outputs(dir.path()).concat();
    assert!(
        out.contains(&format!("envgen {}", env!("CARGO_PKG_VERSION"))),
        "job output: {out}"
    );
});

heavy_test!(array_tasks_run_with_their_own_arguments, || {
    require_slurm_cluster();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = job(
        dir.path(),
        "sweep",
        &[
            "/bin/sh",
            "-c",
            "echo \"mark=$ENVGEN_TEST_MARK args=$*\"",
            "sh",
        ],
    );
    spec.array_tasks = vec![
        vec!["--set".into(), "train.seed=7".into()],
        vec!["--set".into(), "train.seed=8".into()],
    ];
    let id = submit(dir.path(), &spec);
    let state = slurm::wait(&id, Duration::from_secs(120)).unwrap();
    assert_eq!(state.tasks.len(), 2, "{state:?}");
    assert!(state.all_completed(), "{state:?}");
    let out = outputs(dir.path());
    assert_eq!(out.len(), 2, "one output file per array task: {out:?}");
    assert!(
        out[0].contains("mark=it's here args=--set train.seed=7"),
        "{}",
        out[0]
    );
    assert!(out[1].contains("args=--set train.seed=8"), "{}", out[1]);
});

heavy_test!(scancel_stops_a_running_job, || {
    require_slurm_cluster();
    let dir = tempfile::tempdir().unwrap();
    let id = submit(
        dir.path(),
        &job(dir.path(), "sleeper", &["/bin/sleep", "300"]),
    );
    // Cancel only once it was seen RUNNING: a job that never started
    // would end CANCELLED too and prove nothing (issue #26).
    let running = (0..60).any(|_| {
        let state = slurm::state(&id).unwrap();
        let seen = state.tasks.iter().any(|(_, s)| s == "RUNNING");
        if !seen {
            std::thread::sleep(Duration::from_millis(500));
        }
        seen
    });
    assert!(running, "job {id} never reached RUNNING within 30 s");
    slurm::cancel(&id).unwrap();
    let state = slurm::wait(&id, Duration::from_secs(60)).unwrap();
    assert!(
        state.tasks.iter().all(|(_, s)| s == "CANCELLED"),
        "{state:?}"
    );
});
