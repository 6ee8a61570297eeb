//! What an rft run reports: the rounds' bookkeeping (the distinct kept
//! samples, one row per round, the totals of generation, fine-tuning and
//! evaluation) and the metrics of summary.json. One set for every model;
//! a run from a base checkpoint adds the base's record and evaluation.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::base::BaseRecord;
use super::config::RftConfig;
use super::datagen::{DatagenStats, Distinct, Example};
use super::eval::Evaluation;
use super::stages::{final_val_loss, DatagenRecord};
use super::task::Split;
use crate::engine::rundir::Summary;

/// The rounds so far: every distinct kept sample (with a base, each round
/// fine-tunes the base on the SFT data plus all of them), one summary row
/// per round, and the totals of generation, fine-tuning and evaluation.
#[derive(Default)]
pub(crate) struct Rounds {
    /// Rows say how many examples each round's fine-tuning had (runs
    /// from a base, whose rounds train on a growing union).
    with_examples: bool,
    /// When two samples of a question are the same (`datagen.distinct`).
    distinct: Distinct,
    kept: Vec<Example>,
    seen: HashSet<(String, String)>,
    stats: Vec<DatagenStats>,
    rows: Vec<Value>,
    datagen_seconds: f64,
    finetune_seconds: f64,
    eval_seconds: f64,
}

impl Rounds {
    pub(crate) fn new(with_examples: bool, distinct: Distinct) -> Self {
        Self {
            with_examples,
            distinct,
            ..Self::default()
        }
    }

