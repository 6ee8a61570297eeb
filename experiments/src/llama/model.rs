//! A Llama-family decoder (Llama 2/3, SmolLM2, Qwen2), nanoGPT-style: the
//! whole model in this file.
//!
//! Pre-norm blocks with RMSNorm (weight, no bias), rotary position
//! embeddings (transformers' "rotate half" layout), grouped-query attention
//! (`num_key_value_heads` ≤ heads; each key/value head serves a contiguous
//! group of query heads), a SwiGLU MLP (`down(silu(gate(x)) · up(x))`),
//! optional biases (Qwen2's on q/k/v, Llama's `attention_bias`/`mlp_bias`),
//! and a tied or separate output head.
//!
//! Field names follow transformers' (`layers.{i}.self_attn.q_proj`, …) so
//! a checkpoint's tensor name is `model.` + our path. Burn's `Linear`
//! stores its weight as [d_in, d_out]; `nn.Linear`'s is [d_out, d_in], so
//! the loader transposes.
//!
//! Everything computes in f32 (checkpoints in bf16/f16 are widened on load):
//! the model is compared with transformers' f32 forward to 1e-4
//! (tests/it/train/llama_hf.rs).
//!
//! Each projection may carry a LoRA adapter beside it (`q_proj_lora`, …;
//! `super::lora` attaches and merges them); `None`, as [`Llama::build`]
//! makes them, is the plain model with transformers' parameter names.
//!
//! [`Llama::forward_cached`] appends each layer's keys and values to a
//! [`KvCache`], so generation (`super::generate`) feeds only new tokens.

use burn::module::{Module, Param};
use burn::nn::{Embedding, Linear};
use burn::prelude::*;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::TensorData;

use super::config::LlamaConfig;
use crate::lora::adapter::forward_low_rank as adapted;
use crate::lora::LoraAdapter;

#[derive(Module, Debug)]
pub struct Llama<B: Backend> {
    pub embed_tokens: Embedding<B>,
    pub layers: Vec<DecoderLayer<B>>,
    pub norm: RmsNorm<B>,
    /// `None`: the head is `embed_tokens` (`tie_word_embeddings`).
    pub lm_head: Option<Linear<B>>,
    #[module(skip)]
    pub config: LlamaConfig,
}

#[derive(Module, Debug)]
pub struct DecoderLayer<B: Backend> {
    pub input_layernorm: RmsNorm<B>,
    pub self_attn: Attention<B>,
    pub post_attention_layernorm: RmsNorm<B>,
    pub mlp: Mlp<B>,
}

#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    pub q_proj: Linear<B>,
    pub k_proj: Linear<B>,
    pub v_proj: Linear<B>,
    pub o_proj: Linear<B>,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub q_proj_lora: Option<LoraAdapter<B>>,
    pub k_proj_lora: Option<LoraAdapter<B>>,
    pub v_proj_lora: Option<LoraAdapter<B>>,
    pub o_proj_lora: Option<LoraAdapter<B>>,
}

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub gate_proj: Linear<B>,
    pub up_proj: Linear<B>,
    pub down_proj: Linear<B>,
    pub gate_proj_lora: Option<LoraAdapter<B>>,
    pub up_proj_lora: Option<LoraAdapter<B>>,
    pub down_proj_lora: Option<LoraAdapter<B>>,
}

/// RMSNorm: `x / sqrt(mean(x²) + eps) · weight`.
#[derive(Module, Debug)]
pub struct RmsNorm<B: Backend> {
    pub weight: Param<Tensor<B, 1>>,
    pub eps: f64,
}

/// Keys (after RoPE) and values of every layer, `[rows, kv_heads,
/// positions, head_dim]`, and how many positions they hold.
pub struct KvCache<B: Backend> {
    layers: Vec<Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    len: usize,
}

impl<B: Backend> KvCache<B> {
    pub fn new(n_layers: usize) -> Self {
        KvCache {
            layers: (0..n_layers).map(|_| None).collect(),
            len: 0,
        }
    }

