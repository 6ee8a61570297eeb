//! A whole model as packed tensors: every tensor of a source's weights
//! quantized with one scheme (2-D ones by output channel, the rest kept in
//! f32), back again, and scored from its `.envq` file. Shared by the
//! quantization run (`run.rs`) and the pruning rows (`prune.rs`).

use std::collections::HashMap;
use std::path::Path;

use super::pack::{read_packed, NamedTensor};
use super::schemes::{bits_per_weight, dequantize, quantize, transpose, Scheme};
use super::source::{Quality, SourceRun};
use crate::engine::safetensors_io::NamedTensors;

/// Every tensor of `source`: 2-D ones quantized with `scheme` (rows = output
/// channels), the rest kept in f32.
pub fn pack_model(source: &dyn SourceRun, scheme: Scheme) -> anyhow::Result<Vec<NamedTensor>> {
    pack_weights(source, source.weights(), scheme)
}

/// [`pack_model`] for other weights with the source's names (a pruned model).
pub fn pack_weights(
    source: &dyn SourceRun,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    scheme: Scheme,
) -> anyhow::Result<Vec<NamedTensor>> {
    weights
        .iter()
        .map(|(name, shape, values)| {
            let tensor = match shape.as_slice() {
                [rows, cols] if source.is_transposed(name) => {
                    quantize(&transpose(values, *rows, *cols), *cols, *rows, scheme)?
                }
                [rows, cols] => quantize(values, *rows, *cols, scheme)?,
                _ => quantize(values, 1, values.len(), Scheme::Float32)?,
            };
            Ok(NamedTensor {
                name: name.clone(),
                transposed: shape.len() == 2 && source.is_transposed(name),
                tensor,
            })
        })
        .collect()
}

/// The model's tensors back from a packed file (original names, shapes,
/// layout). Tensors that are not 2-D were stored as one row: the source's
/// tensor of the same name says how many dimensions they have (a pruned
/// model's have fewer elements, the same rank).
pub fn unpack_model(
    tensors: &[NamedTensor],
    source: &dyn SourceRun,
) -> anyhow::Result<NamedTensors> {
    let shapes: HashMap<&str, &Vec<usize>> = source
        .weights()
        .iter()
        .map(|(n, s, _)| (n.as_str(), s))
        .collect();
    let mut out = NamedTensors::new();
    for t in tensors {
        let values = dequantize(&t.tensor);
        let (rows, cols) = (t.tensor.rows, t.tensor.cols);
        let values = if t.transposed {
            transpose(&values, rows, cols)
        } else {
            values
        };
        let shape = match shapes.get(t.name.as_str()) {
            Some(s) if s.len() != 2 && s.iter().product::<usize>() == rows * cols => (*s).clone(),
            Some(s) if s.len() == 1 => vec![rows * cols],
            _ if t.transposed => vec![cols, rows],
            _ => vec![rows, cols],
        };
        out.insert(t.name.clone(), (shape, values));
    }
    Ok(out)
}

/// Quality of the model stored in a `.envq` file (what the table reports).
pub fn evaluate_packed(source: &dyn SourceRun, path: &Path) -> anyhow::Result<Quality> {
    let tensors = read_packed(path)?;
    source.evaluate(&unpack_model(&tensors, source)?)
}

/// Nominal bits per weight of the quantized (2-D) tensors of `weights`
/// (the source's names) under `scheme`.
pub fn matrix_bits(
    source: &dyn SourceRun,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    scheme: Scheme,
) -> f64 {
    let (mut bits, mut weights_count) = (0.0, 0usize);
    for (name, shape, values) in weights {
        if let [rows, cols] = shape.as_slice() {
            let (r, c) = if source.is_transposed(name) {
                (*cols, *rows)
            } else {
                (*rows, *cols)
            };
            bits += bits_per_weight(scheme, r, c) * values.len() as f64;
            weights_count += values.len();
        }
    }
    bits / weights_count.max(1) as f64
}
