//! A Llama-family `config.json` (Llama 2/3, SmolLM2, Qwen2) read into the
//! few numbers the model needs, and RoPE's inverse frequencies.
//!
//! Everything the model does not implement is refused by name rather than
//! silently computed differently: another `model_type` or `hidden_act`, a
//! RoPE scaling other than `linear`/`llama3`, sliding-window attention.
//! Both spellings of RoPE are read: `rope_theta` + `rope_scaling` (the Hub's
//! checkpoints, transformers 4) and `rope_parameters` (transformers 5's
//! `save_pretrained`).

use std::path::Path;

use serde_json::Value;

use crate::error::UserError;

/// The `model_type`s this model computes exactly.
pub const MODEL_TYPES: [&str; 2] = ["llama", "qwen2"];

/// What the model needs from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention: each key/value head serves
    /// `num_attention_heads / num_key_value_heads` query heads.
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub rope: Rope,
    /// Biases on q/k/v (Qwen2 always; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// A bias on o_proj (Llama's `attention_bias`; never in Qwen2).
    pub o_bias: bool,
    /// Biases on the MLP's three projections (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// The output head is the token embedding (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

/// Rotary position embedding: base and frequency scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub theta: f64,
    pub scaling: RopeScaling,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Every frequency divided by `factor` (position interpolation).
    Linear {
        factor: f64,
    },
    /// Llama 3.1's: low frequencies divided by `factor`, high ones kept,
    /// the band between interpolated.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

impl Rope {
    /// The `head_dim / 2` inverse frequencies, computed in f32 as
    /// transformers does (`_compute_default_rope_parameters`,
    /// `_compute_llama3_parameters`), so positions rotate by the same angles.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        let base = self.theta as f32;
        (0..head_dim / 2)
            .map(|i| {
                let f = 1.0 / base.powf((2 * i) as f32 / head_dim as f32);
                match self.scaling {
                    RopeScaling::None => f,
                    RopeScaling::Linear { factor } => f / factor as f32,
                    RopeScaling::Llama3 {
                        factor,
                        low_freq_factor,
                        high_freq_factor,
                        original_max_position_embeddings: old,
                    } => {
                        let (factor, low, high, old) = (
                            factor as f32,
                            low_freq_factor as f32,
                            high_freq_factor as f32,
                            old as f32,
                        );
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < old / high {
                            f
                        } else if wavelen > old / low {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    }
                }
            })
            .collect()
    }
}

impl LlamaConfig {
    /// The f32 weights loading this model holds on the host (engine::budget),
    /// in f64 so that an absurd size cannot overflow before it is refused;
    /// named by the config.json field that sizes them most.
    pub fn memory_part(&self) -> crate::engine::budget::Part {
        let f = |n: usize| n as f64;
        let (v, h, l) = (
            f(self.vocab_size),
            f(self.hidden_size),
            f(self.num_hidden_layers),
        );
        let (q, kv) = (
            f(self.num_attention_heads) * f(self.head_dim),
            f(self.num_key_value_heads) * f(self.head_dim),
        );
        let per_layer =
            h * q + 2.0 * h * kv + q * h + 3.0 * h * f(self.intermediate_size) + 2.0 * h;
        let embeddings = v * h * if self.tie_word_embeddings { 1.0 } else { 2.0 };
        let layers = l * per_layer;
        let (key, value) = if embeddings > layers {
            ("vocab_size", self.vocab_size)
        } else if self.num_hidden_layers > self.hidden_size {
            ("num_hidden_layers", self.num_hidden_layers)
        } else if self.intermediate_size > self.hidden_size * 8 {
            ("intermediate_size", self.intermediate_size)
        } else {
            ("hidden_size", self.hidden_size)
        };
        crate::engine::budget::Part::weights(key, value, embeddings + layers + h)
    }
}

/// A usage error about `field` of `path`, with the fix.
fn bad(path: &Path, field: &str, why: String, fix: &str) -> anyhow::Error {
    UserError::usage(format!("{}: `{field}` {why}", path.display()))
        .with_fix(fix.to_string())
        .into()
}

