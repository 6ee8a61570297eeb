//! Tests of LoRA on the Llama (`super`): identity at B = 0, merging, a
//! frozen base, PEFT's layout.

use super::*;
use crate::backend::{Cpu, CpuTrain};
use crate::engine::optim::AdamW;
use crate::engine::{params, OptimConfig};
use crate::llama::model::random_weights;
use crate::llama::model::tests::tiny;
use burn::optim::GradientsParams;
use burn::tensor::{Distribution, TensorData};

/// Every projection of the Llama adapted, rank 3.
fn everywhere() -> LoraConfig {
    LoraConfig {
        rank: 3,
        alpha: 12.0,
        targets: Target::LLAMA.to_vec(),
    }
}

fn model<B: Backend>(seed: u64) -> Llama<B> {
    // Untied head, grouped-query attention, q/k/v biases: every shape.
    Llama::build(
        &tiny(2, false),
        &mut random_weights(seed, 0.3),
        &Default::default(),
    )
    .unwrap()
}

fn tokens<B: Backend>() -> Tensor<B, 2, Int> {
    let ids: Vec<i64> = vec![3, 9, 1, 30, 7, 7, 12, 0, 39, 5, 5, 21];
    Tensor::from_data(TensorData::new(ids, [2, 6]), &Default::default())
}

fn max_diff<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> f32 {
    (a - b).abs().max().into_scalar().elem()
}

/// B drawn at random: what training does to the adapters.
fn nudge<B: Backend>(mut model: Llama<B>) -> Llama<B> {
    for layer in &mut model.layers {
        for (_, _, slot) in adaptable_layers(layer) {
            if let Some(adapter) = slot {
                let shape = adapter.b.val().dims();
                adapter.b = Param::from_tensor(Tensor::random(
                    shape,
                    Distribution::Normal(0.0, 0.2),
                    &Default::default(),
                ));
            }
        }
    }
    model
}

fn names<B: Backend>(model: &Llama<B>) -> Vec<(String, Vec<usize>)> {
    params::collect::<B, _>(model, false)
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect()
}

#[test]
fn fresh_adapters_are_the_base_exactly_and_merging_keeps_the_output() {
    <Cpu as Backend>::seed(&Default::default(), 5);
    let base = model::<Cpu>(1);
    let base_out = base.forward(tokens());
    let adapted = attach(&everywhere(), base.clone(), &Default::default());
    assert_eq!(
        max_diff(base_out.clone(), adapted.forward(tokens())),
        0.0,
        "B = 0: the adapted forward is the base forward"
    );
    let adapted = nudge(adapted);
    let moved = max_diff(base_out, adapted.forward(tokens()));
    assert!(
        moved > 1e-2,
        "the nudged adapters change the logits ({moved})"
    );
    let merged = merge(adapted.clone());
    assert!(peft_tensors(&merged).is_empty());
    let diff = max_diff(merged.forward(tokens()), adapted.forward(tokens()));
    assert!(diff < 1e-4, "merged vs adapted: max difference {diff}");
    // The merged model is a plain Llama: the base's names and shapes.
    assert_eq!(names(&merged), names(&base));
}

#[test]
fn an_optimizer_step_moves_only_the_adapters() {
    <CpuTrain as Backend>::seed(&Default::default(), 3);
    let lora = LoraConfig::defaults_for(Family::Llama);
    let model = attach(&lora, model::<CpuTrain>(2), &Default::default());
    assert_eq!(
        params::count_trainable::<CpuTrain, _>(&model),
        num_params(&lora, &tiny(2, false))
    );
    let before = params::collect::<CpuTrain, _>(&model, true);
    let loss = model.forward(tokens()).powi_scalar(2).mean();
    let mut grads = GradientsParams::from_grads(loss.backward(), &model);
    let optim: OptimConfig = toml::from_str("lr = 1e-2\nwarmup_steps = 1").unwrap();
    let mut adamw = AdamW::<Cpu>::new(optim);
    let model = adamw.step::<CpuTrain, _>(model, &mut grads, 1e-2, 1, 1.0);
    let after = params::collect::<CpuTrain, _>(&model, true);
    let mut moved = Vec::new();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b.name, a.name);
        if b.values != a.values {
            moved.push(b.name.clone());
        }
    }
    // B moved on every default target (q, k, v, o) of every layer.
    assert_eq!(
        moved.iter().filter(|n| n.ends_with("_lora.b")).count(),
        4 * 2,
        "{moved:?}"
    );
    for name in &moved {
        assert!(name.contains("_lora."), "frozen {name} changed");
    }
    assert!(!moved.iter().any(|n| n.contains("mlp")), "{moved:?}");
}

