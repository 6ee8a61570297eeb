//! bench/hf_generate_bench.py, the generation benchmark of docs/benchmarks.md
//! ("Generation: envgen sample against transformers.generate"), on its tiny
//! shape: both sides generate the asked number of tokens for every row, do
//! the same work (the same greedy tokens), and the summary carries the ratio.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{heavy_test, text};

heavy_test!(
    the_generation_benchmark_compares_the_same_greedy_work_on_both_sides,
    || {
        let python = crate::common::reference::python();
        let tmp = tempfile::tempdir().unwrap();
        let out = Command::new(python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/hf_generate_bench.py"))
            .args(["--envgen", env!("CARGO_BIN_EXE_envgen"), "--shape", "tiny"])
            .arg("--dir")
            .arg(tmp.path().join("ckpt"))
            .args(["--batch", "1,3", "--new-tokens", "8", "--repeats", "1"])
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // Two sides × two batch sizes, then the summary.
        assert_eq!(lines.len(), 5, "{lines:?}");
        for line in &lines[..4] {
            let batch = line["batch"].as_u64().unwrap();
            assert_eq!(
                line["generated_tokens"].as_u64().unwrap(),
                8 * batch,
                "{line}"
            );
            assert!(line["tokens_per_s"].as_f64().unwrap() > 0.0, "{line}");
        }
        let summary = &lines[4];
        for batch in ["1", "3"] {
            let b = &summary["batches"][batch];
            assert_eq!(b["greedy_tokens_agreeing"], 8, "{summary}");
            assert!(
                b["envgen_over_transformers"].as_f64().unwrap() > 0.0,
                "{summary}"
            );
        }
    }
);
