//! Hugging Face GPT-2 weights: `model.safetensors` with HF tensor names.
//!
//! Our parameter paths already are HF's names (`wte.weight`,
//! `h.0.attn.c_attn.weight`, `ln_f.bias`, …) except that Burn's LayerNorm
//! calls its parameters `gamma`/`beta` where HF says `weight`/`bias`. Linear
//! weights are [d_in, d_out] in both (HF GPT-2 uses Conv1D), so no transpose.
//! HF files may prefix names with `transformer.` and carry `lm_head.weight`
//! (tied, equal to `wte.weight`) and `attn.bias`/`attn.masked_bias` buffers
//! (the causal mask): the prefix is stripped and the extras ignored.

use std::path::Path;

use burn::prelude::*;

use crate::engine::{params, safetensors_io};

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
    safetensors_io::write_atomic(path, &safetensors_io::to_bytes(&named_weights(model))?)
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
}
