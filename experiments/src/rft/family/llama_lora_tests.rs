//! Stage (c) with LoRA on a Llama checkpoint (`super::llama_task`): resumed bit-exactly,
//! the base frozen, the saved model merged, the adapters in PEFT's layout.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::engine::rundir::Status;
use crate::engine::safetensors_io;
use crate::llama::lora::{ADAPTER_DIR, PEFT_CONFIG, PEFT_WEIGHTS};
use crate::lora::{Family, LoraConfig};
use crate::rft::config::{load_config, PRESETS};
use crate::rft::stages::train_in;
use crate::rft::task::Question;

/// The worked answers of `questions` as training examples.
fn reference_examples(prompter: &Prompter, questions: &[Question]) -> Vec<Tokenized> {
    questions
        .iter()
        .map(|q| prompter.example(&q.text, &q.completion()).unwrap())
        .collect()
}

#[test]
fn llama_lora_finetuning_freezes_the_base_and_resumes_bit_exactly() {
    type B = crate::backend::CpuTrain;
    let overrides: Vec<String> = [
        "task.train_questions=8",
        "task.worked_questions=8",
        "task.validation_questions=2",
        "finetune.train.steps=4",
        "finetune.train.batch_size=4",
        "finetune.train.eval_every=4",
        "finetune.train.checkpoint_every=2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let config = load_config(PRESETS[1].1, "preset tiny-llama", &overrides)
        .unwrap()
        .science;
    let split = config.split().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    pretrained::write_random("tiny-llama", 1, &base).unwrap();
    let tokenizer = HfTokenizer::load(&base, false).unwrap();
    let prompter = Prompter::new(&tokenizer, &base, &config.task).unwrap();
    let lora = LoraConfig {
        rank: 2,
        ..LoraConfig::defaults_for(Family::Llama)
    };
    let task = LlamaRftTask {
        base: base.clone(),
        stage: StageConfig {
            train: config.finetune.train.clone(),
            optim: config.finetune.optim.clone(),
        },
        train: reference_examples(&prompter, &split.train),
        validation: reference_examples(&prompter, &split.validation),
        lora: Some(lora.clone()),
    };
    let train = |name: &str, resume: bool, stop_after: Option<u64>| {
        train_in::<B, _>(&task, tmp.path().join(name), resume, stop_after)
    };
    assert_eq!(train("straight", false, None).status, Status::Completed);
    assert_eq!(train("resumed", false, Some(2)).status, Status::Interrupted);
    assert_eq!(train("resumed", true, None).status, Status::Completed);
    let adapter_file = format!("{ADAPTER_DIR}/{PEFT_WEIGHTS}");
    for file in [llama::hf::SINGLE, adapter_file.as_str()] {
        let read = |run: &str| std::fs::read(tmp.path().join(run).join(file)).unwrap();
        assert_eq!(
            read("straight"),
            read("resumed"),
            "{file} differs after resume"
        );
    }

    // The stage directory is a plain Llama checkpoint: the base's tensors,
    // the untargeted ones bit-identical, the adapted projections moved.
    let read = |path: &Path| -> HashMap<String, Vec<f32>> {
        safetensors_io::read(path)
            .unwrap()
            .into_iter()
            .map(|(name, (_, values))| (name, values))
            .collect()
    };
    let before = read(&base.join(llama::hf::SINGLE));
    let tuned = read(&tmp.path().join("straight").join(llama::hf::SINGLE));
    assert_eq!(
        tuned.keys().collect::<HashSet<_>>(),
        before.keys().collect::<HashSet<_>>()
    );
    for name in [
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.1.mlp.up_proj.weight",
        "model.norm.weight",
    ] {
        assert_eq!(tuned[name], before[name], "{name} changed");
    }
    for name in [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.o_proj.weight",
    ] {
        assert_ne!(tuned[name], before[name], "{name} did not move");
    }
    let dir = tmp.path().join("straight").join(ADAPTER_DIR);
    let adapters = read(&dir.join(PEFT_WEIGHTS));
    let cfg = pretrained::tiny_llama();
    assert_eq!(adapters.len(), 2 * 4 * cfg.num_hidden_layers);
    let values: usize = adapters.values().map(Vec::len).sum();
    assert_eq!(values, crate::llama::lora::num_params(&lora, &cfg));
    let peft: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(PEFT_CONFIG)).unwrap()).unwrap();
    assert_eq!(peft["r"], 2);
}
