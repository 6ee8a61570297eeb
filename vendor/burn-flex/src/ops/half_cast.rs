//! Direct f32 <-> f16/bf16 casts (envgen patch P5).
//!
//! `float_cast` converts through an f64 buffer: two passes and 8 bytes of
//! scratch per element. Mixed-precision training casts every weight and
//! activation that enters or leaves the half type, so these casts are hot;
//! `half`'s slice conversions do them in one pass (with F16C where the CPU
//! has it), in fixed-size chunks on rayon for large tensors. Both
//! directions round exactly as `f16::from_f32` / `bf16::from_f32` do
//! (round to nearest even), so results equal the old path's.

use alloc::vec;
use burn_backend::DType;
use burn_std::{Bytes, bf16, f16};
use half::slice::HalfFloatSliceExt;

use crate::{FlexTensor, Layout};

#[cfg(feature = "rayon")]
use rayon::prelude::*;

/// Elements per rayon task.
#[cfg(feature = "rayon")]
const CHUNK: usize = 64 * 1024;

/// `src` (contiguous) cast to `target` when one side is f32 and the other
/// f16 or bf16; `None` for every other pair.
pub(crate) fn cast_f32_half(src: &FlexTensor, target: DType) -> Option<FlexTensor> {
    let n = src.layout().num_elements();
    let shape = src.layout().shape().clone();
    let bytes = match (src.dtype(), target) {
        (DType::F32, DType::F16) => {
            let mut out = vec![f16::ZERO; n];
            chunked(&src.storage::<f32>()[..n], &mut out, |s, d| {
                d.convert_from_f32_slice(s)
            });
            Bytes::from_elems(out)
        }
        (DType::F32, DType::BF16) => {
            let mut out = vec![bf16::ZERO; n];
            chunked(&src.storage::<f32>()[..n], &mut out, |s, d| {
                d.convert_from_f32_slice(s)
            });
            Bytes::from_elems(out)
        }
        (DType::F16, DType::F32) => {
            let mut out = vec![0.0f32; n];
            chunked(&src.storage::<f16>()[..n], &mut out, |s, d| {
                s.convert_to_f32_slice(d)
            });
            Bytes::from_elems(out)
        }
        (DType::BF16, DType::F32) => {
            let mut out = vec![0.0f32; n];
            chunked(&src.storage::<bf16>()[..n], &mut out, |s, d| {
                s.convert_to_f32_slice(d)
            });
            Bytes::from_elems(out)
        }
        _ => return None,
    };
    Some(FlexTensor::new(bytes, Layout::contiguous(shape), target))
}

/// Apply `convert` to matching chunks of `src` and `dst`.
fn chunked<S: Sync, D: Send>(src: &[S], dst: &mut [D], convert: impl Fn(&[S], &mut [D]) + Sync) {
    #[cfg(feature = "rayon")]
    if src.len() > CHUNK {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| convert(s, d));
        return;
    }
    convert(src, dst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use burn_backend::TensorData;

    /// Every conversion equals the scalar `from_f32`/`to_f32` (the old
    /// path's rounding), on a range that includes subnormals, infinities,
    /// NaN and values that round to even, across the chunk boundaries.
    #[test]
    fn direct_casts_round_like_the_scalar_conversions() {
        let mut values: Vec<f32> = (0..200_003)
            .map(|i| ((i as f32) - 100_000.0) * 1.000_123e-3 * (1.0 + (i % 7) as f32))
            .collect();
        values.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            65504.0,
            70000.0,
            1.0 + 1.0 / 256.0,
            3.0e38,
        ]);
        let n = values.len();
        let t = FlexTensor::from_data(TensorData::new(values.clone(), [n]));
        let h = cast_f32_half(&t, DType::F16).unwrap();
        let b = cast_f32_half(&t, DType::BF16).unwrap();
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(
                h.storage::<f16>()[i].to_bits(),
                f16::from_f32(v).to_bits(),
                "f16({v})"
            );
            assert_eq!(
                b.storage::<bf16>()[i].to_bits(),
                bf16::from_f32(v).to_bits(),
                "bf16({v})"
            );
        }
        let h32 = cast_f32_half(&h, DType::F32).unwrap();
        let b32 = cast_f32_half(&b, DType::F32).unwrap();
        for i in 0..n {
            let (hv, bv) = (h.storage::<f16>()[i], b.storage::<bf16>()[i]);
            assert_eq!(h32.storage::<f32>()[i].to_bits(), hv.to_f32().to_bits());
            assert_eq!(b32.storage::<f32>()[i].to_bits(), bv.to_f32().to_bits());
        }
        assert!(cast_f32_half(&t, DType::F64).is_none());
    }
}
