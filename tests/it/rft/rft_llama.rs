//! RFT on a pretrained Llama-family checkpoint (issue #23) through the real
//! `envgen` binary: the `tiny-llama` preset end to end (envgen makes a
//! random-init checkpoint, fine-tunes it, and transformers loads the
//! result with the same logits), a checkpoint made by transformers'
//! `save_pretrained` accepted by `--set model.init=hf:DIR`, and bad inits
//! refused with exit 2. The transformers parts need `ENVGEN_TEST_PYTHON`
//! (scripts/services/pyref.sh builds it in CI).

use std::path::Path;
use std::process::Output;

use envgen_experiments::backend::Cpu;
use envgen_experiments::llama;
use envgen_experiments::pretrained::HfTokenizer;
use serde_json::Value;

use crate::common::experiment::{manifest_of, resume, stopped_after};
use crate::common::reference::python_json;
use crate::common::{expect_success, heavy_test, json_of, read_json, run, run_dir_of, text};

/// transformers' f32 logits of a token sequence from a directory.
const LOGITS: &str = r#"
import json, sys
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = json.loads(sys.argv[2])
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].flatten().tolist()
print(json.dumps({"logits": logits, "class": type(model).__name__}))
"#;

/// A random-init SmolLM2-shaped checkpoint (LlamaForCausalLM, tied head,
/// grouped-query attention) with `save_pretrained` and a byte-level BPE
/// trained with `tokenizers`, as a Hub directory holds.
const SMOLLM2_LIKE: &str = r#"
import json, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM
out = sys.argv[1]
torch.manual_seed(int(sys.argv[2]))
text = ["Convert 5 kilograms to grams\nA: 1 kilogram = 1000 grams, so 5 * 1000 = 5000. <answer>5000</answer>\n",
        "How many meters are in 3 kilometers?\nA: 1 kilometer = 1000 meters, so 3 * 1000 = 3000. <answer>3000</answer>\n"] * 8
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=320, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
config = LlamaConfig(vocab_size=320, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                     rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                     initializer_range=0.05)
LlamaForCausalLM(config).save_pretrained(out)
tok.save(out + "/tokenizer.json")
print(json.dumps({"ok": True}))
"#;

fn rft(out: &Path, sets: &[&str], extra: &[&str]) -> Output {
    let mut args = vec!["run", "rft", "--preset", "tiny-llama", "--backend", "cpu"];
    args.extend(["--json", "--out", out.to_str().unwrap()]);
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(extra);
    run(&args)
}

fn num(m: &Value, k: &str) -> f64 {
    m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"))
}

/// envgen's logits of `ids` from the Hugging Face directory `dir`.
fn envgen_logits(dir: &Path, ids: &[u32]) -> Vec<f32> {
    let device = Default::default();
    let model = llama::hf::load::<Cpu>(dir, &device).unwrap();
    llama::generate::logits_of(&model, ids, &device)
}

