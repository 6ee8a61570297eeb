//! Rejection-sampling fine-tuning (RFT) on a unit-conversion task.
//!
//! * [`task`]: seeded questions, reference reasoning, prompt/training formats;
//! * [`verify`]: answer parsing, the HW3 correctness rule, accuracy/answer rate;
//! * [`datagen`]: rejection sampling through a [`datagen::Sampler`] (the GPT
//!   implements it) into a deduplicated fine-tuning set;
//! * [`pretrained`], [`llama_task`], [`llama_run`]: the same recipe on a
//!   pretrained Llama-family checkpoint (`model.init = "hf:DIR"`), its
//!   questions shown as plain text or through its chat template ([`prompt`]);
//! * [`gpt2_init`], [`gpt2_run`], [`tokens`]: on a GPT-2 checkpoint, with
//!   the GPT's own task and sampler and the checkpoint's tokenizer;
//!   `checkpoint_run`: what the two checkpoint paths share (the base's
//!   record, the rounds' bookkeeping, summary.json's metrics).

mod checkpoint_run;
pub mod config;
pub mod datagen;
mod ending;
pub mod eval;
pub mod gpt2_init;
pub mod gpt2_run;
pub mod llama_run;
pub mod llama_task;
pub mod pretrained;
pub mod prompt;
pub mod run;
pub mod task;
pub mod tokens;
pub mod train;
pub mod verify;

pub use datagen::{build_dataset, DatagenConfig, DatagenStats, Dataset, Example, Sampler};
pub use task::{generate_split, Question, Split, UnitTable};
pub use verify::{is_correct, parse_answer, score, verify, Metrics, Verdict};
