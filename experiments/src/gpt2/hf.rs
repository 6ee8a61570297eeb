//! Hugging Face GPT-2 weights: `model.safetensors` with HF tensor names.
//!
//! Our parameter paths already are HF's names (`wte.weight`,
//! `h.0.attn.c_attn.weight`, `ln_f.bias`, …) except that Burn's LayerNorm
//! calls its parameters `gamma`/`beta` where HF says `weight`/`bias`. Linear
//! weights are [d_in, d_out] in both (HF GPT-2 uses Conv1D), so no transpose.
//! HF files may prefix names with `transformer.` and carry `lm_head.weight`
//! (tied, equal to `wte.weight`) and `attn.bias`/`attn.masked_bias` buffers
//! (the causal mask): the prefix is stripped and the extras ignored.
//!
//! A Hugging Face model directory (`save_pretrained`: `config.json` and
//! `model.safetensors`) is read with [`load_pretrained`] and written with
//! [`save_pretrained`], so `GPT2LMHeadModel.from_pretrained` loads envgen's
//! weights and envgen loads any GPT-2 checkpoint from the Hub
//! (tests/it/train/gpt2_hf.rs checks both ways against `transformers`).

use std::path::Path;

use burn::prelude::*;
use serde_json::{json, Value};

use super::model::{ModelConfig, LN_EPS};
use crate::engine::{params, safetensors_io};
use crate::error::UserError;
use crate::fsutil::write_atomic;

/// Our parameter path → HF tensor name.
pub fn hf_name(path: &str) -> String {
    if let Some(stem) = path.strip_suffix(".gamma") {
        format!("{stem}.weight")
    } else if let Some(stem) = path.strip_suffix(".beta") {
        format!("{stem}.bias")
    } else {
        path.to_string()
    }
}

/// The model's weights as (HF name, shape, values).
pub fn named_weights<B: Backend>(model: &super::Gpt2<B>) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    params::collect::<B, _>(model, true)
        .into_iter()
        .map(|p| (hf_name(&p.name), p.shape, p.values))
        .collect()
}

pub fn save<B: Backend>(model: &super::Gpt2<B>, path: &Path) -> anyhow::Result<()> {
    write_atomic(path, &safetensors_io::to_bytes(&named_weights(model))?)
}

/// Load HF-named weights into `model` (same shapes required).
pub fn load<B: Backend>(model: super::Gpt2<B>, path: &Path) -> anyhow::Result<super::Gpt2<B>> {
    let tensors = safetensors_io::read(path)?;
    load_tensors(model, &tensors, &path.display().to_string())
}

/// Load HF-named tensors already in memory (`origin` names them in errors).
pub fn load_tensors<B: Backend>(
    model: super::Gpt2<B>,
    tensors: &safetensors_io::NamedTensors,
    origin: &str,
) -> anyhow::Result<super::Gpt2<B>> {
    let lookup = |name: &str| {
        let hf = hf_name(name);
        tensors
            .get(&hf)
            .or_else(|| tensors.get(&format!("transformer.{hf}")))
            .cloned()
    };
    params::replace::<B, _>(model, origin, &lookup)
}

// Loading saved weights is this file's concern, so the model's loading
// constructor lives here, and the model (`model.rs`) knows nothing of files.
impl ModelConfig {
    /// A fresh model, or the weights saved at `path` ([`save`]'s layout,
    /// or a Hugging Face model directory holding `model.safetensors`).
    pub fn init_from<B: Backend>(
        &self,
        path: Option<&std::path::Path>,
        device: &B::Device,
    ) -> anyhow::Result<super::Gpt2<B>> {
        let model = self.init::<B>(device);
        match path {
            Some(path) if is_pretrained_dir(path) => load(model, &path.join("model.safetensors")),
            Some(path) => load(model, path),
            None => Ok(model),
        }
    }
}

/// GPT-2's activations in `transformers`' `config.json`: the tanh
/// approximation of GELU that envgen's MLP computes.
const TANH_GELUS: [&str; 2] = ["gelu_new", "gelu_pytorch_tanh"];

/// GPT2Config's switches that change what the model computes, with the
/// value envgen computes (transformers 5.24's `configuration_gpt2.py`
/// defaults, which a `config.json` without the key gets):
/// `scale_attn_weights` divides scores by √head_dim; the inverse-layer
/// scaling divides them by the layer's number too; `reorder_and_upcast_attn`
/// computes attention in f32 in another order; cross-attention adds
/// weights; an untied head is its own matrix, where envgen's is `wte`.
const FIXED_SWITCHES: [(&str, bool); 5] = [
    ("scale_attn_weights", true),
    ("scale_attn_by_inverse_layer_idx", false),
    ("reorder_and_upcast_attn", false),
    ("add_cross_attention", false),
    ("tie_word_embeddings", true),
];

