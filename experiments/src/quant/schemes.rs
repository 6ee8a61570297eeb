//! Round-to-nearest weight quantization of `[rows, cols]` matrices.
//!
//! Conventions: a row is an output channel and groups run along the input
//! dimension (a row's `cols` weights, split into groups of `group`; the last
//! group of a row is shorter when `group` does not divide `cols`). Scales
//! (and the asymmetric offsets) are stored as IEEE fp16, like llama.cpp's
//! Q4_0/Q4_1/Q8_0 blocks.
//!
//! * INT8 per-channel, symmetric: one scale per row, `s = max|w|/127`,
//!   `q = round(w/s) ∈ [−127, 127]` (−128 unused, so the grid is symmetric),
//!   `x = s·q`.
//! * INT4 per-group, symmetric: `s = max|w|/7`, `q = round(w/s) ∈ [−7, 7]`,
//!   `x = s·q`. Dividing by 7 rather than 8 keeps the largest weight exact
//!   and the grid symmetric; the code −8 is representable but never produced.
//! * INT4 per-group, asymmetric: offset `m = min w`, `s = (max w − m)/15`,
//!   `q = round((w − m)/s) ∈ [0, 15]`, `x = s·q + m`.
//!
//! * `f32` (no quantization): the raw little-endian values, for the small
//!   tensors a model keeps in full precision (biases, LayerNorm) so that one
//!   packed file holds a whole model.
//!
//! Scales are rounded *up* to the next fp16 and offsets *down*, so that
//! every weight stays inside the grid: no clipping, and the per-element
//! error is at most half a step, `s/2` (up to f32 rounding).

use half::f16;
use serde::{Deserialize, Serialize};

use crate::error::UserError;

/// Bits used to store each scale and each offset.
pub const SCALE_BITS: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Scheme {
    Int8PerChannel,
    Int4Symmetric {
        group: usize,
    },
    Int4Asymmetric {
        group: usize,
    },
    /// Stored as is (4 bytes per value, no scales).
    Float32,
}

impl Scheme {
    /// Weights sharing one scale in a row of `cols` weights.
    pub fn group_len(self, cols: usize) -> usize {
        match self {
            Scheme::Int8PerChannel | Scheme::Float32 => cols.max(1),
            Scheme::Int4Symmetric { group } | Scheme::Int4Asymmetric { group } => group,
        }
    }

    pub fn groups_per_row(self, cols: usize) -> usize {
        if self == Scheme::Float32 {
            return 0;
        }
        // A zero group (rejected by `quantize`) must not divide by zero here.
        cols.div_ceil(self.group_len(cols).max(1))
    }

    pub fn code_bits(self) -> u64 {
        match self {
            Scheme::Int8PerChannel => 8,
            Scheme::Int4Symmetric { .. } | Scheme::Int4Asymmetric { .. } => 4,
            Scheme::Float32 => 32,
        }
    }

    /// Whether each group also stores an offset (its minimum).
    pub fn has_offsets(self) -> bool {
        matches!(self, Scheme::Int4Asymmetric { .. })
    }

    /// Bytes of the packed codes of a `[rows, cols]` tensor.
    pub fn code_bytes(self, weights: usize) -> usize {
        match self.code_bits() {
            32 => weights.saturating_mul(4),
            8 => weights,
            _ => weights.div_ceil(2),
        }
    }

    /// Short name used in configs and reports: `int8`, `int4-sym-g32`, `int4-asym-g128`.
    pub fn name(self) -> String {
        match self {
            Scheme::Int8PerChannel => "int8".to_string(),
            Scheme::Int4Symmetric { group } => format!("int4-sym-g{group}"),
            Scheme::Int4Asymmetric { group } => format!("int4-asym-g{group}"),
            Scheme::Float32 => "f32".to_string(),
        }
    }

