//! `envgen run rft`: the four stages of rejection-sampling fine-tuning as
//! resumable steps of one run directory.
//!
//! ```text
//! RUN_DIR/
//!   config.toml manifest.json summary.json metrics.jsonl model.safetensors
//!   stages/pretrain/   (a) engine run: checkpoints/, metrics.jsonl, summary.json, model.safetensors
//!   stages/eval-before.json   (d, before) greedy accuracy on the held-out questions
//!   stages/round-N/datagen.json  (b) kept examples + counts + samples/s, tokens/s
//!   stages/round-N/finetune/     (c) engine run on the kept set, started from the round's weights
//!   stages/round-N/eval.json     (d, after round N)
//! ```
//!
//! Generation (b, d) takes `RunControl::gen_batch` rows per call: a speed
//! knob, the samples do not depend on it.
//!
//! A stage is done when its file (or its engine `summary.json` with status
//! completed) exists; `--resume` skips finished stages and continues an
//! interrupted training stage from its last checkpoint.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use envgen_kernels::{FusedAutodiffBackend, FusedBackend};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::datagen::{build_dataset, check_gen_batch, DatagenStats, Example, DEFAULT_GEN_BATCH};
pub(crate) use super::ending::{finish, interrupted, stage_ended};
use super::task::{Question, Split};
use crate::engine::rundir::{read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::{self, RunControl};
use crate::error::UserError;
use crate::experiment::{ExperimentInfo, TypedExperiment};

pub use super::config::*;
pub use super::eval::*;
pub use super::train::*;

/// Stage (b)'s record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DatagenRecord {
    pub(crate) stats: DatagenStats,
    pub(crate) seconds: f64,
    pub(crate) samples_per_s: f64,
    /// Generated tokens per second (absent in records from before: 0).
    #[serde(default)]
    pub(crate) tokens_per_s: f64,
    pub(crate) examples: Vec<Example>,
}

pub(crate) const STAGES: &str = "stages";

/// Rows per generation call, sampling (b) and greedy evaluation (d) alike.
pub(crate) fn gen_batch(control: &RunControl) -> usize {
    control.gen_batch.unwrap_or(DEFAULT_GEN_BATCH)
}