const UNSUPPORTED_FIX: &str =
    "use a checkpoint trained with transformers' GPT-2 defaults for this key, or run this one with transformers";

/// A switch of [`FIXED_SWITCHES`] set to what envgen does not compute is
/// refused by name (it was ignored: other logits, no error; issue #42).
fn refuse_unimplemented(doc: &Value, path: &Path) -> anyhow::Result<()> {
    for (key, default) in FIXED_SWITCHES {
        let value = &doc[key];
        if value.is_null() || value.as_bool() == Some(default) {
            continue;
        }
        return Err(UserError::usage(format!(
            "{}: `{key}` is {value}; envgen's GPT-2 supports only the default ({default})",
            path.display()
        ))
        .with_fix(UNSUPPORTED_FIX)
        .into());
    }
    Ok(())
}

/// Whether `path` is a Hugging Face model directory (has `config.json`).
pub fn is_pretrained_dir(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// The model config a Hugging Face GPT-2 `config.json` describes.
pub fn config_of(dir: &Path) -> anyhow::Result<ModelConfig> {
    let path = dir.join("config.json");
    let doc = crate::llama::config::read_json(&path)?;
    let bad = |field: &str, why: String| -> anyhow::Error {
        UserError::usage(format!("{}: `{field}` {why}", path.display()))
            .with_fix("only GPT-2 checkpoints (model_type \"gpt2\") are read")
            .into()
    };
    // A value envgen's GPT-2 does not compute: refused, not ignored.
    let unsupported = |field: &str, why: String| -> anyhow::Error {
        UserError::usage(format!("{}: `{field}` {why}", path.display()))
            .with_fix(UNSUPPORTED_FIX)
            .into()
    };
    if doc["model_type"] != "gpt2" {
        return Err(bad(
            "model_type",
            format!("is {}, expected \"gpt2\"", doc["model_type"]),
        ));
    }
    let size = |field: &str| -> anyhow::Result<usize> {
        doc[field].as_u64().map(|v| v as usize).ok_or_else(|| {
            bad(
                field,
                format!("is {}, expected a positive integer", doc[field]),
            )
        })
    };
    let activation = doc["activation_function"].as_str().unwrap_or("gelu_new");
    if !TANH_GELUS.contains(&activation) {
        return Err(unsupported(
            "activation_function",
            format!(
                "is {activation:?}; envgen's GPT-2 supports only the default ({:?}, or {:?}, the same function)",
                TANH_GELUS[0], TANH_GELUS[1]
            ),
        ));
    }
    refuse_unimplemented(&doc, &path)?;
    let eps = doc["layer_norm_epsilon"].as_f64().unwrap_or(LN_EPS);
    if (eps - LN_EPS).abs() > 1e-12 {
        return Err(unsupported(
            "layer_norm_epsilon",
            format!("is {eps:e}; envgen's GPT-2 supports only the default ({LN_EPS:e})"),
        ));
    }
    let n_embd = size("n_embd")?;
    // transformers' MLP is n_inner wide, 4 × n_embd when null (GPT2MLP);
    // envgen's is always 4 × n_embd.
    if !doc["n_inner"].is_null() && doc["n_inner"].as_u64() != Some(4 * n_embd as u64) {
        return Err(unsupported(
            "n_inner",
            format!(
                "is {}; envgen's GPT-2 supports only the default (null: 4 × n_embd = {})",
                doc["n_inner"],
                4 * n_embd
            ),
        ));
    }
    let cfg = ModelConfig {
        n_layer: size("n_layer")?,
        n_head: size("n_head")?,
        n_embd,
        block_size: size("n_positions")?,
        vocab_size: size("vocab_size")?,
        dropout: 0.0,
    };
    cfg.validate(&path.display().to_string())?;
    // Before a weight is allocated (issue #40: n_embd 1e6 aborted).
    let weights: Vec<_> = cfg
        .memory_parts()
        .iter()
        .take(1)
        .map(|p| p.as_weights())
        .collect();
    crate::engine::budget::check(&path.display().to_string(), &weights).map_err(|e| {
        e.with_fix("check config.json's sizes, or load the model where more memory is free")
    })?;
    Ok(cfg)
}

/// A Hugging Face GPT-2 model directory: its config and weights.
pub fn load_pretrained<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> anyhow::Result<(ModelConfig, super::Gpt2<B>)> {
    let cfg = config_of(dir)?;
    let weights = dir.join("model.safetensors");
    if !weights.is_file() {
        return Err(UserError::usage(format!(
            "{} has config.json but no model.safetensors",
            dir.display()
        ))
        .with_fix("save the model with save_pretrained(..., safe_serialization=True), or convert pytorch_model.bin to safetensors")
        .into());
    }
    let model = load(cfg.init::<B>(device), &weights)?;
    Ok((cfg, model))
}

/// The `config.json` `transformers` needs for a GPT-2 of shape `cfg`.
pub fn pretrained_config(cfg: &ModelConfig) -> Value {
    json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_embd": cfg.n_embd,
        "n_positions": cfg.block_size,
        "n_ctx": cfg.block_size,
        "vocab_size": cfg.vocab_size,
        "n_inner": null,
        "activation_function": TANH_GELUS[0],
        "layer_norm_epsilon": LN_EPS,
        "initializer_range": 0.02,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": true,
        "tie_word_embeddings": true,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "torch_dtype": "float32",
    })
}

