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
//!
//! GELU, LayerNorm, attention and the loss go through `envgen_kernels`:
//! one autodiff node each, fused kernels on the CPU (see that crate).
//!
//! Mixed precision (`envgen_kernels::autocast`): the projections, attention
//! and GELU compute in the scope's half type; the residual stream, the
//! LayerNorms and the loss stay f32, as under PyTorch's autocast.

use burn::module::{Module, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::prelude::*;
use envgen_kernels::autocast::{full, half};
use envgen_kernels::FusedBackend;
use serde::{Deserialize, Serialize};

use crate::lora::adapter::{self, LoraAdapter};

/// LayerNorm epsilon of every GPT-2 LayerNorm.
pub const LN_EPS: f64 = 1e-5;

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

    /// What training this model holds in memory at least (engine::budget):
    /// its parameters' training state and one row's activations. In f64, so
    /// that an absurd width cannot overflow before it is refused. The
    /// parameters are named by the key that sizes them most: the vocabulary
    /// (or context) when the embeddings dominate, else the width (or the
    /// depth, when it is the larger number).
    pub fn memory_parts(&self) -> Vec<crate::engine::budget::Part> {
        use crate::engine::budget::Part;
        let (v, t) = (self.vocab_size as f64, self.block_size as f64);
        let (d, l) = (self.n_embd as f64, self.n_layer as f64);
        let embeddings = (v + t) * d;
        let layers = l * (12.0 * d * d + 13.0 * d);
        let parameters = embeddings + layers + 2.0 * d;
        let (key, value) = if embeddings > layers && v >= t {
            ("model.vocab_size", self.vocab_size)
        } else if embeddings > layers {
            ("model.block_size", self.block_size)
        } else if self.n_layer > self.n_embd {
            ("model.n_layer", self.n_layer)
        } else {
            ("model.n_embd", self.n_embd)
        };
        vec![
            Part::parameters(key, value, parameters),
            Part::activations("model.block_size", self.block_size, t, d, l),
        ]
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
        let layer_norm = || {
            LayerNormConfig::new(d)
                .with_epsilon(LN_EPS)
                .init::<B>(device)
        };
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

/// GPT-2's LayerNorm (weight and bias, eps 1e-5) through the fused kernel.
pub fn layer_norm<B: FusedBackend, const D: usize>(
    ln: &LayerNorm<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    let gamma = ln.gamma.val();
    let beta = match &ln.beta {
        Some(beta) => beta.val(),
        None => Tensor::zeros(gamma.dims(), &gamma.device()),
    };
    envgen_kernels::layer_norm(x, gamma, beta, LN_EPS)
}

impl<B: Backend> CausalSelfAttention<B> {
    /// Width of one head. Read from `c_attn` (`[C, 3·heads·hd]`) rather than
    /// `C / heads`: a head-pruned layer keeps fewer heads of the same width.
    pub fn head_dim(&self) -> usize {
        self.c_attn.weight.dims()[1] / (3 * self.n_head)
    }
}

impl<B: FusedBackend> CausalSelfAttention<B> {
    /// Causal self-attention. `c_attn(x)` is [B, T, 3·H·hd] with columns
    /// q | k | v, each head-major (Hugging Face's layout); q, k and v are
    /// strided views of it ([B, H, T, hd], no copy), and the fused kernel
    /// writes its output in [B, T, H, hd] order, so merging the heads back
    /// is a free reshape.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, _] = x.dims();
        let h = self.n_head;
        let hd = self.head_dim();
        let qkv = adapter::forward(&self.c_attn, self.c_attn_lora.as_ref(), x)
            .reshape([b, t, 3 * h, hd])
            .swap_dims(1, 2);
        let heads = |i: usize| qkv.clone().narrow(1, i * h, h);
        let y = envgen_kernels::attention(heads(0), heads(1), heads(2), true)
            .swap_dims(1, 2)
            .reshape([b, t, h * hd]);
        adapter::forward(&self.c_proj, self.c_proj_lora.as_ref(), y)
    }
}

impl<B: FusedBackend> Mlp<B> {
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let hidden =
            envgen_kernels::gelu_tanh(adapter::forward(&self.c_fc, self.c_fc_lora.as_ref(), x));
        adapter::forward(&self.c_proj, self.c_proj_lora.as_ref(), hidden)
    }
}

impl<B: FusedBackend> Block<B> {
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        // Dropout is the identity outside autodiff (evaluation, sampling).
        // Branches may compute in a half type; the residual stream is f32.
        let x = x.clone()
            + self
                .dropout
                .forward(full(self.attn.forward(layer_norm(&self.ln_1, x))));
        x.clone()
            + self
                .dropout
                .forward(full(self.mlp.forward(layer_norm(&self.ln_2, x))))
    }
}

impl<B: FusedBackend> Gpt2<B> {
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
        let x = layer_norm(&self.ln_f, x);
        let [_, _, d] = x.dims();
        // Tied output head: logits = x · wteᵀ (in the autocast type, then
        // f32 for the softmax and the loss).
        let wte = self.wte.weight.val();
        let vocab = wte.dims()[0];
        full(
            half(x.reshape([b * t, d]))
                .matmul(half(wte).transpose())
                .reshape([b, t, vocab]),
        )
    }

    /// Next-token cross-entropy of every position, [batch·time] (row-major).
    pub fn token_losses(&self, idx: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let logits = self.forward(idx);
        let [b, t, v] = logits.dims();
        envgen_kernels::cross_entropy(logits.reshape([b * t, v]), targets.reshape([b * t]))
    }

    /// Mean next-token cross-entropy.
    pub fn loss(&self, idx: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        self.token_losses(idx, targets).mean()
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

    /// The fused attention on views of `c_attn(x)` equals the textbook
    /// split / Burn attention / merge (so the q|k|v, head-major column
    /// layout is Hugging Face's).
    #[test]
    fn attention_matches_the_textbook_form() {
        use burn::tensor::module::attention;
        use burn::tensor::ops::AttentionModuleOptions;
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
        let got = envgen_kernels::gelu_tanh(x)
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        for (xv, g) in [-2.0f64, -0.5, 0.0, 1.0, 3.0].iter().zip(got) {
            let want = 0.5
                * xv
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xv + 0.044715 * xv.powi(3))).tanh());
            assert!((f64::from(g) - want).abs() < 1e-5, "{xv}: {g} vs {want}");
        }
    }
}
