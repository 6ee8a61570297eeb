//! GPT-2 (nanoGPT-style): pre-LN blocks, causal self-attention, tanh-GELU
//! MLP ×4, learned positions, tied input/output embeddings, biases,
//! LayerNorm eps 1e-5, N(0, 0.02) init with residual projections scaled by
//! (2·n_layer)^-0.5.
//!
//! Field names follow Hugging Face's GPT-2 (`wte`, `h.{i}.attn.c_attn`, …)
//! so checkpoint paths map to HF names by renaming LayerNorm's
//! `gamma`/`beta` only. Burn's `Linear` stores its weight as [d_in, d_out],
//! which is exactly HF's Conv1D layout.
//!
//! The four linear layers of a block may carry a LoRA adapter
//! (`c_attn_lora`, …; [`super::lora`]); `None`, as `init` builds them, is
//! plain GPT-2.

use burn::module::{Module, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use serde::{Deserialize, Serialize};

use super::lora::{self, LoraAdapter};

/// The `[model]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    pub block_size: usize,
    /// Embedding rows; may exceed the tokenizer's vocabulary (GPT-2 pads
    /// 50,257 to 50,304, a multiple of 64, for speed).
    pub vocab_size: usize,
    /// Dropout probability on the embeddings and on each residual branch
    /// (nanoGPT's places, except attention weights: Burn's fused attention
    /// has no dropout). 0 = off, and then left out of config.toml, so
    /// configs without dropout hash as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropout: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl ModelConfig {
    /// Parameter count without building the model:
    /// wte V·d + wpe T·d + per layer (12d² + 13d) + final LayerNorm 2d.
    /// Per layer: ln_1 2d, c_attn 3d²+3d, attn c_proj d²+d, ln_2 2d,
    /// c_fc 4d²+4d, mlp c_proj 4d²+d.
    pub fn num_params(&self) -> usize {
        let d = self.n_embd;
        self.vocab_size * d + self.block_size * d + self.n_layer * (12 * d * d + 13 * d) + 2 * d
    }

    /// Reject values the model cannot be built with (a usage error naming the key).
    pub fn validate(&self, origin: &str) -> Result<(), crate::error::UserError> {
        let bad = |key: &str, value: String, fix: &str| {
            Err(
                crate::error::UserError::usage(format!("{origin}: model.{key} = {value}"))
                    .with_fix(fix.to_string()),
            )
        };
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(
                "dropout",
                self.dropout.to_string(),
                "use a probability in [0, 1)",
            );
        }
        if self.n_head == 0 || self.n_embd % self.n_head != 0 {
            return bad(
                "n_head",
                self.n_head.to_string(),
                "n_embd must be a multiple of n_head",
            );
        }
        Ok(())
    }

    /// A fresh model, or the weights saved at `path` (`hf::save`'s layout).
    pub fn init_from<B: Backend>(
        &self,
        path: Option<&std::path::Path>,
        device: &B::Device,
    ) -> anyhow::Result<Gpt2<B>> {
        let model = self.init::<B>(device);
        match path {
            Some(path) => super::hf::load(model, path),
            None => Ok(model),
        }
    }

    pub fn init<B: Backend>(&self, device: &B::Device) -> Gpt2<B> {
        self.init_shaped(self.n_head, 4 * self.n_embd, device)
    }

    /// A model whose blocks keep `heads` attention heads of the full
    /// model's width (`n_embd / n_head`) and `hidden` MLP neurons: the shape
    /// structured pruning leaves (`quant::prune`). `init` is the unpruned case.
    pub fn init_shaped<B: Backend>(
        &self,
        heads: usize,
        hidden: usize,
        device: &B::Device,
    ) -> Gpt2<B> {
        let normal = |std: f64| Initializer::Normal { mean: 0.0, std };
        let resid_std = 0.02 / ((2 * self.n_layer) as f64).sqrt();
        let d = self.n_embd;
        let width = heads * (d / self.n_head);
        let linear = |d_in: usize, d_out: usize, std: f64| {
            let mut layer = LinearConfig::new(d_in, d_out)
                .with_initializer(normal(std))
                .init::<B>(device);
            // `with_initializer` draws the bias too; GPT-2 starts biases at 0.
            layer.bias = Some(Param::from_tensor(Tensor::zeros([d_out], device)));
            layer
        };
        let layer_norm = || LayerNormConfig::new(d).with_epsilon(1e-5).init::<B>(device);
        let dropout = DropoutConfig::new(self.dropout).init();
        let h = (0..self.n_layer)
            .map(|_| Block {
                ln_1: layer_norm(),
                attn: CausalSelfAttention {
                    c_attn: linear(d, 3 * width, 0.02),
                    c_proj: linear(width, d, resid_std),
                    n_head: heads,
                    c_attn_lora: None,
                    c_proj_lora: None,
                },
                ln_2: layer_norm(),
                mlp: Mlp {
                    c_fc: linear(d, hidden, 0.02),
                    c_proj: linear(hidden, d, resid_std),
                    c_fc_lora: None,
                    c_proj_lora: None,
                },
                dropout: dropout.clone(),
            })
            .collect();
        Gpt2 {
            wte: EmbeddingConfig::new(self.vocab_size, d)
                .with_initializer(normal(0.02))
                .init(device),
            wpe: EmbeddingConfig::new(self.block_size, d)
                .with_initializer(normal(0.02))
                .init(device),
            h,
            ln_f: layer_norm(),
            dropout,
        }
    }
}