heavy_test!(
    tiny_llama_runs_end_to_end_and_transformers_loads_the_result,
    |tmp| {
        let started = std::time::Instant::now();
        let doc = json_of(&expect_success(rft(tmp.path(), &[], &[])));
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(doc["summary"]["status"], "completed", "{doc}");
        let m = &doc["summary"]["metrics"];
        eprintln!(
        "rft tiny-llama in {seconds:.0} s: answer rate {:.3} (base) -> {:.3} (SFT) -> {:.3}, accuracy {:.3} -> {:.3} -> {:.3}, SFT val loss {:.3} -> {:.3}, kept {} of {}",
        num(m, "answer_rate_base"),
        num(m, "answer_rate_before"),
        num(m, "answer_rate_after"),
        num(m, "accuracy_base"),
        num(m, "accuracy_before"),
        num(m, "accuracy_after"),
        num(m, "pretrain_initial_val_loss"),
        num(m, "pretrain_final_val_loss"),
        num(m, "kept"),
        num(m, "generated"),
    );
        // Stage (a) taught the random checkpoint the task: the completion loss
        // on held-out worked answers falls to under half (from ln 257 ≈ 5.5).
        assert!(
            num(m, "pretrain_final_val_loss") < 0.5 * num(m, "pretrain_initial_val_loss"),
            "{m}"
        );
        // ... and to answer in the task's format (0 % before: a random model
        // never writes the answer tag).
        assert!(
            num(m, "answer_rate_before") > num(m, "answer_rate_base") + 0.5,
            "{m}"
        );
        // Every training question was sampled `oversample` (4) times.
        assert_eq!(num(m, "generated"), num(m, "train_questions") * 4.0);
        for key in [
            "accuracy_base",
            "accuracy_before",
            "accuracy_after",
            "answer_rate_before",
            "answer_rate_after",
            "datagen_samples_per_s",
            "finetune_final_val_loss",
        ] {
            assert!(num(m, key).is_finite(), "{key}");
        }
        assert_eq!(m["init"], "random:tiny-llama");
        let dir = run_dir_of(&doc);
        let base: Value = read_json(&dir.join("stages/base.json"));
        assert_eq!(m["init_sha256"], base["sha256"]);
        assert_eq!(m["init_sha256"].as_str().unwrap().len(), 64);
        // The checkpoint is recorded as the run's input in the manifest.
        let manifest = manifest_of(&doc);
        assert_eq!(
            manifest["data_files"][0]["sha256"], base["sha256"],
            "{manifest}"
        );
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        assert!(config.contains("init = \"random:tiny-llama\""), "{config}");
        for file in [
            "stages/base/config.json",
            "stages/base/model.safetensors",
            "stages/base/tokenizer.json",
            "stages/pretrain/model.safetensors",
            "stages/round-1/datagen.json",
            "stages/round-1/finetune/config.json",
            "stages/eval-base.json",
            "stages/eval-before.json",
            "stages/round-1/eval.json",
            "model.safetensors",
            "hf/tokenizer.json",
        ] {
            assert!(dir.join(file).exists(), "{file} missing");
        }
        // (c) fine-tunes the base, not the SFT model: the round's weights
        // differ from stage (a)'s.
        assert_ne!(
            std::fs::read(dir.join("stages/pretrain/model.safetensors")).unwrap(),
            std::fs::read(dir.join("model.safetensors")).unwrap()
        );

        // transformers loads the fine-tuned model; its logits are envgen's.
        assert_transformers_agrees(&dir.join("hf"));
    }
);

/// transformers loads the Hugging Face directory `hf`, and its f32 logits
/// of a prompt are envgen's to 1e-4.
fn assert_transformers_agrees(hf: &Path) {
    let tokenizer = HfTokenizer::load(hf, false).unwrap();
    let ids = tokenizer
        .encode("Convert 7 kilograms to grams\nA: ")
        .unwrap();
    let ids_json = serde_json::to_string(&ids).unwrap();
    let reference = python_json(LOGITS, &[hf.to_str().unwrap(), &ids_json]);
    assert_eq!(reference["class"], "LlamaForCausalLM");
    let theirs: Vec<f32> = reference["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let ours = envgen_logits(hf, &ids);
    assert_eq!(ours.len(), theirs.len());
    let diff = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff <= 1e-4, "logits differ from transformers' by {diff}");
}

/// Rebuilds the merged checkpoint from the base and the PEFT adapter
/// files with torch alone: `W_base + lora_alpha / r · lora_B @ lora_A` for
/// every adapted module, every other tensor the base's. Prints the largest
/// difference, the number of adapted weights and the largest update.
const PEFT_MERGE: &str = r#"
import json, sys
import torch
from safetensors.torch import load_file
base, merged, adapter = sys.argv[1], sys.argv[2], sys.argv[3]
W0, W1 = load_file(base + "/model.safetensors"), load_file(merged + "/model.safetensors")
lora = load_file(adapter + "/adapter_model.safetensors")
cfg = json.load(open(adapter + "/adapter_config.json"))
assert cfg["peft_type"] == "LORA", cfg
scale = cfg["lora_alpha"] / cfg["r"]
prefix = "base_model.model."
adapted, worst, largest = set(), 0.0, 0.0
for key, a in lora.items():
    if not key.endswith(".lora_A.weight"):
        continue
    module = key[len(prefix):-len(".lora_A.weight")]
    assert module.split(".")[-1] in cfg["target_modules"], (module, cfg)
    b = lora[prefix + module + ".lora_B.weight"]
    name = module + ".weight"
    w0 = W0[name].double()
    assert a.shape == (cfg["r"], w0.shape[1]) and b.shape == (w0.shape[0], cfg["r"]), (name, a.shape, b.shape)
    update = scale * (b.double() @ a.double())
    worst = max(worst, (w0 + update - W1[name].double()).abs().max().item())
    largest = max(largest, update.abs().max().item())
    adapted.add(name)
untouched = [k for k in W0 if k not in adapted and not torch.equal(W0[k], W1[k])]
print(json.dumps({"max_diff": worst, "adapted": len(adapted), "largest_update": largest,
                  "changed_but_not_adapted": untouched, "r": cfg["r"],
                  "target_modules": cfg["target_modules"]}))
