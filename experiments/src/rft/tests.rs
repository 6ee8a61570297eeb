//! Unit tests of the `rft` config, stages and evaluation.

use crate::engine;
use crate::engine::rundir::Status;
use crate::gpt2::lora::LoraConfig;
use crate::gpt2::{hf, ModelConfig};
use crate::rft::completion::Tokenized;
use crate::rft::config::{load_config, FinetuneMode, RftConfig, StageConfig, PRESETS};
use crate::rft::eval::{GptSampler, ADAPTER_FILE, MODEL_FILE};
use crate::rft::stages::train_in;
use crate::rft::tokens::tokenize;
use crate::rft::train::{completion_loss, RftTrainTask};
use burn::tensor::ElementConversion;

fn preset() -> RftConfig {
    load_config(PRESETS[0].1, "preset tiny", &[])
        .unwrap()
        .science
}

fn with(overrides: &[&str]) -> anyhow::Result<RftConfig> {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Ok(load_config(PRESETS[0].1, "preset tiny", &overrides)?.science)
}

#[test]
fn tiny_preset_is_valid_and_lora_is_configured_in_lora_mode_only() {
    let config = preset();
    assert_eq!(config.datagen.oversample, 16);
    assert_eq!(config.datagen.temperature, 0.7);
    assert_eq!(config.finetune.mode, FinetuneMode::Full);
    assert_eq!(config.finetune.adapters(), None);
    let err = with(&["model.block_size=32"]).unwrap_err();
    assert!(format!("{err:#}").contains("model.block_size"), "{err:#}");

    // `mode = "lora"` alone: the default adapters, recorded in config.toml
    // exactly as before Llama checkpoints had LoRA (same config_hash).
    let lora = with(&["finetune.mode=lora"]).unwrap();
    assert_eq!(lora.finetune.lora, Some(LoraConfig::default()));
    let text = engine::config::to_canonical_toml(&lora).unwrap();
    assert!(
        text.contains("[finetune.lora]\nrank = 8\nalpha = 32.0\ntargets = [\"attn.c_attn\", \"attn.c_proj\", \"mlp.c_fc\", \"mlp.c_proj\"]\n"),
        "{text}"
    );
    // Full mode's config.toml (and hash) is what it was before LoRA.
    let text = engine::config::to_canonical_toml(&config).unwrap();
    assert!(!text.contains("lora"), "{text}");
    let small = with(&["finetune.mode=lora", "finetune.lora={rank=4, alpha=8}"]).unwrap();
    assert_eq!(small.finetune.adapters().map(|l| l.scale()), Some(2.0));

    for (overrides, names) in [
        (
            &["finetune.mode=lora", "finetune.lora={rank=65}"][..],
            "finetune.lora.rank = 65",
        ),
        (
            &["finetune.mode=lora", "finetune.lora={rank=0}"],
            "finetune.lora.rank = 0",
        ),
        (
            &["finetune.mode=lora", "finetune.lora={alpha=-1}"],
            "finetune.lora.alpha = -1",
        ),
        (
            &[
                "finetune.mode=lora",
                "finetune.lora={targets=[\"mlp.c_gate\"]}",
            ],
            "mlp.c_gate",
        ),
        (&["finetune.mode=lora", "finetune.lora={rnak=4}"], "rnak"),
        // A Llama layer name on the GPT: refused naming the GPT's.
        (
            &[
                "finetune.mode=lora",
                "finetune.lora={targets=[\"self_attn.q_proj\"]}",
            ],
            "name layers of the GPT (byte-level, or a GPT-2 checkpoint): \"attn.c_attn\", \"attn.c_proj\"",
        ),
        (&["finetune.lora={rank=4}"], "[finetune.lora] is set"),
    ] {
        let err = with(overrides).unwrap_err();
        assert!(format!("{err:#}").contains(names), "{overrides:?}: {err:#}");
        assert_eq!(crate::error::exit_code_of(&err), 2, "{overrides:?}");
    }
}

