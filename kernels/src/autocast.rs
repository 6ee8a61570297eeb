//! Mixed precision the way PyTorch's autocast does it: parameters (and the
//! optimizer's moments) stay f32; inside an autocast scope the matrix
//! products and the activations between them run in a half type (bf16 or
//! f16), while normalization statistics, softmax statistics, losses and the
//! residual stream stay f32.
//!
//! The scope is a thread-local setting, like `torch.autocast`: the training
//! loop enters it, the models ask it. Models call [`linear`] for their
//! projections (weight and input cast to the compute type; the cast is an
//! autodiff op whose backward casts the gradient back, so f32 parameters get
//! f32 gradients), [`full`] where a result joins the f32 stream, and the
//! fused ops, which take half inputs and compute in f32 inside.

use std::cell::Cell;

use burn::prelude::*;
use burn::tensor::module::linear as burn_linear;
use burn::tensor::DType;

thread_local! {
    static COMPUTE: Cell<Option<DType>> = const { Cell::new(None) };
}

/// While alive, this thread computes in `dtype` (see the module doc);
/// dropping it restores the previous setting, so scopes nest.
#[must_use = "autocast lasts as long as the guard"]
pub struct Scope {
    previous: Option<DType>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        COMPUTE.with(|c| c.set(self.previous));
    }
}

/// Enter an autocast scope: `Some(BF16)`/`Some(F16)` for mixed precision,
/// `None` for plain f32 (what a thread does outside any scope).
pub fn enter(dtype: Option<DType>) -> Scope {
    assert!(
        matches!(dtype, None | Some(DType::BF16 | DType::F16)),
        "autocast computes in bf16 or f16, not {dtype:?}"
    );
    Scope {
        previous: COMPUTE.with(|c| c.replace(dtype)),
    }
}

/// The half type of the current scope, if any.
pub fn compute_dtype() -> Option<DType> {
    COMPUTE.with(|c| c.get())
}

/// `x` in the scope's compute type (unchanged outside a scope).
pub fn half<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    match compute_dtype() {
        Some(dtype) => x.cast(dtype),
        None => x,
    }
}

/// `x` in f32: where an activation joins the residual stream, and before
/// statistics and losses.
pub fn full<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    x.cast(DType::F32)
}

/// A `burn::nn::Linear` layer applied in the scope's compute type.
pub fn linear_layer<B: Backend, const D: usize>(
    layer: &burn::nn::Linear<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    linear(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// `x · weight + bias` (weight [d_in, d_out], Burn's `Linear` layout) in the
/// scope's compute type; the output stays in that type.
///
/// The leading dims of `x` are flattened first, so the products (and the
/// weight gradient xᵀ·dy) are plain 2-D matmuls: Burn 0.21's CubeCL matmul
/// computes some batched products with a transposed left operand wrongly
/// (found by experiments/tests/cubecl_lavapipe.rs: [8, 64, 82]ᵀ-view · [8, 82, 512] on
/// wgpu is off by O(10); 2-D products of the same sizes are right), and on
/// the CPU one 2-D product is also faster than a batch of small ones.
pub fn linear<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, D> {
    let mut dims = x.dims();
    let d_in = dims[D - 1];
    let rows = x.shape().num_elements() / d_in.max(1);
    let d_out = weight.dims()[1];
    let flat: Tensor<B, 2> = half(x).reshape([rows, d_in]);
    dims[D - 1] = d_out;
    burn_linear(flat, half(weight), bias.map(half)).reshape(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};

    #[test]
    fn scopes_nest_and_are_per_thread() {
        assert_eq!(compute_dtype(), None);
        {
            let _outer = enter(Some(DType::BF16));
            assert_eq!(compute_dtype(), Some(DType::BF16));
            {
                let _inner = enter(None);
                assert_eq!(compute_dtype(), None);
            }
            assert_eq!(compute_dtype(), Some(DType::BF16));
            let other = std::thread::spawn(compute_dtype).join().unwrap();
            assert_eq!(other, None, "another thread is not in this scope");
        }
        assert_eq!(compute_dtype(), None);
    }

    /// A bf16 linear layer: half output, f32 gradients for f32 parameters,
    /// values within bf16 rounding of the f32 layer.
    #[test]
    fn half_linear_keeps_f32_gradients() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let w = Tensor::<B, 2>::from_floats([[0.5, -1.25], [2.0, 0.75], [-0.3, 1.1]], &device)
            .require_grad();
        let b = Tensor::<B, 1>::from_floats([0.1, -0.2], &device).require_grad();
        let x = Tensor::<B, 2>::from_floats([[1.0, 2.0, 3.0], [-1.5, 0.25, 4.0]], &device);
        let reference = x.clone().matmul(w.clone()) + b.clone().unsqueeze();
        let y = {
            let _scope = enter(Some(DType::BF16));
            linear(x, w.clone(), Some(b.clone()))
        };
        assert_eq!(y.dtype(), DType::BF16);
        let y = full(y);
        let diff: f32 = (y.clone() - reference).abs().max().into_scalar();
        assert!(diff < 0.05, "bf16 linear differs by {diff}");
        let grads = y.sum().backward();
        let gw = w.grad(&grads).unwrap();
        assert_eq!(gw.dtype(), DType::F32);
        assert_eq!(b.grad(&grads).unwrap().dtype(), DType::F32);
    }
}
