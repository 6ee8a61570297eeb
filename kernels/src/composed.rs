//! The fused operations composed from ordinary Burn operations: the
//! reference the fused kernels are tested against, and what backends
//! without their own kernels run (CubeCL fuses these element-wise chains).
//!
//! Backward passes are written out (not left to autodiff) because the
//! autodiff node calling them records the forward as one step.
//!
//! Half-precision inputs (bf16/f16 under autocast): statistics (LayerNorm
//! mean and variance, softmax maxima and sums, log-sum-exp) are computed in
//! f32 and results returned in the input's type, as PyTorch's autocast and
//! fused GPU kernels do; the matrix products stay in the half type.

use burn::prelude::*;
use burn::tensor::ops::{AttentionModuleOptions, FloatTensor, IntTensor};
use burn::tensor::{Bool, DType, TensorData, TensorPrimitive};

use crate::{AttentionOutput, CrossEntropyOutput, LayerNormOutput};

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_CUBIC: f64 = 0.044715;

fn t<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

fn p<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), rank-agnostic (primitive ops).
pub fn gelu_tanh<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let cube = B::float_mul(B::float_mul(x.clone(), x.clone()), x.clone());
    let inner = B::float_add(x.clone(), B::float_mul_scalar(cube, GELU_CUBIC.into()));
    let th = B::float_tanh(B::float_mul_scalar(inner, SQRT_2_OVER_PI.into()));
    let half_x = B::float_mul_scalar(x, 0.5.into());
    B::float_mul(half_x, B::float_add_scalar(th, 1.0.into()))
}

/// d gelu/dx · grad = grad·[0.5(1 + t) + 0.5·x·(1 − t²)·√(2/π)(1 + 3·0.044715·x²)].
pub fn gelu_tanh_backward<B: Backend>(x: FloatTensor<B>, grad: FloatTensor<B>) -> FloatTensor<B> {
    let x2 = B::float_mul(x.clone(), x.clone());
    let inner = B::float_mul(
        x.clone(),
        B::float_add_scalar(
            B::float_mul_scalar(x2.clone(), GELU_CUBIC.into()),
            1.0.into(),
        ),
    );
    let th = B::float_tanh(B::float_mul_scalar(inner, SQRT_2_OVER_PI.into()));
    let left = B::float_mul_scalar(B::float_add_scalar(th.clone(), 1.0.into()), 0.5.into());
    let sech2 = B::float_add_scalar(B::float_neg(B::float_mul(th.clone(), th)), 1.0.into());
    let du = B::float_mul_scalar(
        B::float_add_scalar(
            B::float_mul_scalar(x2, (3.0 * GELU_CUBIC).into()),
            1.0.into(),
        ),
        SQRT_2_OVER_PI.into(),
    );
    let right = B::float_mul(B::float_mul_scalar(B::float_mul(x, sech2), 0.5.into()), du);
    B::float_mul(grad, B::float_add(left, right))
}

/// LayerNorm of x [rows, features].
pub fn layer_norm<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    eps: f64,
) -> LayerNormOutput<B> {
    let x: Tensor<B, 2> = t(x);
    let dtype = x.dtype();
    let x = x.cast(DType::F32);
    let [rows, features] = x.dims();
    let mean = x.clone().mean_dim(1);
    let centered = x - mean.clone();
    let var = (centered.clone() * centered.clone()).mean_dim(1);
    let rstd = (var + eps).sqrt().recip();
    let normalized = centered * rstd.clone();
    let gamma: Tensor<B, 2> = t::<B, 1>(gamma).cast(DType::F32).reshape([1, features]);
    let beta: Tensor<B, 2> = t::<B, 1>(beta).cast(DType::F32).reshape([1, features]);
    LayerNormOutput {
        output: p((normalized * gamma + beta).cast(dtype)),
        mean: p(mean.reshape([rows])),
        rstd: p(rstd.reshape([rows])),
    }
}

/// dx = rstd·(g·γ − mean(g·γ) − x̂·mean(g·γ·x̂)), dγ = Σ_rows g·x̂, dβ = Σ_rows g.
pub fn layer_norm_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> [FloatTensor<B>; 3] {
    let x: Tensor<B, 2> = t(x);
    let (x_dtype, gamma_dtype) = (x.dtype(), burn::tensor::TensorMetadata::dtype(&gamma));
    let x = x.cast(DType::F32);
    let g: Tensor<B, 2> = t::<B, 2>(grad).cast(DType::F32);
    let [rows, features] = x.dims();
    let mean: Tensor<B, 2> = t::<B, 1>(mean).cast(DType::F32).reshape([rows, 1]);
    let rstd: Tensor<B, 2> = t::<B, 1>(rstd).cast(DType::F32).reshape([rows, 1]);
    let gamma: Tensor<B, 2> = t::<B, 1>(gamma).cast(DType::F32).reshape([1, features]);
    let x_hat = (x - mean) * rstd.clone();
    let g_gamma = g.clone() * gamma;
    let a = g_gamma.clone().mean_dim(1);
    let b = (g_gamma.clone() * x_hat.clone()).mean_dim(1);
    let dx = (g_gamma - a - x_hat.clone() * b) * rstd;
    let dgamma = (g.clone() * x_hat).sum_dim(0).reshape([features]);
    let dbeta = g.sum_dim(0).reshape([features]);
    [
        p(dx.cast(x_dtype)),
        p(dgamma.cast(gamma_dtype)),
        p(dbeta.cast(gamma_dtype)),
    ]
}

