//! RFT through the real `envgen` binary: the tiny preset's accuracy gain,
//! stage resume after an interruption, LoRA fine-tuning, and quantizing the
//! resulting run. Real Burn training and sampling on CPU.

use std::path::Path;

use serde_json::Value;

use crate::common::experiment::*;
use crate::common::{expect_success, heavy_test, json_of, read_json, run, run_dir_of};

/// `envgen run rft` with `--set` overrides into `out`; asserts it completed.
fn run_rft_to_completion(out: &Path, sets: &[&str]) -> Value {
    let doc = json_of(&expect_success(run(&rft_args(out, sets, &[]))));
    assert_eq!(doc["summary"]["status"], "completed");
    doc
}

/// `envgen run quantize` on an RFT run (f32 baseline + int8), into `out`.
fn quantize_int8(out: &Path, run_dir: &Path) -> Value {
    json_of(&expect_success(quantize(
        out,
        run_dir,
        &["schemes=[\"int8\"]"],
    )))
}

heavy_test!(tiny_preset_raises_held_out_accuracy, |tmp| {
    let doc = run_rft_to_completion(tmp.path(), &[]);
    let m = &doc["summary"]["metrics"];
    let num = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"));
    let (before, after) = (num("accuracy_before"), num("accuracy_after"));
    eprintln!(
        "rft tiny: accuracy {before:.3} -> {after:.3}, answer rate {:.3} -> {:.3}, kept {} of {}, {:.0} samples/s, {:.0} s",
        num("answer_rate_before"),
        num("answer_rate_after"),
        num("kept"),
        num("generated"),
        num("datagen_samples_per_s"),
        doc["summary"]["wall_s"].as_f64().unwrap()
    );
    // Issue #4: the tiny preset raises held-out accuracy by at least 10
    // points. Deterministic on one CPU; across CPUs and pretraining seeds it
    // measured +12.4 to +14.8 on 1000 held-out questions (docs/experiments/rft.md).
    assert!(
        after >= before + 0.10,
        "accuracy {before} -> {after}: less than +10 points"
    );
    assert!(num("answer_rate_after") > 0.5);
    assert!(
        num("worked_questions") < num("train_questions"),
        "the tiny preset samples questions it never saw worked"
    );
    // Every training question was sampled `oversample` (16) times; only
    // verified completions were kept.
    assert_eq!(num("generated"), num("train_questions") * 16.0);
    assert!(num("kept") > 0.0 && num("kept") <= num("correct"));
    assert!(num("datagen_samples_per_s") > 0.0);
    for key in ["answer_rate_before", "answer_rate_after"] {
        assert!((0.0..=1.0).contains(&num(key)), "{key}");
    }

    let dir = run_dir_of(&doc);
    for file in [
        "config.toml",
        "manifest.json",
        "summary.json",
        "metrics.jsonl",
        "model.safetensors",
        "stages/pretrain/summary.json",
        "stages/round-1/datagen.json",
        "stages/round-1/finetune/summary.json",
        "stages/eval-before.json",
        "stages/round-1/eval.json",
    ] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    // The kept set holds verified answers only (re-checked from the record).
    let datagen = read_json(&dir.join("stages/round-1/datagen.json"));
    let examples = datagen["examples"].as_array().unwrap();
    assert_eq!(examples.len() as f64, num("kept"));
    let rounds = m["rounds"].as_array().expect("metrics.rounds");
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0]["accuracy"].as_f64(), Some(after));
    for e in examples.iter().take(50) {
        let completion = e["completion"].as_str().unwrap();
        let answer = e["answer"].as_f64().unwrap();
        let got = envgen_experiments::rft::parse_answer(completion).expect("an answer tag");
        assert!(
            envgen_experiments::rft::is_correct(got, answer),
            "{completion} vs {answer}"
        );
    }
    assert!(read_json(&dir.join("manifest.json"))["finished_at"].is_string());

    // Quantizing the RFT run reports its own metric, accuracy. Pruning half
    // the heads and MLP neurons costs accuracy; 50 recovery steps on the
    // worked answers win part of it back.
    let q = json_of(&expect_success(quantize(
        tmp.path(),
        &dir,
        &[
            "schemes=[\"int8\"]",
            "prune={mlp_fraction=0.5, head_fraction=0.5}",
        ],
    )));
    let rows = q["summary"]["metrics"]["schemes"].as_array().unwrap();
    for r in rows {
        eprintln!("{r}");
    }
    assert_eq!(rows[0]["scheme"], "f32");
    assert_eq!(rows[0]["metric"], "accuracy");
    assert!((rows[0]["metric_value"].as_f64().unwrap() - after).abs() < 1e-9);
    assert!(scheme_row(&q, "int8")["samples_per_s"].as_f64().unwrap() > 0.0);
    assert_pruned_rows(&q, false);
});

