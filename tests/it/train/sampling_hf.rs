//! envgen's sampling against transformers' (issue #42): the probability
//! each token is drawn with, and where `envgen sample --model` takes its
//! settings from.
//!
//! A statistical test of drawn tokens would need thousands of draws per
//! setting; instead the processed next-token distribution envgen draws
//! from (`sampling::distribution`: temperature, top-k, top-p) is compared
//! with `softmax(processors(logits))`, where the processors are the
//! `LogitsProcessorList` transformers' own `_get_logits_processor` builds
//! for `generate(do_sample=True, …)` after `_prepare_generation_config`
//! filled in its defaults (top_k 50). The draw itself (one uniform number
//! over that distribution) is tested in the experiments crate.

use std::path::Path;

use envgen_experiments::sampling::{distribution, Sampling};
use serde_json::{json, Value};

use super::llama_hf::{fixture, ids};
use crate::common::{heavy_test, json_of, run, run_ok, text};

const PROCESSORS: &str = r#"
import json, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM

cases = json.load(open(sys.argv[1]))
# Any model: its generate machinery decides the processors, not its weights.
model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16,
                                     num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=2))
out = []
for case in cases:
    asked = {k: v for k, v in case["asked"].items() if v is not None}
    config, _ = model._prepare_generation_config(None, do_sample=True, **asked)
    processors = model._get_logits_processor(generation_config=config, input_ids_seq_length=1,
                                             device="cpu")
    scores = torch.tensor(case["logits"], dtype=torch.float32)
    ids = torch.zeros((scores.shape[0], 1), dtype=torch.long)
    probs = torch.softmax(processors(ids, scores), dim=-1)
    out.append({"processors": [type(p).__name__ for p in processors],
                "settings": [config.temperature, config.top_k, config.top_p],
                "probs": probs.double().tolist()})
print(json.dumps(out))
"#;