fn llama_with(overrides: &[&str]) -> anyhow::Result<RftConfig> {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Ok(load_config(PRESETS[1].1, "preset tiny-llama", &overrides)?.science)
}

/// On a Llama checkpoint, `mode = "lora"` defaults to the attention
/// projections (recorded in config.toml); GPT names and ranks beyond the
/// checkpoint's shapes exit 2 naming the Llama's names and bound.
#[test]
fn llama_lora_defaults_to_the_attention_projections_and_checks_names() {
    use crate::lora::{Family, Target};
    let config = llama_with(&["finetune.mode=lora"]).unwrap();
    let lora = config.finetune.adapters().unwrap();
    assert_eq!(lora, LoraConfig::defaults_for(Family::Llama));
    assert_eq!(lora.targets, Target::LLAMA[..4].to_vec());
    let text = engine::config::to_canonical_toml(&config).unwrap();
    assert!(
        text.contains("targets = [\"self_attn.q_proj\", \"self_attn.k_proj\", \"self_attn.v_proj\", \"self_attn.o_proj\"]"),
        "{text}"
    );
    // Read back from config.toml (a resume), the same config.
    assert_eq!(toml::from_str::<RftConfig>(&text).unwrap(), config);
    // A table without `targets` also gets the Llama's.
    let ranked = llama_with(&["finetune.mode=lora", "finetune.lora={rank=4}"]).unwrap();
    assert_eq!(ranked.finetune.adapters().unwrap().targets, lora.targets);
    let mlp = llama_with(&[
        "finetune.mode=lora",
        "finetune.lora={targets=[\"mlp.down_proj\", \"self_attn.v_proj\"]}",
    ])
    .unwrap();
    assert_eq!(
        mlp.finetune.adapters().unwrap().targets,
        vec![Target::DownProj, Target::VProj]
    );
    for (overrides, names) in [
        (
            &[
                "finetune.mode=lora",
                "finetune.lora={targets=[\"attn.c_attn\"]}",
            ][..],
            "\"attn.c_attn\" is a layer of the GPT (byte-level, or a GPT-2 checkpoint)",
        ),
        (
            &[
                "finetune.mode=lora",
                "finetune.lora={targets=[\"attn.c_attn\"]}",
            ],
            "\"self_attn.q_proj\", \"self_attn.k_proj\", \"self_attn.v_proj\", \"self_attn.o_proj\", \"mlp.gate_proj\"",
        ),
        // tiny-llama's k/v projections are 64 → 2 heads × 16.
        (
            &["finetune.mode=lora", "finetune.lora={rank=33}"],
            "finetune.lora.rank = 33: a rank must lie in 1..=min(d_in, d_out) = 32",
        ),
        (
            &["finetune.mode=lora", "finetune.lora={targets=[]}"],
            "finetune.lora.targets = []",
        ),
    ] {
        let err = llama_with(overrides).unwrap_err();
        assert!(format!("{err:#}").contains(names), "{overrides:?}: {err:#}");
        assert_eq!(crate::error::exit_code_of(&err), 2, "{overrides:?}");
    }
}

