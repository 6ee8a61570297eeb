//! Post-training weight quantization on plain `f32` matrices.
//!
//! * [`schemes`]: INT8 per-channel and INT4 per-group (symmetric and
//!   asymmetric) round-to-nearest, dequantization, bits per weight, error
//!   metrics, and magnitude-based structured-pruning helpers;
//! * [`pack`]: the `.envq` file that stores a set of named quantized tensors;
//! * [`run`]: `envgen run quantize`, which applies them to a trained run.

pub mod pack;
pub mod run;
pub mod schemes;

pub use pack::{read_packed, write_packed, NamedTensor};
pub use schemes::{dequantize, error_stats, quantize, ErrorStats, QuantizedTensor, Scheme};
