//! A user command that imports torch (issue #25): doctor's preflight on
//! the machine that runs it, `--nproc-per-node` through torchrun, and
//! `doctor --python`. The torch is the test venv's real one (PyPI's
//! torch==2.15.0 of scripts/test-requirements.txt, CUDA 13.2, asked for its
//! compiled kernels without a GPU); the GPUs are the recorded FAKE
//! `nvidia-smi` hosts of tests/fixtures/nvidia-smi (this machine has none),
//! and for Slurm's GRES a stand-in `sinfo` that prints a V100 partition's
//! GRES line and hands every other call to the real sinfo.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::doctor::{bin_dir, fixtures_dir};
use crate::common::{envgen, heavy_test, read_json, require_slurm_cluster, text};

/// All-reduce of rank+1 over gloo: 3.0 with two processes. Rank 0 logs it;
/// `FAIL_RANK` makes that rank exit 3 after the collective.
const ALL_REDUCE: &str = r#"
import json, os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
if rank == 0:
    with open(os.environ["ENVGEN_METRICS"], "a") as f:
        f.write(json.dumps({"step": 1, "world_size": world, "sum": t.item()}) + "\n")
print(f"rank {rank}/{world} local {os.environ['LOCAL_RANK']} sum {t.item()}", flush=True)
dist.destroy_process_group()
if os.environ.get("FAIL_RANK") == str(rank):
    sys.exit(3)
"#;

fn python() -> PathBuf {
    super::user_command::python()
}

