//! LoRA for the GPT's linear layers: `envgen run rft --set
//! finetune.mode=lora` (the config, target names and the adapter itself
//! are `crate::lora`'s, shared with the Llama family).
//!
//! An adapted layer computes `x · (W + s·A·B) + b`: `W` and `b` frozen, `A`
//! [d_in, r] drawn at random, `B` [r, d_out] zeros, `s = alpha / r`. With
//! `B = 0` the adapted model is exactly the base model at the start. The
//! adapter sits next to the layer it adapts (`h.0.attn.c_attn_lora.{a,b}`
//! beside `h.0.attn.c_attn.{weight,bias}`); `None`, the default, is plain
//! GPT-2 with unchanged parameter names. Working from the effective weight
//! `W + s·A·B` (rather than adding `s·(x·A)·B` to the output) keeps the
//! attention's per-head weight views as they are; for the tiny GPT the extra
//! [d_in, r]·[r, d_out] product per step is negligible. [`merge`] folds the
//! update into `W` when training ends, so the saved model is plain GPT-2.

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::prelude::*;

use super::model::{Block, Gpt2, ModelConfig};
use crate::engine::{params, safetensors_io};
use crate::error::UserError;
use crate::fsutil::write_atomic;
use crate::lora::adapter::adapted_weight;
pub use crate::lora::{Family, LoraAdapter, LoraConfig, Target};

/// (d_in, d_out) of the GPT layer `target` in a GPT `n_embd` wide; None for
/// a Llama layer name (refused by [`LoraConfig::validate`]).
pub fn shape(target: Target, n_embd: usize) -> Option<(usize, usize)> {
    let d = n_embd;
    match target {
        Target::AttnQkv => Some((d, 3 * d)),
        Target::AttnProj => Some((d, d)),
        Target::MlpFc => Some((d, 4 * d)),
        Target::MlpProj => Some((4 * d, d)),
        _ => None,
    }
}

impl LoraConfig {
    /// Adapter parameters of `model`: per block, r·(d_in + d_out) per target.
    pub fn num_params(&self, model: &ModelConfig) -> usize {
        let per_block: usize = self
            .targets
            .iter()
            .filter_map(|&t| shape(t, model.n_embd))
            .map(|(d_in, d_out)| self.rank * (d_in + d_out))
            .sum();
        model.n_layer * per_block
    }

    /// Reject values no adapter can be built with on the GPT `model`
    /// (Llama layer names included); `key` is the table's path
    /// (`finetune.lora`) for the message.
    pub fn validate(&self, model: &ModelConfig, key: &str) -> Result<(), UserError> {
        let max_rank = self
            .targets
            .iter()
            .filter_map(|&t| shape(t, model.n_embd))
            .map(|(d_in, d_out)| d_in.min(d_out))
            .min()
            .unwrap_or(0);
        self.check(Family::Gpt, key, max_rank)
    }

    /// Freeze every weight of `model` and give each targeted layer a fresh,
    /// trainable adapter (A random, B zeros: the output is unchanged).
    pub fn attach<B: Backend>(&self, model: Gpt2<B>, device: &B::Device) -> Gpt2<B> {
        let mut model = model.no_grad();
        for block in &mut model.h {
            for (target, layer, slot) in adaptable_layers(block) {
                if self.targets.contains(&target) {
                    let [d_in, d_out] = layer.weight.val().dims();
                    *slot = Some(LoraAdapter::new(
                        d_in,
                        d_out,
                        self.rank,
                        self.scale(),
                        device,
                    ));
                }
            }
        }
        model
    }
}

/// A linear layer of a block with its adapter slot.
type AdaptableLayer<'a, B> = (Target, &'a mut Linear<B>, &'a mut Option<LoraAdapter<B>>);

