//! The Hierarchical Reasoning Model (Wang et al., arXiv 2506.21734) in Burn.
//!
//! Two recurrent transformer modules: a fast low-level one (L) and a slow
//! high-level one (H). One *segment* runs `h_cycles × l_cycles` L-updates and
//! `h_cycles` H-updates; only the last L-update and the last H-update are
//! differentiated (the "1-step gradient"), everything before runs without a
//! graph. The ACT loop in `act.rs` chains segments.
//!
//! Shapes: `B` batch, `T = puzzle_emb_len + seq_len` (82 for Sudoku), `D` hidden.

use burn::module::{AutodiffModule, Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::silu;
use burn::tensor::backend::Backend;
use burn::tensor::module::embedding;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use envgen_kernels::autocast::{full, linear_layer};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::config::HrmConfig;

/// Standard deviation of a standard normal truncated to [-2, 2]:
/// sqrt(1 - 2·2·φ(2)/(Φ(2) - Φ(-2))) = sqrt(1 - 4·0.0539910/0.9544997).
/// Dividing by it makes the truncated draw have the requested std, as the
/// reference's `trunc_normal_init_` does.
const TRUNC2_STD: f64 = 0.879_626_7;

/// Draw a tensor from N(0, std²) truncated to ±2 std (rescaled so the result
/// has standard deviation `std`). Burn 0.21 has no truncated-normal
/// initializer, so this is written here; host-side sampling keeps it seeded.
pub fn trunc_normal<B: Backend, const D: usize>(
    shape: [usize; D],
    std: f64,
    rng: &mut StdRng,
    device: &B::Device,
) -> Tensor<B, D> {
    let count: usize = shape.iter().product();
    let scale = std / TRUNC2_STD;
    let mut values = Vec::with_capacity(count);
    while values.len() < count {
        // Box–Muller; reject draws outside [-2, 2].
        let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        let u2: f64 = rng.random::<f64>();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        if z.abs() <= 2.0 {
            values.push((z * scale) as f32);
        }
    }
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// A bias-free linear layer with truncated LeCun-normal weights (std 1/√fan_in).
fn lecun_linear<B: Backend>(
    d_in: usize,
    d_out: usize,
    rng: &mut StdRng,
    device: &B::Device,
) -> Linear<B> {
    let mut linear = LinearConfig::new(d_in, d_out).with_bias(false).init(device);
    // Burn stores Linear weights as [d_in, d_out].
    linear.weight = Param::from_tensor(trunc_normal(
        [d_in, d_out],
        1.0 / (d_in as f64).sqrt(),
        rng,
        device,
    ));
    linear
}

/// RMSNorm without a learned weight: x / sqrt(mean(x²) + eps) over the last
/// dim, in f32 (a statistic: f32 also under autocast).
pub fn rms_norm<B: Backend, const D: usize>(x: Tensor<B, D>, eps: f64) -> Tensor<B, D> {
    let x = full(x);
    let mean_square = x.clone().square().mean_dim(D - 1);
    x / mean_square.add_scalar(eps).sqrt()
}

/// Rotary position embedding in the "rotate half" layout: dimension i pairs
/// with i + head_dim/2. The cos/sin tables are constants (not parameters).
#[derive(Module, Debug)]
pub struct Rope<B: Backend> {
    cos: Tensor<B, 2>,
    sin: Tensor<B, 2>,
}

impl<B: Backend> Rope<B> {
    pub fn new(seq_len: usize, head_dim: usize, theta: f64, device: &B::Device) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(seq_len * head_dim);
        let mut sin = Vec::with_capacity(seq_len * head_dim);
        for pos in 0..seq_len {
            for dim in 0..head_dim {
                let inv_freq = theta.powf(-2.0 * (dim % half) as f64 / head_dim as f64);
                let angle = pos as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let shape = [seq_len, head_dim];
        Self {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
        }
    }

    /// Rotate `x` of shape [B, heads, T, head_dim].
    pub fn apply(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let [_, _, _, head_dim] = x.dims();
        let half = head_dim / 2;
        let first = x.clone().narrow(3, 0, half);
        let second = x.clone().narrow(3, half, half);
        let rotated = Tensor::cat(vec![second.neg(), first], 3);
        // The tables are f32; x may be in an autocast half type.
        let dtype = x.dtype();
        let table = |t: &Tensor<B, 2>| t.clone().cast(dtype).unsqueeze::<4>();
        x * table(&self.cos) + rotated * table(&self.sin)
    }
}

/// Non-causal multi-head self-attention without biases.
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    qkv: Linear<B>,
    out: Linear<B>,
    #[module(skip)]
    heads: usize,
}

impl<B: FusedBackend> Attention<B> {
    fn new(hidden: usize, heads: usize, rng: &mut StdRng, device: &B::Device) -> Self {
        Self {
            qkv: lecun_linear(hidden, 3 * hidden, rng, device),
            out: lecun_linear(hidden, hidden, rng, device),
            heads,
        }
    }

    pub fn forward(&self, x: Tensor<B, 3>, rope: &Rope<B>) -> Tensor<B, 3> {
        let [batch, seq, hidden] = x.dims();
        let heads = self.heads;
        let head_dim = hidden / heads;
        // [B, T, 3D] → [B, 3·heads, T, head_dim]: q heads, then k heads, then v heads.
        let qkv = linear_layer(&self.qkv, x)
            .reshape([batch, seq, 3 * heads, head_dim])
            .swap_dims(1, 2);
        let q = rope.apply(qkv.clone().narrow(1, 0, heads));
        let k = rope.apply(qkv.clone().narrow(1, heads, heads));
        let v = qkv.narrow(1, 2 * heads, heads);
        // Scale 1/√head_dim; the fused kernel's output is stored [B, T,
        // heads, head_dim], so merging the heads back is free.
        let mixed = envgen_kernels::attention(q, k, v, false)
            .swap_dims(1, 2)
            .reshape([batch, seq, hidden]);
        linear_layer(&self.out, mixed)
    }
}

/// SwiGLU feed-forward: down(silu(gate(x)) · up(x)); gate and up share one matmul.
#[derive(Module, Debug)]
pub struct SwiGlu<B: Backend> {
    gate_up: Linear<B>,
    down: Linear<B>,
}

impl<B: Backend> SwiGlu<B> {
    fn new(hidden: usize, inter: usize, rng: &mut StdRng, device: &B::Device) -> Self {
        Self {
            gate_up: lecun_linear(hidden, 2 * inter, rng, device),
            down: lecun_linear(inter, hidden, rng, device),
        }
    }

    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let mut halves = linear_layer(&self.gate_up, x).chunk(2, 2);
        let up = halves.pop().expect("chunk(2) yields two halves");
        let gate = halves.pop().expect("chunk(2) yields two halves");
        linear_layer(&self.down, silu(gate) * up)
    }
}

/// A post-norm transformer block.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    attn: Attention<B>,
    mlp: SwiGlu<B>,
    #[module(skip)]
    eps: f64,
}

