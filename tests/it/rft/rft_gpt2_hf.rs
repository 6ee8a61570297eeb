//! RFT from a GPT-2 checkpoint (issue #23, `model.init = "hf:DIR"` with
//! `model_type` gpt2) through the real `envgen` binary: a checkpoint made
//! by transformers' `save_pretrained` with a trained `tokenizers` BPE runs
//! end to end (stage (a) and every round start from its weights; the
//! result loads in transformers with envgen's logits; a changed checkpoint
//! is refused on resume), LoRA fine-tunes adapters on its frozen weights,
//! and bad checkpoints exit 2. The transformers part needs
//! `ENVGEN_TEST_PYTHON` (scripts/services/pyref.sh builds it in CI).

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use envgen_experiments::backend::Cpu;
use envgen_experiments::gpt2::{self, hf, ModelConfig};
use envgen_experiments::pretrained::HfTokenizer;
use envgen_experiments::rft::pretrained::write_byte_tokenizer;
use serde_json::Value;

use crate::common::experiment::manifest_of;
use crate::common::reference::python_json;
use crate::common::{expect_success, heavy_test, json_of, read_json, run, run_dir_of, text};

/// A random-init GPT2LMHeadModel (2 layers, 32 wide, 128 positions, 320
/// embedding rows for a 300-token BPE) saved with `save_pretrained`, and a
/// byte-level BPE trained with `tokenizers` whose eos is `<|endoftext|>`.
/// The LayerNorm parameters and biases are random too (they start at 1
/// and 0, as a fresh envgen GPT's do), so that weights that came from the
/// checkpoint are told apart from a fresh init.
const GPT2_LIKE: &str = r#"
import json, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel
out = sys.argv[1]
torch.manual_seed(int(sys.argv[2]))
text = ["How many grams are in 5 kilograms?\nA: 1 kilogram = 1000 grams, so 5 * 1000 = 5000. <answer>5000</answer>\n",
        "Convert 3000 meters to kilometers.\nA: 1 kilometer = 1000 meters, so 3000 / 1000 = 3. <answer>3</answer>\n"] * 8
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=300, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
eos = tok.token_to_id("<|endoftext|>")
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=128, vocab_size=320,
                    bos_token_id=eos, eos_token_id=eos)
model = GPT2LMHeadModel(config)
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.add_(0.2 * torch.randn_like(p))
model.save_pretrained(out)
tok.save(out + "/tokenizer.json")
print(json.dumps({"eos": eos}))
"#;

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

/// `envgen run rft --preset tiny-llama` (its `[model]` is `init` alone)
/// from `ckpt` into `out`, sized for seconds.
fn rft(out: &Path, ckpt: &Path, sets: &[&str]) -> Output {
    let init = format!("model.init=hf:{}", ckpt.display());
    let mut args = vec!["run", "rft", "--preset", "tiny-llama", "--backend", "cpu"];
    args.extend(["--json", "--out", out.to_str().unwrap(), "--set", &init]);
    for set in [
        "task.train_questions=8",
        "task.worked_questions=8",
        "task.validation_questions=4",
        "task.max_completion_tokens=24",
        "datagen.oversample=2",
    ]
    .iter()
    .chain(sets)
    {
        args.extend(["--set", set]);
    }
    run(&args)
}

fn num(m: &Value, k: &str) -> f64 {
    m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"))
}

type Weights = HashMap<String, Vec<f32>>;

/// A GPT's weights by (Hugging Face) name.
fn weights_of(model: &gpt2::Gpt2<Cpu>) -> Weights {
    hf::named_weights(model)
        .into_iter()
        .map(|(name, _, values)| (name, values))
        .collect()
}

/// The weights of a Hugging Face GPT-2 directory, read by envgen.
fn tensors(dir: &Path) -> Weights {
    weights_of(
        &hf::load_pretrained::<Cpu>(dir, &Default::default())
            .unwrap()
            .1,
    )
}