/// Read `config.json` in `dir` (and `generation_config.json` for the
/// end-of-sequence ids, which override config.json's as in transformers).
pub fn read(dir: &Path) -> anyhow::Result<LlamaConfig> {
    let path = dir.join("config.json");
    let doc = read_json(&path)?;
    let mut cfg = parse(&doc, &path)?;
    // Before a weight is allocated (issue #40: num_hidden_layers 1e15
    // panicked with "capacity overflow"): sample, eval, export and rft all
    // load through here.
    crate::engine::budget::check(&path.display().to_string(), &[cfg.memory_part()]).map_err(
        |e| e.with_fix("check config.json's sizes, or load the model where more memory is free"),
    )?;
    let generation = dir.join("generation_config.json");
    if generation.exists() {
        let gen = read_json(&generation)?;
        if let Some(ids) = token_ids(&gen, "eos_token_id", &generation)? {
            cfg.eos_token_ids = ids;
        }
        if let Some(ids) = token_ids(&gen, "bos_token_id", &generation)? {
            cfg.bos_token_id = ids.first().copied();
        }
    }
    Ok(cfg)
}

/// A JSON file of a checkpoint directory, by fsutil's rule for files of a
/// user directory (a regular file inside it, of bounded size). A parse
/// error gives serde's line and column, never the file's text.
pub(crate) fn read_json(path: &Path) -> anyhow::Result<Value> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let text = crate::fsutil::read_user_text(dir, path, crate::fsutil::limit::JSON)?;
    serde_json::from_str(&text).map_err(|e| {
        UserError::usage(format!("{} is not JSON: {e}", path.display()))
            .with_fix("download the file again")
            .into()
    })
}

/// A token id or a list of them (`eos_token_id: [128001, 128009]`); None
/// when absent or null.
pub(crate) fn token_ids(doc: &Value, field: &str, path: &Path) -> anyhow::Result<Option<Vec<u32>>> {
    let one = |v: &Value| v.as_u64().and_then(|x| u32::try_from(x).ok());
    let why = || format!("is {}, expected a token id or a list of them", doc[field]);
    match &doc[field] {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|v| one(v).ok_or_else(|| bad(path, field, why(), "fix the file")))
            .collect::<anyhow::Result<Vec<u32>>>()
            .map(Some),
        v => one(v)
            .map(|id| Some(vec![id]))
            .ok_or_else(|| bad(path, field, why(), "fix the file")),
    }
}