impl<B: FusedBackend> Block<B> {
    pub fn forward(&self, x: Tensor<B, 3>, rope: &Rope<B>) -> Tensor<B, 3> {
        // Branches may compute in a half type; the residual stream is f32.
        let x = rms_norm(x.clone() + full(self.attn.forward(x, rope)), self.eps);
        rms_norm(x.clone() + full(self.mlp.forward(x)), self.eps)
    }
}

/// A reasoning module (H or L): the input injection is added to the state,
/// then a stack of blocks runs.
#[derive(Module, Debug)]
pub struct ReasoningModule<B: Backend> {
    blocks: Vec<Block<B>>,
}

impl<B: FusedBackend> ReasoningModule<B> {
    fn new(cfg: &HrmConfig, layers: usize, rng: &mut StdRng, device: &B::Device) -> Self {
        let blocks = (0..layers)
            .map(|_| Block {
                attn: Attention::new(cfg.hidden, cfg.heads, rng, device),
                mlp: SwiGlu::new(cfg.hidden, cfg.intermediate(), rng, device),
                eps: cfg.rms_norm_eps,
            })
            .collect();
        Self { blocks }
    }

    pub fn forward(
        &self,
        state: Tensor<B, 3>,
        injection: Tensor<B, 3>,
        rope: &Rope<B>,
    ) -> Tensor<B, 3> {
        self.blocks
            .iter()
            .fold(state + injection, |x, block| block.forward(x, rope))
    }
}

