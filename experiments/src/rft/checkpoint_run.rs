//! What the two pretrained-checkpoint paths of `envgen run rft` share
//! (`llama_run` for the Llama family, `gpt2_run` for GPT-2): the base
//! checkpoint's record, the rounds' bookkeeping (the union of distinct kept
//! samples, per-round rows, stage times) and the metrics of summary.json.
//! The paths differ in their model, tokenizer and sampler, not in these.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::config::RftConfig;
use super::datagen::Example;
use super::eval::Evaluation;
use super::pretrained;
use super::run::{final_val_loss, DatagenRecord};
use super::task::Split;
use crate::engine::rundir::{read_json, write_json, Summary};
use crate::error::UserError;

/// Where the base checkpoint came from (`stages/base.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BaseRecord {
    pub init: String,
    pub dir: PathBuf,
    /// [`pretrained::fingerprint`] of the directory.
    pub sha256: String,
}

/// Fingerprints the checkpoint in `dir` into `stages/base.json`; a resumed
/// run refuses a directory whose content changed since the run started.
pub(crate) fn record_base(
    config: &RftConfig,
    dir: &Path,
    stages: &Path,
) -> anyhow::Result<BaseRecord> {
    let sha256 = pretrained::fingerprint(dir)?;
    let path = stages.join("base.json");
    if let Ok(earlier) = read_json::<BaseRecord>(&path) {
        if earlier.sha256 != sha256 {
            return Err(UserError::usage(format!(
                "model.init: {} changed since this run started (sha256 {} then, {sha256} now)",
                dir.display(),
                earlier.sha256
            ))
            .with_fix("restore the checkpoint the run started from, or start a new run")
            .into());
        }
    }
    let record = BaseRecord {
        init: config.model.init.clone().unwrap_or_default(),
        dir: dir.to_path_buf(),
        sha256,
    };
    write_json(&path, &record)?;
    Ok(record)
}

/// The rounds so far: every distinct kept sample (each round fine-tunes
/// the base on the SFT data plus all of them), one summary row per round,
/// and the totals of generation, fine-tuning and evaluation.
#[derive(Default)]
pub(crate) struct Rounds {
    kept: Vec<Example>,
    seen: HashSet<(String, String)>,
    rows: Vec<Value>,
    generated: usize,
    datagen_seconds: f64,
    datagen_tokens: usize,
    finetune_seconds: f64,
    eval_seconds: f64,
}

impl Rounds {
    /// Counts a round's sampling and keeps its samples not kept before.
    pub(crate) fn add_samples(&mut self, datagen: &DatagenRecord) {
        self.generated += datagen.stats.generated;
        self.datagen_seconds += datagen.seconds;
        self.datagen_tokens += datagen.stats.tokens;
        for e in &datagen.examples {
            if self.seen.insert((e.question.clone(), e.completion.clone())) {
                self.kept.push(e.clone());
            }
        }
    }

    /// Every distinct sample kept so far, in the order first kept.
    pub(crate) fn kept(&self) -> &[Example] {
        &self.kept
    }

    /// Records round `round` once its fine-tuning (on `examples` examples)
    /// and evaluation are done.
    pub(crate) fn finish_round(
        &mut self,
        round: u32,
        datagen: &DatagenRecord,
        examples: usize,
        finetune: &Summary,
        evaluation: &Evaluation,
    ) {
        self.finetune_seconds += finetune.wall_s;
        self.eval_seconds += evaluation.seconds;
        self.rows.push(json!({
            "round": round,
            "generated": datagen.stats.generated,
            "correct": datagen.stats.correct,
            "kept": datagen.stats.kept,
            "questions_kept": datagen.stats.questions_kept,
            "finetune_examples": examples,
            "datagen_samples_per_s": datagen.samples_per_s,
            "datagen_tokens_per_s": datagen.tokens_per_s,
            "finetune_final_val_loss": final_val_loss(finetune),
            "accuracy": evaluation.metrics.accuracy,
            "answer_rate": evaluation.metrics.answer_rate,
        }));
    }
}

/// A finished run's stages, for [`metrics`].
pub(crate) struct Outcome<'a> {
    pub base: &'a BaseRecord,
    /// (d) on the base checkpoint, on the SFT model, after the last round.
    pub eval_base: &'a Evaluation,
    pub before: &'a Evaluation,
    pub after: &'a Evaluation,
    /// (a) and the last round's (c).
    pub pretrain: &'a Summary,
    pub finetune: &'a Summary,
    /// The last round's sampling.
    pub datagen: &'a DatagenRecord,
    pub parameters: u64,
    /// Stage (c)'s trainable parameters and adapter file size (0: full).
    pub trainable: u64,
    pub adapter_bytes: u64,
}

/// summary.json's metrics of a pretrained-checkpoint run.
pub(crate) fn metrics(
    config: &RftConfig,
    split: &Split,
    rounds: Rounds,
    o: Outcome,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("init".into(), json!(o.base.init));
    m.insert("init_sha256".into(), json!(o.base.sha256));
    // envgen copies `data_files` into manifest.json (provenance, `runs
    // compare`): the checkpoint is the run's input, as a corpus is.
    let path = std::fs::canonicalize(&o.base.dir).unwrap_or_else(|_| o.base.dir.clone());
    m.insert(
        "data_files".into(),
        json!([crate::data::DataFile {
            path,
            sha256: o.base.sha256.clone(),
            tokens: 0
        }]),
    );
    for (when, e) in [
        ("base", o.eval_base),
        ("before", o.before),
        ("after", o.after),
    ] {
        m.insert(format!("accuracy_{when}"), json!(e.metrics.accuracy));
        m.insert(format!("answer_rate_{when}"), json!(e.metrics.answer_rate));
    }
    m.insert("generated".into(), json!(rounds.generated));
    m.insert("kept".into(), json!(rounds.kept.len()));
    let per_s = |n: usize| json!(n as f64 / f64::max(rounds.datagen_seconds, 1e-9));
    m.insert("datagen_samples_per_s".into(), per_s(rounds.generated));
    m.insert("datagen_tokens_per_s".into(), per_s(rounds.datagen_tokens));
    // As the from-scratch path's, plus the base checkpoint's own evaluation.
    m.insert(
        "stage_seconds".into(),
        json!({
            "eval_base": o.eval_base.seconds,
            "pretrain": o.pretrain.wall_s,
            "eval_before": o.before.seconds,
            "datagen": rounds.datagen_seconds,
            "finetune": rounds.finetune_seconds,
            "eval": rounds.eval_seconds,
        }),
    );
    m.insert(
        "questions_kept".into(),
        json!(o.datagen.stats.questions_kept),
    );
    m.insert("rounds".into(), json!(rounds.rows));
    m.insert("train_questions".into(), json!(split.train.len()));
    m.insert("worked_questions".into(), json!(config.worked_questions()));
    m.insert("validation_questions".into(), json!(split.validation.len()));
    m.insert("finetune_mode".into(), json!(config.finetune.mode));
    m.insert("parameters".into(), json!(o.parameters));
    m.insert("trainable_parameters".into(), json!(o.trainable));
    m.insert("adapter_bytes".into(), json!(o.adapter_bytes));
    m.insert("eval_samples_per_s".into(), json!(o.after.samples_per_s));
    m.insert(
        "pretrain_initial_val_loss".into(),
        o.pretrain
            .metrics
            .get("initial_val_loss")
            .cloned()
            .unwrap_or(Value::Null),
    );
    m.insert("pretrain_final_val_loss".into(), final_val_loss(o.pretrain));
    m.insert("finetune_final_val_loss".into(), final_val_loss(o.finetune));
    m
}
