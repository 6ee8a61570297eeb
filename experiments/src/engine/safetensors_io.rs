//! safetensors files of f32 tensors (written atomically through
//! [`crate::fsutil::write_atomic`]).

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use crate::error::UserError;

/// A tensor as stored: shape and f32 values.
pub type Shaped = (Vec<usize>, Vec<f32>);
/// Every tensor of a file by name.
pub type NamedTensors = HashMap<String, Shaped>;

/// Serialize named f32 tensors (name, shape, values) to safetensors bytes.
pub fn to_bytes(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> anyhow::Result<Vec<u8>> {
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, shape, values)| {
            let bytes = f32_to_le_bytes(values);
            (name.clone(), shape.clone(), bytes)
        })
        .collect();
    let views = raw
        .iter()
        .map(|(name, shape, bytes)| {
            Ok((
                name.as_str(),
                TensorView::new(Dtype::F32, shape.clone(), bytes)?,
            ))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    Ok(safetensors::serialize(views, None)?)
}

/// Read every tensor of a safetensors file as f32 (F32, F16 and BF16 accepted).
pub fn read(path: &Path) -> anyhow::Result<NamedTensors> {
    // Checkpoints and run directories alike: a regular file inside its
    // directory (fsutil's rule), never a link out or a FIFO.
    let dir = path.parent().unwrap_or(Path::new("."));
    let bytes = crate::fsutil::read_user_file(dir, path, crate::fsutil::limit::WEIGHTS)?;
    from_bytes(&bytes, &path.display().to_string())
}

pub fn from_bytes(bytes: &[u8], origin: &str) -> anyhow::Result<NamedTensors> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| {
        UserError::usage(format!("{origin}: not a safetensors file: {e}"))
            .with_fix("give a file written by safetensors (e.g. Hugging Face model.safetensors)")
    })?;
    let mut out = HashMap::new();
    for (name, view) in file.tensors() {
        let values = values_of(&view, &name, origin)?;
        out.insert(name, (view.shape().to_vec(), values));
    }
    Ok(out)
}

/// One tensor's values as f32 (F32, F16 and BF16 accepted; `name` and
/// `origin` name it in the error).
pub fn values_of(view: &TensorView<'_>, name: &str, origin: &str) -> anyhow::Result<Vec<f32>> {
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => f32_from_le_bytes(data),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        other => {
            return Err(UserError::usage(format!(
                "{origin}: tensor `{name}` has dtype {other:?}; only F32/F16/BF16 are read"
            ))
            .with_fix("convert the file to float32")
            .into())
        }
    })
}

/// f32 values as little-endian bytes: one memcpy on little-endian machines
/// (this crate builds unoptimized in tests, where a per-value byte iterator
/// made checkpoints of even small models take a second).
fn f32_to_le_bytes(values: &[f32]) -> Vec<u8> {
    if cfg!(target_endian = "little") {
        bytemuck::cast_slice(values).to_vec()
    } else {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

/// The inverse of [`f32_to_le_bytes`] (`data` need not be aligned).
fn f32_from_le_bytes(data: &[u8]) -> Vec<f32> {
    if cfg!(target_endian = "little") {
        bytemuck::pod_collect_to_vec(data)
    } else {
        data.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_half_floats() {
        let t = vec![("a.b".to_string(), vec![2, 2], vec![1.0, -2.5, 0.0, 3.25])];
        let back = from_bytes(&to_bytes(&t).unwrap(), "mem").unwrap();
        assert_eq!(back["a.b"], (vec![2, 2], vec![1.0, -2.5, 0.0, 3.25]));
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    }
}
