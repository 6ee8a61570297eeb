//! Writing a Llama-family model back in Hugging Face's layout:
//! `model.safetensors` with transformers' tensor names (the loader's
//! `super::hf` reads it; `LlamaForCausalLM.from_pretrained` too), and a
//! `config.json` for a model envgen made itself (a random-init checkpoint).
//! Fine-tuned checkpoints copy their base's config.json instead, so every
//! field transformers knows survives.

use std::path::Path;

use burn::module::Param;
use burn::nn::Linear;
use burn::prelude::*;
use serde_json::{json, Value};

use super::config::{LlamaConfig, RopeScaling};
use super::model::{Llama, RmsNorm};
use crate::engine::safetensors_io;
use crate::fsutil::write_atomic;

type Named = Vec<(String, Vec<usize>, Vec<f32>)>;

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> (Vec<usize>, Vec<f32>) {
    let shape = t.dims().to_vec();
    let data = t.into_data().convert::<f32>();
    (shape, data.to_vec::<f32>().unwrap_or_default())
}

fn push<B: Backend, const D: usize>(out: &mut Named, name: String, t: Tensor<B, D>) {
    let (shape, v) = values(t);
    out.push((name, shape, v));
}

/// Burn's `Linear` keeps [d_in, d_out]; `nn.Linear` [d_out, d_in].
fn push_linear<B: Backend>(out: &mut Named, name: &str, linear: &Linear<B>) {
    push(
        out,
        format!("{name}.weight"),
        linear.weight.val().transpose(),
    );
    if let Some(bias) = &linear.bias {
        push(out, format!("{name}.bias"), bias.val());
    }
}

fn push_norm<B: Backend>(out: &mut Named, name: &str, norm: &RmsNorm<B>) {
    push(out, format!("{name}.weight"), norm.weight.val());
}

/// Every weight of `model` under transformers' name and shape.
pub fn named_weights<B: Backend>(model: &Llama<B>) -> Named {
    let mut out = Vec::new();
    let embed: &Param<Tensor<B, 2>> = &model.embed_tokens.weight;
    push(&mut out, "model.embed_tokens.weight".into(), embed.val());
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        push_norm(
            &mut out,
            &format!("{p}.input_layernorm"),
            &layer.input_layernorm,
        );
        let a = &layer.self_attn;
        push_linear(&mut out, &format!("{p}.self_attn.q_proj"), &a.q_proj);
        push_linear(&mut out, &format!("{p}.self_attn.k_proj"), &a.k_proj);
        push_linear(&mut out, &format!("{p}.self_attn.v_proj"), &a.v_proj);
        push_linear(&mut out, &format!("{p}.self_attn.o_proj"), &a.o_proj);
        push_norm(
            &mut out,
            &format!("{p}.post_attention_layernorm"),
            &layer.post_attention_layernorm,
        );
        push_linear(
            &mut out,
            &format!("{p}.mlp.gate_proj"),
            &layer.mlp.gate_proj,
        );
        push_linear(&mut out, &format!("{p}.mlp.up_proj"), &layer.mlp.up_proj);
        push_linear(
            &mut out,
            &format!("{p}.mlp.down_proj"),
            &layer.mlp.down_proj,
        );
    }
    push_norm(&mut out, "model.norm", &model.norm);
    if let Some(head) = &model.lm_head {
        push(
            &mut out,
            "lm_head.weight".into(),
            head.weight.val().transpose(),
        );
    }
    out
}

/// `model.safetensors` (f32) at `path`, written atomically.
pub fn save_safetensors<B: Backend>(model: &Llama<B>, path: &Path) -> anyhow::Result<()> {
    let bytes = safetensors_io::to_bytes(&named_weights(model))?;
    write_atomic(path, &bytes)
}

/// A transformers `config.json` for `cfg` (`LlamaForCausalLM`), for
/// checkpoints envgen creates. Only plain RoPE: scaled configs come from
/// checkpoints, whose own config.json is copied.
pub fn config_json(cfg: &LlamaConfig) -> Value {
    debug_assert!(matches!(cfg.rope.scaling, RopeScaling::None));
    let eos: Value = match cfg.eos_token_ids.as_slice() {
        [] => Value::Null,
        [one] => json!(one),
        many => json!(many),
    };
    json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope.theta,
        "attention_bias": cfg.qkv_bias,
        "mlp_bias": cfg.mlp_bias,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    })
}
