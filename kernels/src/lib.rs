//! Fused operations for envgen's models, as a Burn backend extension.
//!
//! Burn's autodiff records every tensor operation of a model as its own
//! graph node: a tanh-GELU is eight nodes (and eight passes over memory
//! forward, more backward), a LayerNorm a dozen, attention a matmul, a mask,
//! a softmax built from five ops and another matmul. On a GPU the fusion
//! backend merges the element-wise ones; on the CPU each is a separate pass,
//! and together they cost more than the matrix products (docs/benchmarks.md).
//!
//! [`FusedBackend`] declares the few operations our models are made of, each
//! with its backward pass:
//!
//! | operation | forward | saved for backward |
//! |---|---|---|
//! | [`gelu_tanh`] | GPT-2's tanh-approximated GELU | the input |
//! | [`layer_norm`] | LayerNorm over the last dimension | input, mean, 1/std |
//! | [`attention`] | softmax(q·kᵀ/√d)·v, optionally causal | q, k, v, output, log-sum-exp |
//! | [`cross_entropy`] | per-row −log softmax(logits)[target] | logits, targets, log-sum-exp |
//!
//! Every backend gets the composed implementation ([`composed`]: the same
//! Burn operations a model would call, forward and backward), except:
//! - `Flex` (the CPU backend), which runs fused, vectorized, multithreaded
//!   f32 kernels (`flex` module; bf16/f16 inputs are computed in f32 and
//!   returned in their own type, f64 takes the composed path);
//! - `Autodiff<B>`, which records **one** node per operation and calls `B`'s
//!   forward and backward ([`autodiff`] module);
//! - CubeCL backends (`cuda`), whose attention forward is the backend's own
//!   attention kernel (flash attention, autotuned).
//!
//! Mixed precision ([`autocast`]): models compute their projections in the
//! scope's half type and call the fused ops with half inputs.
//!
//! Every fused kernel is tested against the composed form to 1e-5.
//! Results do not depend on the number of threads: work is split into
//! fixed-size pieces and partial sums are added in a fixed order.

use burn::prelude::Backend;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};

pub mod autocast;
mod autodiff;
pub mod composed;
#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod cube;
mod flex;

/// What a fused LayerNorm forward returns: the output and the per-row
/// statistics its backward needs (both shaped [rows]).
#[derive(Debug, Clone)]
pub struct LayerNormOutput<B: Backend> {
    pub output: FloatTensor<B>,
    pub mean: FloatTensor<B>,
    pub rstd: FloatTensor<B>,
}

/// What a fused attention forward returns: the output, and the log-sum-exp
/// of each query row's scores ([batch, heads, queries]) when the kernel
/// produces it (the backward then need not recompute the row maxima).
#[derive(Debug, Clone)]
pub struct AttentionOutput<B: Backend> {
    pub output: FloatTensor<B>,
    pub lse: Option<FloatTensor<B>>,
}

/// What a fused cross-entropy forward returns: the per-row loss and the
/// per-row log-sum-exp of the logits (both shaped [rows]).
#[derive(Debug, Clone)]
pub struct CrossEntropyOutput<B: Backend> {
    pub loss: FloatTensor<B>,
    pub lse: FloatTensor<B>,
}

/// A Burn backend with envgen's fused operations. Every method has a
/// composed default; backends override what they can do faster.
///
/// Shapes: `layer_norm*` work on [rows, features]; `attention*` on q
/// [batch, heads, queries, head_dim] and k, v [batch, heads, keys,
/// head_dim] (any strides); `cross_entropy*` on logits [rows, classes] and
/// targets [rows].
pub trait FusedBackend: Backend {
    /// GPT-2's GELU: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        composed::gelu_tanh::<Self>(x)
    }
    /// The input gradient of [`FusedBackend::fused_gelu_tanh`] for output gradient `grad`.
    fn fused_gelu_tanh_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        composed::gelu_tanh_backward::<Self>(x, grad)
    }

    /// LayerNorm over the last dimension (biased variance, as PyTorch).
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        composed::layer_norm::<Self>(x, gamma, beta, eps)
    }
    /// Gradients of x, gamma and beta.
    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        composed::layer_norm_backward::<Self>(x, gamma, mean, rstd, grad)
    }

    /// Scaled dot-product attention with scale 1/√head_dim, causal (query
    /// i sees keys 0..=i) or not.
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> AttentionOutput<Self> {
        composed::attention::<Self>(q, k, v, causal)
    }
    /// Gradients of q, k and v.
    #[allow(clippy::too_many_arguments)]
    fn fused_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: Option<FloatTensor<Self>>,
        grad: FloatTensor<Self>,
        causal: bool,
    ) -> [FloatTensor<Self>; 3] {
        composed::attention_backward::<Self>(q, k, v, output, lse, grad, causal)
    }

    /// Per-row cross-entropy: log Σ_j e^{logits[r, j]} − logits[r, targets[r]].
    fn fused_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> CrossEntropyOutput<Self> {
        composed::cross_entropy::<Self>(logits, targets)
    }
    /// Gradient of the logits for per-row loss gradients `grad` [rows].
    fn fused_cross_entropy_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        composed::cross_entropy_backward::<Self>(logits, targets, lse, grad)
    }
}

/// A training backend whose forward and inner (evaluation) backends both
/// have the fused operations: `Autodiff<B>` for any `B: FusedBackend`.
pub trait FusedAutodiffBackend: FusedBackend + AutodiffBackend<InnerBackend: FusedBackend> {}

impl<T: FusedBackend + AutodiffBackend<InnerBackend: FusedBackend>> FusedAutodiffBackend for T {}

fn float<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

fn tensor<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// GPT-2's tanh-approximated GELU, element-wise.
pub fn gelu_tanh<B: FusedBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    tensor(B::fused_gelu_tanh(float(x)))
}

/// LayerNorm of `x` over its last dimension with weight `gamma` and bias
/// `beta` (both [features]), as `burn::nn::LayerNorm` computes it.
pub fn layer_norm<B: FusedBackend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, D> {
    let dims = x.dims();
    let features = dims[D - 1];
    let rows = x.shape().num_elements() / features.max(1);
    let x2: Tensor<B, 2> = x.reshape([rows, features]);
    let out = B::fused_layer_norm(float(x2), float(gamma), float(beta), eps);
    tensor::<B, 2>(out.output).reshape(dims)
}

/// Attention over q [batch, heads, queries, head_dim] and k, v [batch,
/// heads, keys, head_dim], scale 1/√head_dim, causal or not.
pub fn attention<B: FusedBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    causal: bool,
) -> Tensor<B, 4> {
    tensor(B::fused_attention(float(q), float(k), float(v), causal).output)
}

/// Per-row cross-entropy of `logits` [rows, classes] against class indices
/// `targets` [rows]: a [rows] tensor of −log softmax(logits)[target].
pub fn cross_entropy<B: FusedBackend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    tensor(B::fused_cross_entropy(float(logits), targets.into_primitive()).loss)
}