/// `true` above the diagonal of a [queries, keys] score matrix: the
/// positions a causal query must not see.
fn causal_mask<B: Backend>(queries: usize, keys: usize, device: &B::Device) -> Tensor<B, 4, Bool> {
    let data: Vec<bool> = (0..queries)
        .flat_map(|i| (0..keys).map(move |j| j > i))
        .collect();
    Tensor::<B, 2, Bool>::from_data(TensorData::new(data, [queries, keys]), device).unsqueeze()
}

/// The backend's own attention (on CubeCL backends a flash-attention
/// kernel; elsewhere matmul, mask, softmax, matmul). No log-sum-exp.
pub fn attention<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    causal: bool,
) -> AttentionOutput<B> {
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: causal,
    };
    AttentionOutput {
        output: B::attention(q, k, v, None, None, options),
        lse: None,
    }
}

/// Softmax probabilities P of the scaled (and masked) scores, recomputed,
/// in f32 whatever q's type.
fn attention_probs<B: Backend>(q: &Tensor<B, 4>, k: &Tensor<B, 4>, causal: bool) -> Tensor<B, 4> {
    let [_, _, queries, head_dim] = q.dims();
    let keys = k.dims()[2];
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut scores = q.clone().matmul(k.clone().swap_dims(2, 3)).cast(DType::F32) * scale;
    if causal {
        scores = scores.mask_fill(
            causal_mask::<B>(queries, keys, &q.device()),
            f64::NEG_INFINITY,
        );
    }
    let max = scores.clone().max_dim(3);
    let e = (scores - max).exp();
    let sum = e.clone().sum_dim(3);
    e / sum
}

/// dV = Pᵀ·dO, dS = P∘(dO·Vᵀ − rowsum(dO∘O)), dQ = dS·K·s, dK = dSᵀ·Q·s.
pub fn attention_backward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    output: FloatTensor<B>,
    _lse: Option<FloatTensor<B>>,
    grad: FloatTensor<B>,
    causal: bool,
) -> [FloatTensor<B>; 3] {
    let (q, k, v): (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) = (t(q), t(k), t(v));
    let (o, d_o): (Tensor<B, 4>, Tensor<B, 4>) = (t(output), t(grad));
    let dtype = q.dtype();
    let scale = 1.0 / (q.dims()[3] as f64).sqrt();
    let probs = attention_probs(&q, &k, causal);
    let dv = probs
        .clone()
        .cast(dtype)
        .swap_dims(2, 3)
        .matmul(d_o.clone());
    let dp = d_o.clone().matmul(v.swap_dims(2, 3)).cast(DType::F32);
    let row_dot = (d_o.cast(DType::F32) * o.cast(DType::F32)).sum_dim(3);
    let ds = (probs * (dp - row_dot)).cast(dtype);
    let dq = ds.clone().matmul(k) * scale;
    let dk = ds.swap_dims(2, 3).matmul(q) * scale;
    [p(dq), p(dk), p(dv)]
}

/// Per-row log-sum-exp minus the target's logit.
pub fn cross_entropy<B: Backend>(
    logits: FloatTensor<B>,
    targets: IntTensor<B>,
) -> CrossEntropyOutput<B> {
    let logits: Tensor<B, 2> = t(logits);
    let dtype = logits.dtype();
    let logits = logits.cast(DType::F32);
    let rows = logits.dims()[0];
    let targets: Tensor<B, 2, Int> =
        Tensor::<B, 1, Int>::from_primitive(targets).reshape([rows, 1]);
    let max = logits.clone().max_dim(1);
    let lse = (logits.clone() - max.clone()).exp().sum_dim(1).log() + max;
    let picked = logits.gather(1, targets);
    CrossEntropyOutput {
        loss: p((lse.clone() - picked).reshape([rows]).cast(dtype)),
        lse: p(lse.reshape([rows])),
    }
}

/// dlogits[r, j] = grad[r]·(softmax(logits)[r, j] − [j = targets[r]]).
pub fn cross_entropy_backward<B: Backend>(
    logits: FloatTensor<B>,
    targets: IntTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> FloatTensor<B> {
    let logits: Tensor<B, 2> = t(logits);
    let dtype = logits.dtype();
    let logits = logits.cast(DType::F32);
    let [rows, classes] = logits.dims();
    let lse: Tensor<B, 2> = t::<B, 1>(lse).cast(DType::F32).reshape([rows, 1]);
    let grad: Tensor<B, 2> = t::<B, 1>(grad).cast(DType::F32).reshape([rows, 1]);
    let targets: Tensor<B, 2, Int> =
        Tensor::<B, 1, Int>::from_primitive(targets).reshape([rows, 1]);
    let one_hot = Tensor::<B, 2>::zeros([rows, classes], &logits.device()).scatter(
        1,
        targets,
        Tensor::ones([rows, 1], &logits.device()),
        burn::tensor::IndexingUpdateOp::Add,
    );
    p((((logits - lse).exp() - one_hot) * grad).cast(dtype))
}
