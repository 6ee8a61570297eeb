//! Scaled dot-product attention, forward and backward, one task per
//! (batch, head): the score matrix lives in a per-thread scratch buffer, the
//! products run through `gemm` directly on the strided q/k/v views (no head
//! split/merge copies), and the output is written in [batch, query, head,
//! head_dim] memory order, so a model's `swap_dims(1, 2).reshape(..)` back
//! to [batch, query, width] is free.
//!
//! The forward saves only the log-sum-exp of each query row; the backward
//! recomputes the probabilities from it (as flash attention does) instead
//! of keeping batch·heads·T² floats alive per layer.

use burn::backend::flex::{FlexTensor, Layout};
use burn::tensor::{DType, Shape};
use burn_flex::simd::math::exp_f32;
use macerator::Simd;
use rayon::prelude::*;

use super::{dot16, from_vec, max16, sum16, SharedMut};

/// Query rows per block of the causal loop: a block only multiplies the keys
/// its last row can see, which skips most of the masked upper triangle.
const ROW_BLOCK: usize = 64;

/// A [batch, heads, rows, head_dim] f32 tensor whose rows are contiguous.
struct Heads {
    tensor: FlexTensor,
    dims: [usize; 4],
    /// Element strides of batch, head and row (the last dimension's is 1).
    strides: [isize; 3],
}

impl Heads {
    fn new(t: &FlexTensor) -> Self {
        let layout = t.layout();
        let usable = layout.strides()[3] == 1 && layout.strides().iter().all(|&s| s >= 0);
        let tensor = if usable { t.clone() } else { t.to_contiguous() };
        let shape = tensor.layout().shape().clone();
        let s = tensor.layout().strides();
        Self {
            dims: [shape[0], shape[1], shape[2], shape[3]],
            strides: [s[0], s[1], s[2]],
            tensor,
        }
    }

    /// Pointer to row 0 of head (b, h).
    fn head(&self, b: usize, h: usize) -> *const f32 {
        let base = self.tensor.storage::<f32>().as_ptr();
        let offset = self.tensor.layout().start_offset() as isize
            + b as isize * self.strides[0]
            + h as isize * self.strides[1];
        // In bounds: (b, h) index the tensor's own shape.
        unsafe { base.offset(offset) }
    }

    fn row_stride(&self) -> isize {
        self.strides[2]
    }
}

/// A new [batch, heads, rows, head_dim] output stored in [batch, rows,
/// heads, head_dim] order (see the module comment).
struct Output {
    data: Vec<f32>,
    dims: [usize; 4],
}

impl Output {
    fn zeros(dims: [usize; 4]) -> Self {
        Self {
            data: vec![0.0; dims.iter().product()],
            dims,
        }
    }

    /// Row stride and the offset of head (b, h)'s row 0.
    fn head(dims: [usize; 4], b: usize, h: usize) -> (isize, usize) {
        let [_, heads, rows, hd] = dims;
        ((heads * hd) as isize, (b * rows * heads + h) * hd)
    }

    fn into_tensor(self) -> FlexTensor {
        let [b, h, t, hd] = self.dims;
        let strides = vec![(t * h * hd) as isize, hd as isize, (h * hd) as isize, 1];
        FlexTensor::new(
            burn::tensor::Bytes::from_elems(self.data),
            Layout::new(Shape::from(vec![b, h, t, hd]), strides, 0),
            DType::F32,
        )
    }
}