fn parse(doc: &Value, path: &Path) -> anyhow::Result<LlamaConfig> {
    let supported =
        "envgen reads Llama-family checkpoints (model_type \"llama\" or \"qwen2\") and GPT-2";
    let model_type = doc["model_type"].as_str().unwrap_or_default().to_string();
    if !MODEL_TYPES.contains(&model_type.as_str()) {
        return Err(bad(
            path,
            "model_type",
            format!("is {}, not one envgen computes", doc["model_type"]),
            supported,
        ));
    }
    let size = |field: &str| -> anyhow::Result<usize> {
        match doc[field].as_u64() {
            Some(v) if v > 0 => Ok(v as usize),
            _ => Err(bad(
                path,
                field,
                format!("is {}, expected a positive integer", doc[field]),
                "fix config.json",
            )),
        }
    };
    let flag = |field: &str, default: bool| doc[field].as_bool().unwrap_or(default);
    let activation = doc["hidden_act"].as_str().unwrap_or("silu");
    if activation != "silu" {
        return Err(bad(
            path,
            "hidden_act",
            format!("is {activation:?}; envgen's Llama MLP computes SwiGLU (\"silu\")"),
            supported,
        ));
    }
    let sliding = flag("use_sliding_window", false)
        || doc["layer_types"]
            .as_array()
            .is_some_and(|t| t.iter().any(|l| l != "full_attention"));
    if sliding {
        return Err(bad(
            path,
            "use_sliding_window",
            "is on; envgen's attention sees the whole context".into(),
            "set use_sliding_window to false (Qwen2 checkpoints ship it off)",
        ));
    }
    let hidden_size = size("hidden_size")?;
    let num_attention_heads = size("num_attention_heads")?;
    let num_key_value_heads = match doc["num_key_value_heads"] {
        Value::Null => num_attention_heads,
        _ => size("num_key_value_heads")?,
    };
    if num_attention_heads % num_key_value_heads != 0 {
        return Err(bad(
            path,
            "num_key_value_heads",
            format!("is {num_key_value_heads}, which does not divide num_attention_heads {num_attention_heads}"),
            "fix config.json",
        ));
    }
    let head_dim = match doc["head_dim"] {
        Value::Null => {
            if hidden_size % num_attention_heads != 0 {
                return Err(bad(
                    path,
                    "num_attention_heads",
                    format!(
                        "is {num_attention_heads}, which does not divide hidden_size {hidden_size}"
                    ),
                    "set head_dim in config.json",
                ));
            }
            hidden_size / num_attention_heads
        }
        _ => size("head_dim")?,
    };
    if head_dim % 2 != 0 {
        return Err(bad(
            path,
            "head_dim",
            format!("is {head_dim}; RoPE rotates pairs, so it must be even"),
            "fix config.json",
        ));
    }
    let qwen2 = model_type == "qwen2";
    let attention_bias = flag("attention_bias", false);
    // A negative or zero epsilon divides by ~0 in every norm: NaN logits.
    let rms_norm_eps = match &doc["rms_norm_eps"] {
        Value::Null => 1e-6,
        v => v
            .as_f64()
            .filter(|e| e.is_finite() && *e > 0.0)
            .ok_or_else(|| {
                bad(
                    path,
                    "rms_norm_eps",
                    format!("is {v}, expected a small positive number"),
                    "fix config.json (1e-5 or 1e-6 usually)",
                )
            })?,
    };
    Ok(LlamaConfig {
        vocab_size: size("vocab_size")?,
        hidden_size,
        intermediate_size: size("intermediate_size")?,
        num_hidden_layers: size("num_hidden_layers")?,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps,
        max_position_embeddings: size("max_position_embeddings")?,
        rope: rope(doc, path)?,
        qkv_bias: qwen2 || attention_bias,
        o_bias: !qwen2 && attention_bias,
        mlp_bias: !qwen2 && flag("mlp_bias", false),
        // Absent, the head is untied, as in transformers 5.24's
        // `LlamaConfig` and `Qwen2Config` (`tie_word_embeddings: bool =
        // False`, configuration_llama.py and configuration_qwen2.py); it was
        // read as tied, which gave other logits and no error (issue #42).
        tie_word_embeddings: flag("tie_word_embeddings", false),
        bos_token_id: token_ids(doc, "bos_token_id", path)?.and_then(|ids| ids.first().copied()),
        eos_token_ids: token_ids(doc, "eos_token_id", path)?.unwrap_or_default(),
        model_type,
    })
}