/// The venv's torch: (version, CUDA). The fixtures below assume CUDA 13.
fn venv_torch() -> (String, String) {
    let out = Command::new(python())
        .args([
            "-c",
            "import torch; print(torch.__version__); print(torch.version.cuda)",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = said.lines();
    let version = lines.next().unwrap_or_default().to_string();
    let cuda = lines.next().unwrap_or_default().to_string();
    assert!(
        cuda.starts_with("13."),
        "the pinned torch (scripts/test-requirements.txt) bundles CUDA 13; these fixtures assume it: {said}"
    );
    (version, cuda)
}

/// PATH: the fake nvidia-smi (if `fixture`), the venv, the system.
fn path_with(fake: &Path, extra: Option<&Path>) -> std::ffi::OsString {
    let venv_bin = python().parent().unwrap().to_path_buf();
    let mut dirs: Vec<PathBuf> = extra.map(Path::to_path_buf).into_iter().collect();
    dirs.extend([fake.to_path_buf(), venv_bin]);
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// `envgen run ARGS` in `dir` on the recorded GPU host `fixture`.
fn run_on(fixture: &str, dir: &Path, args: &[&str], extra_path: Option<&Path>) -> Output {
    run_with(fixture, dir, args, extra_path, &[])
}

/// [`run_on`] with more environment variables.
fn run_with(
    fixture: &str,
    dir: &Path,
    args: &[&str],
    extra_path: Option<&Path>,
    envs: &[(&str, &str)],
) -> Output {
    let fake = bin_dir(true);
    envgen()
        .args(args)
        .current_dir(dir)
        .env("PATH", path_with(fake.path(), extra_path))
        .env("ENVGEN_NO_NVML", "1")
        .env("ENVGEN_PROC_DRIVER_VERSION", fake.path().join("none"))
        .env("FAKE_NVIDIA_SMI_DIR", fixtures_dir().join(fixture))
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("OMP_NUM_THREADS", "1")
        .env_remove("ENVGEN_METRICS")
        .env_remove("ENVGEN_PREFLIGHT")
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

/// The one run directory under `out`.
fn only_run(out: &Path) -> PathBuf {
    let runs = crate::common::run_dirs(out);
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// `out` exited with `code` and said `words` (stdout or stderr).
fn expect_exit(out: &Output, code: i32, words: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
    assert!(text(out).contains(words), "{words}: {}", text(out));
}

/// `envgen run --out OUT -- python train.py` on the recorded host `fixture`.
fn train_on(fixture: &str, code: &Path, out: &Path) -> Output {
    let args = [
        "run",
        "--out",
        out.to_str().unwrap(),
        "--",
        "python",
        "train.py",
    ];
    run_on(fixture, code, &args, None)
}

/// `envgen run FLAGS --out OUT -- python all_reduce.py` on the H100 host:
/// it completes with two processes that all-reduced 1 + 2. The run
/// directory.
fn all_reduced(code: &Path, out: &Path, flags: &[&str]) -> PathBuf {
    let mut args = vec!["run", "--out", out.to_str().unwrap()];
    args.extend(flags);
    args.extend(["--", "python", "all_reduce.py"]);
    let ran = run_on("h100-580", code, &args, None);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let dir = only_run(out);
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["metrics"]["world_size"], 2, "{summary}");
    assert_eq!(summary["metrics"]["sum"], 3.0, "{summary}");
    dir
}

fn codes(preflight: &Value) -> Vec<String> {
    preflight["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["reasons"].as_array().unwrap().clone())
        .map(|r| r["code"].as_str().unwrap().to_string())
        .collect()
}

fn script_dir(tmp: &Path) -> PathBuf {
    let dir = tmp.join("code");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("train.py"), super::user_command::TRAIN).unwrap();
    std::fs::write(dir.join("all_reduce.py"), ALL_REDUCE).unwrap();
    dir
}

heavy_test!(
    preflight_refuses_a_torch_the_driver_cannot_run_before_the_command_starts,
    || {
        let (version, cuda) = venv_torch();
        let tmp = tempfile::tempdir().unwrap();
        let code = script_dir(tmp.path());
        let out = tmp.path().join("refused");
        // An A30 on driver 535 (CUDA 12.2) cannot load a CUDA 13 runtime.
        let refused = train_on("a30-535", &code, &out);
        assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
        let said = text(&refused);
        assert!(
            said.contains(&format!("doctor says torch {version}")),
            "{said}"
        );
        assert!(
            said.contains("driver-too-old") && said.contains("NVIDIA A30"),
            "{said}"
        );
        assert!(said.contains("envgen doctor --python"), "{said}");
        let dir = only_run(&out);
        assert!(
            !dir.join("stdout.log").exists(),
            "the command must not have started"
        );
        let summary = read_json(&dir.join("summary.json"));
        assert_eq!(summary["status"], "failed");
        let preflight = read_json(&dir.join("preflight.json"));
        assert_eq!(preflight["python"], python().display().to_string());
        assert_eq!(preflight["torch"]["cuda"], cuda.as_str());
        assert!(
            preflight["torch"]["sass"].as_array().unwrap().len() > 1,
            "{preflight}"
        );
        assert_eq!(preflight["driver"], "535.261.03");
        assert!(
            codes(&preflight).contains(&"driver-too-old".to_string()),
            "{preflight}"
        );

        // Issue #39: a knob given with `env VAR=…` does not hide the Python
        // from the check: refused the same way, before the command starts.
        let out = tmp.path().join("through-env");
        let args = [
            "run",
            "--out",
            out.to_str().unwrap(),
            "--",
            "env",
            "MICRO_BATCH_SIZE=16",
            "python",
            "train.py",
        ];
        let refused = run_on("a30-535", &code, &args, None);
        expect_exit(&refused, 3, "driver-too-old");
        let dir = only_run(&out);
        assert!(!dir.join("stdout.log").exists());
        let preflight = read_json(&dir.join("preflight.json"));
        assert_eq!(preflight["python"], python().display().to_string());

        // An H100 on driver 580 (CUDA 13.0) runs it.
        let out = tmp.path().join("ran");
        let ran = train_on("h100-580", &code, &out);
        assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
        let dir = only_run(&out);
        assert_eq!(read_json(&dir.join("summary.json"))["status"], "completed");
        let preflight = read_json(&dir.join("preflight.json"));
        assert_eq!(
            preflight["gpus"],
            serde_json::json!(["NVIDIA H100 80GB HBM3"])
        );
        assert!(
            !codes(&preflight).contains(&"driver-too-old".to_string()),
            "{preflight}"
        );
        assert!(
            text(&ran).contains("envgen: preflight: torch"),
            "{}",
            text(&ran)
        );

        // ENVGEN_PREFLIGHT=off: the user's word against envgen's tables.
        let out = tmp.path().join("skipped");
        let args = [
            "run",
            "--out",
            out.to_str().unwrap(),
            "--",
            "python",
            "train.py",
        ];
        let skipped = run_with(
            "a30-535",
            &code,
            &args,
            None,
            &[("ENVGEN_PREFLIGHT", "off")],
        );
        expect_exit(&skipped, 0, "preflight: skipped");
    }
);

heavy_test!(doctor_checks_the_torch_a_python_imports, || {
    let (version, _) = venv_torch();
    let python = python();
    let asked = envgen()
        .args([
            "doctor",
            "--json",
            "--assume-gpu",
            "A30",
            "--assume-driver",
            "535.261.03",
            "--python",
        ])
        .arg(&python)
        .output()
        .unwrap();
    assert_eq!(asked.status.code(), Some(1), "{}", text(&asked));
    let doc: Value = serde_json::from_slice(&asked.stdout).unwrap();
    let verdict = &doc["verdicts"][0];
    let release = version.split('+').next().unwrap();
    assert!(
        verdict["image"]
            .as_str()
            .unwrap()
            .starts_with(&format!("pytorch:{release}+cu13")),
        "{verdict}"
    );
    assert_eq!(verdict["status"], "fail", "{verdict}");
    // Kernels come from the build itself: a V100 (sm_70) has none in it.
    let v100 = envgen()
        .args([
            "doctor",
            "--assume-gpu",
            "V100",
            "--assume-driver",
            "580.65.06",
            "--python",
        ])
        .arg(&python)
        .output()
        .unwrap();
    expect_exit(&v100, 1, "sm_70");
    // Not a Python: a usage error.
    let sh = envgen()
        .args(["doctor", "--python", "/bin/sh"])
        .output()
        .unwrap();
    expect_exit(&sh, 2, "not a Python interpreter");
});

heavy_test!(nproc_per_node_runs_the_command_as_torchrun_ranks, |tmp| {
    let code = script_dir(tmp.path());
    let out = tmp.path().join("runs");
    let dir = all_reduced(&code, &out, &["--nproc-per-node", "2"]);
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["status"], "completed", "{summary}");
    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    for rank in ["rank 0/2 local 0 sum 3.0", "rank 1/2 local 1 sum 3.0"] {
        assert!(log.contains(rank), "{log}");
    }
    // Each rank's output is also kept on its own (torchrun --log-dir).
    let per_rank: Vec<PathBuf> = walkdir::WalkDir::new(dir.join("torchrun"))
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| p.file_name().is_some_and(|n| n == "stdout.log"))
        .collect();
    assert_eq!(per_rank.len(), 2, "{per_rank:?}");
    let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(config.contains("nproc_per_node = 2"), "{config}");

    // Two torchrun node ranks (what `--nodes 2` gives under Slurm), each
    // with one process, meet by torchrun's static rendezvous.
    let out = tmp.path().join("nodes");
    let dir = all_reduced(&code, &out, &["--ranks", "2", "--nproc-per-node", "1"]);
    let manifest = read_json(&dir.join("manifest.json"));
    assert_eq!(
        manifest["distributed"]["reduction"], "torchrun",
        "{manifest}"
    );
    // Node rank 1 keeps its own output and preflight beside rank 0's.
    let node1 = std::fs::read_to_string(dir.join("stdout.node-1.log")).unwrap();
    assert!(node1.contains("rank 1/2 local 0 sum 3.0"), "{node1}");
    assert!(dir.join("preflight.node-1.json").is_file());

    // A rank that fails fails the run.
    let out = tmp.path().join("failing");
    let args = [
        "run",
        "--out",
        out.to_str().unwrap(),
        "--nproc-per-node",
        "2",
        "--",
        "python",
        "all_reduce.py",
    ];
    let failed = run_with("h100-580", &code, &args, None, &[("FAIL_RANK", "1")]);
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    let summary = read_json(&only_run(&out).join("summary.json"));
    assert_eq!(summary["status"], "failed", "{summary}");
    assert_ne!(summary["metrics"]["exit_code"], 0, "{summary}");

    // Flags that cannot work exit 2 and make nothing.
    let nothing = tmp.path().join("nothing");
    for bad in [
        vec!["--nproc-per-node", "2", "--", "torchrun", "all_reduce.py"],
        vec!["--nproc-per-node", "0", "--", "python", "all_reduce.py"],
        vec!["gpt2", "--nproc-per-node", "2"],
        vec!["--ranks", "2", "--", "python", "all_reduce.py"],
    ] {
        let out = envgen()
            .args(["run", "--out", nothing.to_str().unwrap()])
            .args(&bad)
            .current_dir(&code)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out));
        assert!(!nothing.exists(), "{bad:?} made {}", nothing.display());
    }
});

