//! LayerNorm over the last dimension of [rows, features], forward and
//! backward, one pass over each row (the composed form is a dozen
//! broadcasting ops and their backward).

use burn::backend::flex::FlexTensor;
use macerator::Simd;
use rayon::prelude::*;

use super::{contiguous, dot16, from_vec, sum16};
use crate::LayerNormOutput;
use burn::backend::Flex;

/// Rows per task. Also the unit of the partial sums of dγ and dβ, which are
/// then added block by block in order: a fixed constant, so the gradients
/// are the same bits whatever the number of threads.
const BLOCK_ROWS: usize = 32;

#[macerator::with_simd]
#[allow(clippy::too_many_arguments)]
fn forward_rows<S: Simd>(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    y: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
) {
    let d = gamma.len();
    for (r, (xr, yr)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).enumerate() {
        let m = sum16(xr) / d as f32;
        let mut acc = [0.0f32; 16];
        let mut chunks = xr.chunks_exact(16);
        for c in &mut chunks {
            for i in 0..16 {
                let t = c[i] - m;
                acc[i] += t * t;
            }
        }
        let mut var = 0.0f32;
        for a in acc {
            var += a;
        }
        for v in chunks.remainder() {
            var += (v - m) * (v - m);
        }
        let s = 1.0 / (var / d as f32 + eps).sqrt();
        for (((o, v), g), b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
            *o = (v - m) * s * g + b;
        }
        mean[r] = m;
        rstd[r] = s;
    }
}

pub(super) fn forward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: &FlexTensor,
    eps: f32,
) -> LayerNormOutput<Flex> {
    let x = contiguous(x);
    let (gamma, beta) = (contiguous(gamma), contiguous(beta));
    let shape = x.layout().shape().clone();
    let (rows, d) = (shape[0], shape[1]);
    let xs = &x.storage::<f32>()[..rows * d];
    let (gs, bs) = (&gamma.storage::<f32>()[..d], &beta.storage::<f32>()[..d]);
    let mut y = vec![0.0f32; rows * d];
    let mut mean = vec![0.0f32; rows];
    let mut rstd = vec![0.0f32; rows];
    let block = BLOCK_ROWS * d.max(1);
    y.par_chunks_mut(block)
        .zip(xs.par_chunks(block))
        .zip(
            mean.par_chunks_mut(BLOCK_ROWS)
                .zip(rstd.par_chunks_mut(BLOCK_ROWS)),
        )
        .for_each(|((y, x), (m, s))| forward_rows(x, gs, bs, eps, y, m, s));
    LayerNormOutput {
        output: from_vec(y, shape),
        mean: from_vec(mean, [rows]),
        rstd: from_vec(rstd, [rows]),
    }
}

/// dx of a block of rows; returns the block's partial dγ and dβ.
#[macerator::with_simd]
#[allow(clippy::too_many_arguments)]
fn backward_rows<S: Simd>(
    x: &[f32],
    g: &[f32],
    gamma: &[f32],
    mean: &[f32],
    rstd: &[f32],
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let d = gamma.len();
    let inv_d = 1.0 / d as f32;
    let mut x_hat = vec![0.0f32; d];
    let mut g_gamma = vec![0.0f32; d];
    for (r, ((xr, gr), dr)) in x
        .chunks_exact(d)
        .zip(g.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
        .enumerate()
    {
        let (m, s) = (mean[r], rstd[r]);
        for i in 0..d {
            x_hat[i] = (xr[i] - m) * s;
            g_gamma[i] = gr[i] * gamma[i];
            dgamma[i] += gr[i] * x_hat[i];
            dbeta[i] += gr[i];
        }
        let a = sum16(&g_gamma) * inv_d;
        let b = dot16(&g_gamma, &x_hat) * inv_d;
        for i in 0..d {
            dr[i] = s * (g_gamma[i] - a - x_hat[i] * b);
        }
    }
}

pub(super) fn backward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    mean: &FlexTensor,
    rstd: &FlexTensor,
    grad: &FlexTensor,
) -> [FlexTensor; 3] {
    let (x, grad) = (contiguous(x), contiguous(grad));
    let (gamma, mean, rstd) = (contiguous(gamma), contiguous(mean), contiguous(rstd));
    let shape = x.layout().shape().clone();
    let (rows, d) = (shape[0], shape[1]);
    let xs = &x.storage::<f32>()[..rows * d];
    let gs = &grad.storage::<f32>()[..rows * d];
    let gamma_s = &gamma.storage::<f32>()[..d];
    let (ms, ss) = (
        &mean.storage::<f32>()[..rows],
        &rstd.storage::<f32>()[..rows],
    );
    let block = BLOCK_ROWS * d.max(1);
    let blocks = rows.div_ceil(BLOCK_ROWS);
    let mut dx = vec![0.0f32; rows * d];
    // Per block: [dγ partial | dβ partial].
    let mut partials = vec![0.0f32; blocks * 2 * d];
    dx.par_chunks_mut(block)
        .zip(partials.par_chunks_mut(2 * d.max(1)))
        .enumerate()
        .for_each(|(i, (dx, part))| {
            let r0 = i * BLOCK_ROWS;
            let r1 = (r0 + BLOCK_ROWS).min(rows);
            let (dgamma, dbeta) = part.split_at_mut(d);
            backward_rows(
                &xs[r0 * d..r1 * d],
                &gs[r0 * d..r1 * d],
                gamma_s,
                &ms[r0..r1],
                &ss[r0..r1],
                dx,
                dgamma,
                dbeta,
            );
        });
    let mut dgamma = vec![0.0f32; d];
    let mut dbeta = vec![0.0f32; d];
    for part in partials.chunks_exact(2 * d.max(1)) {
        for i in 0..d {
            dgamma[i] += part[i];
            dbeta[i] += part[d + i];
        }
    }
    [
        from_vec(dx, shape),
        from_vec(dgamma, [d]),
        from_vec(dbeta, [d]),
    ]
}
