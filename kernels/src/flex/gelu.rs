//! tanh-GELU forward and backward in one pass each (the composed form is
//! eight element-wise passes forward and more backward).

use burn::backend::flex::FlexTensor;
use burn_flex::simd::math::tanh_f32;
use macerator::Simd;
use rayon::prelude::*;

use super::{contiguous, from_vec};

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const CUBIC: f32 = 0.044715;
/// Elements per rayon task: ~20 flops each, so tasks of 16 Ki elements
/// amortize the scheduling; fixed size keeps results thread-count free.
const CHUNK: usize = 16 * 1024;

#[inline(always)]
fn gelu(x: f32) -> f32 {
    let t = tanh_f32(SQRT_2_OVER_PI * (x + CUBIC * x * x * x));
    0.5 * x * (1.0 + t)
}

#[inline(always)]
fn gelu_grad(x: f32, g: f32) -> f32 {
    let x2 = x * x;
    let t = tanh_f32(SQRT_2_OVER_PI * x * (1.0 + CUBIC * x2));
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * x2);
    g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
}

#[macerator::with_simd]
fn forward_seq<S: Simd>(x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = gelu(*x);
    }
}

#[macerator::with_simd]
fn backward_seq<S: Simd>(x: &[f32], g: &[f32], dx: &mut [f32]) {
    for ((d, x), g) in dx.iter_mut().zip(x).zip(g) {
        *d = gelu_grad(*x, *g);
    }
}

pub(super) fn forward(x: &FlexTensor) -> FlexTensor {
    let x = contiguous(x);
    let n = x.layout().num_elements();
    let xs = &x.storage::<f32>()[..n];
    let mut y = vec![0.0f32; n];
    y.par_chunks_mut(CHUNK)
        .zip(xs.par_chunks(CHUNK))
        .for_each(|(y, x)| forward_seq(x, y));
    from_vec(y, x.layout().shape().clone())
}

pub(super) fn backward(x: &FlexTensor, grad: &FlexTensor) -> FlexTensor {
    let x = contiguous(x);
    let grad = contiguous(grad);
    let n = x.layout().num_elements();
    let xs = &x.storage::<f32>()[..n];
    let gs = &grad.storage::<f32>()[..n];
    let mut dx = vec![0.0f32; n];
    dx.par_chunks_mut(CHUNK)
        .zip(xs.par_chunks(CHUNK).zip(gs.par_chunks(CHUNK)))
        .for_each(|(d, (x, g))| backward_seq(x, g, d));
    from_vec(dx, x.layout().shape().clone())
}
