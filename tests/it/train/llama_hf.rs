//! envgen's Llama-family model against Hugging Face `transformers` (torch,
//! CPU). One Python run makes, with a fixed seed, five randomly initialised
//! tiny checkpoints with `save_pretrained` and a `tokenizers` BPE trained on
//! a paragraph of text:
//!
//! - `mha`: LlamaForCausalLM, 4 heads = 4 key/value heads, tied head (SmolLM2's shape);
//! - `gqa`: 4 heads on 2 key/value heads, separate head (its config.json
//!   without `tie_word_embeddings`: the class default, untied, applies),
//!   rope_theta 500000, `attention_bias` (q/k/v/o biases);
//! - `qwen2`: Qwen2ForCausalLM (q/k/v biases), GQA, saved in 5 shards with
//!   `model.safetensors.index.json`, also without `tie_word_embeddings`;
//! - `llama3`: Llama 3.1's RoPE scaling, saved in bfloat16;
//! - `linear`: linear RoPE scaling (position interpolation, factor 3);
//!
//! and writes their logits for a few token sequences and their greedy
//! continuations (`generate(do_sample=False)`). envgen must load each
//! through `pretrained::load`, match the logits to 1e-4 and the greedy
//! tokens exactly, generating with the KV cache (all sequences in one
//! batch) and without it (the full forward at every step). Needs
//! `ENVGEN_TEST_PYTHON` (scripts/services/pyref.sh builds it in CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data::Tokenizer;
use envgen_experiments::gpt2;
use envgen_experiments::llama::{self, GenerateOptions, Llama};
use envgen_experiments::pretrained::{self, Pretrained};
use serde_json::Value;

use crate::common::{heavy_test, run, run_ok, text};

const REFERENCE: &str = r#"
import json, os, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

root = sys.argv[1]
torch.manual_seed(1234)
text = ("the cat sat on the mat. the dog ate the bone. a bird sang in the tree, "
        "and the cat watched the bird while the dog slept by the door.") * 4
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([text], trainers.BpeTrainer(
    vocab_size=300, special_tokens=["<s>", "</s>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))

shape = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=128, rms_norm_eps=1e-5,
             bos_token_id=0, eos_token_id=1, initializer_range=0.1)
models_ = {
    "mha": (LlamaForCausalLM, LlamaConfig(num_key_value_heads=4, tie_word_embeddings=True, **shape), {}, None),
    "gqa": (LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, tie_word_embeddings=False,
                                          rope_theta=500000.0, attention_bias=True, **shape), {}, None),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(num_key_value_heads=2, tie_word_embeddings=False, **shape),
              {"max_shard_size": "100KB"}, None),
    "llama3": (LlamaForCausalLM, LlamaConfig(num_key_value_heads=4, tie_word_embeddings=True,
               rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 16}, **shape), {}, torch.bfloat16),
    "linear": (LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, tie_word_embeddings=False,
               rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 3.0},
               **shape), {}, None),
}
sequences = [[0, 5, 17, 299, 42, 42, 7, 150, 3, 88, 260, 31], [0, 200, 100], [9, 8, 7, 6, 5, 4]]
out = {}
for name, (cls, config, save_args, dtype) in models_.items():
    model = cls(config)
    # Norm weights start at 1 and biases at 0: randomise them so that
    # every tensor's layout matters.
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    if dtype is not None:
        model = model.to(dtype)
    directory = os.path.join(root, name)
    model.save_pretrained(directory, **save_args)
    if name in ("gqa", "qwen2"):
        # Their config.json without tie_word_embeddings: transformers'
        # default for the class (untied) applies, and envgen must read the
        # same (issue #42: it tied them).
        path = os.path.join(directory, "config.json")
        saved = json.load(open(path))
        assert saved.pop("tie_word_embeddings", False) is False
        json.dump(saved, open(path, "w"))
    tok.save(os.path.join(directory, "tokenizer.json"))
    # The reference is what transformers loads from the directory, in f32
    # (bf16 weights widened, as envgen does; RoPE's frequencies computed
    # afresh, not kept in bf16 from the live model).
    model = cls.from_pretrained(directory, dtype=torch.float32).eval()
    logits, greedy = [], []
    with torch.no_grad():
        for seq in sequences:
            ids = torch.tensor([seq])
            logits.append(model(ids).logits[0].flatten().tolist())
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=10, eos_token_id=1, pad_token_id=1)
            greedy.append(gen[0, len(seq):].tolist())
    out[name] = {"logits": logits, "greedy": greedy}
    if name == "gqa":
        prompt = "the cat sat on the"
        ids = tok.encode(prompt).ids
        gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=10, eos_token_id=1, pad_token_id=1)
        new = gen[0, len(ids):].tolist()
        out["cli"] = {"model": name, "prompt": prompt, "tokens": new,
                      "text": tok.decode(new, skip_special_tokens=True)}