/// Each linear layer of `block` with its adapter slot.
fn adaptable_layers<B: Backend>(block: &mut Block<B>) -> [AdaptableLayer<'_, B>; 4] {
    let (attn, mlp) = (&mut block.attn, &mut block.mlp);
    [
        (Target::AttnQkv, &mut attn.c_attn, &mut attn.c_attn_lora),
        (Target::AttnProj, &mut attn.c_proj, &mut attn.c_proj_lora),
        (Target::MlpFc, &mut mlp.c_fc, &mut mlp.c_fc_lora),
        (Target::MlpProj, &mut mlp.c_proj, &mut mlp.c_proj_lora),
    ]
}

/// Fold every adapter into its layer (W ← W + s·A·B) and drop it: the
/// result is a plain GPT that computes what the adapted one did.
pub fn merge<B: Backend>(mut model: Gpt2<B>) -> Gpt2<B> {
    for block in &mut model.h {
        for (_, layer, slot) in adaptable_layers(block) {
            if let Some(adapter) = slot.take() {
                let merged = adapted_weight(layer, Some(&adapter));
                layer.weight = Param::initialized(layer.weight.id, merged);
            }
        }
    }
    model
}

/// Path component that marks adapter parameters (`h.0.mlp.c_fc_lora.a`).
const ADAPTER_MARK: &str = "_lora.";

/// The adapters alone as (path, shape, values); empty for a plain GPT.
pub fn adapter_tensors<B: Backend>(model: &Gpt2<B>) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    params::collect::<B, _>(model, true)
        .into_iter()
        .filter(|p| p.name.contains(ADAPTER_MARK))
        .map(|p| (p.name, p.shape, p.values))
        .collect()
}

