//! The one rft recipe, for every model (`super::family::ModelFamily`):
//! evaluate the base, supervised fine-tuning (SFT) on the worked answers,
//! then `rounds` times {sample, keep the verified answers, fine-tune,
//! evaluate}, then export. It owns the stage order, the rounds, the
//! `--stop-after` budget and the metrics; the family owns the model.
//!
//! ```text
//! RUN_DIR/
//!   config.toml manifest.json summary.json metrics.jsonl model.safetensors
//!   hf/                 (checkpoints) the final model as a Hugging Face directory
//!   stages/base/        (random:NAME) the random-init checkpoint envgen made
//!   stages/base.json    (checkpoints) the base: init, directory, sha256
//!   stages/prompt.json  (Llama) how questions reach the model, ids of the first
//!   stages/eval-base.json        (d) the base checkpoint, greedy
//!   stages/pretrain/             (a) SFT: engine run (checkpoints/, metrics.jsonl, summary.json, model.safetensors)
//!   stages/eval-before.json      (d) the SFT model
//!   stages/round-N/datagen.json  (b) samples of the previous stage's model, the kept ones, samples/s, tokens/s
//!   stages/round-N/finetune/     (c) engine run on the kept set
//!   stages/round-N/eval.json     (d) after round N
//! ```
//!
//! From a base checkpoint every round fine-tunes the *base* on the SFT
//! data plus every distinct sample kept so far, as Yuan et al. 2023 ("Scaling
//! relationship on learning mathematical reasoning with large language
//! models"; RFT-k unions the samples of several models) do; in LoRA mode
//! the adapters sit on the base's frozen weights. From scratch there is no
//! base to go back to: each round continues from the previous round's
//! weights on that round's samples alone (STaR).
//!
//! Generation (b, d) takes `RunControl::gen_batch` rows per call: a speed
//! knob, the samples do not depend on it. A stage is done when its file
//! (or its engine `summary.json` with status completed) exists; `--resume`
//! skips finished stages and continues an interrupted training stage from
//! its last checkpoint.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::base::BaseRecord;
use super::completion::Tokenized;
use super::config::{RftConfig, StageConfig, TrainOn};
use super::datagen::Example;
use super::ending::{finish, interrupted, stage_ended};
use super::eval::Evaluation;
use super::family::ModelFamily;
use super::metrics::{metrics, Outcome, Rounds};
use super::stages::{
    evaluate_stage, failed_or, sample_stage, train_stage, DatagenRecord, FINETUNE, STAGES,
};
use super::task::{Question, Split};
use crate::engine::rundir::{read_json, MetricsLog, Status, Summary};
use crate::engine::{RunControl, Task};
use crate::error::UserError;

/// A run in progress: its config, its clock, `stages/`, metrics.jsonl and
/// the questions. Opened before the family prepares its base, whose time
/// counts in the run's.
pub(crate) struct Session<'a> {
    pub(crate) config: &'a RftConfig,
    pub(crate) control: &'a RunControl,
    pub(crate) stages: PathBuf,
    pub(crate) split: Split,
    started: Instant,
    log: MetricsLog,
}

impl<'a> Session<'a> {
    pub(crate) fn open(config: &'a RftConfig, control: &'a RunControl) -> anyhow::Result<Self> {
        let started = Instant::now();
        let stages = control.run_dir.join(STAGES);
        crate::fsutil::create_dir_all(&stages)?;
        let log = MetricsLog::open(&control.run_dir.join("metrics.jsonl"), None)?;
        Ok(Self {
            config,
            control,
            stages,
            split: config.split()?,
            started,
            log,
        })
    }

    /// (d) greedy evaluation of the weights at `weights` on the held-out
    /// questions, cached in `record`.
    fn evaluate<B: FusedBackend, F: ModelFamily>(
        &mut self,
        family: &F,
        weights: &Path,
        round: u32,
        record: &Path,
        device: &B::Device,
    ) -> anyhow::Result<Evaluation> {
        if record.exists() {
            return read_json(record);
        }
        let (questions, log, control) = (&self.split.validation, &mut self.log, self.control);
        let (evaluation, error) = family.sample::<B, _>(weights, device, |sampler| {
            evaluate_stage(sampler, questions, round, record, log, control)
        })?;
        failed_or(error, record, evaluation)
    }