/// The PEFT tensors: names, shapes, and `W + alpha/r · lora_B @ lora_A`
/// (in transformers' [d_out, d_in] layout) is the merged weight.
#[test]
fn peft_tensors_rebuild_the_merged_weights() {
    <Cpu as Backend>::seed(&Default::default(), 8);
    let lora = everywhere();
    let base = model::<Cpu>(4);
    let adapted = nudge(attach(&lora, base.clone(), &Default::default()));
    let peft: std::collections::HashMap<String, (Vec<usize>, Vec<f32>)> = peft_tensors(&adapted)
        .into_iter()
        .map(|(n, s, v)| (n, (s, v)))
        .collect();
    assert_eq!(peft.len(), 2 * 7 * 2);
    let cfg = tiny(2, false);
    let name =
        |l: usize, t: &str, ab: &str| format!("base_model.model.model.layers.{l}.{t}.{ab}.weight");
    // k_proj: 16 → 2 kv heads × 4; down_proj: 24 → 16.
    assert_eq!(peft[&name(1, "self_attn.k_proj", "lora_A")].0, vec![3, 16]);
    assert_eq!(peft[&name(1, "self_attn.k_proj", "lora_B")].0, vec![8, 3]);
    assert_eq!(peft[&name(0, "mlp.down_proj", "lora_A")].0, vec![3, 24]);
    assert_eq!(peft[&name(0, "mlp.down_proj", "lora_B")].0, vec![16, 3]);

    let hf = |m: &Llama<Cpu>| -> std::collections::HashMap<String, Vec<f32>> {
        crate::llama::save::named_weights(m)
            .into_iter()
            .map(|(n, _, v)| (n, v))
            .collect()
    };
    let (before, after) = (hf(&base), hf(&merge(adapted)));
    for target in Target::LLAMA {
        let (d_in, d_out) = shape(target, &cfg).unwrap();
        let key = format!("model.layers.1.{}.weight", target.name());
        let a = &peft[&name(1, target.name(), "lora_A")].1; // [r, d_in]
        let b = &peft[&name(1, target.name(), "lora_B")].1; // [d_out, r]
        for o in 0..d_out {
            for i in 0..d_in {
                let ba: f32 = (0..lora.rank)
                    .map(|k| b[o * lora.rank + k] * a[k * d_in + i])
                    .sum();
                let want = before[&key][o * d_in + i] + lora.scale() as f32 * ba;
                let got = after[&key][o * d_in + i];
                assert!(
                    (want - got).abs() < 1e-5,
                    "{key}[{o}, {i}]: {want} vs {got}"
                );
            }
        }
    }
}

#[test]
fn the_peft_config_names_the_modules_and_the_scale() {
    let lora = LoraConfig {
        rank: 4,
        alpha: 16.0,
        targets: vec![Target::QProj, Target::VProj, Target::DownProj],
    };
    let c = peft_config(&lora, "/ckpt");
    assert_eq!(c["peft_type"], "LORA");
    assert_eq!(c["r"], 4);
    assert_eq!(c["lora_alpha"], 16);
    assert_eq!(
        c["target_modules"],
        json!(["q_proj", "v_proj", "down_proj"])
    );
    assert_eq!(c["base_model_name_or_path"], "/ckpt");
}

/// Rank bounds come from the model's own shapes; GPT names are refused
/// naming the Llama ones.
#[test]
fn validation_uses_the_llamas_shapes_and_names() {
    let cfg = tiny(2, false); // k/v projections are 16 → 8
    let with = |rank: usize, targets: Vec<Target>| LoraConfig {
        rank,
        alpha: 8.0,
        targets,
    };
    assert!(validate(&with(8, vec![Target::KProj]), &cfg, "finetune.lora").is_ok());
    let e = validate(&with(9, vec![Target::KProj]), &cfg, "finetune.lora").unwrap_err();
    assert!(
        e.message.contains("rank = 9") && e.message.contains("= 8"),
        "{e:?}"
    );
    let e = validate(&with(2, vec![Target::AttnQkv]), &cfg, "finetune.lora").unwrap_err();
    assert!(e.message.contains("\"attn.c_attn\""), "{e:?}");
    assert!(
        e.fix
            .as_deref()
            .unwrap_or("")
            .contains("\"self_attn.q_proj\""),
        "{e:?}"
    );
}
