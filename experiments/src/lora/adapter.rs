//! A LoRA adapter on one linear layer, and the adapted layer's forward:
//! what a model needs of LoRA. Configuring, attaching and merging adapters
//! across a model is each family's job (`crate::gpt2::lora`,
//! `crate::llama::lora`; they build on this and on their model, this module
//! needs neither).
//!
//! Two forwards: [`forward`] (the GPT's) works from the effective weight
//! `W + s·A·B`, [`forward_low_rank`] (the Llama's) adds `s·(x·A)·B` to
//! `x·W`; each family's module says why it picked its own.

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::Distribution;
use envgen_kernels::autocast;

/// The trainable low-rank update of one linear layer.
#[derive(Module, Debug)]
pub struct LoraAdapter<B: Backend> {
    /// [d_in, rank].
    pub a: Param<Tensor<B, 2>>,
    /// [rank, d_out].
    pub b: Param<Tensor<B, 2>>,
    /// alpha / rank.
    pub scale: f64,
}

impl<B: Backend> LoraAdapter<B> {
    /// A fresh adapter of `rank` whose update is scaled by `scale`.
    pub fn new(d_in: usize, d_out: usize, rank: usize, scale: f64, device: &B::Device) -> Self {
        // PEFT's default init of A (Kaiming-uniform with a = √5) is
        // U(±1/√d_in); B starts at zero so that A·B = 0.
        let bound = 1.0 / (d_in as f64).sqrt();
        let a = Tensor::random([d_in, rank], Distribution::Uniform(-bound, bound), device);
        Self {
            a: Param::from_tensor(a),
            b: Param::from_tensor(Tensor::zeros([rank, d_out], device)),
            scale,
        }
    }

    /// s·A·B: the [d_in, d_out] update of the layer's weight.
    pub fn delta(&self) -> Tensor<B, 2> {
        self.a.val().matmul(self.b.val()) * self.scale
    }
}

/// `layer`'s weight plus the adapter's update, when there is an adapter.
pub fn adapted_weight<B: Backend>(
    layer: &Linear<B>,
    adapter: Option<&LoraAdapter<B>>,
) -> Tensor<B, 2> {
    let weight = layer.weight.val();
    match adapter {
        Some(adapter) => weight + adapter.delta(),
        None => weight,
    }
}

/// `layer(x)` with the adapted weight; without an adapter exactly what
/// `Linear::forward` computes. In an autocast scope it computes (and
/// returns) the scope's half type.
pub fn forward<B: Backend, const D: usize>(
    layer: &Linear<B>,
    adapter: Option<&LoraAdapter<B>>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    autocast::linear(
        x,
        adapted_weight(layer, adapter),
        layer.bias.as_ref().map(|b| b.val()),
    )
}

/// `layer(x) + s·(x·A)·B`: the adapted layer without forming `W + s·A·B`.
/// The frozen `W` then gets no weight gradient at all (the backward of
/// `x·W` computes only the input's), and the update costs
/// r·(d_in + d_out) per token instead of a d_in × d_out product per call;
/// without an adapter exactly `Linear::forward`, and with `B = 0` exactly
/// `layer(x)` (adding zeros).
pub fn forward_low_rank<B: Backend, const D: usize>(
    layer: &Linear<B>,
    adapter: Option<&LoraAdapter<B>>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    // The leading dimensions are flattened into one 2-D product
    // (`autocast::linear`): `Linear::forward` broadcasts its weight over
    // them instead, and a batch of [1, d_in] rows, as in decoding, then
    // became one small product per row, each re-packing the whole weight
    // (the CPU backend's gemm): 8 decode rows of SmolLM2-360M spent most
    // of their time packing (perf, 2026-11-26).
    match adapter {
        None => autocast::linear_layer(layer, x),
        Some(adapter) => {
            let low = autocast::linear(x.clone(), adapter.a.val(), None);
            let low = autocast::linear(low, adapter.b.val(), None);
            autocast::linear_layer(layer, x) + low * adapter.scale
        }
    }
}