    /// (b) rejection sampling with the weights at `weights`, cached in
    /// `dir/datagen.json`; None when a stop request interrupted it.
    fn datagen<B: FusedBackend, F: ModelFamily>(
        &mut self,
        family: &F,
        round: u32,
        weights: &Path,
        dir: &Path,
        device: &B::Device,
    ) -> anyhow::Result<Option<DatagenRecord>> {
        let path = dir.join("datagen.json");
        if path.exists() {
            return read_json(&path).map(Some);
        }
        let (config, split, control, log) = (self.config, &self.split, self.control, &mut self.log);
        let (record, error) = family.sample::<B, _>(weights, device, |sampler| {
            sample_stage(sampler, config, split, round, &path, control, log)
        })?;
        failed_or(error, &path, record)
    }

    /// The run's end when a training stage did not complete.
    fn stage_ended(&self, steps_done: u64, stage: &Summary) -> anyhow::Result<Summary> {
        stage_ended(self.control, self.started, steps_done, Some(stage))
    }
}

/// Run (or resume) every stage of `session` with `family`'s model, from
/// `base` (a pretrained checkpoint) or from scratch.
pub(crate) fn run<B, F>(
    mut session: Session,
    family: &F,
    base: Option<&BaseRecord>,
    device: &B::Device,
) -> anyhow::Result<Summary>
where
    B: FusedAutodiffBackend,
    F: ModelFamily,
    F::Task: Task<B>,
{
    let (config, control) = (session.config, session.control);
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();
    let stages = session.stages.clone();
    let sft_data = examples(family, &session.split.train[..config.worked_questions()])?;
    let validation = examples(family, &session.split.validation)?;
    family.check_examples(&sft_data, &validation)?;
    let base_dir = base.map(|b| b.dir.as_path());
    let eval_base = match base_dir {
        Some(dir) => {
            let record = stages.join("eval-base.json");
            Some(session.evaluate::<B::InnerBackend, _>(family, dir, 0, &record, &inner)?)
        }
        None => None,
    };

    // (a) supervised fine-tuning on the worked answers: every weight of
    // the base, or of a fresh init (`finetune.mode` is stage (c)'s). With
    // `pretrain.skip` (a base only, validated) the base samples round 1
    // and "before" is the base's evaluation.
    let mut steps_done = 0;
    let (pretrain, before, mut sample_from) = match (&config.pretrain, base_dir, &eval_base) {
        (None, Some(dir), Some(eval_base)) => (None, eval_base.clone(), dir.to_path_buf()),
        (stage, _, _) => {
            let stage = stage.clone().unwrap_or_else(|| config.sft_stage());
            let pretrain_dir = stages.join("pretrain");
            let sft = family.task(stage, sft_data.clone(), validation.clone(), base_dir, None);
            let pretrain =
                train_stage::<B, _>(&sft, &pretrain_dir, control, control.stop_after, device)?;
            steps_done += pretrain.steps_done;
            if pretrain.status != Status::Completed {
                return session.stage_ended(steps_done, &pretrain);
            }
            let record = stages.join("eval-before.json");
            let sft_weights = family.weights(&pretrain_dir);
            let before =
                session.evaluate::<B::InnerBackend, _>(family, &sft_weights, 0, &record, &inner)?;
            (Some(pretrain), before, sft_weights)
        }
    };
    if control.stop.load(Ordering::SeqCst) {
        return interrupted(control, session.started, steps_done);
    }

    // (b) + (c) + (d), `rounds` times; `sample_from` is the weights that
    // sample the next round, `last_dir` the last training stage.
    let mut last_dir = None;
    let mut rounds = Rounds::new(base.is_some(), config.datagen.distinct);
    let mut last: Option<(DatagenRecord, Summary, Evaluation)> = None;
    for round in 1..=config.rounds {
        let dir = stages.join(format!("round-{round}"));
        crate::fsutil::create_dir_all(&dir)?;
        let weights = sample_from.clone();
        let datagen =
            session.datagen::<B::InnerBackend, _>(family, round, &weights, &dir, &inner)?;
        let Some(datagen) = datagen else {
            return interrupted(control, session.started, steps_done);
        };
        rounds.add_samples(&datagen);
        let train = round_examples(family, config, &sft_data, &rounds, &datagen, base, round)?;
        let examples = train.len();
        let stage = finetune_stage(config, examples);
        let task = family.task(
            stage,
            train,
            validation.clone(),
            Some(base_dir.unwrap_or(weights.as_path())),
            config.finetune.adapters(),
        );
        let finetune_dir = dir.join(FINETUNE);
        let stop_after = control.stop_after.map(|n| n.saturating_sub(steps_done));
        let finetune = train_stage::<B, _>(&task, &finetune_dir, control, stop_after, device)?;
        steps_done += finetune.steps_done;
        if finetune.status != Status::Completed {
            return session.stage_ended(steps_done, &finetune);
        }
        let weights = family.weights(&finetune_dir);
        let record = dir.join("eval.json");
        let evaluation =
            session.evaluate::<B::InnerBackend, _>(family, &weights, round, &record, &inner)?;
        rounds.finish_round(round, &datagen, examples, &finetune, &evaluation);
        sample_from = weights;
        last_dir = Some(finetune_dir);
        last = Some((datagen, finetune, evaluation));
    }
    let (datagen, finetune, after) = last.expect("rounds >= 1 (validated)");
    let last_dir = last_dir.expect("rounds >= 1 (validated)");
    family.export::<B::InnerBackend>(&last_dir, &control.run_dir, &inner)?;

    let parameters = family.parameters();
    let (trainable, adapter_bytes) = match config.finetune.adapters() {
        Some(lora) => family.adapter_size(&lora, &last_dir)?,
        None => (parameters, 0),
    };
    let outcome = Outcome {
        base: base.zip(eval_base.as_ref()),
        before: &before,
        after: &after,
        pretrain: pretrain.as_ref(),
        finetune: &finetune,
        datagen: &datagen,
        parameters,
        trainable,
        adapter_bytes,
    };
    let m = metrics(config, &session.split, rounds, outcome);
    finish(control, session.started, steps_done, Status::Completed, m)
}

