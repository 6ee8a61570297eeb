//! `envgen run --where slurm|auto`, `--sweep`, `runs cancel`, Ctrl-C and
//! `rerun` against the real one-node Slurm cluster that scripts/test.sh
//! starts (munge + slurmctld + slurmd). Real tiny-gpt2 training in the jobs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::docker_base::{self, require_docker_host};
use crate::common::experiment::{logged_steps, metric_bits};
use crate::common::run::*;
use crate::common::{envgen, heavy_test, json_of, require_slurm_cluster, run_dir_of};

heavy_test!(
    auto_picks_slurm_and_the_job_trains_the_same_bits_as_a_native_run,
    || {
        require_slurm_cluster();
        let tmp = tempfile::tempdir().unwrap();
        let native = short_run(tmp.path(), &["--where", "native"]);
        assert_ok(&native, "native run");
        let native = json_of(&native);

        // A kernel cache warmed on the login node is handed to the job (its
        // CUDA runs seed their cache from it; this CPU run only carries it).
        let seed = tmp.path().join("shared kernel cache");
        let slurm = envgen()
            .env("ENVGEN_KERNEL_SEED", &seed)
            .args(["run", "gpt2"])
            .args(SHORT)
            .arg("--out")
            .arg(tmp.path())
            .args(["--where", "auto"])
            .output()
            .expect("spawn envgen");
        assert_ok(&slurm, "--where auto (Slurm) run");
        let stderr = String::from_utf8_lossy(&slurm.stderr);
        assert!(
            stderr.contains("--where auto: slurm (sbatch found and the cluster answers"),
            "{stderr}"
        );
        let slurm = json_of(&slurm);
        let dir = run_dir_of(&slurm);
        assert_eq!(slurm["summary"]["status"], "completed");
        for key in ["final_train_loss", "final_val_loss"] {
            assert_eq!(
                metric_bits(&native, key),
                metric_bits(&slurm, key),
                "{key}: the Slurm job must train exactly as the native run"
            );
        }
        let manifest = read(&dir, "manifest.json");
        let native_manifest = read(&run_dir_of(&native), "manifest.json");
        assert_eq!(manifest["config_hash"], native_manifest["config_hash"]);
        assert_eq!(manifest["where"], "slurm");
        assert!(manifest["where_reason"].as_str().unwrap().contains("sinfo"));
        assert_eq!(manifest["slurm"]["state"], "COMPLETED");
        let job = manifest["slurm"]["job"].as_str().unwrap();
        assert!(job.chars().all(|c| c.is_ascii_digit()), "{job}");
        // The job's output was collected into the run directory, and the job
        // side recorded the host it ran on.
        let output = std::fs::read_to_string(dir.join("slurm.out")).unwrap();
        assert!(output.contains("run directory"), "{output}");
        let script = std::fs::read_to_string(dir.join("job.sbatch")).unwrap();
        assert!(
            script.contains(&format!("export ENVGEN_KERNEL_SEED='{}'", seed.display())),
            "the job does not get the kernel cache seed:\n{script}"
        );
        assert!(manifest["host"].is_object());

        let show = envgen()
            .args(["runs", "show", "--json", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert_ok(&show, "runs show");
        let show = json_of(&show);
        assert_eq!(show["slurm_job"]["job"], job);
        assert_eq!(show["slurm_job"]["state"], "COMPLETED");
        assert_eq!(show["status"], "completed");

        // `runs compare` of the two machines' manifests: same science, and it
        // names what differs (where).
        let compare = envgen()
            .args([
                "runs",
                "compare",
                "--json",
                run_dir_of(&native).to_str().unwrap(),
                dir.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_ok(&compare, "runs compare");
        let compare = json_of(&compare);
        assert_eq!(compare["same_config"], true, "{compare}");
        let differs = |field: &str| {
            compare["differences"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["field"] == field)
        };
        assert!(differs("where"), "{compare}");
        assert!(!differs("profile.micro_batch"), "{compare}");

        // rerun: same where, same config, the same loss bits.
        let rerun = rerun_json(tmp.path(), &dir);
        let rerun_manifest = read(&run_dir_of(&rerun), "manifest.json");
        assert_eq!(rerun_manifest["where"], "slurm");
        assert_eq!(rerun_manifest["config_hash"], manifest["config_hash"]);
        assert_eq!(
            metric_bits(&rerun, "final_val_loss"),
            metric_bits(&slurm, "final_val_loss")
        );
    }
);

heavy_test!(a_two_seed_sweep_runs_as_one_job_array, || {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let out = short_run(
        tmp.path(),
        &["--where", "slurm", "--sweep", "train.seed=1,2"],
    );
    assert_ok(&out, "sweep");
    let doc = json_of(&out);
    let runs = doc["runs"].as_array().expect("one entry per sweep value");
    assert_eq!(runs.len(), 2);
    let manifests: Vec<Value> = runs
        .iter()
        .map(|r| read(Path::new(r["run_dir"].as_str().unwrap()), "manifest.json"))
        .collect();
    let job_id = manifests[0]["slurm"]["job_id"].as_str().unwrap();
    for (i, (run, manifest)) in runs.iter().zip(&manifests).enumerate() {
        assert_eq!(run["summary"]["status"], "completed", "{run}");
        assert_eq!(manifest["slurm"]["job_id"], job_id, "one job array");
        assert_eq!(manifest["slurm"]["job"], format!("{job_id}_{i}"));
        assert_eq!(manifest["sweep"]["value"], (i + 1).to_string());
        let config = std::fs::read_to_string(
            Path::new(run["run_dir"].as_str().unwrap()).join("config.toml"),
        )
        .unwrap();
        assert!(config.contains(&format!("seed = {}", i + 1)), "{config}");
    }
    assert_ne!(manifests[0]["config_hash"], manifests[1]["config_hash"]);
    assert_ne!(
        metric_bits(&runs[0], "final_train_loss"),
        metric_bits(&runs[1], "final_train_loss"),
        "different seeds must train differently"
    );
});

fn only_run_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

fn assert_interrupted_and_resumable(dir: &Path) {
    assert_interrupted_then_resume(dir, 400);
    let manifest = read(dir, "manifest.json");
    assert_eq!(manifest["slurm"]["state"], "CANCELLED");
}

heavy_test!(
    scancel_through_runs_cancel_leaves_an_interrupted_resumable_run,
    || {
        require_slurm_cluster();
        let tmp = tempfile::tempdir().unwrap();
        let args = long_run_args(tmp.path(), &["--where", "slurm", "--detach"]);
        let submitted = envgen().args(&args).output().unwrap();
        assert_ok(&submitted, "detached submission");
        let doc = json_of(&submitted);
        assert!(doc["job_id"].as_str().is_some(), "{doc}");
        let dir = only_run_dir(tmp.path());
        wait_for_step(&dir, 2, Duration::from_secs(120));

        let show = json_of(
            &envgen()
                .args(["runs", "show", "--json", dir.to_str().unwrap()])
                .output()
                .unwrap(),
        );
        assert_eq!(show["status"], "running");
        assert_eq!(show["slurm_job"]["state"], "RUNNING");

        let cancel = envgen()
            .args(["runs", "cancel", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert_ok(&cancel, "runs cancel");
        assert_interrupted_and_resumable(&dir);
    }
);

heavy_test!(ctrl_c_while_following_cancels_the_job_and_exits_130, || {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let args = long_run_args(tmp.path(), &["--where", "slurm"]);
    let (dir, out) = interrupt_after_two_steps(&args, tmp.path());
    assert_exit_130(&out);
    assert_interrupted_and_resumable(&dir);
});

heavy_test!(slurm_job_runs_envgen_inside_charliecloud, || {
    require_slurm_cluster();
    assert!(
        which_ch_run(),
        "ch-run not found: scripts/test.sh installs charliecloud"
    );
    let tmp = tempfile::tempdir().unwrap();
    let images = tempfile::tempdir().unwrap();
    let image = images.path().join("envgen-cpu");
    minimal_rootfs(&image);
    let native = short_run(tmp.path(), &["--where", "native"]);
    assert_ok(&native, "native run");
    let out = charliecloud_run(tmp.path(), &image);
    let doc = json_of(&out);
    let dir = run_dir_of(&doc);
    let script = std::fs::read_to_string(dir.join("job.sbatch")).unwrap();
    assert!(script.contains("srun ch-run -b "), "{script}");
    let manifest = read(&dir, "manifest.json");
    assert_eq!(manifest["image"]["runtime"], "charliecloud");
    assert!(manifest["image"]["digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(
        metric_bits(&doc, "final_val_loss"),
        metric_bits(&json_of(&native), "final_val_loss")
    );
});

/// A short run as a Slurm job inside the charliecloud image directory `image`.
fn charliecloud_run(out: &Path, image: &Path) -> std::process::Output {
    let image = image.to_str().unwrap();
    let flags = [
        "--where",
        "slurm",
        "--container",
        "charliecloud",
        "--image",
        image,
    ];
    let run = short_run(out, &flags);
    assert_ok(&run, "charliecloud run");
    run
}

fn which_ch_run() -> bool {
    std::process::Command::new("ch-run")
        .arg("--version")
        .env("USER", "envgen")
        .output()
        .is_ok_and(|o| o.status.success())
}

// The real `cpu` profile image (built on demand from this binary, exported
// for charliecloud with `envgen image export`) in a Slurm job. Needs the
// private Docker daemon too (scripts/test.sh starts both).
heavy_test!(slurm_job_runs_inside_the_exported_cpu_profile_image, || {
    require_slurm_cluster();
    assert!(
        which_ch_run(),
        "ch-run not found: scripts/services/slurm.sh installs it"
    );
    require_docker_host();
    docker_base::ensure_base_image();
    let binary = Path::new(env!("CARGO_BIN_EXE_envgen"));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let containers = envgen::image::Containers::locate(None).unwrap();
            envgen::image::build::ensure_built(&containers, "cpu", Some(binary))
                .await
                .unwrap();
        });
    let images = tempfile::tempdir().unwrap();
    let image = images.path().join("envgen-cpu");
    let export = envgen()
        .args(["image", "export", "cpu", "--format", "charliecloud", "-o"])
        .arg(&image)
        .output()
        .unwrap();
    assert_ok(&export, "image export cpu --format charliecloud");
    let tmp = tempfile::tempdir().unwrap();
    let out = charliecloud_run(tmp.path(), &image);
    let doc = json_of(&out);
    assert_eq!(doc["summary"]["status"], "completed");
    // The job side probed inside the container: no ch-run there (this
    // host has it: the test asserted so above).
    let manifest = read(&run_dir_of(&doc), "manifest.json");
    let host = &manifest["host"];
    assert!(host["os"].as_str().is_some(), "{host}");
    let runtimes = host["container_runtimes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        runtimes.iter().all(|r| r["name"] != "charliecloud"),
        "{host}"
    );
});

// `--where slurm --ranks 2`: one job, two srun tasks on the one node,
// training data-parallel through the collective; the same science as a
// native one-rank run, the loss within the tolerance of
// tests/it/train/distributed_cli.rs (f32 reassociation of the gradient average).
heavy_test!(
    two_slurm_tasks_train_data_parallel_like_one_native_rank,
    || {
        require_slurm_cluster();
        let tmp = tempfile::tempdir().unwrap();
        let native = short_run(tmp.path(), &["--where", "native"]);
        assert_ok(&native, "native run");
        let native = json_of(&native);
        let slurm = short_run(tmp.path(), &["--where", "slurm", "--ranks", "2"]);
        assert_ok(&slurm, "--where slurm --ranks 2");
        let slurm = json_of(&slurm);
        assert_eq!(slurm["summary"]["status"], "completed");
        for key in ["final_train_loss", "final_val_loss"] {
            let (a, b) = (
                native["summary"]["metrics"][key].as_f64().unwrap(),
                slurm["summary"]["metrics"][key].as_f64().unwrap(),
            );
            assert!(
                (a - b).abs() <= 1e-4,
                "{key}: native {a}, 2 Slurm tasks {b}"
            );
        }
        let dir = run_dir_of(&slurm);
        let manifest = read(&dir, "manifest.json");
        assert_eq!(manifest["world_size"], 2);
        assert_eq!(manifest["distributed"]["ranks_per_node"], 2);
        assert_eq!(manifest["distributed"]["reduction"], "collective");
        assert_eq!(
            manifest["distributed"]["nodes"].as_array().unwrap().len(),
            1
        );
        assert_eq!(manifest["slurm"]["state"], "COMPLETED");
        assert_eq!(
            manifest["config_hash"],
            read(&run_dir_of(&native), "manifest.json")["config_hash"]
        );
        let script = std::fs::read_to_string(dir.join("job.sbatch")).unwrap();
        assert!(script.contains("#SBATCH --ntasks-per-node=2"), "{script}");
        assert!(script.contains("srun --kill-on-bad-exit=1 "), "{script}");
        // Each step logged once: rank 0 alone writes.
        assert_eq!(logged_steps(&dir), (1..=6).collect::<Vec<_>>());
    }
);

/// Issue #21's injection: a newline in a value that becomes an `#SBATCH`
/// line would end the directives and run as a command of the job. Refused
/// (exit 2, naming the flag) before anything is made, whether typed on the
/// command line or replayed by `rerun` from a crafted manifest.
#[test]
fn slurm_directive_values_cannot_inject_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("injected");
    let evil = format!("debug\ntouch {}", marker.display());
    for (flag, value) in [
        ("--partition", evil.as_str()),
        ("--account", "a;id"),
        ("--time", "01:00:00\n#SBATCH --uid=0"),
        ("--mem", "4G $(id)"),
        ("--qos", "normal\n#SBATCH --uid=0"),
        ("--gres", "gpu:1 $(id)"),
        ("--constraint", "a100\nid"),
        ("--job-name", "x\"y"),
        ("--sbatch-arg", "--comment=x\nid"),
        ("--sbatch-arg", "--comment=\"x y\""),
    ] {
        let out = envgen()
            .args(["run", "gpt2", "--where", "slurm", "--dry-run", flag, value])
            .arg("--out")
            .arg(tmp.path().join("runs"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value:?}: {stderr}");
        assert!(stderr.contains(flag), "{stderr}");
    }
    // The same flags replayed from a run directory someone else wrote.
    let run = tmp.path().join("crafted");
    std::fs::create_dir_all(&run).unwrap();
    let manifest = serde_json::json!({
        "run_id": "crafted", "experiment": "gpt2", "preset": "tiny",
        "config_hash": "sha256:0", "started_at": "", "finished_at": null,
        "profile": {"micro_batch": 1, "grad_accum": 1, "precision": "fp32",
                    "backend": "cpu", "device": "flex:cpu"},
        "envgen_version": "0.1.0", "git_revision": null, "image": null,
        "where": "slurm", "where_reason": "--where slurm",
        "launch_args": ["--sbatch-arg=--partition=debug", "--partition", evil],
    });
    std::fs::write(run.join("manifest.json"), manifest.to_string()).unwrap();
    let out = envgen()
        .arg("rerun")
        .arg(&run)
        .arg("--out")
        .arg(tmp.path().join("runs"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--partition"), "{stderr}");
    assert!(!marker.exists() && !tmp.path().join("runs").exists());
}

/// Issue #39: what an sbatch writer wants to read, the job script, is in
/// the dry run (text and `--json`), with the user's own directives after
/// envgen's, `--gres` instead of `--gpus-per-node`, and 8 CPUs per GPU.
#[test]
fn the_dry_run_shows_the_job_script_with_the_users_directives() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "run",
        "gpt2",
        "--where",
        "slurm",
        "--backend",
        "cuda",
        "--dry-run",
        "--qos",
        "high",
        "--gres",
        "gpu:a30:2",
        "--constraint",
        "a100&ib",
        "--job-name",
        "mine",
        "--sbatch-arg",
        "--mail-type=END",
        "--sbatch-arg=--exclusive",
    ];
    let out = envgen()
        .args(args)
        .arg("--json")
        .arg("--out")
        .arg(tmp.path())
        .output()
        .unwrap();
    let plan = json_of(&out);
    let script = plan["sbatch_script"].as_str().unwrap();
    let directives: Vec<&str> = script
        .lines()
        .filter(|l| l.starts_with("#SBATCH"))
        .collect();
    assert_eq!(
        directives,
        [
            "#SBATCH --job-name=mine",
            "#SBATCH --output=slurm.out",
            "#SBATCH --error=slurm.out",
            "#SBATCH --nodes=1",
            "#SBATCH --ntasks-per-node=2",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --qos=high",
            "#SBATCH --constraint=a100&ib",
            "#SBATCH --gres=gpu:a30:2",
            "#SBATCH --mail-type=END",
            "#SBATCH --exclusive",
        ],
        "{script}"
    );
    let run_dir = tmp.path().join("RUN_DIR");
    assert!(
        script.contains(&format!("--resume {}", run_dir.display())),
        "{script}"
    );
    let text = envgen()
        .args(args)
        .arg("--out")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_ok(&text, "dry run");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("job script (RUN_DIR: named when the run is made):"),
        "{stdout}"
    );
    assert!(stdout.contains("#SBATCH --mail-type=END\n"), "{stdout}");
    assert!(crate::common::run_dirs(tmp.path()).is_empty());
}

// Issue #21 under a real sbatch: the run directory's path reaches the job
// script (its `cd`, the command's `--resume`) and is full of shell syntax,
// quotes, a newline and a tab. The job must train in that very directory,
// write its output there, and run nothing else (no marker file appears).
// `%` and `\` are Slurm's own filename patterns: refused before anything
// is made (with them the job failed at start, its output nowhere).
heavy_test!(
    a_hostile_run_directory_path_trains_under_real_sbatch_and_runs_nothing_else,
    || {
        require_slurm_cluster();
        let tmp = tempfile::tempdir().unwrap();
        let m = |n: u32| tmp.path().join(format!("M{n}")).display().to_string();
        let out = tmp.path().join(format!(
            "a b'c\"$(touch {})`touch {}`;touch {}\n#SBATCH --uid=0\ttab",
            m(1),
            m(2),
            m(3)
        ));
        let run = short_run(&out, &["--where", "slurm"]);
        assert_ok(&run, "Slurm run under a hostile --out");
        let run = json_of(&run);
        let dir = run_dir_of(&run);
        assert!(dir.starts_with(&out), "{}", dir.display());
        assert_eq!(run["summary"]["status"], "completed");
        let output = std::fs::read_to_string(dir.join("slurm.out")).unwrap();
        assert!(output.contains("run directory"), "{output}");
        for n in 1..=3 {
            assert!(!Path::new(&m(n)).exists(), "M{n} was created: a word ran");
        }
        for pattern in ["100%", "a\\b"] {
            let refused = short_run(&tmp.path().join(pattern), &["--where", "slurm"]);
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert_eq!(refused.status.code(), Some(2), "{pattern}: {stderr}");
            assert!(stderr.contains("filename pattern"), "{stderr}");
            assert!(!tmp.path().join(pattern).exists());
        }
    }
);

/// A flag or a sweep value refused (exit 2) leaves no run directory
/// behind: a refused `--partition` once left a half-made one, and a bad
/// second sweep value left the first value's directory and an empty one.
#[test]
fn a_refused_slurm_flag_or_sweep_value_leaves_no_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("runs");
    for (flag, value) in [("--partition", "a;b"), ("--sweep", "optim.lr=0.001,-1")] {
        let out = envgen()
            .args(["run", "gpt2", "--where", "slurm", flag, value])
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        let made = crate::common::run_dirs(&out_dir);
        assert!(made.is_empty(), "{flag} {value}: {made:?}");
    }
}

// sbatch refusing the job (a partition the cluster does not have) ends the
// run `failed` with sbatch's reason instead of leaving it "running"; a run
// whose job Slurm no longer knows is `lost`, and `runs cancel` ends it.
heavy_test!(
    a_refused_submission_fails_the_run_and_a_vanished_job_is_lost,
    || {
        require_slurm_cluster();
        let tmp = tempfile::tempdir().unwrap();
        let out = short_run(
            tmp.path(),
            &["--where", "slurm", "--partition", "nosuchpart"],
        );
        assert_eq!(out.status.code(), Some(3), "{}", crate::common::text(&out));
        // sbatch's own words, and the fix for an unknown partition (issue #39).
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("sbatch refused the job") && stderr.contains("nosuchpart"),
            "{stderr}"
        );
        assert!(
            stderr.contains("`sinfo -s` lists the partitions"),
            "{stderr}"
        );
        let dir = only_run_dir(tmp.path());
        let summary = read(&dir, "summary.json");
        assert_eq!(summary["status"], "failed", "{summary}");
        let why = summary["metrics"]["reason"].as_str().unwrap();
        assert!(
            why.contains("not submitted") && why.contains("nosuchpart"),
            "{summary}"
        );
        assert!(read(&dir, "manifest.json")["finished_at"].is_string());

        // A job Slurm forgot (purged after MinJobAge), with no summary.
        std::fs::remove_file(dir.join("summary.json")).unwrap();
        let mut manifest = read(&dir, "manifest.json");
        manifest["slurm"] = serde_json::json!({
            "job_id": "99999999", "job": "99999999", "script": "job.sbatch",
            "output": "slurm.out", "state": "RUNNING", "earlier_jobs": [],
        });
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
        let show = envgen()
            .args(["runs", "show", "--json", dir.to_str().unwrap()])
            .output()
            .unwrap();
        let show = json_of(&show);
        assert_eq!(show["status"], "lost", "{show}");
        assert_eq!(
            show["status_reason"],
            "Slurm job 99999999 is not known to Slurm any more"
        );
        let cancel = envgen()
            .args(["runs", "cancel", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert_ok(&cancel, "runs cancel of a lost run");
        // No checkpoint to resume from: failed, with why.
        let summary = read(&dir, "summary.json");
        assert_eq!(summary["status"], "failed", "{summary}");
        assert!(summary["metrics"]["reason"]
            .as_str()
            .unwrap()
            .contains("not known to Slurm"));
    }
);

/// A login node's memory says nothing about the compute node's: a run too
/// big for this machine is planned for Slurm all the same (the launched
/// envgen checks on its node), while natively it is refused.
#[test]
fn the_memory_check_is_left_to_the_node_that_trains() {
    require_slurm_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let big = ["--set", "model.n_embd=1000000", "--dry-run"];
    let slurm = short_run(tmp.path(), &[&big[..], &["--where", "slurm"]].concat());
    assert_ok(&slurm, "dry run of a big Slurm job");
    let native = short_run(tmp.path(), &[&big[..], &["--where", "native"]].concat());
    assert_eq!(
        native.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&native.stderr)
    );
    assert!(!tmp.path().exists() || std::fs::read_dir(tmp.path()).unwrap().next().is_none());
}