"#;

// `--set finetune.mode=lora` on the checkpoint: stage (c) trains adapters
// on the attention projections of the frozen base and merges them; the
// run's `hf/` loads in transformers with envgen's logits, and its
// `hf/adapter/` (PEFT's layout) rebuilds the merged weights from the base.
heavy_test!(tiny_llama_lora_merges_and_writes_peft_adapters, |tmp| {
    let sets = [
        "finetune.mode=lora",
        "pretrain.train.steps=40",
        "pretrain.train.eval_every=40",
        "pretrain.train.checkpoint_every=40",
        "finetune.train.steps=20",
        "finetune.train.eval_every=20",
        "finetune.train.checkpoint_every=20",
    ];
    let doc = json_of(&expect_success(rft(tmp.path(), &sets, &[])));
    assert_eq!(doc["summary"]["status"], "completed", "{doc}");
    let m = &doc["summary"]["metrics"];
    assert_eq!(m["finetune_mode"], "lora", "{m}");
    // Rank 8 on q, k, v, o of tiny-llama's 2 layers (width 64, k and v
    // 2 heads × 16): 8 · (128 + 96 + 96 + 128) per layer.
    assert_eq!(num(m, "trainable_parameters"), 2.0 * 8.0 * 448.0, "{m}");
    assert!(
        num(m, "parameters") > 10.0 * num(m, "trainable_parameters"),
        "{m}"
    );
    let dir = run_dir_of(&doc);
    let adapter = dir.join("hf/adapter");
    let bytes = std::fs::metadata(adapter.join("adapter_model.safetensors"))
        .unwrap()
        .len();
    assert_eq!(num(m, "adapter_bytes"), bytes as f64);
    let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(
        config.contains("targets = [\"self_attn.q_proj\", \"self_attn.k_proj\", \"self_attn.v_proj\", \"self_attn.o_proj\"]"),
        "{config}"
    );

    assert_transformers_agrees(&dir.join("hf"));
    let check = python_json(
        PEFT_MERGE,
        &[
            dir.join("stages/base").to_str().unwrap(),
            dir.join("hf").to_str().unwrap(),
            adapter.to_str().unwrap(),
        ],
    );
    assert_eq!(check["adapted"], 2 * 4, "{check}");
    assert_eq!(check["r"], 8, "{check}");
    assert_eq!(
        check["changed_but_not_adapted"],
        serde_json::json!([]),
        "{check}"
    );
    assert!(check["largest_update"].as_f64().unwrap() > 1e-4, "{check}");
    assert!(check["max_diff"].as_f64().unwrap() <= 1e-5, "{check}");
});