/// Short enough for CI yet trained enough to answer sometimes: 48 worked
/// questions, 200 pretraining steps, two rounds of 10 fine-tuning steps.
const SHORT: &[&str] = &[
    "task.train_questions=48",
    "task.worked_questions=48",
    "task.validation_questions=16",
    "pretrain.train.steps=200",
    "pretrain.train.checkpoint_every=100",
    "datagen.oversample=8",
    "finetune.train.steps=10",
    "finetune.train.checkpoint_every=5",
    "finetune.train.eval_every=5",
    "rounds=2",
];

/// `envgen run rft --backend cpu --json --out OUT --set S… EXTRA…`.
fn rft_args<'a>(out: &'a Path, sets: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "rft", "--backend", "cpu", "--json", "--out"];
    args.push(out.to_str().unwrap());
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(extra);
    args
}

// Stopped in the middle of round 2's fine-tuning, resumed: every finished
// stage is reused and the fine-tuning continues from its checkpoint.
heavy_test!(an_interrupted_run_resumes_where_it_stopped, |tmp| {
    // 200 pretraining + 10 (round 1) + 5 (round 2) steps.
    let stopped = run(&rft_args(tmp.path(), SHORT, &["--stop-after", "215"]));
    let dir = stopped_after(&stopped, 215);
    for file in [
        "stages/round-1/eval.json",
        "stages/round-2/datagen.json",
        "stages/round-2/finetune/checkpoints/latest",
    ] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    assert!(!dir.join("stages/round-2/eval.json").exists());
    let modified = |f: &str| std::fs::metadata(dir.join(f)).unwrap().modified().unwrap();
    let round1 = modified("stages/round-1/datagen.json");

    let resumed = resume("rft", &dir);
    assert_eq!(resumed["summary"]["status"], "completed");
    assert_eq!(resumed["summary"]["steps_done"], 220);
    assert_eq!(
        modified("stages/round-1/datagen.json"),
        round1,
        "round 1 redone"
    );
    let steps: Vec<u64> =
        std::fs::read_to_string(dir.join("stages/round-2/finetune/metrics.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["step"].as_u64())
            .filter(|&s| s > 0)
            .collect();
    assert_eq!(steps, (1..=10).collect::<Vec<_>>());
    let rounds = resumed["summary"]["metrics"]["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    assert_eq!(
        rounds[1]["accuracy"],
        resumed["summary"]["metrics"]["accuracy_after"]
    );
});

// LoRA fine-tuning end to end, kept short (200 pretrain steps leave a
// model that gets some sampled answers right; 20 fine-tuning steps).
heavy_test!(
    lora_trains_adapters_on_frozen_weights_and_saves_a_plain_gpt,
    |tmp| {
        let doc = run_rft_to_completion(
            tmp.path(),
            &[
                "finetune.mode=lora",
                "task.train_questions=48",
                "task.worked_questions=48",
                "task.validation_questions=16",
                "pretrain.train.steps=200",
                "datagen.oversample=8",
                "finetune.train.steps=20",
            ],
        );
        let m = &doc["summary"]["metrics"];
        let num = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k} in {m}"));
        assert_eq!(m["finetune_mode"], "lora");
        assert!(num("kept") > 0, "nothing to fine-tune on: {m}");
        // Rank 8 on the four linear layers of 2 blocks 64 wide:
        // 2 · 8 · ((64+192) + (64+64) + (64+256) + (256+64)).
        assert_eq!(num("trainable_parameters"), 16_384);
        assert!(num("trainable_parameters") < num("parameters"));

        let dir = run_dir_of(&doc);
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        assert!(config.contains("[finetune.lora]"), "{config}");
        let adapter = dir.join("stages/round-1/finetune/adapter.safetensors");
        assert_eq!(
            std::fs::metadata(&adapter).unwrap().len(),
            num("adapter_bytes")
        );
        let read = envgen_experiments::engine::safetensors_io::read;
        let adapters = read(&adapter).unwrap();
        assert_eq!(
            adapters.len(),
            2 * 4 * 2,
            "a and b for 4 layers of 2 blocks"
        );
        let values: usize = adapters.values().map(|(_, v)| v.len()).sum();
        assert_eq!(values as u64, num("trainable_parameters"));

        // The base stayed frozen: what LoRA does not touch is bit-identical to
        // stage (a)'s weights; the merged attention weights moved.
        let pretrained = read(&dir.join("stages/pretrain/model.safetensors")).unwrap();
        let tuned = read(&dir.join("model.safetensors")).unwrap();
        assert_eq!(
            tuned.keys().collect::<std::collections::BTreeSet<_>>(),
            pretrained.keys().collect(),
            "model.safetensors is a plain GPT"
        );
        for name in [
            "wte.weight",
            "wpe.weight",
            "h.0.ln_1.weight",
            "h.1.attn.c_attn.bias",
        ] {
            assert_eq!(tuned[name], pretrained[name], "{name} changed");
        }
        for name in ["h.0.attn.c_attn.weight", "h.1.mlp.c_proj.weight"] {
            assert_ne!(tuned[name], pretrained[name], "{name} has no merged update");
        }

        // The merged model quantizes and scores like any RFT run.
        let q = quantize_int8(tmp.path(), &dir);
        let rows = &q["summary"]["metrics"]["schemes"];
        let f32_accuracy = rows[0]["metric_value"].as_f64().unwrap();
        assert!((f32_accuracy - m["accuracy_after"].as_f64().unwrap()).abs() < 1e-9);
    }
);

// Issue #23: the generation batch is a hardware knob. Two runs that differ
// only in `--gen-batch` have the same config_hash and sample the very same
// completions (hence keep the same set and reach the same accuracy); the
// manifest's profile records the knob; the summary has each stage's wall
// time and the generation throughput.
heavy_test!(
    the_generation_batch_changes_neither_the_hash_nor_the_samples,
    |tmp| {
        let sets = [
            "task.train_questions=48",
            "task.worked_questions=48",
            "task.validation_questions=16",
            "pretrain.train.steps=200",
            "pretrain.train.checkpoint_every=100",
            "datagen.oversample=8",
            "finetune.train.steps=2",
            "finetune.train.eval_every=2",
            "finetune.train.checkpoint_every=2",
        ];
        let runs: Vec<(Value, std::path::PathBuf)> = ["3", "40"]
            .iter()
            .map(|n| {
                let out = tmp.path().join(n);
                let extra = ["--preset", "tiny", "--gen-batch", n];
                let doc = json_of(&expect_success(run(&rft_args(&out, &sets, &extra))));
                assert_eq!(doc["summary"]["status"], "completed", "{doc}");
                let dir = run_dir_of(&doc);
                (doc, dir)
            })
            .collect();
        let manifest = |i: usize| read_json(&runs[i].1.join("manifest.json"));
        assert_eq!(manifest(0)["config_hash"], manifest(1)["config_hash"]);
        assert_eq!(manifest(0)["profile"]["gen_batch"], 3);
        assert_eq!(manifest(1)["profile"]["gen_batch"], 40);
        let config = std::fs::read_to_string(runs[0].1.join("config.toml")).unwrap();
        assert!(
            !config.contains("gen_batch") && !config.contains("batch_questions"),
            "a hardware knob in config.toml:\n{config}"
        );
        let datagen = |i: usize| read_json(&runs[i].1.join("stages/round-1/datagen.json"));
        let (a, b) = (datagen(0), datagen(1));
        assert!(!a["examples"].as_array().unwrap().is_empty());
        assert_eq!(a["examples"], b["examples"]);
        assert_eq!(a["stats"], b["stats"]);
        let metrics = |i: usize| runs[i].0["summary"]["metrics"].clone();
        assert_eq!(metrics(0)["accuracy_after"], metrics(1)["accuracy_after"]);

        // Per-stage wall time and generation throughput (issue #23).
        let m = metrics(0);
        for stage in ["pretrain", "eval_before", "datagen", "finetune", "eval"] {
            let seconds = m["stage_seconds"][stage].as_f64();
            assert!(
                seconds.is_some_and(|s| s > 0.0),
                "stage_seconds.{stage} in {m}"
            );
        }
        for key in ["datagen_tokens_per_s", "datagen_samples_per_s"] {
            assert!(m[key].as_f64().is_some_and(|v| v > 0.0), "{key} in {m}");
        }
        assert!(m["rounds"][0]["datagen_tokens_per_s"].as_f64().unwrap() > 0.0);
    }
);