/// Run (or resume) every stage in `control.run_dir`.
pub fn run<B: FusedAutodiffBackend>(
    config: &RftConfig,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    config.validate("config.toml")?;
    check_gen_batch(gen_batch(control))?;
    if let Some(init) = config.model.checkpoint()? {
        // A pretrained checkpoint: GPT-2 (gpt2_run.rs) or Llama (llama_run.rs).
        return super::gpt2_init::run::<B>(config, &init, control, device);
    }
    let started = Instant::now();
    let stages = control.run_dir.join(STAGES);
    crate::fsutil::create_dir_all(&stages)?;
    let mut log = MetricsLog::open(&control.run_dir.join("metrics.jsonl"), None)?;
    let split = config.split()?;
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();

    // (a) supervised training on the reference answers.
    let pretrain_dir = stages.join("pretrain");
    let task = RftTrainTask::reference(config, &split);
    let pretrain = train_stage::<B>(&task, &pretrain_dir, control, control.stop_after, device)?;
    let mut steps_done = pretrain.steps_done;
    if pretrain.status != Status::Completed {
        return stage_ended(control, started, steps_done, Some(&pretrain));
    }
    let pretrained = pretrain_dir.join(MODEL_FILE);

    // (d, before)
    let before = eval_stage::<B::InnerBackend>(
        config,
        &pretrained,
        &split.validation,
        0,
        &stages.join("eval-before.json"),
        &mut log,
        control,
        &inner,
    )?;
    if control.stop.load(Ordering::SeqCst) {
        return interrupted(control, started, steps_done);
    }

    // (b) + (c), `rounds` times (STaR iterates): sample with the current
    // weights, keep the verified answers, fine-tune on them; (d) after each.
    let mut weights = pretrained;
    let mut rounds: Vec<RoundResult> = Vec::new();
    for round in 1..=config.rounds {
        let dir = stages.join(format!("round-{round}"));
        // Steps a global --stop-after leaves for this round's fine-tuning.
        let before_round =
            config.pretrain.train.steps + u64::from(round - 1) * config.finetune.train.steps;
        let stop_after = control.stop_after.map(|n| n.saturating_sub(before_round));
        let Some(result) = rft_round::<B>(
            config, &split, round, &weights, &dir, control, stop_after, &mut log, device,
        )?
        else {
            // The round's fine-tuning may have failed rather than stopped.
            let finetune = read_json::<Summary>(&dir.join(FINETUNE).join("summary.json")).ok();
            let steps = steps_done + stage_steps(&dir);
            return stage_ended(control, started, steps, finetune.as_ref());
        };
        steps_done += result.finetune.steps_done;
        weights = dir.join(FINETUNE).join(MODEL_FILE);
        rounds.push(result);
    }
    let model = control.run_dir.join(MODEL_FILE);
    std::fs::copy(&weights, &model).map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "copying {} to {}",
            weights.display(),
            model.display()
        ))
    })?;
    let last = rounds.last().expect("rounds >= 1 (validated)");
    let last_dir = stages.join(format!("round-{}", last.round));
    let after = &last.eval;

    let total =
        |f: fn(&DatagenStats) -> usize| rounds.iter().map(|r| f(&r.datagen.stats)).sum::<usize>();
    let datagen_seconds: f64 = rounds.iter().map(|r| r.datagen.seconds).sum();
    let mut m = Map::new();
    m.insert("accuracy_before".into(), json!(before.metrics.accuracy));
    m.insert("accuracy_after".into(), json!(after.metrics.accuracy));
    m.insert(
        "answer_rate_before".into(),
        json!(before.metrics.answer_rate),
    );
    m.insert("answer_rate_after".into(), json!(after.metrics.answer_rate));
    m.insert("generated".into(), json!(total(|s| s.generated)));
    m.insert("kept".into(), json!(total(|s| s.kept)));
    m.insert(
        "datagen_samples_per_s".into(),
        json!(total(|s| s.generated) as f64 / datagen_seconds.max(1e-9)),
    );
    m.insert("correct".into(), json!(total(|s| s.correct)));
    m.insert("duplicates".into(), json!(total(|s| s.duplicates)));
    m.insert(
        "wrong_reasoning".into(),
        json!(total(|s| s.wrong_reasoning)),
    );
    m.insert(
        "questions_kept".into(),
        json!(last.datagen.stats.questions_kept),
    );
    m.insert(
        "rounds".into(),
        json!(rounds.iter().map(RoundResult::row).collect::<Vec<_>>()),
    );
    m.insert("train_questions".into(), json!(split.train.len()));
    m.insert("worked_questions".into(), json!(config.worked_questions()));
    m.insert("validation_questions".into(), json!(split.validation.len()));
    m.insert("finetune_mode".into(), json!(config.finetune.mode));
    m.insert("parameters".into(), json!(config.model.num_params()));
    // Every round trains the same structure: the last one's sizes stand for all.
    m.extend(finetune_size_metrics(config, &last_dir.join(FINETUNE))?);
    m.insert("eval_samples_per_s".into(), json!(after.samples_per_s));
    m.extend(stage_metrics(&pretrain, &before, &rounds));
    m.insert("pretrain_final_val_loss".into(), final_val_loss(&pretrain));
    m.insert(
        "finetune_final_val_loss".into(),
        final_val_loss(&last.finetune),
    );
    finish(control, started, steps_done, Status::Completed, m)
}

pub(crate) const FINETUNE: &str = "finetune";

/// `stage_seconds` (wall seconds of each stage, rounds summed; a stage
/// read back from an earlier session counts the time it took then) and
/// `datagen_tokens_per_s` (tokens the model generated in (b) per second).
fn stage_metrics(
    pretrain: &Summary,
    before: &Evaluation,
    rounds: &[RoundResult],
) -> Map<String, Value> {
    let sum = |f: fn(&RoundResult) -> f64| rounds.iter().map(f).sum::<f64>();
    let datagen = sum(|r| r.datagen.seconds);
    let tokens: usize = rounds.iter().map(|r| r.datagen.stats.tokens).sum();
    let mut m = Map::new();
    m.insert(
        "stage_seconds".into(),
        json!({
            "pretrain": pretrain.wall_s,
            "eval_before": before.seconds,
            "datagen": datagen,
            "finetune": sum(|r| r.finetune.wall_s),
            "eval": sum(|r| r.eval.seconds),
        }),
    );
    m.insert(
        "datagen_tokens_per_s".into(),
        json!(tokens as f64 / datagen.max(1e-9)),
    );
    m
}