/// The worked answers of `questions` as training examples.
fn examples<F: ModelFamily>(family: &F, questions: &[Question]) -> anyhow::Result<Vec<Tokenized>> {
    questions
        .iter()
        .map(|q| family.example(&q.text, &q.completion()))
        .collect()
}

/// What round `round`'s fine-tuning trains on, as examples of `family`
/// ([`round_set`]).
fn round_examples<F: ModelFamily>(
    family: &F,
    config: &RftConfig,
    sft_data: &[Tokenized],
    rounds: &Rounds,
    datagen: &DatagenRecord,
    base: Option<&BaseRecord>,
    round: u32,
) -> anyhow::Result<Vec<Tokenized>> {
    let (with_worked, kept) = round_set(config, rounds, datagen, base.is_some(), round)?;
    let head = if with_worked { sft_data } else { &[] };
    let mut train = head.to_vec();
    for e in kept {
        train.push(family.example(&e.question, &e.completion)?);
    }
    Ok(train)
}

/// Whether round `round` trains on the worked answers, and the samples it
/// trains on: from a base, every distinct sample kept so far, after the
/// worked answers; from scratch, this round's kept samples alone, which
/// must not be empty. `finetune.train_on` overrides whether the worked
/// answers are in (`worked_and_kept`) or not (`kept`); a set left empty
/// is an error naming the fix.
pub(crate) fn round_set<'a>(
    config: &RftConfig,
    rounds: &'a Rounds,
    datagen: &'a DatagenRecord,
    from_base: bool,
    round: u32,
) -> anyhow::Result<(bool, &'a [Example])> {
    let with_worked = match config.finetune.train_on {
        Some(on) => on == TrainOn::WorkedAndKept,
        None => from_base,
    };
    let kept = match from_base {
        true if !with_worked && rounds.kept().is_empty() => {
            return Err(UserError::failed(format!(
                "rft round {round}: datagen kept no correct completion out of {} sampled, and finetune.train_on = \"kept\" leaves nothing to train on",
                datagen.stats.generated
            ))
            .with_fix("sample more (--set datagen.oversample=...), or --set finetune.train_on=worked_and_kept")
            .into());
        }
        true => rounds.kept(),
        false if datagen.examples.is_empty() => {
            return Err(UserError::failed(format!(
                "rft round {round}: datagen kept no correct completion out of {} sampled: stage (a) did not teach the model to answer",
                datagen.stats.generated
            ))
            .with_fix("train stage (a) longer (--set pretrain.train.steps=...) or sample more (--set datagen.oversample=...)")
            .into());
        }
        false => &datagen.examples,
    };
    Ok((with_worked, kept))
}

/// Stage (c)'s loop and optimizer on `examples` training examples (its
/// steps fixed, or from `finetune.epochs`).
fn finetune_stage(config: &RftConfig, examples: usize) -> StageConfig {
    let mut train = config.finetune.train.clone();
    train.steps = config.finetune.steps_for(examples);
    StageConfig {
        train,
        optim: config.finetune.optim.clone(),
    }
}

#[cfg(test)]
#[path = "recipe_tests.rs"]
mod tests;