/// Deterministic logits: `rows` rows of `vocab` values, spread like a
/// language model's (a few large, many small); `step` > 0 rounds them to
/// multiples of it, which makes ties.
fn logits(seed: u64, rows: usize, vocab: usize, step: f32) -> Vec<Vec<f32>> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        // xorshift64*: no rand dependency for the test binary.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f32 / (1u64 << 53) as f32
    };
    (0..rows)
        .map(|_| {
            (0..vocab)
                .map(|_| {
                    let u: f32 = uniform().max(1e-7);
                    let x = -4.0 * (-u.ln()).ln().min(8.0); // Gumbel-like tail
                    if step > 0.0 {
                        (x / step).round() * step
                    } else {
                        x
                    }
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_next_token_distribution_is_that_of_transformers_processors() {
    // (temperature, top_k, top_p) as asked of generate; None = left to
    // transformers' defaults. Ties only where top-p is off: at the nucleus
    // edge torch's unstable sort orders equal logits as it likes.
    let cases: Vec<(Option<f32>, Option<usize>, Option<f32>, f32)> = vec![
        (Some(0.7), None, None, 0.0), // an RFT homework's generate(do_sample=True, temperature=0.7)
        (None, None, None, 0.0),      // do_sample=True alone: temperature 1, top_k 50
        (Some(0.6), Some(0), Some(0.9), 0.0),
        (Some(1.3), Some(20), Some(0.8), 0.0),
        (Some(0.5), Some(5), Some(0.95), 0.0),
        (Some(2.0), Some(0), Some(0.3), 0.0),
        (Some(0.8), Some(7), None, 0.5), // ties at the k-th logit: all kept
    ];
    let mut input = Vec::new();
    let mut ours = Vec::new();
    for (i, &(temperature, top_k, top_p, step)) in cases.iter().enumerate() {
        let rows = logits(i as u64 + 1, 3, 300, step);
        let sampling = Sampling {
            temperature: temperature.unwrap_or(1.0),
            top_k: top_k.unwrap_or(envgen_experiments::sampling::TRANSFORMERS_TOP_K),
            top_p: top_p.unwrap_or(1.0),
        };
        ours.push(
            rows.iter()
                .map(|row| distribution(row, &sampling))
                .collect::<Vec<_>>(),
        );
        input.push(json!({
            "asked": {"temperature": temperature, "top_k": top_k, "top_p": top_p},
            "logits": rows,
        }));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cases.json");
    std::fs::write(&path, serde_json::to_string(&input).unwrap()).unwrap();
    let theirs = crate::common::reference::python_json(PROCESSORS, &[path.to_str().unwrap()]);
    // The order envgen applies them in: temperature, top-k, top-p.
    assert_eq!(
        theirs[3]["processors"],
        json!([
            "TemperatureLogitsWarper",
            "TopKLogitsWarper",
            "TopPLogitsWarper"
        ]),
        "{}",
        theirs[3]
    );
    // Defaults filled by transformers: top_k 50, top_p 1.
    let settings = &theirs[0]["settings"];
    assert!(
        (settings[0].as_f64().unwrap() - 0.7).abs() < 1e-6,
        "{settings}"
    );
    assert_eq!((&settings[1], &settings[2]), (&json!(50), &json!(1.0)));
    for (i, (case, mine)) in theirs.as_array().unwrap().iter().zip(&ours).enumerate() {
        for (r, (row, want)) in mine
            .iter()
            .zip(case["probs"].as_array().unwrap())
            .enumerate()
        {
            let want: Vec<f64> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_f64().unwrap())
                .collect();
            let kept = |p: &[f64]| p.iter().filter(|&&x| x > 0.0).count();
            let support_differs = row
                .iter()
                .zip(&want)
                .position(|(a, b)| (*a > 0.0) != (*b > 0.0));
            assert_eq!(
                support_differs,
                None,
                "case {i} ({:?}) row {r}: kept {} tokens, transformers {}",
                cases[i],
                kept(row),
                kept(&want)
            );
            let diff = row
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(
                diff < 1e-6,
                "case {i} ({:?}) row {r}: probabilities differ by {diff}",
                cases[i]
            );
        }
    }
}

/// The gqa checkpoint of the llama_hf fixture, copied with
/// `generation` as its generation_config.json.
fn with_generation_config(name: &str, generation: &Value) -> String {
    let fx = fixture();
    let copy = fx.root.join(name);
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).unwrap();
    for f in std::fs::read_dir(fx.root.join("gqa")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
    }
    std::fs::write(copy.join("generation_config.json"), generation.to_string()).unwrap();
    format!("hf:{}", Path::new(&copy).display())
}

heavy_test!(
    sample_takes_the_checkpoints_generation_config_and_flags_override_it,
    || {
        let fx = fixture();
        let cli = &fx.reference["cli"];
        let prompt = cli["prompt"].as_str().unwrap();
        let spec = with_generation_config(
            "gqa-sampling",
            &json!({"do_sample": true, "temperature": 0.7, "top_p": 0.9,
                    "eos_token_id": [1, 5], "bos_token_id": 0}),
        );
        let sample = |extra: &[&str]| {
            let base = [
                "sample", "--model", &spec, "--prompt", prompt, "--tokens", "10", "--json",
            ];
            json_of(&run_ok(&[&base[..], extra].concat()))
        };
        let doc = sample(&[]);
        let d = &doc["decoding"];
        let setting = |key: &str| (d[key]["value"].clone(), d[key]["from"].clone());
        assert_eq!(
            setting("do_sample"),
            (json!(true), json!("generation_config.json"))
        );
        assert_eq!(setting("top_k"), (json!(50), json!("transformers default")));
        assert_eq!(
            setting("eos_token_ids"),
            (json!([1, 5]), json!("generation_config.json"))
        );
        assert!((d["temperature"]["value"].as_f64().unwrap() - 0.7).abs() < 1e-6);
        assert!((d["top_p"]["value"].as_f64().unwrap() - 0.9).abs() < 1e-6);
        // A second eos of the list stops a row too.
        let tokens = ids(&doc["tokens"]);
        if let Some(at) = tokens.iter().position(|t| [1, 5].contains(t)) {
            assert_eq!(at + 1, tokens.len(), "{doc}");
            assert_eq!(doc["finish"], "eos");
        }
        // Flags win: --temperature 0 is greedy (transformers' greedy text),
        // --top-k replaces the default.
        let greedy = sample(&["--temperature", "0"]);
        assert_eq!(greedy["decoding"]["do_sample"]["from"], "flag");
        let want = ids(&cli["tokens"]);
        let got = ids(&greedy["tokens"]);
        let stop = want
            .iter()
            .position(|&t| t == 5)
            .map_or(want.len(), |at| at + 1);
        assert_eq!(got, want[..stop], "{greedy}");
        let top_k = sample(&["--top-k", "3", "--seed", "2"]);
        assert_eq!(
            top_k["decoding"]["top_k"],
            json!({"value": 3, "from": "flag"})
        );
        // Text mode says the settings on stderr.
        let out = run_ok(&[
            "sample", "--model", &spec, "--prompt", prompt, "--tokens", "2",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("do_sample true: generation_config.json")
                && err.contains("top_k 50 (transformers default)"),
            "{err}"
        );
        // --top-k on a greedy checkpoint would do nothing: refused, exit 2.
        let greedy_spec = with_generation_config("gqa-greedy", &json!({"eos_token_id": 1}));
        let out = run(&[
            "sample",
            "--model",
            &greedy_spec,
            "--prompt",
            prompt,
            "--top-k",
            "5",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("fix:"), "{}", text(&out));
        // A wrong value in the file names the file, the key and the value.
        let bad = with_generation_config("gqa-bad", &json!({"top_p": 2.5}));
        let out = run(&["sample", "--model", &bad, "--prompt", prompt]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = text(&out);
        assert!(
            err.contains("generation_config.json") && err.contains("top_p") && err.contains("2.5"),
            "{err}"
        );
    }
);