# The chat template test: the gqa checkpoint with a tokenizer saved by
# transformers (tokenizer_config.json, chat_template.jinja) and a template
# that leans on trim_blocks/lstrip_blocks, special tokens, slicing,
# Python string methods and raise_exception.
import shutil
from transformers import PreTrainedTokenizerFast
chat_dir = os.path.join(root, "chat")
shutil.copytree(os.path.join(root, "gqa"), chat_dir)
hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
hf_tok.chat_template = """{% if messages[0]['role'] == 'system' %}
    {% set system = messages[0]['content'] | trim %}
    {% set turns = messages[1:] %}
{% else %}
    {% set system = 'the cat and the dog' %}
    {% set turns = messages %}
{% endif %}
{{ bos_token }}system: {{ system }}{{ eos_token }}
{% for message in turns %}
    {% if message['role'] not in ['user', 'assistant'] %}
        {{ raise_exception('only user and assistant turns follow the system turn, not ' + message['role']) }}
    {% endif %}
{{ message['role'] }}: {{ message['content'].strip() }}{{ eos_token }}
{% endfor %}
{% if add_generation_prompt %}
assistant:{% endif %}
"""
hf_tok.save_pretrained(chat_dir)
conversations = [
    ([{"role": "user", "content": " the cat sat on the "}], True),
    ([{"role": "system", "content": "a bird sang "}, {"role": "user", "content": "the dog ate"}], True),
    ([{"role": "user", "content": "the mat"}, {"role": "assistant", "content": "the bone"},
      {"role": "user", "content": "the tree"}], False),
]
chat = []
for messages, gen in conversations:
    text_ = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    chat.append({"messages": messages, "add_generation_prompt": gen, "text": text_,
                 "ids": hf_tok(text_, add_special_tokens=False)["input_ids"]})
chat_model = LlamaForCausalLM.from_pretrained(chat_dir, dtype=torch.float32).eval()
system_user = chat[1]
ids = torch.tensor([system_user["ids"]])
with torch.no_grad():
    gen = chat_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=10, eos_token_id=1, pad_token_id=1)
out["chat"] = {"conversations": chat, "greedy": gen[0, ids.shape[1]:].tolist()}
out["sequences"] = sequences
json.dump(out, open(os.path.join(root, "reference.json"), "w"))
"#;

/// The checkpoints and transformers' answers, made once per test process.
pub(crate) struct Fixture {
    pub(crate) root: PathBuf,
    pub(crate) reference: Value,
}

pub(crate) fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let python = crate::common::reference::python();
        let root =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("llama_hf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let out = Command::new(python)
            .args(["-c", REFERENCE, root.to_str().unwrap()])
            .env("OMP_NUM_THREADS", "2")
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .expect("run ENVGEN_TEST_PYTHON");
        assert!(
            out.status.success(),
            "reference script failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let reference =
            serde_json::from_str(&std::fs::read_to_string(root.join("reference.json")).unwrap())
                .unwrap();
        Fixture { root, reference }
    })
}

pub(crate) fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn load(name: &str) -> Llama<Cpu> {
    let dir = fixture().root.join(name);
    match pretrained::load::<Cpu>(&dir, &Default::default()).unwrap() {
        Pretrained::Llama(model) => model,
        Pretrained::Gpt2 { .. } => panic!("{name} loaded as GPT-2"),
    }
}

fn logits(model: &Llama<Cpu>, seq: &[u32]) -> Vec<f32> {
    llama::generate::logits_of(model, seq, &Default::default())
}