#[derive(Module, Debug)]
pub struct Gpt2<B: Backend> {
    pub wte: Embedding<B>,
    pub wpe: Embedding<B>,
    pub h: Vec<Block<B>>,
    pub ln_f: LayerNorm<B>,
    pub dropout: Dropout,
}

#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    pub ln_1: LayerNorm<B>,
    pub attn: CausalSelfAttention<B>,
    pub ln_2: LayerNorm<B>,
    pub mlp: Mlp<B>,
    pub dropout: Dropout,
}

#[derive(Module, Debug)]
pub struct CausalSelfAttention<B: Backend> {
    pub c_attn: Linear<B>,
    pub c_proj: Linear<B>,
    pub n_head: usize,
    pub c_attn_lora: Option<LoraAdapter<B>>,
    pub c_proj_lora: Option<LoraAdapter<B>>,
}

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub c_fc: Linear<B>,
    pub c_proj: Linear<B>,
    pub c_fc_lora: Option<LoraAdapter<B>>,
    pub c_proj_lora: Option<LoraAdapter<B>>,
}

/// GELU, tanh approximation (GPT-2's). Written with `x*x*x`: Burn's
/// `gelu_approximate` uses `powf_scalar(3.0)`, which is much slower on CPU.
pub fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    let cube = x.clone() * x.clone() * x.clone();
    let inner = (x.clone() + cube * 0.044715) * SQRT_2_OVER_PI;
    x * (inner.tanh() + 1.0) * 0.5
}

impl<B: Backend> CausalSelfAttention<B> {
    /// Width of one head. Read from `c_attn` (`[C, 3·heads·hd]`) rather than
    /// `C / heads`: a head-pruned layer keeps fewer heads of the same width.
    pub fn head_dim(&self) -> usize {
        self.c_attn.weight.dims()[1] / (3 * self.n_head)
    }

    /// Causal self-attention, computed head-major without moving activations.
    ///
    /// The textbook form splits `c_attn(x)` into heads with a reshape and a
    /// transpose and merges them back the same way. On Burn's CPU backend
    /// each of those is an element-by-element copy of a [B, T, C] tensor,
    /// forward and backward (≈ a quarter of a bench-cpu step in a perf
    /// profile, docs/benchmarks.md). Instead the weights are viewed per head:
    /// `x [B, 1, T, C] @ W_q [1, H, C, hd]` lands directly in the [B, H, T, hd]
    /// layout attention wants (a broadcast, strided matmul: no copy), and the
    /// output projection is `Σ_h y_h @ W_o,h`, the same sum the concatenated
    /// matmul computes. Parameters keep Hugging Face's Conv1D layout.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, d] = x.dims();
        let h = self.n_head;
        let hd = self.head_dim();
        let x = x.reshape([b, 1, t, d]);
        // [C, 3C] viewed as [C, 3, H, hd], then [3, H, C, hd]: views only.
        let w_qkv = lora::adapted_weight(&self.c_attn, self.c_attn_lora.as_ref())
            .reshape([d, 3, h, hd])
            .permute([1, 2, 0, 3]);
        let b_qkv = self
            .c_attn
            .bias
            .as_ref()
            .map(|bias| bias.val().reshape([3, h, 1, hd]));
        let project = |i: usize| {
            let w = w_qkv.clone().slice([i..i + 1]);
            let out = x.clone().matmul(w);
            match &b_qkv {
                Some(bias) => out + bias.clone().slice([i..i + 1]),
                None => out,
            }
        };
        let y = attention(
            project(0),
            project(1),
            project(2),
            None,
            None,
            AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: true,
            },
        );
        // [H·hd, C] viewed as [1, H, hd, C]; sum the per-head projections.
        let w_proj =
            lora::adapted_weight(&self.c_proj, self.c_proj_lora.as_ref()).reshape([1, h, hd, d]);
        let out = y.matmul(w_proj).sum_dim(1).reshape([b, t, d]);
        match &self.c_proj.bias {
            Some(bias) => out + bias.val().reshape([1, 1, d]),
            None => out,
        }
    }
}