/// Stage (c) in LoRA mode on a small GPT: straight through vs stopped
/// after 2 steps and resumed give the same bytes; the base weights stay
/// frozen; the saved model is a plain (merged) GPT.
#[test]
fn lora_finetuning_freezes_the_base_and_resumes_bit_exactly() {
    type B = crate::backend::CpuTrain;
    let config = with(&[
        "finetune.mode=lora",
        "finetune.lora={rank=2}",
        "model.n_layer=1",
        "model.n_embd=16",
        "task.train_questions=8",
        "task.worked_questions=4",
        "task.validation_questions=2",
        "finetune.train.steps=4",
        "finetune.train.batch_size=4",
        "finetune.train.checkpoint_every=2",
    ])
    .unwrap();
    let split = config.split().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let base_path = tmp.path().join("base.safetensors");
    let base = config.model.init::<B>(&Default::default());
    hf::save(&base, &base_path).unwrap();
    let examples: Vec<Tokenized> = split
        .train
        .iter()
        .map(|q| tokenize(&q.prompt(), &q.training_text()))
        .collect();
    let stage = StageConfig {
        train: config.finetune.train.clone(),
        optim: config.finetune.optim.clone(),
    };
    let task = RftTrainTask::new(&config, &stage, examples, &split, Some(base_path));
    assert!(task.lora.is_some());
    let train = |name: &str, resume: bool, stop_after: Option<u64>| {
        train_in::<B, _>(&task, tmp.path().join(name), resume, stop_after)
    };
    assert_eq!(train("straight", false, None).status, Status::Completed);
    assert_eq!(train("resumed", false, Some(2)).status, Status::Interrupted);
    assert_eq!(train("resumed", true, None).status, Status::Completed);
    for file in [MODEL_FILE, ADAPTER_FILE] {
        let read = |run: &str| std::fs::read(tmp.path().join(run).join(file)).unwrap();
        assert_eq!(
            read("straight"),
            read("resumed"),
            "{file} differs after resume"
        );
    }

    let tuned =
        crate::engine::safetensors_io::read(&tmp.path().join("straight").join(MODEL_FILE)).unwrap();
    let before: std::collections::HashMap<String, Vec<f32>> = hf::named_weights(&base)
        .into_iter()
        .map(|(name, _, values)| (name, values))
        .collect();
    // Untouched by LoRA: bit-identical to the base.
    for name in ["wte.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.bias"] {
        assert_eq!(tuned[name].1, before[name], "{name} changed");
    }
    // Adapted and merged: the plain GPT's attention weights moved.
    assert_ne!(
        tuned["h.0.attn.c_attn.weight"].1,
        before["h.0.attn.c_attn.weight"]
    );
    assert_eq!(
        tuned.len(),
        before.len(),
        "model.safetensors is a plain GPT"
    );
    let adapters =
        crate::engine::safetensors_io::read(&tmp.path().join("straight").join(ADAPTER_FILE))
            .unwrap();
    assert_eq!(adapters.len(), 2 * 4 * config.model.n_layer);
    assert!(adapters.contains_key("h.0.mlp.c_fc_lora.b"));
}

#[test]
fn loss_covers_only_completion_tokens() {
    type B = crate::backend::Cpu;
    let device = Default::default();
    let cfg = ModelConfig {
        n_layer: 1,
        n_head: 1,
        n_embd: 8,
        block_size: 16,
        vocab_size: 256,
        dropout: 0.0,
    };
    let model = cfg.init::<B>(&device);
    let a = tokenize("ab", "abcd");
    // Only the completion "cd" is scored: changing it changes the loss.
    let b = tokenize("ab", "abce");
    let la: f64 = completion_loss(&model, &[&a], &device).into_scalar().elem();
    let lb: f64 = completion_loss(&model, &[&b], &device).into_scalar().elem();
    assert!(la.is_finite() && lb.is_finite());
    assert_ne!(la, lb);
    // A padded batch scores each example exactly as alone would.
    let short = tokenize("a", "ab");
    let lab: f64 = completion_loss(&model, &[&a, &short], &device)
        .into_scalar()
        .elem();
    let ls: f64 = completion_loss(&model, &[&short], &device)
        .into_scalar()
        .elem();
    // Token-weighted mean: a has 2 completion targets, short has 1.
    assert!(
        (lab - (2.0 * la + ls) / 3.0).abs() < 1e-5,
        "{lab} {la} {ls}"
    );
}

/// A sampler that records every completion it hands out, in order.
struct Recording<S>(S, Vec<String>);

