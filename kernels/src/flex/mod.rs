//! Fused f32 kernels for Burn's CPU backend (`Flex`): vectorized through
//! macerator's run-time instruction-set dispatch, parallel through rayon in
//! fixed-size pieces (so results never depend on the thread count), matrix
//! products through the `gemm` crate as burn-flex itself calls it.
//!
//! Other dtypes (f16/bf16 under mixed precision) take the composed path.

mod attention;
mod cross_entropy;
mod gelu;
mod layer_norm;

use burn::backend::flex::{FlexTensor, Layout};
use burn::backend::Flex;
use burn::tensor::ops::{FloatTensor, FloatTensorOps, IntTensor};
use burn::tensor::{DType, FloatDType, Shape};

use crate::{composed, AttentionOutput, CrossEntropyOutput, FusedBackend, LayerNormOutput};

/// Whether the f32 kernels serve these tensors: f32, or a half type they
/// compute in f32 (converted in, converted back out, as GPU kernels
/// accumulate half inputs in f32). f64 keeps the composed path.
fn kernel_dtypes(tensors: &[&FlexTensor]) -> bool {
    tensors
        .iter()
        .all(|t| matches!(t.dtype(), DType::F32 | DType::BF16 | DType::F16))
}

/// `t` as f32 (shared, not copied, when it already is).
fn as_f32(t: &FlexTensor) -> FlexTensor {
    match t.dtype() {
        DType::F32 => t.clone(),
        _ => <Flex as FloatTensorOps<Flex>>::float_cast(t.clone(), FloatDType::F32),
    }
}

/// An f32 kernel result back in the dtype of the input it stands for.
fn in_dtype(t: FlexTensor, dtype: DType) -> FlexTensor {
    match dtype {
        DType::F32 => t,
        DType::BF16 => <Flex as FloatTensorOps<Flex>>::float_cast(t, FloatDType::BF16),
        DType::F16 => <Flex as FloatTensorOps<Flex>>::float_cast(t, FloatDType::F16),
        other => unreachable!("kernel_dtypes admits no {other:?}"),
    }
}

/// The f32 values of `t` in logical (row-major) order, as a slice of a
/// contiguous tensor (a copy only when `t` is a strided view).
fn contiguous(t: &FlexTensor) -> FlexTensor {
    t.to_contiguous()
}

/// A new contiguous f32 tensor of `shape` holding `data`.
fn from_vec(data: Vec<f32>, shape: impl Into<Shape>) -> FlexTensor {
    let shape = shape.into();
    debug_assert_eq!(data.len(), shape.num_elements());
    FlexTensor::new(
        burn::tensor::Bytes::from_elems(data),
        Layout::contiguous(shape),
        DType::F32,
    )
}

/// A raw pointer that rayon tasks may share because each task writes a
/// disjoint part of the buffer behind it (checked by each caller's
/// indexing; see the comments there).
#[derive(Clone, Copy)]
struct SharedMut(*mut f32);
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl FusedBackend for Flex {
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        if !kernel_dtypes(&[&x]) {
            return composed::gelu_tanh::<Self>(x);
        }
        in_dtype(gelu::forward(&as_f32(&x)), x.dtype())
    }

    fn fused_gelu_tanh_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        if !kernel_dtypes(&[&x, &grad]) {
            return composed::gelu_tanh_backward::<Self>(x, grad);
        }
        in_dtype(gelu::backward(&as_f32(&x), &as_f32(&grad)), x.dtype())
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        if !kernel_dtypes(&[&x, &gamma, &beta]) {
            return composed::layer_norm::<Self>(x, gamma, beta, eps);
        }
        let out = layer_norm::forward(&as_f32(&x), &as_f32(&gamma), &as_f32(&beta), eps as f32);
        LayerNormOutput {
            output: in_dtype(out.output, x.dtype()),
            ..out
        }
    }

    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        if !kernel_dtypes(&[&x, &gamma, &mean, &rstd, &grad]) {
            return composed::layer_norm_backward::<Self>(x, gamma, mean, rstd, grad);
        }
        let [dx, dgamma, dbeta] = layer_norm::backward(
            &as_f32(&x),
            &as_f32(&gamma),
            &as_f32(&mean),
            &as_f32(&rstd),
            &as_f32(&grad),
        );
        [
            in_dtype(dx, x.dtype()),
            in_dtype(dgamma, gamma.dtype()),
            in_dtype(dbeta, gamma.dtype()),
        ]
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> AttentionOutput<Self> {
        if !kernel_dtypes(&[&q, &k, &v]) {
            return composed::attention::<Self>(q, k, v, causal);
        }
        let (output, lse) = attention::forward(&as_f32(&q), &as_f32(&k), &as_f32(&v), causal);
        AttentionOutput {
            output: in_dtype(output, q.dtype()),
            lse: Some(lse),
        }
    }

    fn fused_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: Option<FloatTensor<Self>>,
        grad: FloatTensor<Self>,
        causal: bool,
    ) -> [FloatTensor<Self>; 3] {
        match lse {
            Some(lse) if kernel_dtypes(&[&q, &k, &v, &output, &lse, &grad]) => {
                let [dq, dk, dv] = attention::backward(
                    &as_f32(&q),
                    &as_f32(&k),
                    &as_f32(&v),
                    &as_f32(&output),
                    &lse,
                    &as_f32(&grad),
                    causal,
                );
                [
                    in_dtype(dq, q.dtype()),
                    in_dtype(dk, k.dtype()),
                    in_dtype(dv, v.dtype()),
                ]
            }
            lse => composed::attention_backward::<Self>(q, k, v, output, lse, grad, causal),
        }
    }

    fn fused_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> CrossEntropyOutput<Self> {
        if !kernel_dtypes(&[&logits]) {
            return composed::cross_entropy::<Self>(logits, targets);
        }
        let out = cross_entropy::forward(&as_f32(&logits), &targets);
        CrossEntropyOutput {
            loss: in_dtype(out.loss, logits.dtype()),
            lse: out.lse,
        }
    }

    fn fused_cross_entropy_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        if !kernel_dtypes(&[&logits, &lse, &grad]) {
            return composed::cross_entropy_backward::<Self>(logits, targets, lse, grad);
        }
        let d = cross_entropy::backward(&as_f32(&logits), &targets, &as_f32(&lse), &as_f32(&grad));
        in_dtype(d, logits.dtype())
    }
}

/// Sum of a slice with 16 independent accumulators: vectorizable without
/// reassociating (the order is fixed by this code, not by the ISA).
#[inline(always)]
fn sum16(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let mut chunks = xs.chunks_exact(16);
    for chunk in &mut chunks {
        for (a, x) in acc.iter_mut().zip(chunk) {
            *a += *x;
        }
    }
    let mut total = 0.0f32;
    for a in acc {
        total += a;
    }
    for x in chunks.remainder() {
        total += *x;
    }
    total
}

/// Σ a[i]·b[i] with the same fixed order as [`sum16`].
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let mut ca = a.chunks_exact(16);
    let mut cb = b.chunks_exact(16);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut total = 0.0f32;
    for v in acc {
        total += v;
    }
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        total += x * y;
    }
    total
}

/// max of a non-empty slice, 16 lanes.
#[inline(always)]
fn max16(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut chunks = xs.chunks_exact(16);
    for chunk in &mut chunks {
        for (a, x) in acc.iter_mut().zip(chunk) {
            *a = a.max(*x);
        }
    }
    let mut m = f32::NEG_INFINITY;
    for a in acc {
        m = m.max(a);
    }
    for x in chunks.remainder() {
        m = m.max(*x);
    }
    m
}

#[cfg(test)]
mod tests;