/// Write `model` as a Hugging Face model directory: `config.json` and
/// `model.safetensors` with the names `save_pretrained` uses
/// (`transformer.` prefix; the tied `lm_head.weight` left out, as there).
pub fn save_pretrained<B: Backend>(
    model: &super::Gpt2<B>,
    cfg: &ModelConfig,
    dir: &Path,
) -> anyhow::Result<()> {
    // fsutil's error keeps the I/O error, so its class decides the exit
    // code: a read-only filesystem is the environment (3), not bad input
    // (it was 2; issue #40).
    write_pretrained(named_weights(model), &pretrained_config(cfg), dir)
}

/// Write HF-named `weights` (without their `transformer.` prefix) and
/// `config` as a model directory.
pub(crate) fn write_pretrained(
    weights: Vec<(String, Vec<usize>, Vec<f32>)>,
    config: &Value,
    dir: &Path,
) -> anyhow::Result<()> {
    crate::fsutil::create_dir_all(dir)?;
    let weights: Vec<(String, Vec<usize>, Vec<f32>)> = weights
        .into_iter()
        .map(|(name, shape, values)| (format!("transformer.{name}"), shape, values))
        .collect();
    write_atomic(
        &dir.join("model.safetensors"),
        &safetensors_io::to_bytes(&weights)?,
    )?;
    let config = serde_json::to_string_pretty(config)?;
    write_atomic(&dir.join("config.json"), config.as_bytes())?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backend::Cpu;
    use crate::gpt2::ModelConfig;

    /// A 2-layer GPT 16 wide (shared with the LoRA tests).
    pub(crate) fn small() -> ModelConfig {
        ModelConfig {
            n_layer: 2,
            n_head: 2,
            n_embd: 16,
            block_size: 8,
            vocab_size: 40,
            dropout: 0.0,
        }
    }

    /// `export hf` where nothing can be written (sysfs: EPERM, or EROFS
    /// where it is mounted read-only) is the environment's fault: exit 3.
    #[test]
    fn an_unwritable_export_directory_is_exit_3() {
        let cfg = small();
        let model = cfg.init::<Cpu>(&Default::default());
        let err = save_pretrained(&model, &cfg, Path::new("/sys/envgen-export/hf")).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 3, "{err:#}");
        assert!(format!("{err:#}").contains("/sys/envgen-export"), "{err:#}");
    }

    #[test]
    fn names_and_layouts_are_hugging_faces() {
        let cfg = small();
        let model = cfg.init::<Cpu>(&Default::default());
        let weights = named_weights(&model);
        let get = |n: &str| weights.iter().find(|w| w.0 == n).map(|w| w.1.clone());
        assert_eq!(get("wte.weight"), Some(vec![40, 16]));
        assert_eq!(get("wpe.weight"), Some(vec![8, 16]));
        assert_eq!(get("h.1.ln_1.weight"), Some(vec![16]));
        assert_eq!(get("h.1.ln_1.bias"), Some(vec![16]));
        assert_eq!(get("h.0.attn.c_attn.weight"), Some(vec![16, 48]));
        assert_eq!(get("h.0.attn.c_attn.bias"), Some(vec![48]));
        assert_eq!(get("h.0.attn.c_proj.weight"), Some(vec![16, 16]));
        assert_eq!(get("h.0.mlp.c_fc.weight"), Some(vec![16, 64]));
        assert_eq!(get("h.0.mlp.c_proj.weight"), Some(vec![64, 16]));
        assert_eq!(get("ln_f.weight"), Some(vec![16]));
        // HF GPT-2 (tied head) has exactly 4 + 12·n_layer + 2 tensors here.
        assert_eq!(weights.len(), 2 + 12 * cfg.n_layer + 2);
    }

    #[test]
    fn save_then_load_gives_identical_logits() {
        let cfg = small();
        let device = Default::default();
        let a = cfg.init::<Cpu>(&device);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        save(&a, &path).unwrap();
        let b = load(cfg.init::<Cpu>(&device), &path).unwrap();
        let idx = Tensor::<Cpu, 2, Int>::from_ints([[1, 5, 7, 39]], &device);
        let la = a.forward(idx.clone()).into_data().to_vec::<f32>().unwrap();
        let lb = b.forward(idx).into_data().to_vec::<f32>().unwrap();
        assert_eq!(la, lb);
        // A file from another config is refused by name.
        let other = ModelConfig {
            n_embd: 8,
            ..small()
        }
        .init::<Cpu>(&device);
        let err = load(other, &path).unwrap_err();
        assert!(err.to_string().contains("wrong shape"), "{err}");
    }

    #[test]
    fn pretrained_directories_round_trip_with_their_config() {
        let cfg = small();
        let device = Default::default();
        let a = cfg.init::<Cpu>(&device);
        let dir = tempfile::tempdir().unwrap();
        save_pretrained(&a, &cfg, dir.path()).unwrap();
        assert!(is_pretrained_dir(dir.path()));
        let names = safetensors_io::read(&dir.path().join("model.safetensors")).unwrap();
        assert!(names.contains_key("transformer.h.0.attn.c_attn.weight"));
        let (back_cfg, b) = load_pretrained::<Cpu>(dir.path(), &device).unwrap();
        assert_eq!(back_cfg, cfg);
        let idx = Tensor::<Cpu, 2, Int>::from_ints([[1, 5, 7, 39]], &device);
        let la = a.forward(idx.clone()).into_data().to_vec::<f32>().unwrap();
        let lb = b.forward(idx).into_data().to_vec::<f32>().unwrap();
        assert_eq!(la, lb);

        let mut doc = pretrained_config(&cfg);
        doc["activation_function"] = json!("relu");
        std::fs::write(dir.path().join("config.json"), doc.to_string()).unwrap();
        let e = load_pretrained::<Cpu>(dir.path(), &device).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
        assert!(e.to_string().contains("activation_function"), "{e}");
    }

    /// Every GPT2Config key that changes the model, set to what envgen
    /// does not compute, is refused naming the key, its value and the
    /// default envgen supports (issue #42: they were ignored); the
    /// defaults themselves, written out or absent, load.
    #[test]
    fn model_changing_gpt2_keys_off_their_default_are_refused_by_name() {
        let cfg = small();
        let dir = tempfile::tempdir().unwrap();
        save_pretrained(&cfg.init::<Cpu>(&Default::default()), &cfg, dir.path()).unwrap();
        let with = |key: &str, value: Value| {
            let mut doc = pretrained_config(&cfg);
            doc[key] = value;
            std::fs::write(dir.path().join("config.json"), doc.to_string()).unwrap();
            config_of(dir.path())
        };
        let refused = [
            ("scale_attn_by_inverse_layer_idx", json!(true), "(false)"),
            ("reorder_and_upcast_attn", json!(true), "(false)"),
            ("scale_attn_weights", json!(false), "(true)"),
            ("add_cross_attention", json!(true), "(false)"),
            ("tie_word_embeddings", json!(false), "(true)"),
            ("activation_function", json!("gelu"), "\"gelu_new\""),
            ("n_inner", json!(32), "4 × n_embd = 64"),
            ("layer_norm_epsilon", json!(1e-6), "(1e-5)"),
        ];
        for (key, value, default) in refused {
            let e = with(key, value.clone()).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&e), 2, "{key}: {e:#}");
            let text = format!("{e:#}");
            for part in [
                "config.json",
                &format!("`{key}` is {value}"),
                "supports only the default",
                default,
                "fix:",
            ] {
                assert!(text.contains(part), "{key}: {part:?} not in {text}");
            }
        }
        for (key, value) in [
            ("n_inner", json!(64)),
            ("n_inner", Value::Null),
            ("activation_function", json!("gelu_pytorch_tanh")),
            ("scale_attn_by_inverse_layer_idx", Value::Null),
        ] {
            assert_eq!(with(key, value).unwrap(), cfg, "{key}");
        }
    }
}