/// Write the adapters alone to a safetensors file (atomically).
pub fn save_adapters<B: Backend>(model: &Gpt2<B>, path: &Path) -> anyhow::Result<()> {
    write_atomic(path, &safetensors_io::to_bytes(&adapter_tensors(model))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Cpu, CpuTrain};
    use crate::engine::optim::AdamW;
    use crate::engine::OptimConfig;
    use crate::gpt2::hf::tests::small;
    use burn::optim::GradientsParams;
    use burn::tensor::Distribution;

    fn tokens<B: Backend>(device: &B::Device) -> Tensor<B, 2, Int> {
        Tensor::from_ints([[1, 5, 7, 31, 2, 9], [3, 3, 0, 12, 8, 30]], device)
    }

    fn max_diff<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> f32 {
        (a - b).abs().max().into_scalar().elem()
    }

    /// A·B perturbed by hand: what training would do to B.
    fn nudge_adapters<B: Backend>(model: Gpt2<B>, device: &B::Device) -> Gpt2<B> {
        let mut model = model;
        for block in &mut model.h {
            for (_, _, slot) in adaptable_layers(block) {
                if let Some(adapter) = slot {
                    let shape = adapter.b.val().dims();
                    adapter.b = Param::from_tensor(Tensor::random(
                        shape,
                        Distribution::Normal(0.0, 0.1),
                        device,
                    ));
                }
            }
        }
        model
    }

    #[test]
    fn a_fresh_adapter_leaves_the_model_unchanged_and_merging_keeps_the_output() {
        let cfg = small();
        let device = Default::default();
        <Cpu as Backend>::seed(&device, 11);
        let base = cfg.init::<Cpu>(&device);
        let idx = tokens::<Cpu>(&device);
        // The forward initializes Burn's lazy parameters: a clone made
        // before that would draw its own.
        let base_out = base.forward(idx.clone());
        let adapted = LoraConfig::default().attach(base.clone(), &device);
        let diff = max_diff(base_out, adapted.forward(idx.clone()));
        assert_eq!(diff, 0.0, "B = 0: the adapted forward is the base forward");

        let adapted = nudge_adapters(adapted, &device);
        let moved = max_diff(base.forward(idx.clone()), adapted.forward(idx.clone()));
        assert!(
            moved > 1e-3,
            "the nudged adapters change the output ({moved})"
        );
        let merged = merge(adapted.clone());
        assert!(adapter_tensors(&merged).is_empty());
        let diff = max_diff(merged.forward(idx.clone()), adapted.forward(idx));
        assert!(diff < 1e-5, "merged vs adapted: max difference {diff}");
        // The merged model is a plain GPT-2: same names and shapes as the base.
        let names = |m: &Gpt2<Cpu>| -> Vec<(String, Vec<usize>)> {
            params::collect::<Cpu, _>(m, false)
                .into_iter()
                .map(|p| (p.name, p.shape))
                .collect()
        };
        assert_eq!(names(&merged), names(&base));
    }

    #[test]
    fn adapters_are_named_beside_their_layers_and_counted_by_the_config() {
        let cfg = small();
        let device = Default::default();
        let lora = LoraConfig {
            rank: 4,
            alpha: 8.0,
            targets: vec![Target::AttnQkv, Target::MlpProj],
        };
        let model = lora.attach(cfg.init::<CpuTrain>(&device), &device);
        let adapters = adapter_tensors(&model);
        let get = |n: &str| adapters.iter().find(|a| a.0 == n).map(|a| a.1.clone());
        assert_eq!(get("h.1.attn.c_attn_lora.a"), Some(vec![16, 4]));
        assert_eq!(get("h.1.attn.c_attn_lora.b"), Some(vec![4, 48]));
        assert_eq!(get("h.0.mlp.c_proj_lora.a"), Some(vec![64, 4]));
        assert_eq!(adapters.len(), 2 * 2 * cfg.n_layer);
        let adapter_values: usize = adapters.iter().map(|a| a.2.len()).sum();
        assert_eq!(adapter_values, lora.num_params(&cfg));
        // Only the adapters are trainable.
        assert_eq!(
            params::count_trainable::<CpuTrain, _>(&model),
            adapter_values
        );
        assert_eq!(
            params::count_trainable::<CpuTrain, _>(&cfg.init::<CpuTrain>(&device)),
            cfg.num_params()
        );
    }

    #[test]
    fn an_optimizer_step_moves_only_the_adapters() {
        let cfg = small();
        let device = Default::default();
        <CpuTrain as Backend>::seed(&device, 3);
        let model = LoraConfig::default().attach(cfg.init::<CpuTrain>(&device), &device);
        let before = params::collect::<CpuTrain, _>(&model, true);
        let idx = tokens::<CpuTrain>(&device);
        let loss = model.loss(idx.clone().slice([0..2, 0..5]), idx.slice([0..2, 1..6]));
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
        assert!(moved.iter().any(|n| n.ends_with("_lora.b")), "{moved:?}");
        for name in &moved {
            assert!(name.contains(ADAPTER_MARK), "frozen {name} changed");
        }
        // Frozen weights keep no optimizer moments (no decay, no state).
        let state = adamw.state_tensors::<CpuTrain, _>(&model);
        assert!(!state.is_empty());
        assert!(state.iter().all(|(n, _, _)| n.contains(ADAPTER_MARK)));
    }

    #[test]
    fn bad_rank_or_alpha_is_a_usage_error_naming_the_key() {
        let cfg = small();
        let check = |lora: LoraConfig| lora.validate(&cfg, "finetune.lora");
        assert!(check(LoraConfig::default()).is_ok());
        for (lora, key) in [
            (
                LoraConfig {
                    rank: 0,
                    ..LoraConfig::default()
                },
                "finetune.lora.rank = 0",
            ),
            (
                LoraConfig {
                    rank: 17,
                    ..LoraConfig::default()
                },
                "finetune.lora.rank = 17",
            ),
            (
                LoraConfig {
                    alpha: 0.0,
                    ..LoraConfig::default()
                },
                "finetune.lora.alpha = 0",
            ),
            (
                LoraConfig {
                    targets: vec![],
                    ..LoraConfig::default()
                },
                "finetune.lora.targets",
            ),
        ] {
            let err = check(lora).unwrap_err();
            let err = anyhow::Error::from(err);
            assert!(format!("{err:#}").contains(key), "{err:#}");
            assert_eq!(crate::error::exit_code_of(&err), 2);
        }
    }
}