impl<S: crate::rft::datagen::Sampler> crate::rft::datagen::Sampler for Recording<S> {
    fn sample(
        &mut self,
        rows: &[crate::rft::datagen::Row<'_>],
        sampling: &crate::sampling::Sampling,
    ) -> Vec<crate::rft::datagen::Completion> {
        let out = self.0.sample(rows, sampling);
        self.1.extend(out.iter().map(|c| c.text.clone()));
        out
    }
}

/// The generation batch is a speed knob: the same datagen seed gives the
/// same samples whether the GPT continues 1, 7 or all 15 rows per call
/// (rows of prompts of different lengths sharing a call).
#[test]
fn samples_do_not_depend_on_the_generation_batch() {
    type B = crate::backend::Cpu;
    let config = with(&["model.n_layer=1", "model.n_embd=16"]).unwrap();
    let split = config.split().unwrap();
    let questions = &split.train[..5];
    let model = config.model.init::<B>(&Default::default());
    let datagen = crate::rft::datagen::DatagenConfig {
        oversample: 3,
        temperature: 1.0,
        ..config.datagen.clone()
    };
    let sample = |round, gen_batch| {
        let gpt = GptSampler::new(&model, &config.model, 12, Default::default());
        let mut sampler = Recording(gpt, Vec::new());
        crate::rft::datagen::build_dataset(
            &mut sampler,
            questions,
            &datagen,
            round,
            gen_batch,
            &mut |_| {},
        )
        .unwrap();
        sampler.1
    };
    let one = sample(1, 1);
    assert_eq!(one.len(), 15);
    assert_eq!(sample(1, 7), one, "gen batch 7 vs 1");
    assert_eq!(sample(1, 64), one, "gen batch 64 vs 1");
    // Not trivially equal: the samples of one question differ, and another
    // round draws others.
    assert!(one[..3].iter().any(|c| c != &one[0]), "{one:?}");
    assert_ne!(sample(2, 7), one);
}

/// A config.toml from before issue #23 names `datagen.batch_questions`:
/// refused with exit 2, naming the key and the flag that replaced it.
#[test]
fn batch_questions_is_refused_with_its_replacement() {
    let old = PRESETS[0]
        .1
        .replace("[datagen]\n", "[datagen]\nbatch_questions = 32\n");
    let err = load_config(&old, "config.toml", &[]).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("datagen.batch_questions"), "{text}");
    assert_eq!(crate::error::exit_code_of(&err), 2);
    // Its own fix, not the generic "compare with experiments describe".
    let fix = err
        .downcast_ref::<crate::error::UserError>()
        .and_then(|e| e.fix.clone())
        .unwrap_or_default();
    assert!(fix.starts_with("delete the batch_questions line"), "{text}");
    assert!(fix.contains("--gen-batch"), "{text}");
    let err = with(&["datagen.batch_questions=32"]).unwrap_err();
    assert!(format!("{err:#}").contains("--gen-batch"), "{err:#}");
}

/// Every bundled preset loads and validates as shipped (tiny-llama once
/// kept a key the config had dropped, and only the CLI found out). A preset
/// made for a Hub checkpoint (`hub:REPO`) is refused as shipped with the
/// download command, and validates once given a directory.
#[test]
fn every_preset_loads_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::llama::save::config_json(&crate::rft::pretrained::tiny_llama());
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    let template = serde_json::json!({"chat_template": "{{ messages[0]['content'] }}"});
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        template.to_string(),
    )
    .unwrap();
    let local = format!("model.init=hf:{}", dir.path().display());
    for (name, text) in PRESETS {
        let origin = format!("preset {name}");
        let loaded = load_config(text, &origin, &[]);
        let table: toml::Value = toml::from_str(text).unwrap();
        let init = table["model"].get("init").and_then(|v| v.as_str());
        let Some(repo) = init.and_then(|i| i.strip_prefix("hub:")) else {
            assert!(loaded.is_ok(), "{:#}", loaded.unwrap_err());
            continue;
        };
        let e = loaded.expect_err("a hub: preset needs a local copy");
        assert_eq!(crate::error::exit_code_of(&e), 2, "{e:#}");
        let text_of = format!("{e:#}");
        let download = format!("huggingface-cli download {repo} --local-dir DIR");
        assert!(text_of.contains(&download), "{text_of}");
        assert!(text_of.contains("--set model.init=hf:DIR"), "{text_of}");
        let loaded = load_config(text, &origin, std::slice::from_ref(&local));
        assert!(loaded.is_ok(), "{name}: {:#}", loaded.unwrap_err());
    }
}
