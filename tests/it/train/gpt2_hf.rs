//! envgen's GPT-2 against an independent implementation, Hugging Face
//! `transformers` (torch, CPU): randomly initialised `GPT2LMHeadModel`s
//! (a small config and the 124M one) saved with `save_pretrained` load into
//! envgen with the same logits (≤ 1e-4) and the same greedy continuation;
//! and `envgen export hf RUN_DIR` writes a directory `transformers` loads
//! with the same logits as envgen. Needs `ENVGEN_TEST_PYTHON` (a python with
//! torch and transformers; scripts/services/pyref.sh provides it in CI).

use std::path::Path;
use std::process::Command;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data::Tokenizer;
use envgen_experiments::gpt2::{self, hellaswag, hf, Gpt2, ModelConfig};
use serde_json::Value;

use crate::common::reference::python;
use crate::common::{heavy_test, json_of, run_dir_of, run_ok};

/// Builds, saves and runs the reference model; writes reference.json.
const REFERENCE: &str = r#"
import json, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel

mode, directory = sys.argv[1], sys.argv[2]
tokens = json.loads(sys.argv[3])
steps = int(sys.argv[4])
torch.manual_seed(1234)
if mode == "export":
    model = GPT2LMHeadModel.from_pretrained(directory)
else:
    if mode == "small":
        config = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=48, vocab_size=300,
                            initializer_range=0.2)
    else:
        config = GPT2Config(initializer_range=0.05)  # the 124M shape
    model = GPT2LMHeadModel(config)
    # Random LayerNorm parameters and biases too (they start at 1 and 0),
    # so every tensor's layout is exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(directory)
model.eval()
with torch.no_grad():
    logits = model(torch.tensor([tokens])).logits[0]
    row = list(tokens)
    for _ in range(steps):
        row.append(int(model(torch.tensor([row])).logits[0, -1].argmax()))
    greedy = row[len(tokens):]
    # HellaSwag scoring as build-nanogpt's hellaswag.py does it: per row,
    # cross-entropy of the targets from the ending's first token on, summed
    # and averaged over the ending.
    endings = []
    if len(sys.argv) > 5:
        for ending_row, at in json.load(open(sys.argv[5])):
            out = model(torch.tensor([ending_row])).logits[0]
            losses = torch.nn.functional.cross_entropy(
                out[:-1], torch.tensor(ending_row[1:]), reduction="none")
            scored = losses[at - 1:]
            endings.append([float(scored.sum()), float(scored.mean())])
# An export read through transformers' Auto classes: the tokenizer's ids
# for "hello world" and the prompt, and generate's greedy tokens.
auto = {}
if mode == "export":
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(directory)
    auto_model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    ids = tok(sys.argv[6], return_tensors="pt")
    with torch.no_grad():
        gen = auto_model.generate(**ids, do_sample=False, max_new_tokens=steps)
    auto = {"hello": tok("hello world")["input_ids"], "prompt": ids["input_ids"][0].tolist(),
            "generated": gen[0, ids["input_ids"].shape[1]:].tolist(),
            "bos": auto_model.generation_config.bos_token_id,
            "eos": auto_model.generation_config.eos_token_id,
            "vocab": auto_model.config.vocab_size, "tokenizer_vocab": len(tok)}
json.dump({"logits": logits.tolist(), "greedy": greedy, "endings": endings, "auto": auto},
          open(directory + "/reference.json", "w"))
"#;

/// Run the reference script; its logits `[tokens][vocab]` and greedy tokens.
struct Reference {
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
    /// (summed, mean) loss of each HellaSwag row asked for.
    endings: Vec<(f64, f64)>,
    /// An export's answers through `AutoTokenizer`/`AutoModelForCausalLM`.
    auto: Value,
}

/// Run the reference script (`rows`: HellaSwag rows to score, with where
/// each ending begins; `prompt`: the text an export's tokenizer encodes).
fn reference(
    mode: &str,
    dir: &Path,
    tokens: &[u32],
    steps: usize,
    rows: &[(Vec<u32>, usize)],
    prompt: &str,
) -> Reference {
    let rows_path = std::env::temp_dir().join(format!(
        "envgen-hellaswag-rows-{}-{mode}.json",
        std::process::id()
    ));
    std::fs::write(&rows_path, serde_json::to_string(rows).unwrap()).unwrap();
    let out = Command::new(python())
        .args([
            "-c",
            REFERENCE,
            mode,
            dir.to_str().unwrap(),
            &serde_json::to_string(tokens).unwrap(),
            &steps.to_string(),
            rows_path.to_str().unwrap(),
            prompt,
        ])
        .env("OMP_NUM_THREADS", "2")
        .output()
        .expect("run ENVGEN_TEST_PYTHON");
    assert!(
        out.status.success(),
        "reference script failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let logits = doc["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    let greedy = doc["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let endings = doc["endings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e[0].as_f64().unwrap(), e[1].as_f64().unwrap()))
        .collect();
    let _ = std::fs::remove_file(&rows_path);
    Reference {
        logits,
        greedy,
        endings,
        auto: doc["auto"].clone(),
    }
}

