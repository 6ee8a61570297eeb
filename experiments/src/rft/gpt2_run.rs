//! `envgen run rft` with `model.init = "hf:DIR"` naming a GPT-2 checkpoint:
//! the recipe of `super::llama_run` (Yuan et al. 2023) on the GPT that the
//! from-scratch path trains. The checkpoint loads into `gpt2::Gpt2`, so
//! the stages are that path's task (`super::train::RftTrainTask`, full or
//! LoRA fine-tuning) and sampler (`super::eval::GptSampler`), fed with the
//! checkpoint's sizes and tokenizer (`super::tokens::RftTokenizer::Hf`).
//!
//! ```text
//! RUN_DIR/
//!   model.safetensors   the last round's weights (the GPT path's layout)
//!   hf/                 the same as a Hugging Face GPT-2 directory (transformers loads it)
//!   stages/base.json    the base checkpoint: init, directory, sha256
//!   stages/eval-base.json     (d) the base checkpoint, greedy
//!   stages/pretrain/    (a) SFT of the base on the worked answers
//!   stages/eval-before.json   (d) the SFT model
//!   stages/round-N/datagen.json  (b) samples of the previous model (round 1: SFT), kept ones
//!   stages/round-N/finetune/     (c) the *base* fine-tuned on SFT data ∪ distinct kept samples
//!   stages/round-N/eval.json     (d) after round N
//! ```
//!
//! Unlike the from-scratch path, whose rounds each continue from the
//! previous round's weights on that round's samples alone (STaR; there is
//! no pretrained base to go back to), every round here fine-tunes the base
//! checkpoint, as the paper and the Llama path do; in LoRA mode the
//! adapters sit on the base's frozen weights.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::checkpoint_run::{metrics, record_base, Outcome, Rounds};
use super::config::{RftConfig, StageConfig};
use super::eval::{load_model, Evaluation, GptSampler, ADAPTER_FILE, MODEL_FILE};
use super::gpt2_init;
use super::run::{
    evaluate_stage, finish, interrupted, sample_stage, stage_ended, train_stage, DatagenRecord,
    FINETUNE, STAGES,
};
use super::task::{format_prompt, Question, Split};
use super::tokens::RftTokenizer;
use super::train::{RftTrainTask, Tokenized};
use crate::engine::rundir::{read_json, MetricsLog, Status, Summary};
use crate::engine::RunControl;
use crate::gpt2::{self, ModelConfig};

/// Files of the base directory besides the weights that the exported
/// directory keeps: the config (its token ids, its context) and every
/// tokenizer file transformers or envgen may read.
pub(crate) const COMPANIONS: [&str; 7] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
];

/// Run (or resume) every stage from the GPT-2 checkpoint in `dir`.
pub fn run<B: FusedAutodiffBackend>(
    config: &RftConfig,
    dir: &Path,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let stages = control.run_dir.join(STAGES);
    crate::fsutil::create_dir_all(&stages)?;
    let mut log = MetricsLog::open(&control.run_dir.join("metrics.jsonl"), None)?;
    let split = config.split()?;
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();

    let base = record_base(config, dir, &stages)?;
    let sizes = gpt2_init::check_dir(&base.dir)?;
    let tokens = gpt2_init::tokenizer(&base.dir, &sizes)?;
    let sft_data = examples(&tokens, &split.train[..config.worked_questions()])?;
    let validation = examples(&tokens, &split.validation)?;
    let eval = |weights: &Path, round: u32, record: &Path, log: &mut MetricsLog| {
        let gen = Gen {
            config,
            sizes: &sizes,
            tokens: &tokens,
            control,
        };
        gen.eval::<B::InnerBackend>(weights, &split, round, record, log, &inner)
    };
    // Every stage trains the base's weights (full, or LoRA in (c)).
    let task = |stage: StageConfig, train: Vec<Tokenized>, finetune: bool| RftTrainTask {
        model: sizes.clone(),
        stage,
        train,
        validation: validation.clone(),
        init_from: Some(base.dir.clone()),
        lora: config.finetune.adapters().filter(|_| finetune),
    };
    let eval_base = eval(&base.dir, 0, &stages.join("eval-base.json"), &mut log)?;

    // (a) supervised fine-tuning of the base on the worked answers.
    let pretrain_dir = stages.join("pretrain");
    let sft = task(config.pretrain.clone(), sft_data.clone(), false);
    let pretrain = train_stage::<B>(&sft, &pretrain_dir, control, control.stop_after, device)?;
    let mut steps_done = pretrain.steps_done;
    if pretrain.status != Status::Completed {
        return stage_ended(control, started, steps_done, Some(&pretrain));
    }
    let sft_weights = pretrain_dir.join(MODEL_FILE);
    let before = eval(&sft_weights, 0, &stages.join("eval-before.json"), &mut log)?;
    if control.stop.load(Ordering::SeqCst) {
        return interrupted(control, started, steps_done);
    }

    // (b) + (c) + (d), `rounds` times.
    let mut weights = sft_weights;
    let mut rounds = Rounds::default();
    let mut last: Option<(DatagenRecord, Summary, Evaluation)> = None;
    for round in 1..=config.rounds {
        let dir = stages.join(format!("round-{round}"));
        crate::fsutil::create_dir_all(&dir)?;
        let gen = Gen {
            config,
            sizes: &sizes,
            tokens: &tokens,
            control,
        };
        let Some(datagen) =
            gen.datagen::<B::InnerBackend>(&split, round, &weights, &dir, &mut log, &inner)?
        else {
            return interrupted(control, started, steps_done);
        };
        rounds.add_samples(&datagen);
        let mut train = sft_data.clone();
        for e in rounds.kept() {
            train.push(tokens.tokenize(&format_prompt(&e.question), &e.text)?);
        }
        let examples = train.len();
        let stage = StageConfig {
            train: config.finetune.train.clone(),
            optim: config.finetune.optim.clone(),
        };
        let before_round =
            config.pretrain.train.steps + u64::from(round - 1) * config.finetune.train.steps;
        let stop_after = control.stop_after.map(|n| n.saturating_sub(before_round));
        let finetune_dir = dir.join(FINETUNE);
        let finetune = train_stage::<B>(
            &task(stage, train, true),
            &finetune_dir,
            control,
            stop_after,
            device,
        )?;
        steps_done += finetune.steps_done;
        if finetune.status != Status::Completed {
            return stage_ended(control, started, steps_done, Some(&finetune));
        }
        weights = finetune_dir.join(MODEL_FILE);
        let evaluation = eval(&weights, round, &dir.join("eval.json"), &mut log)?;
        rounds.finish_round(round, &datagen, examples, &finetune, &evaluation);
        last = Some((datagen, finetune, evaluation));
    }
    let (datagen, finetune, after) = last.expect("rounds >= 1 (validated)");
    export::<B::InnerBackend>(&weights, &sizes, &base.dir, &control.run_dir, &inner)?;

    let (trainable, adapter_bytes) = match config.finetune.adapters() {
        Some(lora) => {
            let file = weights.with_file_name(ADAPTER_FILE);
            (lora.num_params(&sizes), std::fs::metadata(file)?.len())
        }
        None => (sizes.num_params(), 0),
    };
    let outcome = Outcome {
        base: &base,
        eval_base: &eval_base,
        before: &before,
        after: &after,
        pretrain: &pretrain,
        finetune: &finetune,
        datagen: &datagen,
        parameters: sizes.num_params() as u64,
        trainable: trainable as u64,
        adapter_bytes,
    };
    let m = metrics(config, &split, rounds, outcome);
    finish(control, started, steps_done, Status::Completed, m)
}

