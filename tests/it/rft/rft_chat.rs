//! RFT prompts through a checkpoint's chat template (issue #23), against
//! transformers: a random-init SmolLM2-shaped checkpoint, saved by
//! `save_pretrained` with SmolLM2-Instruct's ChatML template, fed to
//! `envgen run rft` with `task.prompt_format = "chat"`. The ids envgen
//! prompts with (`stages/prompt.json`) are `apply_chat_template`'s; the
//! `smollm2-360m` preset runs end to end on it, and refuses to run without
//! a local copy of its checkpoint. Needs `ENVGEN_TEST_PYTHON`.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::Value;

use crate::common::reference::python_json;
use crate::common::{expect_success, heavy_test, json_of, read_json, run, run_dir_of, text};

/// A SmolLM2-Instruct-shaped checkpoint, tiny: LlamaForCausalLM with a
/// tied head and grouped-query attention, a byte-level BPE whose first
/// tokens are SmolLM2's specials (0 `<|endoftext|>`, 1 `<|im_start|>`,
/// 2 `<|im_end|>`), tokenizer_config.json from PreTrainedTokenizerFast with
/// SmolLM2-Instruct's chat template (ChatML, a default system turn), and a
/// generation_config.json listing two eos ids, as some checkpoints do.
const SMOLLM2_CHAT: &str = r#"
import json, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = sys.argv[1]
torch.manual_seed(3)
text = ["How many grams are in 5 kilograms?", "1 kilogram = 1000 grams, so 5 * 1000 = 5000. <answer>5000</answer>",
        "Convert 3 kilometers to meters.", "1 kilometer = 1000 meters, so 3 * 1000 = 3000. <answer>3000</answer>",
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face"] * 8
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=360, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
config = LlamaConfig(vocab_size=360, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                     pad_token_id=2, initializer_range=0.05)
LlamaForCausalLM(config).save_pretrained(out)
GenerationConfig(bos_token_id=1, eos_token_id=[2, 0], pad_token_id=2).save_pretrained(out)
hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                 unk_token="<|endoftext|>", pad_token="<|im_end|>")
hf_tok.chat_template = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
hf_tok.save_pretrained(out)
print(json.dumps({"ok": True}))
"#;

/// transformers' ids for a question: the open conversation
/// (`add_generation_prompt=True`) and the answered one up to the end of
/// the assistant's turn (the newline between turns is not the model's).
const CHAT_IDS: &str = r#"
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
question, answer, system = sys.argv[2], sys.argv[3], sys.argv[4]
messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
def ids(text):
    return tok(text, add_special_tokens=False)["input_ids"]
prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
answered = tok.apply_chat_template(messages + [{"role": "assistant", "content": answer}], tokenize=False)
assert answered.endswith("<|im_end|>\n"), answered
print(json.dumps({"prompt": prompt, "prompt_ids": ids(prompt), "turn_ids": ids(answered[:-1])}))
"#;

/// The checkpoint, made once per test process.
fn checkpoint() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("smollm2-chat");
        python_json(SMOLLM2_CHAT, &[dir.to_str().unwrap()]);
        (tmp, dir)
    })
    .1
}

fn rft(preset: &str, out: &Path, sets: &[String]) -> Output {
    let mut args = vec!["run", "rft", "--preset", preset, "--backend", "cpu"];
    args.extend(["--json", "--out", out.to_str().unwrap()]);
    for set in sets {
        args.extend(["--set", set]);
    }
    run(&args)
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not ids: {v}"))
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect()
}

/// Few questions and steps: the plumbing, not the science.
fn small(init: &Path) -> Vec<String> {
    [
        format!("model.init=hf:{}", init.display()),
        "task.train_questions=8".into(),
        "task.worked_questions=8".into(),
        "task.validation_questions=4".into(),
        "task.max_completion_tokens=16".into(),
        "pretrain.train.steps=3".into(),
        "pretrain.train.eval_every=3".into(),
        "pretrain.train.checkpoint_every=3".into(),
        "finetune.train.steps=2".into(),
        "finetune.train.eval_every=2".into(),
        "finetune.train.checkpoint_every=2".into(),
        "datagen.oversample=2".into(),
    ]
    .into()
}

