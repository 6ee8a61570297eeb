//! The stages of an rft run, each in its own file or directory of
//! `RUN_DIR/stages/` and read back when done: a training stage (a, c) run
//! by the engine, rejection sampling (b) and greedy evaluation (d) with
//! any model's [`Sampler`]. `super::recipe` puts them in order.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use envgen_kernels::FusedAutodiffBackend;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::config::RftConfig;
use super::datagen::{build_dataset, DatagenStats, Example, Sampler, DEFAULT_GEN_BATCH};
use super::eval::{evaluate_with, Evaluation, MODEL_FILE};
use super::task::{Question, Split};
use crate::engine::rundir::{read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::{self, RunControl, Task};

pub(crate) const STAGES: &str = "stages";
pub(crate) const FINETUNE: &str = "finetune";

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

/// Rows per generation call, sampling (b) and greedy evaluation (d) alike.
pub(crate) fn gen_batch(control: &RunControl) -> usize {
    control.gen_batch.unwrap_or(DEFAULT_GEN_BATCH)
}

/// A training stage in its own directory: skipped when its summary says
/// completed, resumed when it has a checkpoint, started fresh otherwise.
pub(crate) fn train_stage<B: FusedAutodiffBackend, T: Task<B>>(
    task: &T,
    dir: &Path,
    control: &RunControl,
    stop_after: Option<u64>,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    if let Ok(done) = read_json::<Summary>(&dir.join("summary.json")) {
        // Both models' tasks write their weights as `model.safetensors`.
        if done.status == Status::Completed && dir.join(MODEL_FILE).exists() {
            return Ok(done);
        }
    }
    crate::fsutil::create_dir_all(dir)?;
    let stage_control = control.stage(dir, control.micro_batch, stop_after);
    engine::train::<B, T>(task, &stage_control, device)
}

/// (b) rejection sampling with `sampler` on the training questions,
/// recorded in `path` and metrics.jsonl; `None` when a stop request came
/// (the stage has no partial record: it reruns on resume).
pub(crate) fn sample_stage(
    sampler: &mut dyn Sampler,
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

/// (d) greedy evaluation with `sampler`, recorded in `record` (whose name
/// is the stage's) and metrics.jsonl with its round: `runs report` plots
/// accuracy per round.
pub(crate) fn evaluate_stage(
    sampler: &mut dyn Sampler,
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

/// `result`, unless the sampler failed: then its error, and the record it
/// graded (every row as unanswered) is removed so that a resume redoes it.
pub(crate) fn failed_or<T>(
    error: Option<anyhow::Error>,
    record: &Path,
    result: anyhow::Result<T>,
) -> anyhow::Result<T> {
    match error {
        Some(e) => {
            let _ = std::fs::remove_file(record);
            Err(e)
        }
        None => result,
    }
}

/// A training stage's last held-out loss (null when it has none).
pub(crate) fn final_val_loss(stage: &Summary) -> Value {
    stage
        .metrics
        .get("final_val_loss")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Test support: `task` trained in `run_dir` (micro-batch 4), fresh or
/// resumed, stopped after `stop_after` steps when given.
#[cfg(test)]
pub(crate) fn train_in<B: FusedAutodiffBackend, T: Task<B>>(
    task: &T,
    run_dir: std::path::PathBuf,
    resume: bool,
    stop_after: Option<u64>,
) -> Summary {
    std::fs::create_dir_all(&run_dir).unwrap();
    let control = RunControl {
        run_dir,
        micro_batch: 4,
        resume,
        stop_after,
        ..Default::default()
    };
    engine::train::<B, T>(task, &control, &Default::default()).unwrap()
}