/// RoPE from `rope_parameters` (transformers 5) or `rope_theta` +
/// `rope_scaling` (transformers 4 and most Hub checkpoints).
fn rope(doc: &Value, path: &Path) -> anyhow::Result<Rope> {
    let (params, key) = match &doc["rope_parameters"] {
        Value::Object(_) => (&doc["rope_parameters"], "rope_parameters"),
        _ => (&doc["rope_scaling"], "rope_scaling"),
    };
    let theta = params["rope_theta"]
        .as_f64()
        .or_else(|| doc["rope_theta"].as_f64())
        .unwrap_or(10_000.0);
    if theta.is_nan() || theta <= 1.0 {
        return Err(bad(
            path,
            "rope_theta",
            format!("is {theta}, expected a base above 1"),
            "fix config.json",
        ));
    }
    let kind = params["rope_type"]
        .as_str()
        .or_else(|| params["type"].as_str())
        .unwrap_or("default");
    let number = |field: &str| -> anyhow::Result<f64> {
        params[field].as_f64().filter(|v| *v > 0.0).ok_or_else(|| {
            bad(
                path,
                &format!("{key}.{field}"),
                format!("is {}, expected a positive number", params[field]),
                "fix config.json",
            )
        })
    };
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: number("factor")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: number("factor")?,
            low_freq_factor: number("low_freq_factor")?,
            high_freq_factor: number("high_freq_factor")?,
            original_max_position_embeddings: number("original_max_position_embeddings")?,
        },
        other => {
            return Err(bad(
                path,
                &format!("{key}.rope_type"),
                format!(
                    "is {other:?}; envgen computes RoPE scaling \"linear\" and \"llama3\" only"
                ),
                "use a checkpoint without this RoPE scaling, or ask for it in an issue",
            ))
        }
    };
    Ok(Rope { theta, scaling })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tiny() -> Value {
        json!({
            "model_type": "llama", "vocab_size": 50, "hidden_size": 16,
            "intermediate_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "tie_word_embeddings": false,
            "eos_token_id": [3, 4],
        })
    }

    fn parsed(doc: &Value) -> anyhow::Result<LlamaConfig> {
        parse(doc, Path::new("config.json"))
    }

    fn refused(doc: &Value, field: &str) {
        let e = parsed(doc).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2, "{e}");
        assert!(e.to_string().contains(field), "{e}");
    }

    #[test]
    fn reads_both_rope_spellings_and_the_head_layout() {
        let cfg = parsed(&tiny()).unwrap();
        assert_eq!((cfg.head_dim, cfg.num_key_value_heads), (4, 2));
        assert_eq!(cfg.rope.theta, 500000.0);
        assert_eq!(cfg.eos_token_ids, vec![3, 4]);
        assert!(!cfg.qkv_bias && !cfg.tie_word_embeddings);
        let mut doc = tiny();
        doc["rope_parameters"] = json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0});
        let cfg = parsed(&doc).unwrap();
        assert_eq!(cfg.rope.theta, 100.0);
        assert_eq!(cfg.rope.scaling, RopeScaling::Linear { factor: 2.0 });
        doc["model_type"] = json!("qwen2");
        let cfg = parsed(&doc).unwrap();
        assert!(cfg.qkv_bias && !cfg.o_bias);
    }

    /// Without `tie_word_embeddings` both model types have their own head,
    /// as transformers' config classes default it; `true` still ties.
    #[test]
    fn an_absent_tie_word_embeddings_is_untied_as_in_transformers() {
        for model_type in MODEL_TYPES {
            let mut doc = tiny();
            doc["model_type"] = json!(model_type);
            doc.as_object_mut().unwrap().remove("tie_word_embeddings");
            assert!(!parsed(&doc).unwrap().tie_word_embeddings, "{model_type}");
            doc["tie_word_embeddings"] = json!(true);
            assert!(parsed(&doc).unwrap().tie_word_embeddings, "{model_type}");
        }
    }

    #[test]
    fn refuses_what_it_does_not_compute_by_name() {
        let mut doc = tiny();
        doc["rope_scaling"] = json!({"type": "yarn", "factor": 4.0});
        refused(&doc, "rope_scaling.rope_type");
        let mut doc = tiny();
        doc["model_type"] = json!("mistral");
        refused(&doc, "model_type");
        let mut doc = tiny();
        doc["hidden_act"] = json!("gelu");
        refused(&doc, "hidden_act");
        let mut doc = tiny();
        doc["num_key_value_heads"] = json!(3);
        refused(&doc, "num_key_value_heads");
        let mut doc = tiny();
        doc["hidden_size"] = json!("sixteen");
        refused(&doc, "hidden_size");
        let mut doc = tiny();
        doc["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0});
        refused(&doc, "rope_scaling.low_freq_factor");
    }

    /// Llama 3.1's frequencies (its published config): the highest
    /// frequencies are kept, the lowest divided by 8.
    #[test]
    fn llama3_scaling_keeps_high_and_divides_low_frequencies() {
        let plain = Rope {
            theta: 500000.0,
            scaling: RopeScaling::None,
        };
        let scaled = Rope {
            theta: 500000.0,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        };
        let (a, b) = (plain.inv_freq(128), scaled.inv_freq(128));
        assert_eq!(a[0], b[0]);
        assert!((a[63] / 8.0 - b[63]).abs() < 1e-12);
        // Wavelengths between 8192/4 and 8192 (indices 29..=34): the
        // interpolation between the two, as transformers writes it.
        for i in 29..=34 {
            let f = f64::from(a[i]);
            let smooth = (8192.0 * f / (2.0 * std::f64::consts::PI) - 1.0) / (4.0 - 1.0);
            let want = (1.0 - smooth) * f / 8.0 + smooth * f;
            assert!(f64::from(b[i]) < f && f64::from(b[i]) > f / 8.0, "{i}");
            assert!(
                (f64::from(b[i]) - want).abs() < 1e-6 * want,
                "{i}: {} vs {want}",
                b[i]
            );
        }
    }
}
