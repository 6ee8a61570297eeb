//! Quantization through the real `envgen` binary on a tiny GPT-2 trained
//! inside the test: the quality goals of issue #4, structured pruning with
//! recovery, the packed files loading back to the reported numbers, damaged
//! files, and bad sources. (HRM and RFT sources: `hrm_cli`, `rft_cli`.)

use envgen_experiments::quant::run::{evaluate_packed, open_source};

use crate::common::experiment::*;
use crate::common::{expect_success, heavy_test, json_of, run, run_dir_of, run_ok};

heavy_test!(
    tiny_gpt2_meets_the_quality_goals_and_files_load_back,
    |tmp| {
        // The gpt2 tiny preset, shortened: val loss is already well below its
        // initial value after 200 steps.
        let gpt2 = json_of(&run_ok(&[
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--json",
            "--out",
            tmp.path().to_str().unwrap(),
            "--set",
            "train.steps=200",
        ]));
        let source = run_dir_of(&gpt2);
        // Every scheme of the preset, plus half the heads and MLP neurons
        // pruned, 50 recovery steps, INT4 g32.
        let doc = json_of(&expect_success(quantize(
            tmp.path(),
            &source,
            &["prune={mlp_fraction=0.5, head_fraction=0.5}"],
        )));
        assert_eq!(doc["summary"]["status"], "completed");
        let rows = doc["summary"]["metrics"]["schemes"]
            .as_array()
            .unwrap()
            .clone();
        for r in &rows {
            eprintln!("{r}");
        }
        let base = scheme_row(&doc, "f32");
        assert_eq!(base["metric"], "val_perplexity");
        let f32_ppl = base["metric_value"].as_f64().unwrap();
        let val_loss = gpt2["summary"]["metrics"]["final_val_loss"]
            .as_f64()
            .unwrap();
        assert!(
            (f32_ppl.ln() - val_loss).abs() < 1e-4,
            "baseline {f32_ppl} is not exp(val loss {val_loss})"
        );
        for r in &rows {
            // Burn's built-in schemes included: a scheme that errors is a
            // broken scheme (issue #26: accepting their errors let them break).
            assert!(r.get("error").is_none(), "{r}");
            for field in [
                "bits_per_weight",
                "bytes",
                "compression",
                "metric_value",
                "metric_delta_pct",
                "tokens_per_s",
            ] {
                assert!(r[field].is_number(), "{field} in {r}");
            }
        }
        let delta = |s: &str| scheme_row(&doc, s)["metric_delta_pct"].as_f64().unwrap();
        assert!(delta("int8") <= 0.5, "INT8 perplexity +{}%", delta("int8"));
        assert!(
            delta("int4-sym-g32") <= 5.0,
            "INT4 g32 perplexity +{}%",
            delta("int4-sym-g32")
        );
        assert!(
            delta("burn-q8-block32").abs() <= 1.0,
            "Burn Q8 {}%",
            delta("burn-q8-block32")
        );
        assert!(
            delta("burn-q4-block32").abs() <= 10.0,
            "Burn Q4 {}%",
            delta("burn-q4-block32")
        );
        for scheme in [
            "int4-sym-g32",
            "int4-sym-g64",
            "int4-sym-g128",
            "int4-asym-g32",
            "int4-asym-g64",
            "int4-asym-g128",
        ] {
            let r = scheme_row(&doc, scheme);
            let compression = r["compression"].as_f64().unwrap();
            assert!(compression >= 3.5, "{scheme}: {compression}x");
            // bytes is the file on disk.
            let file = run_dir_of(&doc).join(r["file"].as_str().unwrap());
            assert_eq!(
                std::fs::metadata(&file).unwrap().len(),
                r["bytes"].as_u64().unwrap()
            );
        }

        // Pruned, the model loses perplexity; recovery wins part of it back.
        let (pruned, recovered) = assert_pruned_rows(&doc, true);
        eprintln!("pruned ppl {pruned:.4}, after recovery {recovered:.4}");

        // Interrupted inside the recovery fine-tune and resumed: the same
        // pruned rows, bit for bit (the recovery continues from its checkpoint).
        let out = quantize_with(
            tmp.path(),
            &source,
            &[
                "schemes=[\"int8\"]",
                "prune={mlp_fraction=0.5, head_fraction=0.5}",
            ],
            &["--stop-after", "20"],
        );
        assert_eq!(
            out.status.code(),
            Some(130),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stopped = json_of(&out);
        assert_eq!(stopped["summary"]["status"], "interrupted");
        let stopped_dir = run_dir_of(&stopped);
        assert!(stopped_dir.join("pruned/pruned.json").is_file());
        assert!(!stopped_dir.join("pruned/pruned+recovery.json").exists());
        let resumed = resume("quantize", &stopped_dir);
        assert_eq!(resumed["summary"]["status"], "completed");
        for scheme in [
            "int8",
            "pruned",
            "pruned+recovery",
            "pruned+recovery+int4-sym-g32",
            "unpruned+recovery",
        ] {
            let value =
                |d: &serde_json::Value| scheme_row(d, scheme)["metric_value"].as_f64().unwrap();
            assert_eq!(value(&doc).to_bits(), value(&resumed).to_bits(), "{scheme}");
        }

        // Pruning that would leave no head is refused before a run directory
        // is made.
        let runs = || std::fs::read_dir(tmp.path()).unwrap().count();
        let before = runs();
        let out = quantize(tmp.path(), &source, &["prune={head_fraction=0.9}"]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("leaves no unit"), "{stderr}");
        assert_eq!(runs(), before, "a run directory was made");

        // Every packed file (the pruned one too), loaded back on its own,
        // evaluates to the number in the table (bit for bit: same weights, same
        // evaluation).
        let opened = open_source(&source, 16).unwrap();
        for r in rows.iter().filter(|r| r.get("file").is_some()) {
            let file = run_dir_of(&doc).join(r["file"].as_str().unwrap());
            let quality = evaluate_packed(&*opened, &file).unwrap();
            assert_reported(
                quality.value,
                r["metric_value"].as_f64().unwrap(),
                r["scheme"].as_str().unwrap(),
            );
        }

        // A truncated and a corrupted file are clear usage errors.
        let file = run_dir_of(&doc).join(scheme_row(&doc, "int8")["file"].as_str().unwrap());
        let bytes = std::fs::read(&file).unwrap();
        let damaged = tmp.path().join("damaged.envq");
        std::fs::write(&damaged, &bytes[..bytes.len() / 2]).unwrap();
        let err = format!("{:#}", evaluate_packed(&*opened, &damaged).unwrap_err());
        assert!(
            err.contains("damaged.envq") && err.contains("truncated"),
            "{err}"
        );
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        std::fs::write(&damaged, &flipped).unwrap();
        let err = format!("{:#}", evaluate_packed(&*opened, &damaged).unwrap_err());
        assert!(err.contains("checksum"), "{err}");

        // Quantizing the quantize run itself: wrong kind, exit 2.
        let out = quantize(tmp.path(), &run_dir_of(&doc), &[]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is a `quantize` run"), "{stderr}");
    }
);

heavy_test!(missing_or_unset_sources_exit_2_with_the_fix, |tmp| {
    let out = quantize(tmp.path(), &tmp.path().join("no-such-run"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-run") && stderr.contains("no such directory"),
        "{stderr}"
    );
    let out = run(&[
        "run",
        "quantize",
        "--json",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--set source=RUN_DIR"), "{stderr}");
});