/// The recurrent state of one segment: z_H and z_L, each [B, T, D].
#[derive(Debug, Clone)]
pub struct Carry<B: Backend> {
    pub z_h: Tensor<B, 3>,
    pub z_l: Tensor<B, 3>,
}

/// What one segment produces.
#[derive(Debug, Clone)]
pub struct SegmentOutput<B: Backend> {
    /// The state for the next segment, detached from the graph.
    pub carry: Carry<B>,
    /// [B, seq_len, vocab] token logits.
    pub logits: Tensor<B, 3>,
    /// [B] halt logit.
    pub q_halt: Tensor<B, 1>,
    /// [B] continue logit.
    pub q_continue: Tensor<B, 1>,
}

/// The HRM network. `h_init`/`l_init` are non-trainable (`require_grad`
/// off) but are parameters so checkpoints keep them, like PyTorch buffers.
#[derive(Module, Debug)]
pub struct HrmModel<B: Backend> {
    /// [vocab, D], trunc-normal std 1/√D; the lookup is scaled by √D.
    pub token_embedding: Param<Tensor<B, 2>>,
    /// [num_puzzle_ids, puzzle_emb_len·D], zero-initialized; trained with SignSGD.
    pub puzzle_embedding: Param<Tensor<B, 2>>,
    pub h_level: ReasoningModule<B>,
    pub l_level: ReasoningModule<B>,
    /// D → vocab, no bias.
    pub lm_head: Linear<B>,
    /// D → 2 (halt, continue); weight 0 and bias −5 so the model starts by continuing.
    pub q_head: Linear<B>,
    pub h_init: Param<Tensor<B, 1>>,
    pub l_init: Param<Tensor<B, 1>>,
    rope: Rope<B>,
    #[module(skip)]
    config: HrmConfig,
}

