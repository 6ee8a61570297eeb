//! Rejection-sampling fine-tuning (RFT) on a unit-conversion task: one
//! recipe, any model.
//!
//! The task and the data, the same for every model:
//! * [`task`]: seeded questions, reference reasoning, prompt/training formats;
//! * [`verify`]: answer parsing, the HW3 correctness rule, accuracy/answer rate;
//! * [`equations`]: the equations of a reasoning path, checked and normalised;
//! * [`datagen`]: rejection sampling through any [`datagen::Sampler`] into a
//!   deduplicated fine-tuning set, as [`datagen_config`] (`[datagen]`) says.
//!
//! The run, named for what it does (as Burn's examples split model,
//! training and inference), not for the model:
//! * [`config`]: the science config and its checks (a leaf: it asks
//!   [`model_path`], never a run path);
//! * [`model_path`]: from scratch, a GPT-2 or a Llama-family checkpoint,
//!   decided once from `[model]`;
//! * [`recipe`]: the stage order, the rounds, the `--stop-after` budget,
//!   the metrics ([`metrics`]) and the RUN_DIR layout, for every model;
//! * [`stages`]: one stage each (train, sample, evaluate), cached on disk;
//! * [`run`]: `envgen run rft`, the one branch from [`model_path`] to a family;
//! * [`completion`], [`tokens`], [`train`], [`eval`], [`prompt`]: examples in
//!   token ids and their loss, the GPT's tokenizer, task and sampler, a
//!   checkpoint's prompts;
//! * [`family`]: what differs between models, the
//!   [`family::ModelFamily`] trait: [`family::gpt`] (the byte-level GPT from
//!   scratch and a GPT-2 checkpoint, one model code) and [`family::llama`].
//!
//! A fourth model family needs exactly: a `ModelPath` variant that
//! [`model_path::ModelPath::of`] returns for it (with its arms in that
//! enum's checks: checkpoint files, LoRA targets, chat template, context,
//! parameters), one `impl ModelFamily` under `family/` (examples, task,
//! weights, sampler, export, sizes) with a `run` that prepares it and calls
//! [`recipe`], and that `run` in [`run::run`]'s match. The stages, rounds,
//! resume and metrics come with the recipe.

pub(crate) mod base;
pub(crate) mod completion;
pub mod config;
pub mod datagen;
pub mod datagen_config;
mod ending;
pub mod equations;
pub mod eval;
pub(crate) mod family;
pub(crate) mod files;
pub(crate) mod metrics;
pub(crate) mod model_path;
pub mod pretrained;
pub mod prompt;
pub(crate) mod recipe;
pub mod run;
pub(crate) mod stages;
pub mod task;
pub mod tokens;
pub mod train;
pub mod verify;

pub use datagen::{build_dataset, DatagenConfig, DatagenStats, Dataset, Example, Sampler};
pub use task::{generate_split, Question, Split, UnitTable};
pub use verify::{is_correct, parse_answer, score, verify, Metrics, Verdict};

#[cfg(test)]
mod layering_tests;

#[cfg(test)]
mod config_tests;