fn envgen_logits(model: &Gpt2<Cpu>, tokens: &[u32]) -> Vec<f32> {
    gpt2::eval::logits::<Cpu>(model, tokens, &Default::default())
}

fn greedy(model: &Gpt2<Cpu>, cfg: &ModelConfig, tokens: &[u32], steps: usize) -> Vec<u32> {
    gpt2::sample(
        model,
        cfg,
        tokens,
        gpt2::SampleOptions {
            tokens: steps,
            sampling: Default::default(),
            seed: 0,
            vocab_limit: None,
        },
        &Default::default(),
    )
    .unwrap()
}

/// Largest |envgen − transformers| over every logit.
fn max_diff(ours: &[f32], theirs: &[Vec<f32>]) -> f32 {
    let flat: Vec<f32> = theirs.iter().flatten().copied().collect();
    assert_eq!(ours.len(), flat.len(), "logit counts differ");
    ours.iter()
        .zip(&flat)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

fn check_pretrained(mode: &str, tokens: &[u32], steps: usize, rows: &[(Vec<u32>, usize)]) {
    let tmp = tempfile::tempdir().unwrap();
    let want = reference(mode, tmp.path(), tokens, steps, rows, "");
    let (cfg, model) = hf::load_pretrained::<Cpu>(tmp.path(), &Default::default()).unwrap();
    let diff = max_diff(&envgen_logits(&model, tokens), &want.logits);
    // f32 sums in another order differ by rounding; a wrong layout differs
    // by O(1). Measured on the 124M shape (largest |logit| 7.1): 8.8e-6 when
    // this test runs alone, 1.4e-4 once inside the full suite (2026-11-26;
    // not explained yet, a guess: the thread pool the process ends up with
    // orders the sums). The bound, 1e-4 of the largest logit, is above both.
    let scale = want
        .logits
        .iter()
        .flatten()
        .fold(0f32, |m, x| m.max(x.abs()));
    eprintln!("{mode}: max |logit difference| {diff:e}, largest |logit| {scale}");
    assert!(
        diff <= 1e-4 * scale.max(1.0),
        "{mode}: logits differ by {diff} (largest |logit| {scale})"
    );
    assert_eq!(
        greedy(&model, &cfg, tokens, steps),
        want.greedy,
        "{mode}: greedy continuation"
    );
    // HellaSwag's per-ending losses, batched and padded on envgen's side.
    let ours = hellaswag::ending_losses::<Cpu>(&model, &cfg, rows, &Default::default());
    assert_eq!(ours.len(), want.endings.len());
    for (a, b) in ours.iter().zip(&want.endings) {
        assert!(
            (a.0 - b.0).abs() < 1e-3 && (a.1 - b.1).abs() < 1e-4,
            "{a:?} vs {b:?}"
        );
    }
}

heavy_test!(a_small_transformers_gpt2_loads_with_the_same_logits, || {
    check_pretrained("small", &[5, 17, 299, 0, 42, 42, 7, 150, 3, 88], 12, &[]);
});

heavy_test!(
    the_124m_transformers_gpt2_loads_with_the_same_logits,
    || {
        // "Hello, I'm a language model," in GPT-2 BPE.
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hellaswag/hellaswag_val_sample.jsonl"
        );
        let items = hellaswag::load(Path::new(fixture), Some(2)).unwrap();
        let rows: Vec<(Vec<u32>, usize)> = items
            .iter()
            .flat_map(|item| hellaswag::render(item, &Tokenizer::gpt2()))
            .collect();
        check_pretrained(
            "124m",
            &[15496, 11, 314, 1101, 257, 3303, 2746, 11],
            4,
            &rows,
        );
    }
);