    /// Counts a round's sampling and keeps its samples not kept before.
    pub(crate) fn add_samples(&mut self, datagen: &DatagenRecord) {
        self.stats.push(datagen.stats);
        self.datagen_seconds += datagen.seconds;
        for e in &datagen.examples {
            let key = self.distinct.key(&e.completion);
            if self.seen.insert((e.question.clone(), key)) {
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
        let mut row = json!({
            "round": round,
            "generated": datagen.stats.generated,
            "correct": datagen.stats.correct,
            "kept": datagen.stats.kept,
            "duplicates": datagen.stats.duplicates,
            "wrong_equations": datagen.stats.wrong_equations,
            "questions_kept": datagen.stats.questions_kept,
            "finetune_steps": finetune.steps_done,
            "datagen_samples_per_s": datagen.samples_per_s,
            "datagen_tokens_per_s": datagen.tokens_per_s,
            "finetune_final_val_loss": final_val_loss(finetune),
            "accuracy": evaluation.metrics.accuracy,
            "answer_rate": evaluation.metrics.answer_rate,
        });
        if self.with_examples {
            row["finetune_examples"] = json!(examples);
        }
        self.rows.push(row);
    }

    /// The sum of `f` over the rounds' sampling.
    fn total(&self, f: fn(&DatagenStats) -> usize) -> usize {
        self.stats.iter().map(f).sum()
    }
}

/// A finished run's stages, for [`metrics`].
pub(crate) struct Outcome<'a> {
    /// The base checkpoint and (d) on it; None from scratch.
    pub base: Option<(&'a BaseRecord, &'a Evaluation)>,
    /// (d) on the SFT model and after the last round.
    pub before: &'a Evaluation,
    pub after: &'a Evaluation,
    /// (a) (None: `pretrain.skip`) and the last round's (c).
    pub pretrain: Option<&'a Summary>,
    pub finetune: &'a Summary,
    /// The last round's sampling.
    pub datagen: &'a DatagenRecord,
    pub parameters: u64,
    /// Stage (c)'s trainable parameters and adapter file size (0: full).
    pub trainable: u64,
    pub adapter_bytes: u64,
}

/// summary.json's metrics.
pub(crate) fn metrics(
    config: &RftConfig,
    split: &Split,
    rounds: Rounds,
    o: Outcome,
) -> Map<String, Value> {
    let mut m = Map::new();
    for (when, e) in [("before", o.before), ("after", o.after)] {
        m.insert(format!("accuracy_{when}"), json!(e.metrics.accuracy));
        m.insert(format!("answer_rate_{when}"), json!(e.metrics.answer_rate));
    }
    let generated = rounds.total(|s| s.generated);
    m.insert("generated".into(), json!(generated));
    let per_s = |n: usize| json!(n as f64 / f64::max(rounds.datagen_seconds, 1e-9));
    m.insert("datagen_samples_per_s".into(), per_s(generated));
    m.insert(
        "datagen_tokens_per_s".into(),
        per_s(rounds.total(|s| s.tokens)),
    );
    let mut stage_seconds = json!({
        "pretrain": o.pretrain.map_or(0.0, |p| p.wall_s),
        "eval_before": o.before.seconds,
        "datagen": rounds.datagen_seconds,
        "finetune": rounds.finetune_seconds,
        "eval": rounds.eval_seconds,
    });
    match o.base {
        Some((base, eval_base)) => {
            stage_seconds["eval_base"] = json!(eval_base.seconds);
            m.extend(base_metrics(base, eval_base, o.pretrain));
            m.insert(
                "wrong_equations".into(),
                json!(rounds.total(|s| s.wrong_equations)),
            );
            // The fine-tunings trained on the distinct samples.
            m.insert("kept".into(), json!(rounds.kept.len()));
        }
        None => {
            // Each round's fine-tuning trained on that round's samples.
            m.insert("kept".into(), json!(rounds.total(|s| s.kept)));
            m.insert("correct".into(), json!(rounds.total(|s| s.correct)));
            m.insert("duplicates".into(), json!(rounds.total(|s| s.duplicates)));
            m.insert(
                "wrong_reasoning".into(),
                json!(rounds.total(|s| s.wrong_reasoning)),
            );
            m.insert(
                "wrong_equations".into(),
                json!(rounds.total(|s| s.wrong_equations)),
            );
        }
    }
    m.insert("stage_seconds".into(), stage_seconds);
    m.insert(
        "questions_kept".into(),
        json!(o.datagen.stats.questions_kept),
    );
    m.insert("rounds".into(), json!(rounds.rows));
    m.insert("train_questions".into(), json!(split.train.len()));
    m.insert("worked_questions".into(), json!(config.worked_questions()));
    m.insert("validation_questions".into(), json!(split.validation.len()));
    m.insert("finetune_mode".into(), json!(config.finetune.mode));
    m.insert("finetune_epochs".into(), json!(config.finetune.epochs));
    m.insert("finetune_steps".into(), json!(o.finetune.steps_done));
    m.insert("parameters".into(), json!(o.parameters));
    m.insert("trainable_parameters".into(), json!(o.trainable));
    m.insert("adapter_bytes".into(), json!(o.adapter_bytes));
    m.insert("eval_samples_per_s".into(), json!(o.after.samples_per_s));
    m.insert(
        "pretrain_final_val_loss".into(),
        o.pretrain.map_or(Value::Null, final_val_loss),
    );
    m.insert("finetune_final_val_loss".into(), final_val_loss(o.finetune));
    m
}

/// The base checkpoint's provenance and evaluation, and the SFT stage's
/// loss before training (the base's own loss on the worked answers).
fn base_metrics(
    base: &BaseRecord,
    eval_base: &Evaluation,
    pretrain: Option<&Summary>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("init".into(), json!(base.init));
    m.insert("init_sha256".into(), json!(base.sha256));
    // envgen copies `data_files` into manifest.json (provenance, `runs
    // compare`): the checkpoint is the run's input, as a corpus is.
    let path = std::fs::canonicalize(&base.dir).unwrap_or_else(|_| base.dir.clone());
    m.insert(
        "data_files".into(),
        json!([crate::data::DataFile {
            path,
            sha256: base.sha256.clone(),
            tokens: 0
        }]),
    );
    m.insert("accuracy_base".into(), json!(eval_base.metrics.accuracy));
    m.insert(
        "answer_rate_base".into(),
        json!(eval_base.metrics.answer_rate),
    );
    m.insert(
        "pretrain_initial_val_loss".into(),
        pretrain
            .and_then(|p| p.metrics.get("initial_val_loss").cloned())
            .unwrap_or(Value::Null),
    );
    m
}