    /// Positions cached so far (the position of the next token fed).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keep only the rows `keep` (indices into the current batch, in order).
    pub fn retain_rows(&mut self, keep: &[usize], device: &B::Device) {
        let index: Vec<i64> = keep.iter().map(|&k| k as i64).collect();
        let index = Tensor::<B, 1, Int>::from_data(TensorData::new(index, [keep.len()]), device);
        for (k, v) in self.layers.iter_mut().flatten() {
            *k = k.clone().select(0, index.clone());
            *v = v.clone().select(0, index.clone());
        }
    }
}

/// Where a model's weights come from: the values of the tensor `name`
/// (transformers' name, e.g. `model.norm.weight`) of the given shape.
/// `super::hf` reads checkpoints; [`random_weights`] draws them.
pub type WeightSource<'a> = dyn FnMut(&str, &[usize]) -> anyhow::Result<Vec<f32>> + 'a;

impl<B: Backend> Llama<B> {
    /// The model `cfg` describes, every tensor taken from `weights`.
    pub fn build(
        cfg: &LlamaConfig,
        weights: &mut WeightSource<'_>,
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        let (d, hd) = (cfg.hidden_size, cfg.head_dim);
        let (h, kvh, ff) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.intermediate_size,
        );
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let mut proj = |name: &str, d_in: usize, d_out: usize, bias: bool| {
                let name = format!("model.layers.{i}.{name}");
                linear(weights, &name, d_in, d_out, bias, device)
            };
            let self_attn = Attention {
                q_proj: proj("self_attn.q_proj", d, h * hd, cfg.qkv_bias)?,
                k_proj: proj("self_attn.k_proj", d, kvh * hd, cfg.qkv_bias)?,
                v_proj: proj("self_attn.v_proj", d, kvh * hd, cfg.qkv_bias)?,
                o_proj: proj("self_attn.o_proj", h * hd, d, cfg.o_bias)?,
                n_head: h,
                n_kv_head: kvh,
                head_dim: hd,
                q_proj_lora: None,
                k_proj_lora: None,
                v_proj_lora: None,
                o_proj_lora: None,
            };
            let mlp = Mlp {
                gate_proj: proj("mlp.gate_proj", d, ff, cfg.mlp_bias)?,
                up_proj: proj("mlp.up_proj", d, ff, cfg.mlp_bias)?,
                down_proj: proj("mlp.down_proj", ff, d, cfg.mlp_bias)?,
                gate_proj_lora: None,
                up_proj_lora: None,
                down_proj_lora: None,
            };
            let p = format!("model.layers.{i}");
            layers.push(DecoderLayer {
                input_layernorm: rms_norm(weights, &format!("{p}.input_layernorm"), cfg, device)?,
                self_attn,
                post_attention_layernorm: rms_norm(
                    weights,
                    &format!("{p}.post_attention_layernorm"),
                    cfg,
                    device,
                )?,
                mlp,
            });
        }
        let norm = rms_norm(weights, "model.norm", cfg, device)?;
        let embed_tokens = Embedding {
            weight: Param::from_tensor(tensor(
                weights,
                "model.embed_tokens.weight",
                [cfg.vocab_size, d],
                device,
            )?),
        };
        let lm_head = match cfg.tie_word_embeddings {
            true => None,
            false => Some(linear(
                weights,
                "lm_head",
                d,
                cfg.vocab_size,
                false,
                device,
            )?),
        };
        Ok(Llama {
            embed_tokens,
            layers,
            norm,
            lm_head,
            config: cfg.clone(),
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Logits `[batch, time, vocab]` of token ids `[batch, time]`, every
    /// position from 0 (no cache).
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let mut cache = KvCache::new(self.layers.len());
        self.logits(self.forward_cached(tokens, &mut cache))
    }

    /// Feed `tokens` `[batch, time]` at positions `cache.len()..` and append
    /// their keys/values to `cache`; returns the final-normed hidden states
    /// `[batch, time, hidden]` (see [`Self::logits`]).
    pub fn forward_cached(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 3> {
        let [_, t] = tokens.dims();
        let device = tokens.device();
        let start = cache.len;
        let (cos, sin) = rope_tables::<B>(self.config(), start, t, &device);
        let mask = causal_mask::<B>(start, t, &device);
        let mut x = self.embed_tokens.forward(tokens);
        for (layer, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            x = layer.forward(x, &cos, &sin, mask.as_ref(), kv);
        }
        cache.len += t;
        self.norm.forward(x)
    }

    /// The output head: hidden `[batch, time, hidden]` → logits `[batch,
    /// time, vocab]`.
    pub fn logits(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        match &self.lm_head {
            Some(head) => head.forward(hidden),
            None => {
                // Tied head: logits = h·Eᵀ, computed as (E·hᵀ)ᵀ so that the
                // [vocab, hidden] embedding is read as stored; transposing
                // it (188 MB for SmolLM2-360M) cost a copy per token.
                let [b, t, d] = hidden.dims();
                let wte = self.embed_tokens.weight.val();
                let vocab = wte.dims()[0];
                wte.matmul(hidden.reshape([b * t, d]).transpose())
                    .transpose()
                    .reshape([b, t, vocab])
            }
        }
    }
}

impl<B: Backend> DecoderLayer<B> {
    fn forward(
        &self,
        x: Tensor<B, 3>,
        cos: &Tensor<B, 4>,
        sin: &Tensor<B, 4>,
        mask: Option<&Tensor<B, 4>>,
        kv: &mut Option<(Tensor<B, 4>, Tensor<B, 4>)>,
    ) -> Tensor<B, 3> {
        let attn =
            self.self_attn
                .forward(self.input_layernorm.forward(x.clone()), cos, sin, mask, kv);
        let x = x + attn;
        x.clone() + self.mlp.forward(self.post_attention_layernorm.forward(x))
    }
}

impl<B: Backend> Attention<B> {
    fn forward(
        &self,
        x: Tensor<B, 3>,
        cos: &Tensor<B, 4>,
        sin: &Tensor<B, 4>,
        mask: Option<&Tensor<B, 4>>,
        kv: &mut Option<(Tensor<B, 4>, Tensor<B, 4>)>,
    ) -> Tensor<B, 3> {
        let [b, t, _] = x.dims();
        let (h, kvh, hd) = (self.n_head, self.n_kv_head, self.head_dim);
        let heads = |proj: &Linear<B>, lora: &Option<LoraAdapter<B>>, n: usize| {
            adapted(proj, lora.as_ref(), x.clone())
                .reshape([b, t, n, hd])
                .swap_dims(1, 2)
        };
        let q = rotate(heads(&self.q_proj, &self.q_proj_lora, h), cos, sin);
        let k = rotate(heads(&self.k_proj, &self.k_proj_lora, kvh), cos, sin);
        let v = heads(&self.v_proj, &self.v_proj_lora, kvh);
        let (k, v) = match kv.take() {
            Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
            None => (k, v),
        };
        *kv = Some((k.clone(), v.clone()));
        // Grouped-query attention: query head j reads key/value head
        // j / (h / kvh), as transformers' `repeat_kv`.
        let (k, v) = (repeat_kv(k, h / kvh), repeat_kv(v, h / kvh));
        let scores = q.matmul(k.swap_dims(2, 3)) / (hd as f64).sqrt();
        let scores = match mask {
            Some(mask) => scores + mask.clone(),
            None => scores,
        };
        let y = softmax(scores, 3).matmul(v);
        let y = y.swap_dims(1, 2).reshape([b, t, h * hd]);
        adapted(&self.o_proj, self.o_proj_lora.as_ref(), y)
    }
}

/// The tensor `name` of `shape` from `weights`.
fn tensor<B: Backend, const D: usize>(
    weights: &mut WeightSource<'_>,
    name: &str,
    shape: [usize; D],
    device: &B::Device,
) -> anyhow::Result<Tensor<B, D>> {
    let values = weights(name, &shape)?;
    Ok(Tensor::from_data(TensorData::new(values, shape), device))
}

/// `{name}.weight` (and `{name}.bias`). `nn.Linear` weights are [d_out,
/// d_in]: transposed into Burn's [d_in, d_out] here, once, in memory. A
/// transposed view instead made the CPU backend copy every weight into
/// contiguous order at every matmul: three quarters of the time of a
/// SmolLM2-360M decode step went into that copy (perf, 2026-11-26).
fn linear<B: Backend>(
    weights: &mut WeightSource<'_>,
    name: &str,
    d_in: usize,
    d_out: usize,
    bias: bool,
    device: &B::Device,
) -> anyhow::Result<Linear<B>> {
    let stored = tensor::<B, 2>(weights, &format!("{name}.weight"), [d_out, d_in], device)?;
    // into_data() of the transposed view is the backend's own (tiled) copy.
    let weight = Tensor::<B, 2>::from_data(stored.transpose().into_data(), device);
    let bias = match bias {
        true => Some(Param::from_tensor(tensor(
            weights,
            &format!("{name}.bias"),
            [d_out],
            device,
        )?)),
        false => None,
    };
    Ok(Linear {
        weight: Param::from_tensor(weight),
        bias,
    })
}

fn rms_norm<B: Backend>(
    weights: &mut WeightSource<'_>,
    name: &str,
    cfg: &LlamaConfig,
    device: &B::Device,
) -> anyhow::Result<RmsNorm<B>> {
    let weight = tensor(
        weights,
        &format!("{name}.weight"),
        [cfg.hidden_size],
        device,
    )?;
    Ok(RmsNorm {
        weight: Param::from_tensor(weight),
        eps: cfg.rms_norm_eps,
    })
}

/// `[b, kvh, t, hd]` → `[b, kvh·n_rep, t, hd]`, each head repeated in place.
fn repeat_kv<B: Backend>(x: Tensor<B, 4>, n_rep: usize) -> Tensor<B, 4> {
    if n_rep == 1 {
        return x;
    }
    let [b, kvh, t, hd] = x.dims();
    x.unsqueeze_dim::<5>(2)
        .repeat_dim(2, n_rep)
        .reshape([b, kvh * n_rep, t, hd])
}

/// RoPE in transformers' layout: `x·cos + rotate_half(x)·sin`, where
/// `rotate_half([x1, x2]) = [-x2, x1]` over the two halves of a head.
fn rotate<B: Backend>(x: Tensor<B, 4>, cos: &Tensor<B, 4>, sin: &Tensor<B, 4>) -> Tensor<B, 4> {
    let hd = x.dims()[3];
    let x1 = x.clone().narrow(3, 0, hd / 2);
    let x2 = x.clone().narrow(3, hd / 2, hd / 2);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    x * cos.clone() + rotated * sin.clone()
}

/// cos and sin of the angles of positions `start..start + t`, `[1, 1, t,
/// head_dim]` (each frequency twice: the halves rotate together). The
/// angle is `position · inv_freq` in f32, as transformers computes it.
fn rope_tables<B: Backend>(
    cfg: &LlamaConfig,
    start: usize,
    t: usize,
    device: &B::Device,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let hd = cfg.head_dim;
    let inv_freq = cfg.rope.inv_freq(hd);
    let mut cos = Vec::with_capacity(t * hd);
    let mut sin = Vec::with_capacity(t * hd);
    for p in start..start + t {
        for j in 0..hd {
            let angle = p as f32 * inv_freq[j % (hd / 2)];
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let table = |v: Vec<f32>| Tensor::from_data(TensorData::new(v, [1, 1, t, hd]), device);
    (table(cos), table(sin))
}

/// The additive causal mask of `t` new positions after `start` cached ones,
/// `[1, 1, t, start + t]`; None for one new position (it sees everything).
fn causal_mask<B: Backend>(start: usize, t: usize, device: &B::Device) -> Option<Tensor<B, 4>> {
    if t <= 1 {
        return None;
    }
    let keys = start + t;
    let values: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..keys).map(move |j| {
                if j > start + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Some(Tensor::from_data(
        TensorData::new(values, [1, 1, t, keys]),
        device,
    ))
}

impl<B: Backend> RmsNorm<B> {
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let rms = ((x.clone() * x.clone()).mean_dim(D - 1) + self.eps).sqrt();
        x / rms * self.weight.val().unsqueeze()
    }
}

impl<B: Backend> Mlp<B> {
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let gate = silu(adapted(
            &self.gate_proj,
            self.gate_proj_lora.as_ref(),
            x.clone(),
        ));
        let up = adapted(&self.up_proj, self.up_proj_lora.as_ref(), x);
        adapted(&self.down_proj, self.down_proj_lora.as_ref(), gate * up)
    }
}

/// Weights drawn from a seeded generator: N(0, `std`) for projections and
/// embeddings (and biases), 1 + N(0, 0.1) for the norms (so their weights
/// matter in tests). For tests and random-init checkpoints.
pub fn random_weights(
    seed: u64,
    std: f32,
) -> impl FnMut(&str, &[usize]) -> anyhow::Result<Vec<f32>> {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(seed);
    move |name: &str, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let norm = name.ends_with("norm.weight");
        // Box–Muller: rand_distr is a dev-dependency only.
        let mut normal = || {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-12), rng.random());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f32::consts::PI * v).cos()
        };
        Ok((0..n)
            .map(|_| match norm {
                true => 1.0 + 0.1 * normal(),
                false => std * normal(),
            })
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backend::Cpu;
    use crate::llama::config::{Rope, RopeScaling};

    pub(crate) fn tiny(kv_heads: usize, tied: bool) -> LlamaConfig {
        LlamaConfig {
            model_type: "llama".into(),
            vocab_size: 40,
            hidden_size: 16,
            intermediate_size: 24,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: kv_heads,
            head_dim: 4,
            rms_norm_eps: 1e-6,
            max_position_embeddings: 32,
            rope: Rope {
                theta: 10_000.0,
                scaling: RopeScaling::None,
            },
            qkv_bias: true,
            o_bias: false,
            mlp_bias: false,
            tie_word_embeddings: tied,
            bos_token_id: None,
            eos_token_ids: vec![],
        }
    }

    fn logits(model: &Llama<Cpu>, tokens: &[i64]) -> Vec<f32> {
        let t = Tensor::<Cpu, 2, Int>::from_data(
            TensorData::new(tokens.to_vec(), [1, tokens.len()]),
            &Default::default(),
        );
        model.forward(t).into_data().to_vec::<f32>().unwrap()
    }

    /// Feeding a sequence in pieces through the cache (3 tokens, then 1,
    /// then 2) gives the logits of the full forward.
    #[test]
    fn the_cache_gives_the_full_forwards_logits() {
        for (kv, tied) in [(4, true), (2, false), (1, false)] {
            let cfg = tiny(kv, tied);
            let device = Default::default();
            let model = Llama::<Cpu>::build(&cfg, &mut random_weights(1, 0.3), &device).unwrap();
            let tokens: Vec<i64> = vec![3, 9, 1, 30, 7, 7];
            let full = logits(&model, &tokens);
            let mut cache = KvCache::new(2);
            let mut pieces = Vec::new();
            for range in [0..3, 3..4, 4..6] {
                let n = range.len();
                let piece = Tensor::<Cpu, 2, Int>::from_data(
                    TensorData::new(tokens[range].to_vec(), [1, n]),
                    &device,
                );
                let hidden = model.forward_cached(piece, &mut cache);
                pieces.extend(model.logits(hidden).into_data().to_vec::<f32>().unwrap());
            }
            assert_eq!(cache.len(), 6);
            let diff = full
                .iter()
                .zip(&pieces)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(diff < 1e-5, "kv {kv}: cached logits differ by {diff}");
        }
    }

    /// A missing tensor is an error naming it, not a panic.
    #[test]
    fn a_missing_tensor_is_named() {
        let cfg = tiny(2, false);
        let mut only_some = |name: &str, shape: &[usize]| {
            if name == "lm_head.weight" {
                anyhow::bail!("no tensor `{name}`")
            }
            Ok(vec![0.0; shape.iter().product()])
        };
        let e = Llama::<Cpu>::build(&cfg, &mut only_some, &Default::default()).unwrap_err();
        assert!(e.to_string().contains("lm_head.weight"), "{e}");
    }
}