impl<B: FusedBackend> HrmModel<B> {
    /// Build a freshly initialized model; the same seed gives the same weights.
    pub fn new(cfg: &HrmConfig, seed: u64, device: &B::Device) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let d = cfg.hidden;
        let token_embedding =
            trunc_normal([cfg.vocab, d], 1.0 / (d as f64).sqrt(), &mut rng, device);
        let puzzle_embedding = Tensor::zeros([cfg.num_puzzle_ids, cfg.puzzle_emb_len * d], device);
        let h_level = ReasoningModule::new(cfg, cfg.h_layers, &mut rng, device);
        let l_level = ReasoningModule::new(cfg, cfg.l_layers, &mut rng, device);
        let lm_head = lecun_linear(d, cfg.vocab, &mut rng, device);
        let mut q_head = LinearConfig::new(d, 2).init(device);
        q_head.weight = Param::from_tensor(Tensor::zeros([d, 2], device));
        q_head.bias = Some(Param::from_tensor(Tensor::full([2], -5.0, device)));
        let h_init = trunc_normal([d], 1.0, &mut rng, device);
        let l_init = trunc_normal([d], 1.0, &mut rng, device);
        Self {
            token_embedding: Param::from_tensor(token_embedding),
            puzzle_embedding: Param::from_tensor(puzzle_embedding),
            h_level,
            l_level,
            lm_head,
            q_head,
            h_init: Param::from_tensor(h_init).set_require_grad(false),
            l_init: Param::from_tensor(l_init).set_require_grad(false),
            rope: Rope::new(cfg.total_seq_len(), cfg.head_dim(), cfg.rope_theta, device),
            config: cfg.clone(),
        }
    }

    pub fn config(&self) -> &HrmConfig {
        &self.config
    }

    /// Input embedding [B, T, D]: puzzle-embedding positions then the cells,
    /// all scaled by √D. `inputs` [B, seq_len], `puzzle_ids` [B].
    pub fn embed(&self, inputs: Tensor<B, 2, Int>, puzzle_ids: Tensor<B, 1, Int>) -> Tensor<B, 3> {
        let cfg = &self.config;
        let [batch, _] = inputs.dims();
        let tokens = embedding(self.token_embedding.val(), inputs);
        let puzzle = self.puzzle_embedding.val().select(0, puzzle_ids).reshape([
            batch,
            cfg.puzzle_emb_len,
            cfg.hidden,
        ]);
        Tensor::cat(vec![puzzle, tokens], 1).mul_scalar((cfg.hidden as f64).sqrt())
    }

    /// The start state: H_init / L_init broadcast to every row and position.
    pub fn initial_carry(&self, batch: usize) -> Carry<B> {
        let cfg = &self.config;
        let broadcast = |init: Tensor<B, 1>| {
            init.reshape([1, 1, cfg.hidden])
                .repeat(&[batch, cfg.total_seq_len(), 1])
                .detach()
        };
        Carry {
            z_h: broadcast(self.h_init.val()),
            z_l: broadcast(self.l_init.val()),
        }
    }

    /// Put the start state into the rows where `reset[row]` is true.
    pub fn reset_carry(&self, carry: Carry<B>, reset: &[bool]) -> Carry<B> {
        let [batch, seq, hidden] = carry.z_h.dims();
        let device = carry.z_h.device();
        let mask =
            Tensor::<B, 1, Bool>::from_data(TensorData::new(reset.to_vec(), [batch]), &device)
                .reshape([batch, 1, 1])
                .expand([batch, seq, hidden]);
        let init = self.initial_carry(batch);
        Carry {
            z_h: carry.z_h.mask_where(mask.clone(), init.z_h),
            z_l: carry.z_l.mask_where(mask, init.z_l),
        }
    }

    /// Every reasoning step of a segment except the last L- and H-update:
    /// `for h, for l: z_L = L(z_L, z_H + x)` and `z_H = H(z_H, z_L)` after each
    /// cycle but the last. The caller decides how it runs without a graph.
    pub fn steps_without_grad(&self, carry: Carry<B>, x: Tensor<B, 3>) -> Carry<B> {
        let cfg = &self.config;
        let Carry { mut z_h, mut z_l } = carry;
        for h in 0..cfg.h_cycles {
            for l in 0..cfg.l_cycles {
                let last = h + 1 == cfg.h_cycles && l + 1 == cfg.l_cycles;
                if !last {
                    z_l = self
                        .l_level
                        .forward(z_l, z_h.clone() + x.clone(), &self.rope);
                }
            }
            if h + 1 < cfg.h_cycles {
                z_h = self.h_level.forward(z_h, z_l.clone(), &self.rope);
            }
        }
        Carry { z_h, z_l }
    }

    /// The differentiated part: one L-update then one H-update.
    pub fn final_step(&self, carry: Carry<B>, x: Tensor<B, 3>) -> Carry<B> {
        let z_l = self
            .l_level
            .forward(carry.z_l, carry.z_h.clone() + x, &self.rope);
        let z_h = self.h_level.forward(carry.z_h, z_l.clone(), &self.rope);
        Carry { z_h, z_l }
    }

    /// Heads on z_H: token logits from the cell positions, Q-values from position 0.
    pub fn readout(&self, carry: Carry<B>) -> SegmentOutput<B> {
        let cfg = &self.config;
        let [batch, _, hidden] = carry.z_h.dims();
        let cells = carry.z_h.clone().narrow(1, cfg.puzzle_emb_len, cfg.seq_len);
        // Heads in the autocast type, results in f32 for the losses.
        let logits = full(linear_layer(&self.lm_head, cells));
        let first = carry.z_h.clone().narrow(1, 0, 1).reshape([batch, hidden]);
        let q = full(linear_layer(&self.q_head, first));
        let q_halt = q.clone().narrow(1, 0, 1).reshape([batch]);
        let q_continue = q.narrow(1, 1, 1).reshape([batch]);
        SegmentOutput {
            carry: Carry {
                z_h: carry.z_h.detach(),
                z_l: carry.z_l.detach(),
            },
            logits,
            q_halt,
            q_continue,
        }
    }

    /// One segment on any backend. The no-grad steps run on this backend and
    /// their result is detached before the final step, so under autodiff the
    /// loss graph starts at the detached carry; the nodes recorded for the
    /// no-grad steps are unreachable from the loss and are freed with their
    /// tensors. Prefer [`segment_autodiff`] for training: it never records them.
    pub fn segment(
        &self,
        carry: Carry<B>,
        inputs: Tensor<B, 2, Int>,
        puzzle_ids: Tensor<B, 1, Int>,
    ) -> SegmentOutput<B> {
        let x = self.embed(inputs, puzzle_ids);
        let warm = self.steps_without_grad(
            Carry {
                z_h: carry.z_h.detach(),
                z_l: carry.z_l.detach(),
            },
            x.clone().detach(),
        );
        let warm = Carry {
            z_h: warm.z_h.detach(),
            z_l: warm.z_l.detach(),
        };
        self.readout(self.final_step(warm, x))
    }
}