/// dst[m×n] (row stride `dst_rs`, unit column stride) = scale·lhs·rhs, or
/// += when `accumulate`; lhs is m×k and rhs k×n with the given strides.
/// Single-threaded: the callers already run one task per head.
///
/// # Safety
/// Every pointer must address the whole matrix its strides describe.
#[allow(clippy::too_many_arguments)]
unsafe fn matmul(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: isize,
    accumulate: bool,
    lhs: (*const f32, isize, isize),
    rhs: (*const f32, isize, isize),
    scale: f32,
) {
    let (lhs, lhs_rs, lhs_cs) = lhs;
    let (rhs, rhs_rs, rhs_cs) = rhs;
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs,
        accumulate,
        lhs,
        lhs_cs,
        lhs_rs,
        rhs,
        rhs_cs,
        rhs_rs,
        1.0,
        scale,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// In place: row ← softmax(row); returns log Σ e^row.
#[macerator::with_simd]
fn softmax_row<S: Simd>(row: &mut [f32]) -> f32 {
    let m = max16(row);
    for x in row.iter_mut() {
        *x = exp_f32(*x - m);
    }
    let l = sum16(row);
    let inv = 1.0 / l;
    for x in row.iter_mut() {
        *x *= inv;
    }
    m + l.ln()
}

/// In place: row ← e^(row − lse).
#[macerator::with_simd]
fn probs_row<S: Simd>(row: &mut [f32], lse: f32) {
    for x in row.iter_mut() {
        *x = exp_f32(*x - lse);
    }
}

/// In place: dp ← p ∘ (dp − d).
#[macerator::with_simd]
fn dscores_row<S: Simd>(dp: &mut [f32], p: &[f32], d: f32) {
    for (x, p) in dp.iter_mut().zip(p) {
        *x = p * (*x - d);
    }
}

/// Keys query `i` may see.
fn visible(i: usize, keys: usize, causal: bool) -> usize {
    if causal {
        i + 1
    } else {
        keys
    }
}

/// Scaled scores of query rows r0..r1 against the keys they can see, into
/// `scores` (row stride `keys`); returns how many key columns were written.
///
/// # Safety
/// `q` and `k` point at heads of the given shapes.
unsafe fn scores_block(
    scores: &mut [f32],
    (r0, r1): (usize, usize),
    (q, q_rs): (*const f32, isize),
    (k, k_rs): (*const f32, isize),
    (keys, head_dim, scale, causal): (usize, usize, f32, bool),
) -> usize {
    let cols = if causal { r1 } else { keys };
    // rhs = kᵀ: element (c, j) = k[j, c].
    matmul(
        (r1 - r0, cols, head_dim),
        scores.as_mut_ptr().add(r0 * keys),
        keys as isize,
        false,
        (q.offset(r0 as isize * q_rs), q_rs, 1),
        (k, 1, k_rs),
        scale,
    );
    cols
}

fn check(q: &Heads, k: &Heads, v: &Heads, causal: bool) {
    let [b, h, t, hd] = q.dims;
    assert!(
        k.dims == v.dims && k.dims[0] == b && k.dims[1] == h && k.dims[3] == hd,
        "attention: q {:?}, k {:?}, v {:?} do not fit",
        q.dims,
        k.dims,
        v.dims
    );
    assert!(
        !causal || k.dims[2] == t,
        "attention: causal attention needs as many keys as queries"
    );
}

pub(super) fn forward(
    q: &FlexTensor,
    k: &FlexTensor,
    v: &FlexTensor,
    causal: bool,
) -> (FlexTensor, FlexTensor) {
    let (q, k, v) = (Heads::new(q), Heads::new(k), Heads::new(v));
    check(&q, &k, &v, causal);
    let [batch, heads, queries, hd] = q.dims;
    let keys = k.dims[2];
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = Output::zeros(q.dims);
    let mut lse = vec![0.0f32; batch * heads * queries];
    let out_ptr = SharedMut(out.data.as_mut_ptr());
    let dims = q.dims;
    lse.par_chunks_mut(queries.max(1))
        .enumerate()
        .for_each_init(
            || vec![0.0f32; queries * keys],
            |scores, (bh, lse)| {
                let (b, h) = (bh / heads, bh % heads);
                let (qp, kp, vp) = (q.head(b, h), k.head(b, h), v.head(b, h));
                let (o_rs, o_off) = Output::head(dims, b, h);
                let out_ptr = out_ptr;
                for r0 in (0..queries).step_by(ROW_BLOCK) {
                    let r1 = (r0 + ROW_BLOCK).min(queries);
                    // SAFETY: q/k/v heads are in bounds (Heads::head); this
                    // task writes only head (b, h)'s rows of `out`, at
                    // o_off + i·o_rs + 0..hd, disjoint from every other task.
                    unsafe {
                        let cols = scores_block(
                            scores,
                            (r0, r1),
                            (qp, q.row_stride()),
                            (kp, k.row_stride()),
                            (keys, hd, scale, causal),
                        );
                        for i in r0..r1 {
                            let row = &mut scores[i * keys..i * keys + cols];
                            let seen = visible(i, keys, causal);
                            lse[i] = softmax_row(&mut row[..seen]);
                            row[seen..].fill(0.0);
                        }
                        matmul(
                            (r1 - r0, hd, cols),
                            out_ptr.0.add(o_off).offset(r0 as isize * o_rs),
                            o_rs,
                            false,
                            (scores.as_ptr().add(r0 * keys), keys as isize, 1),
                            (vp, v.row_stride(), 1),
                            1.0,
                        );
                    }
                }
            },
        );
    (out.into_tensor(), from_vec(lse, [batch, heads, queries]))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    q: &FlexTensor,
    k: &FlexTensor,
    v: &FlexTensor,
    output: &FlexTensor,
    lse: &FlexTensor,
    grad: &FlexTensor,
    causal: bool,
) -> [FlexTensor; 3] {
    let (q, k, v) = (Heads::new(q), Heads::new(k), Heads::new(v));
    check(&q, &k, &v, causal);
    let (o, d_o) = (Heads::new(output), Heads::new(grad));
    let lse = lse.to_contiguous();
    let [batch, heads, queries, hd] = q.dims;
    let keys = k.dims[2];
    let scale = 1.0 / (hd as f32).sqrt();
    let lse_s = &lse.storage::<f32>()[..batch * heads * queries];
    let (mut dq, mut dk, mut dv) = (
        Output::zeros(q.dims),
        Output::zeros(k.dims),
        Output::zeros(v.dims),
    );
    let ptrs = (
        SharedMut(dq.data.as_mut_ptr()),
        SharedMut(dk.data.as_mut_ptr()),
        SharedMut(dv.data.as_mut_ptr()),
    );
    let (q_dims, k_dims) = (q.dims, k.dims);
    (0..batch * heads).into_par_iter().for_each_init(
        || (vec![0.0f32; queries * keys], vec![0.0f32; queries * keys]),
        |(probs, dscores), bh| {
            let (b, h) = (bh / heads, bh % heads);
            let (qp, kp, vp) = (q.head(b, h), k.head(b, h), v.head(b, h));
            let (op, dop) = (o.head(b, h), d_o.head(b, h));
            let (q_rs, k_rs, v_rs) = (q.row_stride(), k.row_stride(), v.row_stride());
            let (o_rs, do_rs) = (o.row_stride(), d_o.row_stride());
            let lse = &lse_s[bh * queries..(bh + 1) * queries];
            let (dq_rs, dq_off) = Output::head(q_dims, b, h);
            let (dk_rs, dk_off) = Output::head(k_dims, b, h);
            let (dq_ptr, dk_ptr, dv_ptr) = ptrs;
            // SAFETY: as in `forward`: heads in bounds, and this task writes
            // only head (b, h)'s rows of dq, dk and dv.
            unsafe {
                // P, recomputed from the saved log-sum-exp.
                for r0 in (0..queries).step_by(ROW_BLOCK) {
                    let r1 = (r0 + ROW_BLOCK).min(queries);
                    scores_block(
                        probs,
                        (r0, r1),
                        (qp, q_rs),
                        (kp, k_rs),
                        (keys, hd, scale, causal),
                    );
                    for i in r0..r1 {
                        let row = &mut probs[i * keys..(i + 1) * keys];
                        let seen = visible(i, keys, causal);
                        probs_row(&mut row[..seen], lse[i]);
                        row[seen..].fill(0.0);
                    }
                }
                // dV = Pᵀ·dO (v has k's shape, hence k's output layout).
                matmul(
                    (keys, hd, queries),
                    dv_ptr.0.add(dk_off),
                    dk_rs,
                    false,
                    (probs.as_ptr(), 1, keys as isize),
                    (dop, do_rs, 1),
                    1.0,
                );
                // dP = dO·Vᵀ, then dS = P∘(dP − rowsum(dO∘O)).
                matmul(
                    (queries, keys, hd),
                    dscores.as_mut_ptr(),
                    keys as isize,
                    false,
                    (dop, do_rs, 1),
                    (vp, 1, v_rs),
                    1.0,
                );
                for i in 0..queries {
                    let o_row = std::slice::from_raw_parts(op.offset(i as isize * o_rs), hd);
                    let do_row = std::slice::from_raw_parts(dop.offset(i as isize * do_rs), hd);
                    let d = dot16(o_row, do_row);
                    let seen = visible(i, keys, causal);
                    let (dp, p) = (
                        &mut dscores[i * keys..(i + 1) * keys],
                        &probs[i * keys..(i + 1) * keys],
                    );
                    dscores_row(&mut dp[..seen], &p[..seen], d);
                    dp[seen..].fill(0.0);
                }
                // dQ = dS·K·s, dK = dSᵀ·Q·s.
                matmul(
                    (queries, hd, keys),
                    dq_ptr.0.add(dq_off),
                    dq_rs,
                    false,
                    (dscores.as_ptr(), keys as isize, 1),
                    (kp, k_rs, 1),
                    scale,
                );
                matmul(
                    (keys, hd, queries),
                    dk_ptr.0.add(dk_off),
                    dk_rs,
                    false,
                    (dscores.as_ptr(), 1, keys as isize),
                    (qp, q_rs, 1),
                    scale,
                );
            }
        },
    );
    [dq.into_tensor(), dk.into_tensor(), dv.into_tensor()]
}