/// The worked answers of `questions` as training examples.
fn examples(tokens: &RftTokenizer, questions: &[Question]) -> anyhow::Result<Vec<Tokenized>> {
    questions
        .iter()
        .map(|q| tokens.tokenize(&q.prompt(), &q.training_text()))
        .collect()
}

/// Generation with the checkpoint's sizes and tokenizer: stages (b), (d).
struct Gen<'a> {
    config: &'a RftConfig,
    sizes: &'a ModelConfig,
    tokens: &'a RftTokenizer,
    control: &'a RunControl,
}

impl Gen<'_> {
    fn sampler<'m, B: FusedBackend>(
        &'m self,
        model: &'m gpt2::Gpt2<B>,
        device: &B::Device,
    ) -> GptSampler<'m, B> {
        let max = self.config.task.max_completion_tokens;
        GptSampler::new(model, self.sizes, max, device.clone()).with_tokenizer(self.tokens)
    }

    /// (b) rejection sampling with the weights at `weights`, cached in
    /// `dir/datagen.json`; None when a stop request interrupted it.
    fn datagen<B: FusedBackend>(
        &self,
        split: &Split,
        round: u32,
        weights: &Path,
        dir: &Path,
        log: &mut MetricsLog,
        device: &B::Device,
    ) -> anyhow::Result<Option<DatagenRecord>> {
        let path = dir.join("datagen.json");
        if path.exists() {
            return read_json(&path).map(Some);
        }
        let model = load_model::<B>(self.sizes, weights, device)?;
        let mut sampler = self.sampler(&model, device);
        let record = sample_stage(
            &mut sampler,
            self.config,
            split,
            round,
            &path,
            self.control,
            log,
        );
        failed_or(sampler.error.take(), &path, record)
    }

    /// (d) greedy evaluation of the weights at `weights` (a file, or the
    /// base's directory), cached in `record`.
    fn eval<B: FusedBackend>(
        &self,
        weights: &Path,
        split: &Split,
        round: u32,
        record: &Path,
        log: &mut MetricsLog,
        device: &B::Device,
    ) -> anyhow::Result<Evaluation> {
        if record.exists() {
            return read_json(record);
        }
        let model = load_model::<B>(self.sizes, weights, device)?;
        let mut sampler = self.sampler(&model, device);
        let evaluation = evaluate_stage(
            &mut sampler,
            &split.validation,
            round,
            record,
            log,
            self.control,
        );
        failed_or(sampler.error.take(), record, evaluation)
    }
}

/// `result`, unless the sampler failed: then its error, and the record it
/// graded (every row as unanswered) is removed so that a resume redoes it.
fn failed_or<T>(
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

/// `RUN_DIR/model.safetensors` and `RUN_DIR/hf/`: the final weights, and
/// them as a GPT-2 directory (transformers' names, the base's config.json
/// and tokenizer files).
fn export<B: FusedBackend>(
    weights: &Path,
    sizes: &ModelConfig,
    base: &Path,
    run_dir: &Path,
    device: &B::Device,
) -> anyhow::Result<()> {
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to).map(|_| ()).map_err(|e| {
            anyhow::Error::new(e).context(format!("copying {} to {}", from.display(), to.display()))
        })
    };
    copy(weights, &run_dir.join(MODEL_FILE))?;
    let hf = run_dir.join("hf");
    let model = load_model::<B>(sizes, weights, device)?;
    gpt2::hf::save_pretrained(&model, sizes, &hf)?;
    // The base's config.json replaces the one save_pretrained writes: same
    // sizes, and the checkpoint's own token ids and settings.
    super::llama_task::copy_files(base, &COMPANIONS, &hf)
}
