//! Per-row softmax cross-entropy, forward and backward, one pass per row
//! (the composed form: max, subtract, exp, sum, log, add, gather, and their
//! backward through a full-size scatter).

use burn::backend::flex::FlexTensor;
use burn::backend::Flex;
use burn::tensor::DType;
use burn_flex::simd::math::exp_f32;
use macerator::Simd;
use rayon::prelude::*;

use super::{contiguous, from_vec, max16};
use crate::CrossEntropyOutput;

/// Rows per rayon task.
const BLOCK_ROWS: usize = 16;

/// Class indices as i64 whatever the integer dtype; panics with the
/// offending row when one is out of range (as Burn's gather would).
fn targets_of(t: &FlexTensor, rows: usize, classes: usize) -> Vec<usize> {
    let t = contiguous(t);
    let values: Vec<i64> = match t.dtype() {
        DType::I64 => t.storage::<i64>()[..rows].to_vec(),
        DType::I32 => t.storage::<i32>()[..rows]
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DType::U32 => t.storage::<u32>()[..rows]
            .iter()
            .map(|&v| v as i64)
            .collect(),
        other => panic!("cross_entropy: targets must be an integer tensor, not {other:?}"),
    };
    values
        .into_iter()
        .enumerate()
        .map(|(row, v)| {
            assert!(
                (0..classes as i64).contains(&v),
                "cross_entropy: target {v} of row {row} is not a class in 0..{classes}"
            );
            v as usize
        })
        .collect()
}

#[macerator::with_simd]
fn forward_rows<S: Simd>(
    logits: &[f32],
    targets: &[usize],
    classes: usize,
    loss: &mut [f32],
    lse: &mut [f32],
    scratch: &mut [f32],
) {
    for (r, row) in logits.chunks_exact(classes).enumerate() {
        let m = max16(row);
        for (e, x) in scratch.iter_mut().zip(row) {
            *e = exp_f32(x - m);
        }
        let l = super::sum16(scratch).ln() + m;
        lse[r] = l;
        loss[r] = l - row[targets[r]];
    }
}

pub(super) fn forward(logits: &FlexTensor, targets: &FlexTensor) -> CrossEntropyOutput<Flex> {
    let logits = contiguous(logits);
    let shape = logits.layout().shape().clone();
    let (rows, classes) = (shape[0], shape[1]);
    let targets = targets_of(targets, rows, classes);
    let xs = &logits.storage::<f32>()[..rows * classes];
    let mut loss = vec![0.0f32; rows];
    let mut lse = vec![0.0f32; rows];
    loss.par_chunks_mut(BLOCK_ROWS)
        .zip(lse.par_chunks_mut(BLOCK_ROWS))
        .enumerate()
        .for_each_init(
            || vec![0.0f32; classes],
            |scratch, (i, (loss, lse))| {
                let r0 = i * BLOCK_ROWS;
                let r1 = r0 + loss.len();
                forward_rows(
                    &xs[r0 * classes..r1 * classes],
                    &targets[r0..r1],
                    classes,
                    loss,
                    lse,
                    scratch,
                );
            },
        );
    CrossEntropyOutput {
        loss: from_vec(loss, [rows]),
        lse: from_vec(lse, [rows]),
    }
}

#[macerator::with_simd]
fn backward_rows<S: Simd>(
    logits: &[f32],
    targets: &[usize],
    lse: &[f32],
    grad: &[f32],
    classes: usize,
    dlogits: &mut [f32],
) {
    for (r, (row, d)) in logits
        .chunks_exact(classes)
        .zip(dlogits.chunks_exact_mut(classes))
        .enumerate()
    {
        let (l, g) = (lse[r], grad[r]);
        for (d, x) in d.iter_mut().zip(row) {
            *d = g * exp_f32(x - l);
        }
        d[targets[r]] -= g;
    }
}

pub(super) fn backward(
    logits: &FlexTensor,
    targets: &FlexTensor,
    lse: &FlexTensor,
    grad: &FlexTensor,
) -> FlexTensor {
    let logits = contiguous(logits);
    let shape = logits.layout().shape().clone();
    let (rows, classes) = (shape[0], shape[1]);
    let targets = targets_of(targets, rows, classes);
    let (lse, grad) = (contiguous(lse), contiguous(grad));
    let xs = &logits.storage::<f32>()[..rows * classes];
    let (ls, gs) = (
        &lse.storage::<f32>()[..rows],
        &grad.storage::<f32>()[..rows],
    );
    let mut d = vec![0.0f32; rows * classes];
    d.par_chunks_mut(BLOCK_ROWS * classes.max(1))
        .enumerate()
        .for_each(|(i, d)| {
            let r0 = i * BLOCK_ROWS;
            let r1 = r0 + d.len() / classes.max(1);
            backward_rows(
                &xs[r0 * classes..r1 * classes],
                &targets[r0..r1],
                &ls[r0..r1],
                &gs[r0..r1],
                classes,
                d,
            );
        });
    from_vec(d, shape)
}
