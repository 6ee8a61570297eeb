//! LoRA on a Llama-family model (`envgen run rft --preset tiny-llama --set
//! finetune.mode=lora`): attaching fresh adapters to the projections the
//! config names, merging them into the weights, and writing them in PEFT's
//! layout so that `peft.PeftModel.from_pretrained(base, DIR)` reads them.
//!
//! An adapter sits next to its projection (`layers.0.self_attn.q_proj_lora.
//! {a,b}` beside `layers.0.self_attn.q_proj.weight`). The adapted
//! projection computes `x·W + s·(x·A)·B` (`crate::lora::adapter::
//! forward_low_rank`) rather than `x·(W + s·A·B)` as the tiny GPT does:
//! for a checkpoint of SmolLM2-360M's size the effective-weight form would
//! make autodiff compute the full d_in × d_out weight gradient of every
//! adapted projection (a third of its training matmul work, what full
//! fine-tuning pays) and keep a second copy of each weight alive for the
//! backward; the low-rank form computes only the input's gradient through
//! the frozen `W` plus r·(d_in + d_out) per token. The two agree to float
//! rounding, which the tests check through [`merge`].

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::prelude::*;
use serde_json::json;

use super::config::LlamaConfig;
use super::model::{DecoderLayer, Llama};
use crate::engine::safetensors_io;
use crate::error::UserError;
use crate::fsutil::write_atomic;
use crate::lora::adapter::adapted_weight;
use crate::lora::{Family, LoraAdapter, LoraConfig, Target};

/// The adapters of a fine-tuned stage, in PEFT's layout, inside the stage's
/// (and the run's `hf/`) directory.
pub const ADAPTER_DIR: &str = "adapter";
/// PEFT's `SAFETENSORS_WEIGHTS_NAME` and `CONFIG_NAME`.
pub const PEFT_WEIGHTS: &str = "adapter_model.safetensors";
pub const PEFT_CONFIG: &str = "adapter_config.json";

