//! Post-training weight quantization on plain `f32` matrices.
//!
//! * [`schemes`]: INT8 per-channel and INT4 per-group (symmetric and
//!   asymmetric) round-to-nearest, dequantization, bits per weight, error
//!   metrics, and magnitude-based structured-pruning helpers;
//! * [`pack`]: the `.envq` file that stores a set of named quantized tensors;
//! * [`model`]: a whole model packed with one scheme, unpacked and scored;
//! * [`source`]: the trained runs quantize reads (gpt2, rft, hrm-sudoku) and
//!   how each is scored;
//! * [`prune`]: structured pruning with a recovery fine-tune (GPT sources);
//! * [`run`]: `envgen run quantize`, which applies them to a trained run.

pub mod model;
pub mod pack;
pub mod prune;
pub mod run;
pub mod schemes;
pub mod source;

pub use pack::{read_packed, write_packed, NamedTensor};
pub use schemes::{dequantize, error_stats, quantize, ErrorStats, QuantizedTensor, Scheme};
