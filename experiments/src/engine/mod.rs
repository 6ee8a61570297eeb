//! The experiment engine shared by GPT-2, HRM, RFT and quantization:
//! science configs with `--set` overrides and hashing ([`config`]), AdamW
//! with GPT-2 parameter groups, global-norm clipping and warmup+cosine
//! ([`optim`]), the iteration-based loop with gradient accumulation, eval,
//! checkpoints and resume ([`train`]), and the run directory ([`rundir`]).

pub mod checkpoint;
pub mod config;
pub mod optim;
pub mod params;
pub mod rundir;
pub mod safetensors_io;
pub mod train;

pub use config::{config_hash, load, split_batch, HardwareHint, Loaded, OptimConfig, TrainConfig};
pub use rundir::{Manifest, Profile, Status, Summary};
pub use train::{train, train_on, AnyBackendTask, RunControl, Task};