// The Slurm side: the partition's GRES refuses before submitting, the
// job's own preflight refuses on the node, torchrun ranks run in the job.
heavy_test!(
    on_slurm_the_gres_and_the_node_are_checked_and_ranks_run_in_the_job,
    || {
        require_slurm_cluster();
        let tmp = tempfile::tempdir().unwrap();
        let code = script_dir(tmp.path());
        // Stand-in sinfo: a partition of V100s (sm_70, which this torch lacks).
        let sinfo_dir = tmp.path().join("sinfo");
        std::fs::create_dir_all(&sinfo_dir).unwrap();
        let real = which::which("sinfo").expect("sinfo of the test cluster");
        let stand_in = sinfo_dir.join("sinfo");
        std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\n# STAND-IN for a GPU partition's GRES (no GPUs here)\ncase \"$*\" in *%G*) echo 'gpu:tesla_v100:4(S:0-1)'; exit 0;; esac\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = tmp.path().join("gres");
        let args = [
            "run",
            "--where",
            "slurm",
            "--out",
            out.to_str().unwrap(),
            "--",
            "python",
            "train.py",
        ];
        let refused = run_on("h100-580", &code, &args, Some(&sinfo_dir));
        expect_exit(&refused, 3, "(GRES tesla_v100)");
        assert!(text(&refused).contains("sm_70"), "{}", text(&refused));
        assert!(!out.exists(), "a refused submission left {}", out.display());

        // The node (the job's environment: an A30 on 535) refuses it itself.
        let out = tmp.path().join("node");
        let args = [
            "run",
            "--where",
            "slurm",
            "--json",
            "--out",
            out.to_str().unwrap(),
            "--",
            "python",
            "train.py",
        ];
        let failed = run_on("a30-535", &code, &args, None);
        assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
        let dir = only_run(&out);
        let manifest = read_json(&dir.join("manifest.json"));
        assert_eq!(manifest["slurm"]["state"], "FAILED", "{manifest}");
        let preflight = read_json(&dir.join("preflight.json"));
        assert!(
            codes(&preflight).contains(&"driver-too-old".to_string()),
            "{preflight}"
        );
        assert!(
            !dir.join("stdout.log").exists(),
            "the command started on the node"
        );

        // Two torchrun ranks inside one job.
        let out = tmp.path().join("ranks");
        let dir = all_reduced(&code, &out, &["--where", "slurm", "--nproc-per-node", "2"]);
        let manifest = read_json(&dir.join("manifest.json"));
        assert_eq!(manifest["slurm"]["state"], "COMPLETED", "{manifest}");

        // Two srun tasks (torchrun node ranks, as on two nodes) of one process
        // each, meeting at the rendezvous the job derives from Slurm's nodelist.
        let out = tmp.path().join("node-ranks");
        let dir = all_reduced(
            &code,
            &out,
            &["--where", "slurm", "--ranks", "2", "--nproc-per-node", "1"],
        );
        let job = std::fs::read_to_string(dir.join("job.sbatch")).unwrap();
        assert!(
            job.contains("ENVGEN_RENDEZVOUS=\"$(scontrol show hostnames"),
            "{job}"
        );
        assert!(job.contains("--ntasks-per-node=2"), "{job}");
        assert!(dir.join("stdout.node-1.log").is_file());
    }
);

