//! `envgen run rft`: the experiment in the registry, and its one branch on
//! the model: the config's [`ModelPath`], resolved once, picks the family
//! whose model `super::recipe` runs (the stages and `RUN_DIR` layout are
//! the recipe's).

use envgen_kernels::FusedAutodiffBackend;
use serde_json::Value;

use super::config::{RftConfig, DEFAULT_PRESET, EXPERIMENT, PRESETS};
use super::datagen::check_gen_batch;
use super::family::{gpt, llama};
use super::model_path::ModelPath;
use super::stages::gen_batch;
use crate::engine::rundir::Summary;
use crate::engine::RunControl;
use crate::experiment::{ExperimentInfo, TypedExperiment};

/// Run (or resume) every stage in `control.run_dir`.
pub fn run<B: FusedAutodiffBackend>(
    config: &RftConfig,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    config.validate("config.toml")?;
    check_gen_batch(gen_batch(control))?;
    match ModelPath::of(&config.model)? {
        ModelPath::Scratch => gpt::run_scratch::<B>(config, control, device),
        ModelPath::Gpt2(dir) => gpt::run_gpt2::<B>(config, &dir, control, device),
        ModelPath::Llama(init) => llama::run::<B>(config, &init, control, device),
    }
}

/// [`run`] on the resolved backend.
pub fn run_on(
    config: &RftConfig,
    control: &RunControl,
    backend: crate::backend::Resolved,
) -> anyhow::Result<Summary> {
    crate::with_train_backend!(backend, B => run::<B>(config, control, &Default::default()))
}

/// `rft` in the experiment registry.
pub struct RftExperiment;
pub static RFT: RftExperiment = RftExperiment;

impl TypedExperiment for RftExperiment {
    type Config = RftConfig;
    const INFO: ExperimentInfo = ExperimentInfo {
        name: EXPERIMENT,
        description:
            "rejection-sampling fine-tuning of a small GPT on verified unit-conversion answers",
        presets: PRESETS,
        default_preset: DEFAULT_PRESET,
        headline_metric: "accuracy_after",
    };
    fn validate(&self, config: &RftConfig, origin: &str) -> anyhow::Result<()> {
        config.validate(origin)
    }
    fn batch_size(&self, config: &RftConfig) -> usize {
        config.sft_stage().train.batch_size
    }
    fn parameters(&self, config: &RftConfig) -> Option<u64> {
        ModelPath::of(&config.model).ok()?.parameters(&config.model)
    }
    fn run_typed(
        &self,
        config: &RftConfig,
        control: &RunControl,
        backend: crate::backend::Resolved,
    ) -> anyhow::Result<Summary> {
        run_on(config, control, backend)
    }
    fn line(&self, summary: &Summary) -> String {
        summary_line(summary)
    }
}

/// The one line printed after a run.
pub fn summary_line(summary: &Summary) -> String {
    let m = &summary.metrics;
    let num = |k: &str| m.get(k).and_then(Value::as_f64);
    match (num("accuracy_before"), num("accuracy_after")) {
        (Some(before), Some(after)) => format!(
            "{:?} in {:.1} s: accuracy {:.1}% -> {:.1}%, answer rate {:.1}% -> {:.1}%, kept {} of {} samples ({:.0} samples/s)",
            summary.status,
            summary.wall_s,
            before * 100.0,
            after * 100.0,
            num("answer_rate_before").unwrap_or(0.0) * 100.0,
            num("answer_rate_after").unwrap_or(0.0) * 100.0,
            num("kept").unwrap_or(0.0),
            num("generated").unwrap_or(0.0),
            num("datagen_samples_per_s").unwrap_or(0.0),
        ),
        _ => format!(
            "{:?} after {} training steps in {:.1} s (resume with --resume RUN_DIR)",
            summary.status, summary.steps_done, summary.wall_s
        ),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