    /// Inverse of [`Scheme::name`].
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        let group = |rest: &str| rest.parse::<usize>().ok().filter(|g| *g > 0);
        let scheme = if name == "int8" {
            Some(Scheme::Int8PerChannel)
        } else if name == "f32" {
            Some(Scheme::Float32)
        } else if let Some(rest) = name.strip_prefix("int4-sym-g") {
            group(rest).map(|group| Scheme::Int4Symmetric { group })
        } else if let Some(rest) = name.strip_prefix("int4-asym-g") {
            group(rest).map(|group| Scheme::Int4Asymmetric { group })
        } else {
            None
        };
        scheme.ok_or_else(|| {
            UserError::usage(format!("unknown quantization scheme '{name}'"))
                .with_fix("use int8, int4-sym-gN, int4-asym-gN (or f32) with a group size N such as 32, 64 or 128")
                .into()
        })
    }
}

/// Storage cost in bits per weight, scales and offsets included.
pub fn bits_per_weight(scheme: Scheme, rows: usize, cols: usize) -> f64 {
    let weights = (rows * cols) as u64;
    if weights == 0 {
        return 0.0;
    }
    let groups = (rows * scheme.groups_per_row(cols)) as u64;
    let per_group = if scheme.has_offsets() { 2 } else { 1 } * SCALE_BITS;
    (weights * scheme.code_bits() + groups * per_group) as f64 / weights as f64
}

/// A quantized matrix, stored the way the packed file stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedTensor {
    pub scheme: Scheme,
    pub rows: usize,
    pub cols: usize,
    /// One per group, row-major (`row * groups_per_row + group`).
    pub scales: Vec<f16>,
    /// Asymmetric only: each group's offset, same order; empty otherwise.
    pub offsets: Vec<f16>,
    /// INT8: one two's-complement byte per weight. INT4: two weights per byte,
    /// the even flat index (`row * cols + col`) in the low nibble; symmetric
    /// nibbles hold `q + 8`, asymmetric ones `q`.
    pub codes: Vec<u8>,
}

impl QuantizedTensor {
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The integer code of weight `index` (flat, row-major): signed for the
    /// symmetric schemes, 0..=15 for the asymmetric one.
    pub fn code(&self, index: usize) -> i32 {
        match self.scheme {
            Scheme::Int8PerChannel => i32::from(self.codes[index] as i8),
            Scheme::Int4Symmetric { .. } => nibble(&self.codes, index) - 8,
            Scheme::Int4Asymmetric { .. } => nibble(&self.codes, index),
            // Not a code: the value's bit pattern (see `dequantize`).
            Scheme::Float32 => i32::from_le_bytes(f32_bytes(&self.codes, index)),
        }
    }

    pub fn bits_per_weight(&self) -> f64 {
        bits_per_weight(self.scheme, self.rows, self.cols)
    }

    /// Why the parts do not fit together, if they do not (used on data read
    /// from files).
    pub fn inconsistency(&self) -> Option<String> {
        if self.scheme.group_len(self.cols) == 0 {
            return Some("group size 0".to_string());
        }
        let (Some(weights), Some(groups)) = (
            self.rows.checked_mul(self.cols),
            self.rows.checked_mul(self.scheme.groups_per_row(self.cols)),
        ) else {
            return Some(format!("shape [{}, {}] is too large", self.rows, self.cols));
        };
        let offsets = if self.scheme.has_offsets() { groups } else { 0 };
        let expected = [
            ("scales", self.scales.len(), groups),
            ("offsets", self.offsets.len(), offsets),
            ("codes", self.codes.len(), self.scheme.code_bytes(weights)),
        ];
        expected
            .iter()
            .find(|(_, got, want)| got != want)
            .map(|(what, got, want)| format!("{what}: {got} entries, shape needs {want}"))
    }
}

fn f32_bytes(codes: &[u8], index: usize) -> [u8; 4] {
    let at = index * 4;
    [codes[at], codes[at + 1], codes[at + 2], codes[at + 3]]
}

fn nibble(codes: &[u8], index: usize) -> i32 {
    let byte = codes[index / 2];
    i32::from(if index % 2 == 0 {
        byte & 0x0f
    } else {
        byte >> 4
    })
}

fn set_nibble(codes: &mut [u8], index: usize, value: u8) {
    let shift = if index % 2 == 0 { 0 } else { 4 };
    codes[index / 2] |= (value & 0x0f) << shift;
}

/// The next fp16 towards +∞ (half has no `next_up`).
fn next_up(h: f16) -> f16 {
    let bits = h.to_bits();
    if bits == 0x8000 {
        f16::from_bits(1)
    } else if bits & 0x8000 == 0 {
        f16::from_bits(bits + 1)
    } else {
        f16::from_bits(bits - 1)
    }
}