heavy_test!(
    exported_runs_load_in_transformers_with_the_same_logits,
    |tmp| {
        // A GPT-2 BPE run with the padded embedding (50,304 rows), as
        // llm.c and the gpt2-124m preset train; small batches keep the
        // 50k-wide logits cheap.
        let doc = json_of(&run_ok(&[
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--json",
            "--set",
            "data.tokenizer=gpt2",
            "--set",
            "model.vocab_size=50304",
            "--set",
            "train.steps=6",
            "--set",
            "train.eval_every=6",
            "--set",
            "train.batch_size=4",
            "--micro-batch",
            "4",
            "--out",
            tmp.path().to_str().unwrap(),
        ]));
        let run_dir = run_dir_of(&doc);
        let hf_dir = tmp.path().join("exported");
        let out = run_ok(&[
            "export",
            "hf",
            run_dir.to_str().unwrap(),
            "--out",
            hf_dir.to_str().unwrap(),
        ]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            hf_dir.to_str().unwrap()
        );
        let bpe = Tokenizer::gpt2();
        let vocab = bpe.vocab_size();
        let prompt = "the cat sat on ";
        let tokens = bpe.encode(prompt);
        let steps = 8;
        let want = reference("export", &hf_dir, &tokens, steps, &[], prompt);
        let config = gpt2::eval::run_config(&run_dir).unwrap();
        assert_eq!(config.model.vocab_size, 50304);
        let model = hf::load(
            config.model.init::<Cpu>(&Default::default()),
            &run_dir.join("model.safetensors"),
        )
        .unwrap();
        // The export keeps the tokenizer's 50,257 rows of the run's 50,304
        // (issue #42): transformers' logits are envgen's on those rows.
        let ours: Vec<f32> = envgen_logits(&model, &tokens)
            .chunks(config.model.vocab_size)
            .flat_map(|row| row[..vocab].to_vec())
            .collect();
        let diff = max_diff(&ours, &want.logits);
        assert!(diff <= 1e-4, "exported logits differ by {diff}");
        let sampled_ids = gpt2::sample(
            &model,
            &config.model,
            &tokens,
            gpt2::SampleOptions {
                tokens: steps,
                sampling: envgen_experiments::sampling::Sampling::greedy(),
                seed: 0,
                vocab_limit: Some(vocab),
            },
            &Default::default(),
        )
        .unwrap();
        assert_eq!(sampled_ids, want.greedy);

        // transformers' Auto classes: GPT-2's ids for the text, bos/eos
        // <|endoftext|>, and generate's greedy tokens are envgen's (up to
        // an eos, where generate stops), never a padding row.
        let auto = &want.auto;
        let ids_of = |v: &Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect()
        };
        assert_eq!(ids_of(&auto["hello"]), bpe.encode("hello world"), "{auto}");
        assert_eq!(ids_of(&auto["prompt"]), tokens, "{auto}");
        assert_eq!(
            (auto["bos"].as_u64(), auto["eos"].as_u64()),
            (Some(50256), Some(50256))
        );
        assert_eq!(
            (auto["vocab"].as_u64(), auto["tokenizer_vocab"].as_u64()),
            (Some(50257), Some(50257))
        );
        let generated = ids_of(&auto["generated"]);
        assert!(
            generated.iter().all(|&t| (t as usize) < vocab),
            "{generated:?}"
        );
        let until_eos: Vec<u32> = match sampled_ids.iter().position(|&t| t == 50256) {
            Some(at) => sampled_ids[..=at].to_vec(),
            None => sampled_ids.clone(),
        };
        assert_eq!(generated, until_eos, "generate vs envgen's greedy sample");

        // envgen samples its own export through the written tokenizer.json.
        let spec = format!("hf:{}", hf_dir.display());
        let sampled = run_ok(&[
            "sample",
            "--model",
            &spec,
            "--prompt",
            prompt,
            "--tokens",
            &steps.to_string(),
            "--temperature",
            "0",
        ]);
        let before_eos: Vec<u32> = until_eos.iter().copied().filter(|&t| t != 50256).collect();
        let text = String::from_utf8_lossy(&sampled.stdout);
        assert!(
            text.starts_with(&bpe.decode(&before_eos)),
            "envgen sample printed {text:?}, greedy is {:?}",
            bpe.decode(&sampled_ids)
        );

        // `envgen eval` scores the run and its export on HellaSwag, both
        // with GPT-2's tokenizer.
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hellaswag/hellaswag_val_sample.jsonl"
        );
        for checkpoint in [&run_dir, &hf_dir] {
            let scored = json_of(&run_ok(&[
                "eval",
                "gpt2",
                "--checkpoint",
                checkpoint.to_str().unwrap(),
                "--hellaswag",
                fixture,
                "--json",
            ]));
            assert_eq!(scored["hellaswag_items"], 5, "{}", checkpoint.display());
        }
    }
);