// A checkpoint written by transformers (SmolLM2's layout, a tokenizers
// BPE) is accepted by `--set model.init=hf:DIR`; the run records the spec
// and the content hash, and refuses to resume once the directory changed.
heavy_test!(
    a_save_pretrained_checkpoint_is_accepted_and_fingerprinted,
    |tmp| {
        let ckpt = tmp.path().join("smollm2-like");
        python_json(SMOLLM2_LIKE, &[ckpt.to_str().unwrap(), "7"]);
        let spec = format!("model.init=hf:{}", ckpt.display());
        let sets = [
            spec.as_str(),
            "task.train_questions=8",
            "task.worked_questions=8",
            "task.validation_questions=4",
            "task.max_completion_tokens=8",
            "pretrain.train.steps=3",
            "pretrain.train.eval_every=3",
            "pretrain.train.checkpoint_every=3",
            "finetune.train.steps=2",
            "finetune.train.eval_every=2",
            "finetune.train.checkpoint_every=2",
            "datagen.oversample=2",
        ];
        let runs = tmp.path().join("runs");
        let doc = json_of(&expect_success(rft(&runs, &sets, &[])));
        assert_eq!(doc["summary"]["status"], "completed", "{doc}");
        let m = &doc["summary"]["metrics"];
        assert_eq!(m["init"], format!("hf:{}", ckpt.display()));
        assert_eq!(num(m, "generated"), 16.0);
        let sha = m["init_sha256"].as_str().unwrap().to_string();
        assert_eq!(manifest_of(&doc)["data_files"][0]["sha256"], sha.as_str());
        let dir = run_dir_of(&doc);
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        assert!(
            config.contains(&format!("init = \"hf:{}\"", ckpt.display())),
            "{config}"
        );
        // The tokenizer is the checkpoint's: the fine-tuned copy carries it.
        assert_eq!(
            std::fs::read(ckpt.join("tokenizer.json")).unwrap(),
            std::fs::read(dir.join("hf/tokenizer.json")).unwrap()
        );

        // Another checkpoint at the same path: a resume refuses it by hash.
        std::fs::remove_dir_all(&ckpt).unwrap();
        python_json(SMOLLM2_LIKE, &[ckpt.to_str().unwrap(), "8"]);
        std::fs::remove_file(dir.join("summary.json")).unwrap();
        std::fs::remove_dir_all(dir.join("stages/round-1")).unwrap();
        let out = run(&[
            "run",
            "rft",
            "--backend",
            "cpu",
            "--resume",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("changed since this run started"),
            "{}",
            text(&out)
        );
    }
);

// Bad `model.init` values exit 2 before anything runs, naming the key and
// the fix.
heavy_test!(bad_inits_exit_2_naming_the_key_and_the_fix, |tmp| {
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mamba = tmp.path().join("mamba");
    std::fs::create_dir_all(&mamba).unwrap();
    std::fs::write(mamba.join("config.json"), r#"{"model_type": "mamba"}"#).unwrap();
    let gpt2 = tmp.path().join("gpt2");
    std::fs::create_dir_all(&gpt2).unwrap();
    std::fs::write(gpt2.join("config.json"), r#"{"model_type": "gpt2"}"#).unwrap();
    let missing = tmp.path().join("nope");
    let cases: Vec<(String, &str)> = vec![
        (format!("hf:{}", missing.display()), "is not a directory"),
        (format!("hf:{}", empty.display()), "has no config.json"),
        (format!("hf:{}", mamba.display()), "\"mamba\""),
        // A GPT-2 checkpoint takes the GPT path, which reads its sizes.
        (
            format!("hf:{}", gpt2.display()),
            "is null, expected a positive integer",
        ),
        ("random:huge-llama".into(), "tiny-llama"),
        ("./dir".into(), "neither hf:DIR nor random:NAME"),
    ];
    let runs = tmp.path().join("runs");
    for (init, says) in &cases {
        let set = format!("model.init={init}");
        let out = rft(&runs, &[&set], &[]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(2), "{init}: {msg}");
        assert!(
            msg.contains("model.init") && msg.contains(says),
            "{init}: {msg}"
        );
        assert!(msg.contains("fix:"), "{init}: {msg}");
    }
    // The byte-level GPT's sizes do not go with a checkpoint.
    let set = format!("model.init=hf:{}", empty.display());
    let out = run(&[
        "run",
        "rft",
        "--preset",
        "tiny",
        "--backend",
        "cpu",
        "--out",
        runs.to_str().unwrap(),
        "--set",
        &set,
    ]);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(
        msg.contains("model.n_layer") && msg.contains("fix:"),
        "{msg}"
    );
    assert!(!runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none());
});

// Stopped inside round 1's fine-tuning and resumed: the base checkpoint,
// stage (a) and the samples are reused, the fine-tuning continues from its
// checkpoint, and the run completes.
heavy_test!(
    an_interrupted_checkpoint_run_resumes_where_it_stopped,
    |tmp| {
        let sets = [
            "pretrain.train.steps=40",
            "pretrain.train.eval_every=20",
            "pretrain.train.checkpoint_every=20",
            "finetune.train.steps=20",
            "finetune.train.eval_every=10",
            "finetune.train.checkpoint_every=10",
        ];
        let dir = stopped_after(&rft(tmp.path(), &sets, &["--stop-after", "50"]), 50);
        for file in [
            "stages/base/model.safetensors",
            "stages/pretrain/model.safetensors",
            "stages/round-1/datagen.json",
            "stages/round-1/finetune/checkpoints/latest",
        ] {
            assert!(dir.join(file).exists(), "{file} missing");
        }
        assert!(!dir
            .join("stages/round-1/finetune/model.safetensors")
            .exists());
        let mtime = |f: &str| std::fs::metadata(dir.join(f)).unwrap().modified().unwrap();
        let kept = [
            "stages/base/model.safetensors",
            "stages/pretrain/model.safetensors",
            "stages/round-1/datagen.json",
        ];
        let before: Vec<_> = kept.iter().map(|f| mtime(f)).collect();
        let doc = resume("rft", &dir);
        assert_eq!(doc["summary"]["status"], "completed", "{doc}");
        assert_eq!(doc["summary"]["steps_done"], 60);
        assert_eq!(kept.iter().map(|f| mtime(f)).collect::<Vec<_>>(), before);
        assert!(dir.join("hf/model.safetensors").exists());
    }
);
