//! Llama-family models from Hugging Face checkpoints (Llama 2/3, SmolLM2,
//! Qwen2): the model (`model.rs`), its `config.json` (`config.rs`), the
//! weights (`hf.rs`) and batched generation with a KV cache
//! (`generate.rs`); `save.rs` writes a model back in the same layout. `crate::pretrained` picks this model or GPT-2 by a
//! directory's `model_type`.

pub mod config;
pub mod generate;
pub mod hf;
pub mod lora;
pub mod model;
pub mod save;

pub use config::LlamaConfig;
pub use generate::{generate, Finish, GenerateOptions, Generation};
pub use model::{KvCache, Llama};
