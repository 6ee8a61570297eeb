//! bench/gpu-check.sh without a GPU: its CHECK_ONLY mode dry-runs every
//! envgen command it would run, its recorder computes the medians and
//! ratios the GPU table reports, and the two breakdown tools (CubeCL's
//! profile summed per kernel, the PyTorch twin's `--profile`) read and
//! write what the real ones do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{envgen, heavy_test, text};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> String {
    std::env::var("ENVGEN_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

heavy_test!(
    gpu_check_script_check_only_mode_validates_its_commands,
    |tmp| {
        let out = Command::new("bash")
            .arg(repo().join("bench/gpu-check.sh"))
            .current_dir(repo())
            .env("CHECK_ONLY", "1")
            .env("ENVGEN", env!("CARGO_BIN_EXE_envgen"))
            // The syntax check of the script's Python needs a python (no torch).
            .env("PY", python())
            .env("OUT", tmp.path().join("out"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Every envgen step the script would run was dry-run, and passed.
        for step in [
            "envgen_doctor",
            "envgen_cuda_tiny",
            "envgen_gpt2_124m_cold",
            "envgen_gpt2_124m",
            "envgen_gpt2_124m_kernels",
            "envgen_hrm_sudoku_extreme_1k",
            "envgen_probe_gpt2_124m",
        ] {
            assert!(
                stdout.contains(&format!("ok {step}")),
                "{step} not checked:\n{stdout}"
            );
        }
        assert!(!stdout.contains("FAILED"), "{stdout}");
    }
);

heavy_test!(
    gpu_check_records_a_runs_median_throughput_and_the_ratio_to_pytorch,
    || {
        let python = python();
        let tmp = tempfile::tempdir().unwrap();
        // A real (CPU) run, logged as the script logs its steps.
        let run = envgen()
            .args(["run", "gpt2", "--backend", "cpu", "--json"])
            .args(["--set", "train.steps=5", "--set", "train.eval_every=100"])
            .arg("--out")
            .arg(tmp.path().join("runs"))
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", text(&run));
        let (out, err) = (tmp.path().join("run.out"), tmp.path().join("run.err"));
        std::fs::write(&out, &run.stdout).unwrap();
        std::fs::write(&err, &run.stderr).unwrap();
        let record = repo().join("bench/gpu_check/record.py");
        let line = Command::new(&python)
            .arg(&record)
            .args(["envgen", "envgen_gpt2_124m", "0", "1500"])
            .args([&out, &err])
            .arg(r#"{"skip_first": 2}"#)
            .output()
            .unwrap();
        assert!(line.status.success(), "{python}: {}", text(&line));
        let rec: serde_json::Value = serde_json::from_slice(&line.stdout).unwrap();

        // The median of steps 3..5 from the run's own metrics.jsonl.
        let run_dir = PathBuf::from(rec["run_dir"].as_str().unwrap());
        let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
        let mut timed: Vec<f64> = metrics
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["step"].as_u64().unwrap_or(0) >= 3)
            .filter_map(|r| r["tokens_per_s"].as_f64())
            .collect();
        timed.sort_by(f64::total_cmp);
        assert_eq!(timed.len(), 3, "{metrics}");
        assert_eq!(rec["steps_done"], 5);
        assert_eq!(rec["timed_steps"], 3);
        assert_eq!(rec["median_tokens_per_s"].as_f64().unwrap(), timed[1]);
        assert_eq!(rec["wall_s"], 1.5);

        // The last line: envgen over the PyTorch twin.
        let results = tmp.path().join("results.jsonl");
        let torch = serde_json::json!({"name": "torch_gpt2_124m_eager", "kind": "torch", "result": {"tokens_per_s": timed[1] / 2.0}});
        std::fs::write(&results, format!("{rec}\n{torch}\n")).unwrap();
        let compare = Command::new(&python)
            .arg(&record)
            .arg("compare")
            .arg(&results)
            .output()
            .unwrap();
        assert!(compare.status.success(), "{}", text(&compare));
        let summary: serde_json::Value = serde_json::from_slice(&compare.stdout).unwrap();
        assert_eq!(summary["gpt2_envgen_over_eager"].as_f64().unwrap(), 2.0);
        assert!(summary["hrm_envgen_over_eager"].is_null());
    }
);

heavy_test!(
    cubecl_kernel_summary_sums_each_kernels_launches_from_cubecls_log_lines,
    |tmp| {
        // cubecl-runtime 0.10 writes one line per profiled launch as
        // `format!("| {duration:<10?} | {name}")` (src/logging/server.rs), the
        // duration in Rust's Debug form (ns, µs, ms, s), between other log lines.
        let launches = [
            (
                Duration::from_micros(1500),
                "MatmulEntry | TensorMapArgs | CudaRuntime",
            ),
            (
                Duration::from_nanos(750),
                "KernelBinop | AddOp | CudaRuntime",
            ),
            (
                Duration::from_micros(2500),
                "MatmulEntry | TensorMapArgs | CudaRuntime",
            ),
            (
                Duration::from_micros(20),
                "KernelBinop | AddOp | CudaRuntime",
            ),
            (
                Duration::from_millis(1200),
                "ReduceKernel | TensorArgs | CudaRuntime",
            ),
        ];
        let mut log = String::from("validate checksum key=MatmulAutotuneKey - m: 64\n");
        for (d, name) in launches {
            log.push_str(&format!("| {d:<10?} | {name}\n"));
        }
        log.push_str("| not a duration | ignored\n");
        let path = tmp.path().join("cubecl.log");
        std::fs::write(&path, &log).unwrap();
        let out = Command::new(python())
            .arg(repo().join("bench/gpu_check/cubecl_kernels.py"))
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines[0], "5 profiled launches, 1.204 s of kernel time in all",
            "{stdout}"
        );
        // Largest first; per kernel the sum of its launches and their count.
        assert!(
            lines[1].contains("1200.0 ms") && lines[1].contains("1x  ReduceKernel"),
            "{stdout}"
        );
        assert!(
            lines[2].contains("4.0 ms") && lines[2].contains("2x  MatmulEntry"),
            "{stdout}"
        );
        assert!(
            lines[3].contains("0.0 ms") && lines[3].contains("2x  KernelBinop | AddOp"),
            "{stdout}"
        );
        assert_eq!(lines.len(), 4, "{stdout}");
    }
);

heavy_test!(
    the_pytorch_twin_profiles_one_extra_step_outside_its_median,
    |tmp| {
        let table = tmp.path().join("profile.txt");
        let out = Command::new(python())
            .arg(repo().join("bench/pytorch_gpt2_bench.py"))
            .args(["--preset", "tiny", "--steps", "2", "--warmup", "1"])
            .arg("--profile")
            .arg(&table)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(line["steps"], 2, "{line}");
        assert!(line["median_step_ms"].as_f64().unwrap() > 0.0, "{line}");
        // torch.profiler's table of the extra step: the products ran in it.
        let table = std::fs::read_to_string(&table).unwrap();
        assert!(table.contains("Self CPU"), "{table}");
        assert!(
            table.contains("aten::mm") || table.contains("aten::addmm"),
            "{table}"
        );
    }
);