/// Greedy without the cache: the full forward over the whole row at every
/// step, stopping at transformers' eos (1).
fn uncached_greedy(model: &Llama<Cpu>, seq: &[u32], steps: usize) -> Vec<u32> {
    let mut row = seq.to_vec();
    for _ in 0..steps {
        let all = logits(model, &row);
        let vocab = all.len() / row.len();
        let last = &all[(row.len() - 1) * vocab..];
        let next = last
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &v)| if v > b.1 { (i, v) } else { b },
            )
            .0 as u32;
        row.push(next);
        if next == 1 {
            break;
        }
    }
    row[seq.len()..].to_vec()
}

fn check(name: &str) {
    let fx = fixture();
    let want = &fx.reference[name];
    let model = load(name);
    let sequences: Vec<Vec<u32>> = fx.reference["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    for (seq, theirs) in sequences.iter().zip(want["logits"].as_array().unwrap()) {
        let ours = logits(&model, seq);
        let theirs: Vec<f32> = theirs
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{name}: logit counts");
        let diff = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        let scale = theirs.iter().fold(0f32, |m, x| m.max(x.abs()));
        eprintln!("{name}: max |logit difference| {diff:e}, largest |logit| {scale}");
        assert!(diff <= 1e-4, "{name}: logits differ by {diff} on {seq:?}");
    }
    let greedy: Vec<Vec<u32>> = want["greedy"].as_array().unwrap().iter().map(ids).collect();
    // The eos comes from the checkpoint (config.json / generation_config.json).
    assert_eq!(model.config().eos_token_ids, vec![1], "{name}: eos ids");
    let opts = GenerateOptions {
        max_new_tokens: 10,
        eos_token_ids: model.config().eos_token_ids.clone(),
        ..Default::default()
    };
    // All sequences in one batch (different prompt lengths), with the cache.
    let batch = llama::generate(&model, &sequences, &opts, None, &Default::default()).unwrap();
    for ((seq, got), theirs) in sequences.iter().zip(&batch).zip(&greedy) {
        assert_eq!(&got.tokens, theirs, "{name}: cached greedy of {seq:?}");
        assert_eq!(
            &uncached_greedy(&model, seq, 10),
            theirs,
            "{name}: uncached greedy of {seq:?}"
        );
    }
}

heavy_test!(a_tied_multi_head_llama_matches_transformers, || {
    check("mha");
});

heavy_test!(
    a_grouped_query_llama_with_its_rope_theta_and_biases_matches_transformers,
    || {
        check("gqa");
    }
);

heavy_test!(a_sharded_qwen2_with_qkv_biases_matches_transformers, || {
    assert!(fixture()
        .root
        .join("qwen2/model.safetensors.index.json")
        .is_file());
    assert!(!fixture().root.join("qwen2/model.safetensors").exists());
    check("qwen2");
});

heavy_test!(
    a_bf16_llama3_scaled_rope_checkpoint_matches_transformers,
    || {
        check("llama3");
    }
);

heavy_test!(
    a_linearly_scaled_rope_checkpoint_matches_transformers,
    || {
        check("linear");
    }
);

heavy_test!(envgen_sample_prints_transformers_greedy_text, || {
    let fx = fixture();
    let cli = &fx.reference["cli"];
    let dir = fx.root.join(cli["model"].as_str().unwrap());
    let spec = format!("hf:{}", dir.display());
    let args = [
        "sample",
        "--model",
        &spec,
        "--prompt",
        cli["prompt"].as_str().unwrap(),
        "--tokens",
        "10",
    ];
    // No --temperature: greedy, as transformers when neither the
    // checkpoint's generation_config.json nor the caller asks to sample.
    let out = run_ok(&args);
    let want = cli["text"].as_str().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{want}\n"));
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let doc = crate::common::json_of(&run_ok(&json_args));
    assert_eq!(ids(&doc["tokens"]), ids(&cli["tokens"]));
    assert_eq!(doc["text"], want);
    let decoding = &doc["decoding"];
    assert_eq!(decoding["do_sample"]["value"], false, "{doc}");
    assert_eq!(decoding["do_sample"]["from"], "transformers default");
    // save_pretrained wrote generation_config.json with the eos.
    assert_eq!(decoding["eos_token_ids"]["value"], serde_json::json!([1]));
    assert_eq!(decoding["eos_token_ids"]["from"], "generation_config.json");
});