/// The smallest fp16 ≥ `x`.
fn f16_at_least(x: f32) -> f16 {
    let h = f16::from_f32(x);
    if h.to_f32() < x {
        next_up(h)
    } else {
        h
    }
}

/// The largest fp16 ≤ `x`.
fn f16_at_most(x: f32) -> f16 {
    -f16_at_least(-x)
}

fn check_shape(len: usize, rows: usize, cols: usize) -> anyhow::Result<()> {
    if rows.checked_mul(cols) != Some(len) {
        return Err(UserError::usage(format!(
            "{len} weights do not fill a [{rows}, {cols}] matrix"
        ))
        .with_fix("pass the matrix's real shape (rows = output channels, cols = inputs)")
        .into());
    }
    Ok(())
}

/// Quantize a row-major `[rows, cols]` matrix.
pub fn quantize(
    weights: &[f32],
    rows: usize,
    cols: usize,
    scheme: Scheme,
) -> anyhow::Result<QuantizedTensor> {
    check_shape(weights.len(), rows, cols)?;
    if let Some(at) = weights.iter().position(|w| !w.is_finite()) {
        return Err(UserError::usage(format!(
            "weight [{}, {}] is {}: only finite weights can be quantized",
            at / cols,
            at % cols,
            weights[at]
        ))
        .into());
    }
    let group = scheme.group_len(cols);
    if group == 0 {
        return Err(UserError::usage(format!("{}: group size 0", scheme.name()))
            .with_fix("use a group size of 1 or more (32, 64 or 128 are usual)")
            .into());
    }
    if scheme == Scheme::Float32 {
        return Ok(QuantizedTensor {
            scheme,
            rows,
            cols,
            scales: Vec::new(),
            offsets: Vec::new(),
            codes: weights.iter().flat_map(|w| w.to_le_bytes()).collect(),
        });
    }
    let groups = rows * scheme.groups_per_row(cols);
    let mut tensor = QuantizedTensor {
        scheme,
        rows,
        cols,
        scales: Vec::with_capacity(groups),
        offsets: Vec::with_capacity(if scheme.has_offsets() { groups } else { 0 }),
        codes: vec![0; scheme.code_bytes(weights.len())],
    };
    for (row_index, row) in weights.chunks(cols.max(1)).enumerate() {
        for (group_index, values) in row.chunks(group).enumerate() {
            let first = row_index * cols + group_index * group;
            quantize_group(&mut tensor, values, first)?;
        }
    }
    Ok(tensor)
}

fn quantize_group(
    tensor: &mut QuantizedTensor,
    values: &[f32],
    first: usize,
) -> anyhow::Result<()> {
    let too_large = |what: &str, value: f32| -> anyhow::Error {
        UserError::usage(format!(
            "a group starting at weight {first} needs {what} {value}, beyond fp16's range (65504)"
        ))
        .with_fix("these weights are too large for fp16 scales; rescale the layer first")
        .into()
    };
    match tensor.scheme {
        Scheme::Int8PerChannel | Scheme::Int4Symmetric { .. } => {
            let levels = if tensor.scheme == Scheme::Int8PerChannel {
                127.0
            } else {
                7.0
            };
            let max_abs = values.iter().fold(0f32, |acc, w| acc.max(w.abs()));
            let scale = f16_at_least(max_abs / levels);
            if !scale.is_finite() {
                return Err(too_large("a scale of", max_abs / levels));
            }
            tensor.scales.push(scale);
            let scale = scale.to_f32();
            for (offset, &w) in values.iter().enumerate() {
                let q = if scale == 0.0 {
                    0.0
                } else {
                    (w / scale).round().clamp(-levels, levels)
                };
                let index = first + offset;
                if tensor.scheme == Scheme::Int8PerChannel {
                    tensor.codes[index] = (q as i8) as u8;
                } else {
                    set_nibble(&mut tensor.codes, index, (q as i32 + 8) as u8);
                }
            }
        }
        Scheme::Int4Asymmetric { .. } => {
            let (lo, hi) = values
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &w| {
                    (lo.min(w), hi.max(w))
                });
            let offset_h = f16_at_most(lo);
            if !offset_h.is_finite() {
                return Err(too_large("an offset of", lo));
            }
            let offset_f = offset_h.to_f32();
            let scale = f16_at_least((hi - offset_f) / 15.0);
            if !scale.is_finite() {
                return Err(too_large("a scale of", (hi - offset_f) / 15.0));
            }
            tensor.scales.push(scale);
            tensor.offsets.push(offset_h);
            let scale = scale.to_f32();
            for (offset, &w) in values.iter().enumerate() {
                let q = if scale == 0.0 {
                    0.0
                } else {
                    ((w - offset_f) / scale).round().clamp(0.0, 15.0)
                };
                set_nibble(&mut tensor.codes, first + offset, q as u8);
            }
        }
        Scheme::Float32 => unreachable!("f32 tensors are stored without groups"),
    }
    Ok(())
}