pub(crate) fn final_val_loss(stage: &Summary) -> Value {
    stage
        .metrics
        .get("final_val_loss")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Steps an interrupted fine-tuning stage in `round_dir` got through.
pub(crate) fn stage_steps(round_dir: &Path) -> u64 {
    read_json::<Summary>(&round_dir.join(FINETUNE).join("summary.json")).map_or(0, |s| s.steps_done)
}

/// What one RFT round produced.
pub(crate) struct RoundResult {
    round: u32,
    datagen: DatagenRecord,
    finetune: Summary,
    /// (d) on the weights after this round.
    eval: Evaluation,
}

impl RoundResult {
    /// This round's entry in `metrics.rounds[]`.
    fn row(&self) -> Value {
        let stats = &self.datagen.stats;
        json!({
            "round": self.round,
            "generated": stats.generated,
            "correct": stats.correct,
            "kept": stats.kept,
            "questions_kept": stats.questions_kept,
            "datagen_samples_per_s": self.datagen.samples_per_s,
            "datagen_tokens_per_s": self.datagen.tokens_per_s,
            "finetune_final_val_loss": final_val_loss(&self.finetune),
            "accuracy": self.eval.metrics.accuracy,
            "answer_rate": self.eval.metrics.answer_rate,
        })
    }
}

/// One round in `dir`: (b) sample with `weights` and keep the verified
/// answers (`datagen.json`), (c) fine-tune from `weights` on them
/// (`finetune/`), (d) evaluate (`eval.json`). Finished parts are read back;
/// `None` when a stop request interrupted it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rft_round<B: FusedAutodiffBackend>(
    config: &RftConfig,
    split: &Split,
    round: u32,
    weights: &Path,
    dir: &Path,
    control: &RunControl,
    stop_after: Option<u64>,
    log: &mut MetricsLog,
    device: &B::Device,
) -> anyhow::Result<Option<RoundResult>> {
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();
    crate::fsutil::create_dir_all(dir)?;
    // (b) rejection sampling; each round draws from its own seed.
    let datagen_path = dir.join("datagen.json");
    let datagen: DatagenRecord = if datagen_path.exists() {
        read_json(&datagen_path)?
    } else {
        let model = load_model::<B::InnerBackend>(&config.model, weights, &inner)?;
        let mut sampler = GptSampler::new(
            &model,
            &config.model,
            config.task.max_completion_tokens,
            inner.clone(),
        );
        match sample_stage(
            &mut sampler,
            config,
            split,
            round,
            &datagen_path,
            control,
            log,
        )? {
            Some(record) => record,
            // Rejection sampling has no partial record: it reruns on resume.
            None => return Ok(None),
        }
    };
    if datagen.examples.is_empty() {
        return Err(UserError::failed(format!(
            "rft round {round}: datagen kept no correct completion out of {} sampled: stage (a) did not teach the model to answer",
            datagen.stats.generated
        ))
        .with_fix("train stage (a) longer (--set pretrain.train.steps=...) or sample more (--set datagen.oversample=...)")
        .into());
    }

    // (c) fine-tuning on the kept completions, from this round's weights.
    let kept: Vec<Tokenized> = datagen
        .examples
        .iter()
        .map(|e| tokenize(&super::task::format_prompt(&e.question), &e.text))
        .collect();
    let finetune_stage = StageConfig {
        train: config.finetune.train.clone(),
        optim: config.finetune.optim.clone(),
    };
    let task = RftTrainTask::new(
        config,
        &finetune_stage,
        kept,
        split,
        Some(weights.to_path_buf()),
    );
    let finetune_dir = dir.join(FINETUNE);
    let finetune = train_stage::<B>(&task, &finetune_dir, control, stop_after, device)?;
    if finetune.status != Status::Completed {
        return Ok(None);
    }

    // (d) after this round.
    let eval = eval_stage::<B::InnerBackend>(
        config,
        &finetune_dir.join(MODEL_FILE),
        &split.validation,
        round,
        &dir.join("eval.json"),
        log,
        control,
        &inner,
    )?;
    Ok(Some(RoundResult {
        round,
        datagen,
        finetune,
        eval,
    }))
}

/// (b) rejection sampling with `sampler` on the training questions,
/// recorded in `path` and metrics.jsonl; `None` when a stop request came
/// (the stage has no partial record: it reruns on resume).
pub(crate) fn sample_stage(
    sampler: &mut dyn super::datagen::Sampler,
    config: &RftConfig,
    split: &Split,
    round: u32,
    path: &Path,
    control: &RunControl,
    log: &mut MetricsLog,
) -> anyhow::Result<Option<DatagenRecord>> {
    let t0 = Instant::now();
    let bar = engine::train::progress_bar(control.progress, split.train.len() as u64, 0);
    bar.set_prefix(format!("datagen (round {round}) "));
    bar.set_message("questions");
    let dataset = build_dataset(
        sampler,
        &split.train,
        &config.datagen,
        round,
        gen_batch(control),
        &mut |s| {
            bar.set_message(format!(
                "questions, kept {} of {} samples",
                s.kept, s.generated
            ));
            bar.set_position(s.questions as u64);
        },
    )?;
    bar.finish_and_clear();
    let seconds = t0.elapsed().as_secs_f64();
    if control.stop.load(Ordering::SeqCst) {
        return Ok(None);
    }
    let record = DatagenRecord {
        stats: dataset.stats,
        seconds,
        samples_per_s: dataset.stats.generated as f64 / seconds.max(1e-9),
        tokens_per_s: dataset.stats.tokens as f64 / seconds.max(1e-9),
        examples: dataset.examples,
    };
    write_json(path, &record)?;
    log.write(&json!({"stage": "datagen", "round": round,
        "generated": record.stats.generated, "kept": record.stats.kept,
        "samples_per_s": record.samples_per_s, "tokens_per_s": record.tokens_per_s,
        "seconds": record.seconds}))?;
    Ok(Some(record))
}