/// (d_in, d_out) of the projection `target` in a model `cfg` describes;
/// None for a GPT layer name (refused by [`validate`]).
pub fn shape(target: Target, cfg: &LlamaConfig) -> Option<(usize, usize)> {
    let (d, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let q = cfg.num_attention_heads * cfg.head_dim;
    let kv = cfg.num_key_value_heads * cfg.head_dim;
    match target {
        Target::QProj => Some((d, q)),
        Target::KProj | Target::VProj => Some((d, kv)),
        Target::OProj => Some((q, d)),
        Target::GateProj | Target::UpProj => Some((d, ff)),
        Target::DownProj => Some((ff, d)),
        _ => None,
    }
}

/// Adapter parameters on the model `cfg` describes: per layer,
/// r·(d_in + d_out) per target.
pub fn num_params(lora: &LoraConfig, cfg: &LlamaConfig) -> usize {
    let per_layer: usize = lora
        .targets
        .iter()
        .filter_map(|&t| shape(t, cfg))
        .map(|(d_in, d_out)| lora.rank * (d_in + d_out))
        .sum();
    cfg.num_hidden_layers * per_layer
}

/// Reject adapters that cannot be built on the model `cfg` describes (GPT
/// layer names included, naming the Llama ones); `key` is the table's path.
pub fn validate(lora: &LoraConfig, cfg: &LlamaConfig, key: &str) -> Result<(), UserError> {
    let max_rank = lora
        .targets
        .iter()
        .filter_map(|&t| shape(t, cfg))
        .map(|(d_in, d_out)| d_in.min(d_out))
        .min()
        .unwrap_or(0);
    lora.check(Family::Llama, key, max_rank)
}

/// A projection of a layer with its adapter slot.
type AdaptableLayer<'a, B> = (Target, &'a mut Linear<B>, &'a mut Option<LoraAdapter<B>>);

/// Each projection of `layer` with its adapter slot, in [`Target::LLAMA`]'s
/// order.
fn adaptable_layers<B: Backend>(layer: &mut DecoderLayer<B>) -> [AdaptableLayer<'_, B>; 7] {
    let (a, m) = (&mut layer.self_attn, &mut layer.mlp);
    [
        (Target::QProj, &mut a.q_proj, &mut a.q_proj_lora),
        (Target::KProj, &mut a.k_proj, &mut a.k_proj_lora),
        (Target::VProj, &mut a.v_proj, &mut a.v_proj_lora),
        (Target::OProj, &mut a.o_proj, &mut a.o_proj_lora),
        (Target::GateProj, &mut m.gate_proj, &mut m.gate_proj_lora),
        (Target::UpProj, &mut m.up_proj, &mut m.up_proj_lora),
        (Target::DownProj, &mut m.down_proj, &mut m.down_proj_lora),
    ]
}

/// Freeze every weight of `model` and give each targeted projection a
/// fresh, trainable adapter (A random, B zeros: the output is unchanged).
pub fn attach<B: Backend>(lora: &LoraConfig, model: Llama<B>, device: &B::Device) -> Llama<B> {
    let mut model = model.no_grad();
    for layer in &mut model.layers {
        for (target, linear, slot) in adaptable_layers(layer) {
            if lora.targets.contains(&target) {
                let [d_in, d_out] = linear.weight.val().dims();
                *slot = Some(LoraAdapter::new(
                    d_in,
                    d_out,
                    lora.rank,
                    lora.scale(),
                    device,
                ));
            }
        }
    }
    model
}

/// Fold every adapter into its projection (W ← W + s·A·B) and drop it: the
/// result is a plain Llama that computes what the adapted one did, and
/// `super::save` writes it as transformers' checkpoint.
pub fn merge<B: Backend>(mut model: Llama<B>) -> Llama<B> {
    for layer in &mut model.layers {
        for (_, linear, slot) in adaptable_layers(layer) {
            if let Some(adapter) = slot.take() {
                let merged = adapted_weight(linear, Some(&adapter));
                linear.weight = Param::initialized(linear.weight.id, merged);
            }
        }
    }
    model
}

fn values<B: Backend>(t: Tensor<B, 2>) -> (Vec<usize>, Vec<f32>) {
    let shape = t.dims().to_vec();
    let data = t.into_data().convert::<f32>();
    (shape, data.to_vec::<f32>().unwrap_or_default())
}

/// The adapters of `model` under PEFT's names and shapes; empty for a plain
/// model.
///
/// PEFT's layout (huggingface/peft, docs/source/developer_guides/
/// checkpoint.md and src/peft/tuners/lora/layer.py): `lora_A` is an
/// `nn.Linear(in_features, r)`, so its weight is [r, d_in]; `lora_B` an
/// `nn.Linear(r, out_features)`, weight [d_out, r]; the update of the
/// [d_out, d_in] weight is `lora_B @ lora_A · lora_alpha / r`; keys are the
/// transformers module path under `base_model.model.` with the adapter
/// name ("default") stripped, as `save_pretrained` writes them. Ours: A is
/// [d_in, r] and B [r, d_out] on Burn's [d_in, d_out] weight, so
/// `lora_A = Aᵀ`, `lora_B = Bᵀ`, and `(A·B)ᵀ = Bᵀ·Aᵀ` is the same update.
pub fn peft_tensors<B: Backend>(model: &Llama<B>) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out = Vec::new();
    for (i, layer) in model.layers.iter().enumerate() {
        let mut layer = layer.clone();
        for (target, _, slot) in adaptable_layers(&mut layer) {
            let Some(adapter) = slot.as_ref() else {
                continue;
            };
            let prefix = format!("base_model.model.model.layers.{i}.{}", target.name());
            for (name, t) in [
                ("lora_A", adapter.a.val().transpose()),
                ("lora_B", adapter.b.val().transpose()),
            ] {
                let (shape, v) = values(t);
                out.push((format!("{prefix}.{name}.weight"), shape, v));
            }
        }
    }
    out
}

/// PEFT's `adapter_config.json` for `lora` on the checkpoint at `base`.
pub fn peft_config(lora: &LoraConfig, base: &str) -> serde_json::Value {
    // PEFT matches a `target_modules` entry against the end of a module's
    // path, so the short names ("q_proj", PEFT's own convention for Llama)
    // select exactly the projections we adapted.
    let modules: Vec<&str> = lora
        .targets
        .iter()
        .map(|t| t.name().rsplit('.').next().unwrap_or(t.name()))
        .collect();
    // lora_alpha is an int in most configs; keep a fractional one as is.
    let alpha = match lora.alpha.fract() == 0.0 && lora.alpha.abs() < 1e15 {
        true => json!(lora.alpha as i64),
        false => json!(lora.alpha),
    };
    json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": alpha,
        "target_modules": modules,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": false,
        "use_rslora": false,
        "use_dora": false,
        "inference_mode": true,
        "modules_to_save": null,
    })
}

/// `dir/adapter_model.safetensors` and `dir/adapter_config.json`: the
/// adapters of `model` (before [`merge`]) as `PeftModel.save_pretrained`
/// writes them, for the checkpoint at `base`.
pub fn save_peft<B: Backend>(
    model: &Llama<B>,
    lora: &LoraConfig,
    base: &Path,
    dir: &Path,
) -> anyhow::Result<()> {
    crate::fsutil::create_dir_all(dir)?;
    let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    let config = peft_config(lora, &base.display().to_string());
    write_atomic(
        &dir.join(PEFT_CONFIG),
        serde_json::to_string_pretty(&config)?.as_bytes(),
    )?;
    let bytes = safetensors_io::to_bytes(&peft_tensors(model))?;
    write_atomic(&dir.join(PEFT_WEIGHTS), &bytes)
}

#[cfg(test)]
#[path = "lora_tests.rs"]
mod tests;