/// Back to a row-major `f32` matrix.
pub fn dequantize(tensor: &QuantizedTensor) -> Vec<f32> {
    if tensor.scheme == Scheme::Float32 {
        return (0..tensor.len())
            .map(|i| f32::from_le_bytes(f32_bytes(&tensor.codes, i)))
            .collect();
    }
    let group = tensor.scheme.group_len(tensor.cols);
    let groups_per_row = tensor.scheme.groups_per_row(tensor.cols);
    let mut out = Vec::with_capacity(tensor.len());
    for row in 0..tensor.rows {
        for col in 0..tensor.cols {
            let g = row * groups_per_row + col / group;
            let index = row * tensor.cols + col;
            let scaled = tensor.code(index) as f32 * tensor.scales[g].to_f32();
            out.push(match tensor.offsets.get(g) {
                Some(offset) => scaled + offset.to_f32(),
                None => scaled,
            });
        }
    }
    out
}

/// How far a reconstruction is from the original.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ErrorStats {
    pub max_abs: f64,
    pub rmse: f64,
    /// ‖original − reconstructed‖_F / ‖original‖_F (0 when both are zero).
    pub rel_frobenius: f64,
}

/// Error of `reconstructed` against `original` (same length required).
pub fn error_stats(original: &[f32], reconstructed: &[f32]) -> anyhow::Result<ErrorStats> {
    if original.len() != reconstructed.len() {
        return Err(UserError::failed(format!(
            "comparing {} original weights with {} reconstructed ones",
            original.len(),
            reconstructed.len()
        ))
        .into());
    }
    let (mut max_abs, mut err_sq, mut norm_sq) = (0f64, 0f64, 0f64);
    for (&w, &x) in original.iter().zip(reconstructed) {
        let e = f64::from(w) - f64::from(x);
        max_abs = max_abs.max(e.abs());
        err_sq += e * e;
        norm_sq += f64::from(w) * f64::from(w);
    }
    let n = original.len().max(1) as f64;
    Ok(ErrorStats {
        max_abs,
        rmse: (err_sq / n).sqrt(),
        rel_frobenius: if norm_sq > 0.0 {
            (err_sq / norm_sq).sqrt()
        } else if err_sq > 0.0 {
            f64::INFINITY
        } else {
            0.0
        },
    })
}

// ---------------------------------------------------------------------------
// Magnitude-based structured pruning (pure helpers; the model applies them).

/// Result of pruning a pair of matrices that share a hidden dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    /// `true` for each kept unit (head or neuron), in the original order.
    pub keep: Vec<bool>,
    pub first: Vec<f32>,
    pub first_shape: [usize; 2],
    pub second: Vec<f32>,
    pub second_shape: [usize; 2],
}

fn sum_sq(values: impl IntoIterator<Item = f32>) -> f64 {
    values
        .into_iter()
        .map(|v| f64::from(v) * f64::from(v))
        .sum()
}

/// The `keep` highest-scoring units as a mask (ties: the lower index wins).
pub fn keep_top(scores: &[f64], keep: usize) -> Vec<bool> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut mask = vec![false; scores.len()];
    for &index in order.iter().take(keep) {
        mask[index] = true;
    }
    mask
}