// `--batch N` continues the prompt N times in one batch (RFT's sampling):
// each row draws from its own seed, so row 0 of a sampled batch is the
// single-row run with the same seed, and greedy rows are all
// transformers' greedy continuation; `--json` times the whole batch.
heavy_test!(envgen_sample_batches_rows_each_with_its_own_seed, || {
    let fx = fixture();
    let cli = &fx.reference["cli"];
    let spec = format!(
        "hf:{}",
        fx.root.join(cli["model"].as_str().unwrap()).display()
    );
    let prompt = cli["prompt"].as_str().unwrap();
    let sample = |extra: &[&str]| {
        let base = [
            "sample", "--model", &spec, "--prompt", prompt, "--tokens", "10",
        ];
        crate::common::json_of(&run_ok(&[&base[..], extra, &["--json"]].concat()))
    };
    let one = sample(&["--temperature", "1.5", "--seed", "7"]);
    let four = sample(&["--temperature", "1.5", "--seed", "7", "--batch", "4"]);
    assert_eq!(one["rows"], 1);
    assert_eq!(four["rows"], 4);
    assert_eq!(
        ids(&four["tokens"]),
        ids(&one["tokens"]),
        "row 0 depends on the batch"
    );
    let generated = four["generated_tokens"].as_u64().unwrap();
    assert!(generated > ids(&one["tokens"]).len() as u64, "{four}");
    assert!(generated <= 40, "{four}");
    let rate = four["tokens_per_s"].as_f64().unwrap();
    let seconds = four["generate_s"].as_f64().unwrap();
    assert!(
        (rate * seconds - generated as f64).abs() < 1e-6 * generated as f64,
        "{four}"
    );
    // Greedy: every row is transformers' greedy continuation.
    let out = run_ok(&[
        "sample",
        "--model",
        &spec,
        "--prompt",
        prompt,
        "--tokens",
        "10",
        "--temperature",
        "0",
        "--batch",
        "3",
    ]);
    let want = cli["text"].as_str().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout,
        (0..3)
            .map(|i| format!("--- row {i} ---\n{want}\n"))
            .collect::<String>()
    );
});

// What envgen does not compute is refused by name (exit 2), never loaded
// wrong: an unknown RoPE scaling, a missing tokenizer, a missing shard.
heavy_test!(
    unsupported_or_incomplete_checkpoints_are_refused_by_name,
    || {
        let fx = fixture();
        let copy = fx.root.join("broken");
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).unwrap();
        for f in std::fs::read_dir(fx.root.join("qwen2")).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
        }
        let spec = format!("hf:{}", copy.display());
        let sample = |expect: &str| {
            let out = run(&[
                "sample", "--model", &spec, "--prompt", "the", "--tokens", "2",
            ]);
            assert_eq!(out.status.code(), Some(2), "{}", text(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(expect), "{expect}: {}", text(&out));
            assert!(err.contains("fix:"), "{}", text(&out));
        };
        let config = copy.join("config.json");
        let original = std::fs::read_to_string(&config).unwrap();
        let mut doc: Value = serde_json::from_str(&original).unwrap();
        doc["rope_parameters"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
        std::fs::write(&config, doc.to_string()).unwrap();
        sample("rope_parameters.rope_type");
        doc["rope_parameters"] = serde_json::json!({"rope_type": "default"});
        doc["hidden_act"] = "gelu".into();
        std::fs::write(&config, doc.to_string()).unwrap();
        sample("hidden_act");
        // This untied checkpoint said to be tied: its lm_head.weight is not
        // the embedding, and the contradiction is refused (issue #42).
        doc["hidden_act"] = "silu".into();
        doc["tie_word_embeddings"] = true.into();
        std::fs::write(&config, doc.to_string()).unwrap();
        sample("`tie_word_embeddings` is true");
        std::fs::write(&config, &original).unwrap();
        std::fs::remove_file(copy.join("tokenizer.json")).unwrap();
        sample("tokenizer.json");
        std::fs::remove_file(copy.join("model-00003-of-00005.safetensors")).unwrap();
        sample("model-00003-of-00005.safetensors");
        std::fs::remove_file(copy.join("model.safetensors.index.json")).unwrap();
        sample("model.safetensors.index.json");
        let out = run(&["sample", "--model", copy.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("hf:DIR"));
    }
);

// A GPT-2 directory goes through the same `--model hf:DIR`: without a
// tokenizer.json it is read with GPT-2's BPE, and prints what envgen's
// GPT-2 sampler gives; a prompt its vocabulary cannot hold is exit 2.
heavy_test!(envgen_sample_reads_gpt2_directories_too, |tmp| {
    let device = Default::default();
    let cfg = gpt2::ModelConfig {
        n_layer: 1,
        n_head: 2,
        n_embd: 16,
        block_size: 32,
        vocab_size: 50257,
        dropout: 0.0,
    };
    let model = cfg.init::<Cpu>(&device);
    gpt2::hf::save_pretrained(&model, &cfg, tmp.path()).unwrap();
    let tokenizer = Tokenizer::gpt2();
    let options = gpt2::SampleOptions {
        tokens: 6,
        sampling: Default::default(),
        seed: 0,
        vocab_limit: None,
    };
    let prompt = tokenizer.encode("Hello, I'm");
    let want = tokenizer.decode(&gpt2::sample(&model, &cfg, &prompt, options, &device).unwrap());
    let spec = format!("hf:{}", tmp.path().display());
    let args = [
        "sample",
        "--model",
        &spec,
        "--prompt",
        "Hello, I'm",
        "--tokens",
        "6",
        "--temperature",
        "0",
    ];
    let out = run_ok(&args);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{want}\n"));
    // One row only: GPT-2 has no batched sampling here.
    let out = run(&[&args[..], &["--batch", "2"]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--batch applies to Llama-family"),
        "{}",
        text(&out)
    );
    // A length no memory holds is refused before the model runs (it
    // aborted on allocation, issue #40).
    let mut huge = args.to_vec();
    huge[6] = "1000000000000000";
    let out = run(&huge);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--tokens") && text(&out).contains("memory"),
        "{}",
        text(&out)
    );

    let small = gpt2::ModelConfig {
        vocab_size: 40,
        ..cfg
    };
    gpt2::hf::save_pretrained(&small.init::<Cpu>(&device), &small, tmp.path()).unwrap();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("vocab_size 40"),
        "{}",
        text(&out)
    );
});

