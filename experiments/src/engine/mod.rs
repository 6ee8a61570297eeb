//! The experiment engine shared by GPT-2, HRM, RFT and quantization:
//! science configs with `--set` overrides and hashing ([`config`]), AdamW
//! with GPT-2 parameter groups, global-norm clipping and warmup+cosine
//! ([`optim`]), the iteration-based loop with gradient accumulation, eval,
//! checkpoints and resume ([`train`]), the loss of a global batch weighted
//! over its loss-bearing units whatever the micro-batch ([`micro_batches`]),
//! the run directory ([`rundir`]) and its
//! TensorBoard event files ([`tensorboard`]).

pub mod budget;
pub mod checkpoint;
pub mod config;
pub mod distributed;
pub mod health;
pub mod micro_batches;
pub mod optim;
pub mod params;
pub mod precision;
pub mod progress;
pub mod run_files;
pub mod rundir;
pub mod safetensors_io;
pub mod task;
pub mod tensorboard;
pub mod train;

pub use config::{config_hash, load, split_batch, HardwareHint, Loaded, OptimConfig, TrainConfig};
pub use distributed::World;
pub use precision::{LossScaler, Precision, ScaledStep};
pub use rundir::{Status, Summary};
pub use task::{EvalShare, RunControl, Task};
pub use train::{train, train_on, AnyBackendTask};

/// A seed that depends on (`seed`, `step`, `row`) only: what a task draws
/// row `row` of step `step` from, so that a resumed run, or the same batch
/// split into other micro-batches, draws exactly what an uninterrupted run
/// does.
pub fn row_seed(seed: u64, step: u64, row: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(step.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add((row as u64).wrapping_mul(0x94D0_49BB_1331_11EB))
}