/// Rows of a row-major `[rows, cols]` matrix where `row_mask` is true.
pub fn select_rows(weights: &[f32], cols: usize, row_mask: &[bool]) -> Vec<f32> {
    weights
        .chunks(cols.max(1))
        .zip(row_mask)
        .filter(|(_, keep)| **keep)
        .flat_map(|(row, _)| row.iter().copied())
        .collect()
}

/// Row-major `[rows, cols]` → `[cols, rows]`.
pub fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// Columns of a row-major `[rows, cols]` matrix where `col_mask` is true.
pub fn select_cols(weights: &[f32], cols: usize, col_mask: &[bool]) -> Vec<f32> {
    weights
        .chunks(cols.max(1))
        .flat_map(|row| {
            row.iter()
                .zip(col_mask)
                .filter(|(_, keep)| **keep)
                .map(|(w, _)| *w)
        })
        .collect()
}

/// MLP neurons by the L2 norm of their in and out weights: `fc` is
/// `[hidden, embed]` (neuron i = row i), `proj` is `[embed, hidden]`
/// (neuron i = column i). Keeps `keep` neurons; `first` is the pruned `fc`,
/// `second` the pruned `proj`.
pub fn prune_mlp(
    fc: &[f32],
    proj: &[f32],
    embed: usize,
    hidden: usize,
    keep: usize,
) -> anyhow::Result<Pruned> {
    check_shape(fc.len(), hidden, embed)?;
    check_shape(proj.len(), embed, hidden)?;
    let scores: Vec<f64> = (0..hidden)
        .map(|i| {
            let incoming = sum_sq(fc[i * embed..(i + 1) * embed].iter().copied());
            let outgoing = sum_sq((0..embed).map(|r| proj[r * hidden + i]));
            (incoming + outgoing).sqrt()
        })
        .collect();
    let mask = keep_top(&scores, keep);
    let kept = mask.iter().filter(|k| **k).count();
    Ok(Pruned {
        first: select_rows(fc, embed, &mask),
        first_shape: [kept, embed],
        second: select_cols(proj, hidden, &mask),
        second_shape: [embed, kept],
        keep: mask,
    })
}

/// Attention heads by the L2 norm of the weights that belong to them:
/// `qkv` is `[3·embed, embed]` (query, key, value output rows stacked; head h
/// owns rows h·d..(h+1)·d of each block, d = embed / heads) and `proj` is
/// `[embed, embed]` (head h owns input columns h·d..(h+1)·d). Keeps `keep`
/// heads; `first` is the pruned `qkv` (`[3·kept·d, embed]`), `second` the
/// pruned `proj` (`[embed, kept·d]`).
pub fn prune_heads(
    qkv: &[f32],
    proj: &[f32],
    embed: usize,
    heads: usize,
    keep: usize,
) -> anyhow::Result<Pruned> {
    if heads == 0 || embed % heads != 0 {
        return Err(UserError::usage(format!(
            "{heads} heads do not divide the embedding width {embed}"
        ))
        .with_fix("pass the model's real head count")
        .into());
    }
    check_shape(qkv.len(), 3 * embed, embed)?;
    check_shape(proj.len(), embed, embed)?;
    let d = embed / heads;
    let scores: Vec<f64> = (0..heads)
        .map(|h| {
            let owned = (0..3).flat_map(|block| {
                let start = (block * embed + h * d) * embed;
                qkv[start..start + d * embed].iter().copied()
            });
            let outgoing = (0..embed).flat_map(|r| {
                proj[r * embed + h * d..r * embed + (h + 1) * d]
                    .iter()
                    .copied()
            });
            (sum_sq(owned) + sum_sq(outgoing)).sqrt()
        })
        .collect();
    let mask = keep_top(&scores, keep);
    let kept = mask.iter().filter(|k| **k).count();
    // Per-head mask spread over the head's d rows/columns.
    let lanes: Vec<bool> = mask
        .iter()
        .flat_map(|&k| std::iter::repeat_n(k, d))
        .collect();
    let rows: Vec<bool> = lanes.iter().copied().cycle().take(3 * embed).collect();
    Ok(Pruned {
        first: select_rows(qkv, embed, &rows),
        first_shape: [3 * kept * d, embed],
        second: select_cols(proj, embed, &lanes),
        second_shape: [embed, kept * d],
        keep: mask,
    })
}

#[cfg(test)]
mod tests;