// `envgen run rft --preset tiny-llama --set model.init=hf:DIR --set
// task.prompt_format=chat` completes, and the question it records reaches
// the model as transformers' `apply_chat_template(..., add_generation_prompt
// =True)` ids, without and with a system prompt; the worked answer it
// trains on ends with `<|im_end|>` exactly where transformers' rendering of
// the answered turn does, and generation stops on both of
// generation_config.json's eos ids.
heavy_test!(
    chat_prompts_are_transformers_chat_template_ids_and_the_run_completes,
    || {
        let ckpt = checkpoint();
        let tmp = tempfile::tempdir().unwrap();
        for system in [None, Some("You convert units. Be concise.")] {
            let started = Instant::now();
            let mut sets = small(ckpt);
            sets.push("task.prompt_format=chat".into());
            if let Some(system) = system {
                sets.push(format!("task.system_prompt={}", Value::from(system)));
            }
            let doc = json_of(&expect_success(rft("tiny-llama", tmp.path(), &sets)));
            eprintln!(
                "rft chat run (system {system:?}) in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            assert_eq!(doc["summary"]["status"], "completed", "{doc}");
            assert_eq!(doc["summary"]["metrics"]["generated"], 16, "{doc}");
            let dir = run_dir_of(&doc);
            let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
            assert!(config.contains("prompt_format = \"chat\""), "{config}");
            let record: Value = read_json(&dir.join("stages/prompt.json"));
            assert_eq!(record["format"], "chat", "{record}");
            assert_eq!(record["end_of_completion"], "<|im_end|>", "{record}");
            let completion = record["completion"].as_str().unwrap();
            let answer = completion.strip_suffix("<|im_end|>").unwrap();
            let reference = python_json(
                CHAT_IDS,
                &[
                    ckpt.to_str().unwrap(),
                    record["question"].as_str().unwrap(),
                    answer,
                    system.unwrap_or(""),
                ],
            );
            assert_eq!(record["prompt"], reference["prompt"], "{system:?}");
            assert_eq!(
                ids(&record["prompt_ids"]),
                ids(&reference["prompt_ids"]),
                "{system:?}"
            );
            let mut turn_ids = ids(&record["prompt_ids"]);
            turn_ids.extend(ids(&record["completion_ids"]));
            assert_eq!(turn_ids, ids(&reference["turn_ids"]), "{system:?}");
            assert_eq!(ids(&record["stop_token_ids"]), vec![2, 0], "{record}");
            // The fine-tuned copy keeps the template (`sample --chat` reads it).
            assert!(
                dir.join("hf/chat_template.jinja").is_file() || {
                    let config: Value = read_json(&dir.join("hf/tokenizer_config.json"));
                    config["chat_template"].is_string()
                }
            );
        }
    }
);

// The `smollm2-360m` preset: without a local copy of its checkpoint it
// exits 2 with the download command, the size and the `--set` to use,
// before any run directory exists; given a SmolLM2-shaped checkpoint and
// fewer questions and steps, its keys (chat prompts, optimizer, hardware)
// run end to end. Then the `homework` preset's shape on the same
// checkpoint (issue #42): no stage (a), few-shot turns in the prompt,
// LoRA on every linear layer, stage (c)'s steps from `finetune.epochs`.
heavy_test!(
    the_smollm2_preset_needs_a_local_checkpoint_and_runs_on_one,
    |tmp| {
        let runs = tmp.path().join("runs");
        let out = rft("smollm2-360m", &runs, &[]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(2), "{msg}");
        for says in [
            "huggingface-cli download HuggingFaceTB/SmolLM2-360M-Instruct --local-dir DIR",
            "724 MB",
            "--set model.init=hf:DIR",
        ] {
            assert!(msg.contains(says), "{says}: {msg}");
        }
        assert!(!runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none());

        let started = Instant::now();
        let mut sets = small(checkpoint());
        sets.retain(|s| {
            !s.starts_with("task.max_completion_tokens") && !s.starts_with("task.worked_questions")
        });
        sets.extend([
            "task.worked_questions=4".into(),
            "pretrain.train.batch_size=4".into(),
            "finetune.train.batch_size=4".into(),
            "pretrain.train.eval_batches=1".into(),
            "finetune.train.eval_batches=1".into(),
        ]);
        let doc = json_of(&expect_success(rft("smollm2-360m", &runs, &sets)));
        eprintln!(
            "rft smollm2-360m preset, reduced, in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(doc["summary"]["status"], "completed", "{doc}");
        let dir = run_dir_of(&doc);
        let text = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        let config: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            config["task"]["prompt_format"].as_str(),
            Some("chat"),
            "{text}"
        );
        for stage in ["pretrain", "finetune"] {
            let optim = &config[stage]["optim"];
            assert_eq!(optim["lr"].as_float(), Some(2e-5), "{text}");
            assert_eq!(optim["beta2"].as_float(), Some(0.999), "{text}");
        }
        let record: Value = read_json(&dir.join("stages/prompt.json"));
        assert_eq!(record["format"], "chat", "{record}");

        // `homework`: a random checkpoint answers nothing right, so stage
        // (c) trains on the worked answers too (`train_on`), not on the
        // kept samples alone.
        let started = Instant::now();
        let mut sets = small(checkpoint());
        sets.retain(|s| {
            !s.starts_with("pretrain.")
                && !s.starts_with("finetune.train.steps")
                && !s.starts_with("task.worked_questions")
        });
        sets.extend([
            "task.worked_questions=4".into(),
            "task.few_shot=2".into(),
            "finetune.train.batch_size=4".into(),
            "finetune.train.eval_batches=1".into(),
            "finetune.epochs=2".into(),
            "finetune.train_on=worked_and_kept".into(),
        ]);
        let doc = json_of(&expect_success(rft("homework", &runs, &sets)));
        eprintln!(
            "rft homework preset, reduced, in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(doc["summary"]["status"], "completed", "{doc}");
        let dir = run_dir_of(&doc);
        assert!(!dir.join("stages/pretrain").exists());
        let metrics = &doc["summary"]["metrics"];
        assert_eq!(
            metrics["accuracy_before"], metrics["accuracy_base"],
            "{doc}"
        );
        let examples = metrics["rounds"][0]["finetune_examples"].as_u64().unwrap();
        assert_eq!(examples, 4 + metrics["kept"].as_u64().unwrap(), "{doc}");
        let steps = metrics["finetune_steps"].as_u64().unwrap();
        // ceil(examples x 2 epochs / batch 4)
        assert!(
            steps * 4 >= examples * 2 && (steps - 1) * 4 < examples * 2,
            "{doc}"
        );
        assert_eq!(metrics["finetune_epochs"], 2, "{doc}");
        let record: Value = read_json(&dir.join("stages/prompt.json"));
        let prompt = record["prompt"].as_str().unwrap();
        assert_eq!(prompt.matches("<|im_start|>user").count(), 3, "{prompt}");
        assert_eq!(
            prompt.matches("<|im_start|>assistant").count(),
            3,
            "{prompt}"
        );
        let adapter: Value = read_json(&dir.join("hf/adapter/adapter_config.json"));
        let mut targets: Vec<&str> = adapter["target_modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        targets.sort();
        let all = [
            "down_proj",
            "gate_proj",
            "k_proj",
            "o_proj",
            "q_proj",
            "up_proj",
            "v_proj",
        ];
        assert_eq!(targets, all, "{adapter}");
        assert_eq!(adapter["lora_alpha"].as_f64(), Some(32.0), "{adapter}");
        assert_eq!(adapter["r"], 8, "{adapter}");
    }
);