/// The weights a stage saved (envgen's layout), shaped by `sizes`.
fn stage_weights(path: &Path, sizes: &ModelConfig) -> Weights {
    weights_of(
        &sizes
            .init_from::<Cpu>(Some(path), &Default::default())
            .unwrap(),
    )
}

/// Largest |a − b| over every weight.
fn max_diff(a: &Weights, b: &Weights) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .flat_map(|(name, x)| x.iter().zip(&b[name]).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

heavy_test!(
    a_gpt2_checkpoint_runs_end_to_end_and_transformers_loads_the_result,
    |tmp| {
        let ckpt = tmp.path().join("gpt2-like");
        python_json(GPT2_LIKE, &[ckpt.to_str().unwrap(), "7"]);
        let runs = tmp.path().join("runs");
        // (a) moves each weight by at most ~lr per step (Adam); (c) takes one
        // step of lr 1e-3, so it ends within ~1e-3 of where it started. Every
        // prompt is over 28 bytes: 100 completion tokens fit the 128 positions
        // in the checkpoint's BPE tokens only (in bytes it is exit 2).
        let sets = [
            "task.max_completion_tokens=100",
            "pretrain.train.steps=4",
            "pretrain.train.eval_every=4",
            "pretrain.train.checkpoint_every=4",
            "pretrain.optim.lr=1e-2",
            "pretrain.optim.warmup_steps=0",
            "finetune.train.steps=1",
            "finetune.train.eval_every=1",
            "finetune.train.checkpoint_every=1",
            "finetune.optim.lr=1e-3",
            "finetune.optim.warmup_steps=0",
        ];
        let started = std::time::Instant::now();
        let doc = json_of(&expect_success(rft(&runs, &ckpt, &sets)));
        eprintln!(
            "rft from a GPT-2 checkpoint: {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(doc["summary"]["status"], "completed", "{doc}");
        let m = &doc["summary"]["metrics"];
        assert_eq!(m["init"], format!("hf:{}", ckpt.display()));
        assert_eq!(num(m, "generated"), 16.0);
        assert_eq!(m["finetune_mode"], "full");
        for key in ["accuracy_base", "accuracy_before", "accuracy_after"] {
            assert!((0.0..=1.0).contains(&num(m, key)), "{key}");
        }
        // The checkpoint's config.json sizes the model: (320 + 128)·32 +
        // 2·(12·32² + 13·32) + 2·32.
        assert_eq!(num(m, "parameters"), 39_808.0);

        // The base checkpoint's record: the summary, stages/base.json and the
        // manifest's data files agree on its content hash.
        let dir = run_dir_of(&doc);
        let base: Value = read_json(&dir.join("stages/base.json"));
        assert_eq!(base["init"], m["init"]);
        assert_eq!(m["init_sha256"], base["sha256"]);
        assert_eq!(m["init_sha256"].as_str().unwrap().len(), 64);
        assert_eq!(manifest_of(&doc)["data_files"][0]["sha256"], base["sha256"]);

        // Stage (a) started from the checkpoint (4 steps of lr 1e-2 stay far
        // closer to it than a fresh init, whose LayerNorms are 1 and 0), and
        // round 1 fine-tuned the base again, not the SFT model.
        let sizes = hf::config_of(&ckpt).unwrap();
        let base_w = tensors(&ckpt);
        let sft = stage_weights(&dir.join("stages/pretrain/model.safetensors"), &sizes);
        let tuned = stage_weights(&dir.join("model.safetensors"), &sizes);
        let fresh = weights_of(&sizes.init::<Cpu>(&Default::default()));
        let (sft_moved, tuned_moved) = (max_diff(&sft, &base_w), max_diff(&tuned, &base_w));
        eprintln!(
        "max |weight − checkpoint|: SFT {sft_moved:.4}, round 1 {tuned_moved:.5}, fresh init {:.3}",
        max_diff(&fresh, &base_w)
    );
        assert!(sft_moved < 0.1 && max_diff(&fresh, &base_w) > 0.3);
        // (1e-3 plus AdamW's decay of lr · weight_decay · |w|.)
        assert!(tuned_moved <= 1.5e-3 && sft_moved > 5e-3);

        // RUN_DIR/hf is a GPT-2 directory with the checkpoint's config and
        // tokenizer; transformers loads it with envgen's logits.
        let hf_dir = dir.join("hf");
        for file in ["config.json", "tokenizer.json"] {
            assert_eq!(
                std::fs::read(ckpt.join(file)).unwrap(),
                std::fs::read(hf_dir.join(file)).unwrap(),
                "{file}"
            );
        }
        assert_eq!(max_diff(&tensors(&hf_dir), &tuned), 0.0);
        let tokenizer = HfTokenizer::load(&hf_dir, false).unwrap();
        let ids = tokenizer
            .encode("Convert 7 kilograms to grams.\nA: ")
            .unwrap();
        let reference = python_json(
            LOGITS,
            &[
                hf_dir.to_str().unwrap(),
                &serde_json::to_string(&ids).unwrap(),
            ],
        );
        assert_eq!(reference["class"], "GPT2LMHeadModel");
        let theirs: Vec<f32> = reference["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let (_, model) = hf::load_pretrained::<Cpu>(&hf_dir, &Default::default()).unwrap();
        let ours = gpt2::eval::logits::<Cpu>(&model, &ids, &Default::default());
        assert_eq!(ours.len(), theirs.len());
        let diff = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff <= 1e-4, "logits differ from transformers' by {diff}");

        // Another checkpoint at the same path: a resume refuses it by hash.
        let config = ckpt.join("config.json");
        let edited = std::fs::read_to_string(&config).unwrap() + "\n";
        std::fs::write(&config, edited).unwrap();
        std::fs::remove_file(dir.join("summary.json")).unwrap();
        std::fs::remove_dir_all(dir.join("stages/round-1")).unwrap();
        let args = ["run", "rft", "--backend", "cpu", "--resume"];
        let out = run(&[&args[..], &[dir.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("changed since this run started"),
            "{}",
            text(&out)
        );
    }
);

/// A GPT-2 directory written by envgen itself (no Python): `sizes`, a
/// random init, the byte tokenizer (ids 0..=255, eos 256).
fn envgen_gpt2(dir: &Path, sizes: &ModelConfig) {
    let model = sizes.init::<Cpu>(&Default::default());
    hf::save_pretrained(&model, sizes, dir).unwrap();
    let mut config: Value = read_json(&dir.join("config.json"));
    config["eos_token_id"] = 256.into();
    config["bos_token_id"] = 256.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    write_byte_tokenizer(dir).unwrap();
}

fn byte_gpt2(block_size: usize) -> ModelConfig {
    ModelConfig {
        n_layer: 1,
        n_head: 2,
        n_embd: 32,
        block_size,
        vocab_size: 257,
        dropout: 0.0,
    }
}

// `finetune.mode = "lora"` from a GPT-2 checkpoint, two rounds: (c)
// trains adapters on the base's frozen weights in each round and saves
// them merged (embeddings and LayerNorms are the base's, bit for bit —
// not the SFT model's; the adapted matrices moved).
heavy_test!(lora_finetunes_adapters_on_a_gpt2_checkpoint, |tmp| {
    let ckpt = tmp.path().join("byte-gpt2");
    let sizes = byte_gpt2(160);
    envgen_gpt2(&ckpt, &sizes);
    let started = std::time::Instant::now();
    let doc = json_of(&expect_success(rft(
        &tmp.path().join("runs"),
        &ckpt,
        &[
            "task.max_completion_tokens=80",
            "rounds=2",
            "pretrain.train.steps=2",
            "pretrain.train.eval_every=2",
            "pretrain.train.checkpoint_every=2",
            "finetune.mode=lora",
            "finetune.lora={rank=4}",
            "finetune.train.steps=2",
            "finetune.train.eval_every=2",
            "finetune.train.checkpoint_every=2",
        ],
    )));
    eprintln!(
        "rft LoRA from a GPT-2 checkpoint: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let m = &doc["summary"]["metrics"];
    assert_eq!(m["finetune_mode"], "lora");
    // rank 4 on all four matrices of 1 block 32 wide: 4·(32+96 + 32+32 + 32+128 + 128+32).
    assert_eq!(num(m, "trainable_parameters"), 2048.0);
    assert!(num(m, "adapter_bytes") > 0.0);
    assert_eq!(m["rounds"].as_array().map(Vec::len), Some(2), "{m}");
    let dir = run_dir_of(&doc);
    for round in [1, 2] {
        let adapter = format!("stages/round-{round}/finetune/adapter.safetensors");
        assert!(dir.join(&adapter).is_file(), "{adapter}");
    }
    let base = tensors(&ckpt);
    let tuned = tensors(&dir.join("hf"));
    for name in ["wte.weight", "wpe.weight", "h.0.ln_1.weight", "ln_f.bias"] {
        assert_eq!(tuned[name], base[name], "{name} changed");
    }
    assert_ne!(
        tuned["h.0.attn.c_attn.weight"],
        base["h.0.attn.c_attn.weight"]
    );
});

// Bad GPT-2 checkpoints and settings exit 2 before a run directory is
// made, naming the key, the value and the fix.
heavy_test!(bad_gpt2_inits_exit_2_naming_the_key_and_the_fix, |tmp| {
    let runs = tmp.path().join("runs");
    let short = tmp.path().join("short");
    envgen_gpt2(&short, &byte_gpt2(64));
    let ok = tmp.path().join("ok");
    envgen_gpt2(&ok, &byte_gpt2(160));
    let small_vocab = tmp.path().join("small-vocab");
    envgen_gpt2(
        &small_vocab,
        &ModelConfig {
            vocab_size: 200,
            ..byte_gpt2(160)
        },
    );
    let no_weights = tmp.path().join("no-weights");
    envgen_gpt2(&no_weights, &byte_gpt2(160));
    std::fs::remove_file(no_weights.join("model.safetensors")).unwrap();
    // A GPT-2 with a chat template: rft's GPT path prompts with plain text.
    let templated = tmp.path().join("templated");
    envgen_gpt2(&templated, &byte_gpt2(160));
    std::fs::write(
        templated.join("chat_template.jinja"),
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )
    .unwrap();
    let cases: Vec<(&Path, &[&str], &[&str])> = vec![
        (&short, &[], &["n_positions = 64", "longest worked answer"]),
        (
            &templated,
            &["task.prompt_format=chat"],
            &["is a GPT-2 checkpoint", "plain text"],
        ),
        (
            &ok,
            &["task.max_completion_tokens=150"],
            &[
                "n_positions = 160",
                "task.max_completion_tokens = 150",
                "--set task.max_completion_tokens=",
            ],
        ),
        (&small_vocab, &[], &["257 tokens", "vocab_size is 200"]),
        (&no_weights, &[], &["no model.safetensors"]),
        (
            &ok,
            &["finetune.mode=lora", "finetune.lora={rank=64}"],
            &["finetune.lora.rank = 64"],
        ),
    ];
    for (ckpt, sets, says) in cases {
        let out = rft(&runs, ckpt, sets);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(2), "{sets:?}: {msg}");
        for s in says {
            assert!(msg.contains(s), "{sets:?} should say {s:?}: {msg}");
        }
        assert!(msg.contains("fix:"), "{sets:?}: {msg}");
    }
    // The byte-level GPT's sizes (--preset tiny) do not go with a checkpoint.
    let set = format!("model.init=hf:{}", ok.display());
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