impl<B: Backend> Mlp<B> {
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let hidden = gelu_tanh(lora::forward(&self.c_fc, self.c_fc_lora.as_ref(), x));
        lora::forward(&self.c_proj, self.c_proj_lora.as_ref(), hidden)
    }
}

impl<B: Backend> Block<B> {
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        // Dropout is the identity outside autodiff (evaluation, sampling).
        let x = x.clone()
            + self
                .dropout
                .forward(self.attn.forward(self.ln_1.forward(x)));
        x.clone() + self.dropout.forward(self.mlp.forward(self.ln_2.forward(x)))
    }
}

impl<B: Backend> Gpt2<B> {
    /// Logits [batch, time, vocab] for token ids [batch, time].
    pub fn forward(&self, idx: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [b, t] = idx.dims();
        let device = idx.device();
        let positions = Tensor::<B, 1, Int>::arange(0..t as i64, &device).reshape([1, t]);
        let mut x = self
            .dropout
            .forward(self.wte.forward(idx) + self.wpe.forward(positions));
        for block in &self.h {
            x = block.forward(x);
        }
        let x = self.ln_f.forward(x);
        let [_, _, d] = x.dims();
        // Tied output head: logits = x · wteᵀ.
        let wte = self.wte.weight.val();
        let vocab = wte.dims()[0];
        x.reshape([b * t, d])
            .matmul(wte.transpose())
            .reshape([b, t, vocab])
    }

    /// Mean next-token cross-entropy.
    pub fn loss(&self, idx: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let logits = self.forward(idx);
        let [b, t, v] = logits.dims();
        let logp = log_softmax(logits.reshape([b * t, v]), 1);
        let picked = logp.gather(1, targets.reshape([b * t, 1]));
        picked.mean().neg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;

    #[test]
    fn analytic_count_matches_a_real_model() {
        let cfg = ModelConfig {
            n_layer: 2,
            n_head: 2,
            n_embd: 32,
            block_size: 16,
            vocab_size: 50,
            dropout: 0.0,
        };
        let model = cfg.init::<Cpu>(&Default::default());
        assert_eq!(model.num_params(), cfg.num_params());
    }

    #[test]
    fn gpt2_124m_has_124_475_904_parameters() {
        let cfg = ModelConfig {
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
            block_size: 1024,
            vocab_size: 50304,
            dropout: 0.0,
        };
        assert_eq!(cfg.num_params(), 124_475_904);
    }

    /// The head-major attention equals the textbook split/transpose/merge.
    #[test]
    fn head_major_attention_matches_the_textbook_form() {
        let cfg = ModelConfig {
            n_layer: 1,
            n_head: 4,
            n_embd: 32,
            block_size: 8,
            vocab_size: 16,
            dropout: 0.0,
        };
        let device = Default::default();
        <Cpu as Backend>::seed(&device, 7);
        let model = cfg.init::<Cpu>(&device);
        let attn = &model.h[0].attn;
        let x = Tensor::<Cpu, 3>::random([2, 8, 32], burn::tensor::Distribution::Default, &device);
        let [b, t, d] = x.dims();
        let (h, hd) = (4, 8);
        let qkv = attn.c_attn.forward(x.clone());
        let heads = |i: usize| {
            qkv.clone()
                .slice([0..b, 0..t, i * d..(i + 1) * d])
                .reshape([b, t, h, hd])
                .swap_dims(1, 2)
        };
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: true,
        };
        let y = attention(heads(0), heads(1), heads(2), None, None, options);
        let textbook = attn.c_proj.forward(y.swap_dims(1, 2).reshape([b, t, d]));
        let diff: f32 = (attn.forward(x) - textbook).abs().max().into_scalar();
        assert!(diff < 1e-5, "max difference {diff}");
    }

    #[test]
    fn gelu_matches_the_formula() {
        let x = Tensor::<Cpu, 1>::from_floats([-2.0, -0.5, 0.0, 1.0, 3.0], &Default::default());
        let got = gelu_tanh(x).into_data().to_vec::<f32>().unwrap();
        for (xv, g) in [-2.0f64, -0.5, 0.0, 1.0, 3.0].iter().zip(got) {
            let want = 0.5
                * xv
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xv + 0.044715 * xv.powi(3))).tanh());
            assert!((f64::from(g) - want).abs() < 1e-5, "{xv}: {g} vs {want}");
        }
    }
}