/// `trainable_parameters` of stage (c) and `adapter_bytes`, the size of its
/// adapter file (0 in full mode, which trains every parameter).
pub(crate) fn finetune_size_metrics(
    config: &RftConfig,
    finetune_dir: &Path,
) -> anyhow::Result<Map<String, Value>> {
    let (trainable, adapter_bytes) = match config.finetune.adapters() {
        Some(lora) => (
            lora.num_params(&config.model),
            std::fs::metadata(finetune_dir.join(ADAPTER_FILE))?.len(),
        ),
        None => (config.model.num_params(), 0),
    };
    let mut m = Map::new();
    m.insert("trainable_parameters".into(), json!(trainable));
    m.insert("adapter_bytes".into(), json!(adapter_bytes));
    Ok(m)
}

/// A training stage in its own directory: skipped when its summary says
/// completed, resumed when it has a checkpoint, started fresh otherwise.
pub(crate) fn train_stage<B: FusedAutodiffBackend>(
    task: &RftTrainTask,
    dir: &Path,
    control: &RunControl,
    stop_after: Option<u64>,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    if let Ok(done) = read_json::<Summary>(&dir.join("summary.json")) {
        if done.status == Status::Completed && dir.join(MODEL_FILE).exists() {
            return Ok(done);
        }
    }
    crate::fsutil::create_dir_all(dir)?;
    let stage_control = control.stage(dir, control.micro_batch, stop_after);
    engine::train::<B, RftTrainTask>(task, &stage_control, device)
}

/// Greedy evaluation of the weights at `model_path` after `round` (0: the
/// pretrained model), cached in `record` and logged to metrics.jsonl when
/// computed, with its round: `runs report` plots accuracy per round.
/// `control` gives the generation batch and whether to show progress.
#[allow(clippy::too_many_arguments)]
pub(crate) fn eval_stage<B: FusedBackend>(
    config: &RftConfig,
    model_path: &Path,
    questions: &[Question],
    round: u32,
    record: &Path,
    log: &mut MetricsLog,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Evaluation> {
    if record.exists() {
        return read_json(record);
    }
    let model = load_model::<B>(&config.model, model_path, device)?;
    let mut sampler = GptSampler::new(
        &model,
        &config.model,
        config.task.max_completion_tokens,
        device.clone(),
    );
    evaluate_stage(&mut sampler, questions, round, record, log, control)
}

/// (d) greedy evaluation with `sampler`, recorded in `record` (whose name
/// is the stage's) and metrics.jsonl with its round: `runs report` plots
/// accuracy per round.
pub(crate) fn evaluate_stage(
    sampler: &mut dyn super::datagen::Sampler,
    questions: &[Question],
    round: u32,
    record: &Path,
    log: &mut MetricsLog,
    control: &RunControl,
) -> anyhow::Result<Evaluation> {
    let stage = record
        .file_stem()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    // Named as `runs watch` names the row logged below.
    let bar = engine::train::progress_bar(control.progress, questions.len() as u64, 0);
    bar.set_prefix(match round {
        0 => format!("{stage} "),
        _ => format!("{stage} (round {round}) "),
    });
    bar.set_message("questions");
    let evaluation = evaluate_with(sampler, questions, gen_batch(control), &mut |done| {
        bar.set_position(done as u64)
    });
    bar.finish_and_clear();
    write_json(record, &evaluation)?;
    log.write(
        &json!({"stage": stage, "round": round, "accuracy": evaluation.metrics.accuracy,
        "answer_rate": evaluation.metrics.answer_rate, "seconds": evaluation.seconds}),
    )?;
    Ok(evaluation)
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
        config.pretrain.train.batch_size
    }
    fn parameters(&self, config: &RftConfig) -> Option<u64> {
        if config.model.init.is_some() {
            return super::gpt2_init::parameters_of(config);
        }
        Some(config.model.num_params() as u64)
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