// `--tensorboard-dir`: what the command logged with PyTorch's own
// `SummaryWriter` (simple values, new-style tensors, `add_scalars`
// subfolders) and TensorFlow 2's layout (tensor_content of each dtype, as
// written by tensorboard's own event writer) becomes the run's metrics
// (summary, steps): the numbers and wall times TensorBoard shows of the
// same files, keyed `SUBFOLDER/TAG`; what is no number is named (issue #42).
heavy_test!(a_commands_tensorboard_scalars_become_its_metrics, |tmp| {
    let code = script_dir(tmp.path());
    std::fs::write(code.join("tb.py"), include_str!("tensorboard_writers.py")).unwrap();
    let out = tmp.path().join("runs");
    let args = [
        "run",
        "--out",
        out.to_str().unwrap(),
        "--tensorboard-dir",
        "logs/tb",
        "--",
        "python",
        "tb.py",
    ];
    let ran = run_on("h100-580", &code, &args, None);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let dir = only_run(&out);
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(summary["steps_done"], 5, "{summary}");
    assert_eq!(summary["metrics"]["loss"], 0.2, "{summary}");
    let lr = summary["metrics"]["train/lr"].as_f64().unwrap();
    assert!((lr - 0.5).abs() < 1e-6, "{summary}");
    assert!(summary["metrics"].get("time").is_none(), "{summary}");
    let rows = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 5, "{rows}");
    let shown = read_json(&code.join("tb-shown.json"));
    assert_imported_as_shown(&rows, &shown);
    let said = text(&ran);
    for (key, why) in [
        (
            "keras/vector",
            "a DT_FLOAT tensor of 3 elements, not one number",
        ),
        ("weights", "a histogram, not a scalar"),
        (
            "note/text_summary",
            "data of TensorBoard's text plugin, not a scalar",
        ),
    ] {
        assert!(
            said.contains(&format!("{key} (")) && said.contains(why),
            "{key}: {said}"
        );
    }
    assert_eq!(shown["not_one_number"], serde_json::json!(["keras/vector"]));
    // A bundled experiment has its own tb/: the flag is refused there.
    let refused = envgen()
        .args(["run", "gpt2", "--tensorboard-dir", "x", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
});

/// envgen's imported rows hold what TensorBoard shows (`shown`: key →
/// [[step, value, wall_time, dtype]]): every key, every step, the value
/// (float32s as float32s, every other dtype exactly), and as each row's
/// `time` the latest wall time of its step.
fn assert_imported_as_shown(rows: &str, shown: &Value) {
    let shown = shown["shown"].as_object().unwrap();
    let mut got: std::collections::BTreeMap<String, Vec<(u64, f64)>> = Default::default();
    let mut times = std::collections::BTreeMap::new();
    for row in rows.lines() {
        let row: Value = serde_json::from_str(row).unwrap();
        let step = row["step"].as_u64().unwrap();
        times.insert(
            step,
            row["time"].as_f64().expect("an imported row has its time"),
        );
        for (key, value) in row.as_object().unwrap() {
            if key != "step" && key != "time" {
                got.entry(key.clone())
                    .or_default()
                    .push((step, value.as_f64().unwrap()));
            }
        }
    }
    let keys: Vec<&String> = got.keys().collect();
    assert_eq!(keys, shown.keys().collect::<Vec<_>>(), "keys");
    let mut latest = std::collections::BTreeMap::<u64, f64>::new();
    for (key, points) in shown {
        let points = points.as_array().unwrap();
        assert_eq!(got[key].len(), points.len(), "{key}");
        for ((step, value), point) in got[key].iter().zip(points) {
            let (want, dtype) = (point[1].as_f64().unwrap(), point[3].as_str().unwrap());
            assert_eq!(*step, point[0].as_u64().unwrap(), "{key}");
            let same = match dtype {
                "DT_FLOAT" => *value as f32 == want as f32,
                _ => *value == want,
            };
            assert!(
                same,
                "{key} at {step}: envgen {value}, TensorBoard {want} ({dtype})"
            );
            let t = latest.entry(*step).or_insert(0.0);
            *t = t.max(point[2].as_f64().unwrap());
        }
    }
    assert_eq!(
        times, latest,
        "each row's time is its step's latest wall time"
    );
}