/// One training segment under autodiff with the no-grad steps run on the
/// inner (non-autodiff) backend through `model.valid()`: no graph node is
/// ever created for them, which is what `torch.no_grad()` does in the
/// reference. The final L/H step and the heads run on `AD` with gradient.
pub fn segment_autodiff<AD: FusedAutodiffBackend>(
    model: &HrmModel<AD>,
    carry: Carry<AD>,
    inputs: Tensor<AD, 2, Int>,
    puzzle_ids: Tensor<AD, 1, Int>,
) -> SegmentOutput<AD> {
    let x = model.embed(inputs, puzzle_ids);
    let inner_model = model.valid();
    let warm = inner_model.steps_without_grad(
        Carry {
            z_h: carry.z_h.inner(),
            z_l: carry.z_l.inner(),
        },
        x.clone().inner(),
    );
    let warm = Carry {
        z_h: Tensor::from_inner(warm.z_h),
        z_l: Tensor::from_inner(warm.z_l),
    };
    model.readout(model.final_step(warm, x))
}

/// Trainable parameters of a model with this config, counted analytically.
/// Includes the puzzle embedding (num_puzzle_ids · puzzle_emb_len · hidden,
/// 512 for Sudoku) and excludes the non-trainable H_init/L_init (2·hidden),
/// so `model.num_params() == parameter_count(cfg) + 2·hidden`.
pub fn parameter_count(cfg: &HrmConfig) -> usize {
    let d = cfg.hidden;
    let inter = cfg.intermediate();
    let attention = d * 3 * d + d * d;
    let mlp = d * 2 * inter + inter * d;
    let blocks = (cfg.h_layers + cfg.l_layers) * (attention + mlp);
    let token_embedding = cfg.vocab * d;
    let puzzle_embedding = cfg.num_puzzle_ids * cfg.puzzle_emb_len * d;
    let lm_head = d * cfg.vocab;
    let q_head = d * 2 + 2;
    blocks + token_embedding + puzzle_embedding + lm_head + q_head
}