// The chat template of a checkpoint saved by transformers
// (chat_template.jinja, tokenizer_config.json's special tokens) renders
// to transformers' `apply_chat_template` text and token ids, and `envgen
// sample --chat` continues it with transformers' greedy tokens.
heavy_test!(
    chat_templates_render_and_generate_as_in_transformers,
    || {
        let fx = fixture();
        let chat = &fx.reference["chat"];
        let dir = fx.root.join("chat");
        let template = pretrained::ChatTemplate::load(&dir)
            .unwrap()
            .expect("saved template");
        let tokenizer = pretrained::HfTokenizer::load(&dir, false).unwrap();
        let conversations = chat["conversations"].as_array().unwrap();
        for c in conversations {
            let messages: Vec<pretrained::Message> = c["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    pretrained::Message::new(
                        m["role"].as_str().unwrap(),
                        m["content"].as_str().unwrap(),
                    )
                })
                .collect();
            let generation_prompt = c["add_generation_prompt"].as_bool().unwrap();
            let rendered = template.render(&messages, generation_prompt).unwrap();
            assert_eq!(rendered, c["text"].as_str().unwrap(), "{messages:?}");
            assert_eq!(tokenizer.encode_plain(&rendered).unwrap(), ids(&c["ids"]));
        }
        // The template's own refusal, quoted, exit 2.
        let e = template
            .render(&[pretrained::Message::new("tool", "x")], true)
            .unwrap_err();
        assert_eq!(envgen_experiments::error::exit_code_of(&e), 2);
        assert!(e.to_string().contains("not tool"), "{e}");

        let spec = format!("hf:{}", dir.display());
        let system_user = &conversations[1]["messages"];
        let doc = crate::common::json_of(&run_ok(&[
            "sample",
            "--model",
            &spec,
            "--chat",
            "--system",
            system_user[0]["content"].as_str().unwrap(),
            "--prompt",
            system_user[1]["content"].as_str().unwrap(),
            "--tokens",
            "10",
            "--temperature",
            "0",
            "--json",
        ]));
        assert_eq!(ids(&doc["prompt_tokens"]), ids(&conversations[1]["ids"]));
        assert_eq!(ids(&doc["tokens"]), ids(&chat["greedy"]));

        // A checkpoint without a template: --chat is refused by name.
        let plain = format!("hf:{}", fx.root.join("gqa").display());
        let out = run(&["sample", "--model", &plain, "--chat", "--prompt", "x"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("no chat template"), "{}", text(&out));
    }
);
