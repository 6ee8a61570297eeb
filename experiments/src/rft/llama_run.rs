//! `envgen run rft` with `model.init`: rejection-sampling fine-tuning of a
//! pretrained Llama-family checkpoint, as in Yuan et al. 2023 ("Scaling
//! relationship on learning mathematical reasoning with large language
//! models"):
//!
//! ```text
//! RUN_DIR/
//!   model.safetensors   the last round's weights (transformers' names)
//!   hf/                 the same as a Hugging Face directory (config.json, tokenizer.json)
//!   stages/base/        (random:NAME only) the random-init checkpoint envgen made
//!   stages/base.json    the base checkpoint: init, directory, sha256
//!   stages/prompt.json  how questions reach the model (task.prompt_format), ids of the first
//!   stages/eval-base.json     (d) the base checkpoint, greedy
//!   stages/pretrain/    (a) SFT of the base on the worked answers (an HF directory)
//!   stages/eval-before.json   (d) the SFT model
//!   stages/round-N/datagen.json  (b) samples of the previous model (round 1: SFT), kept ones
//!   stages/round-N/finetune/     (c) the *base* fine-tuned on SFT data ∪ distinct kept samples
//!   stages/round-N/eval.json     (d) after round N
//! ```
//!
//! Rounds after the first sample with the previous round's model and train
//! the base on the SFT data plus every distinct sample kept so far (the
//! paper's RFT-k unions the samples of several models).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use envgen_kernels::FusedAutodiffBackend;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::config::{Init, RftConfig, StageConfig};
use super::datagen::Example;
use super::eval::Evaluation;
use super::llama_task::{LlamaExample, LlamaRftTask, LlamaSampler};
use super::prompt::Prompter;
use super::run::{
    evaluate_stage, final_val_loss, finish, interrupted, sample_stage, DatagenRecord, FINETUNE,
    STAGES,
};
use super::task::Question;
use super::{pretrained, task::Split};
use crate::engine::rundir::{read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::{self, RunControl};
use crate::error::UserError;
use crate::llama;
use crate::pretrained::HfTokenizer;

/// Where the base checkpoint came from (`stages/base.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BaseRecord {
    pub init: String,
    pub dir: PathBuf,
    /// [`pretrained::fingerprint`] of the directory.
    pub sha256: String,
}

/// The base checkpoint's directory, made first for `random:`, and its
/// record; a resumed run refuses a directory whose content changed.
fn base_checkpoint(config: &RftConfig, init: &Init, stages: &Path) -> anyhow::Result<BaseRecord> {
    let spec = config.model.init.clone().unwrap_or_default();
    let dir = match init {
        Init::Hf(dir) => dir.clone(),
        Init::Random(name) => {
            let dir = stages.join("base");
            if !dir.join(llama::hf::SINGLE).is_file() {
                pretrained::write_random(name, config.pretrain.train.seed, &dir)?;
            }
            dir
        }
    };
    pretrained::check_dir(&dir)?;
    let sha256 = pretrained::fingerprint(&dir)?;
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
        init: spec,
        dir,
        sha256,
    };
    write_json(&path, &record)?;
    Ok(record)
}

/// Run (or resume) every stage of a pretrained-checkpoint RFT run.
pub fn run<B: FusedAutodiffBackend>(
    config: &RftConfig,
    init: &Init,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let stages = control.run_dir.join(STAGES);
    crate::fsutil::create_dir_all(&stages)?;
    let mut log = MetricsLog::open(&control.run_dir.join("metrics.jsonl"), None)?;
    let split = config.split()?;
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();

    let base = base_checkpoint(config, init, &stages)?;
    let tokenizer = HfTokenizer::load(&base.dir, false)?;
    let cfg = llama::config::read(&base.dir)?;
    let prompter = Prompter::new(&tokenizer, &base.dir, &config.task)?;
    if let Some(first) = split.train.first() {
        let record = prompter.record(first, &cfg.eos_token_ids)?;
        write_json(&stages.join("prompt.json"), &record)?;
    }
    let sft_data = reference_examples(&prompter, &split.train[..config.worked_questions()])?;
    let validation = reference_examples(&prompter, &split.validation)?;
    let longest = sft_data.iter().chain(&validation).map(LlamaExample::len);
    let longest = longest.max().unwrap_or(0) + config.task.max_completion_tokens;
    if longest > cfg.max_position_embeddings {
        return Err(UserError::usage(format!(
            "{}: max_position_embeddings = {} is shorter than the longest prompt plus task.max_completion_tokens ({longest} tokens)",
            base.dir.display(),
            cfg.max_position_embeddings
        ))
        .with_fix("lower task.max_completion_tokens")
        .into());
    }
    let eval = |dir: &Path, round: u32, record: &Path, log: &mut MetricsLog| {
        eval_stage::<B::InnerBackend>(
            config, &prompter, dir, &split, round, record, log, control, &inner,
        )
    };
    let eval_base = eval(&base.dir, 0, &stages.join("eval-base.json"), &mut log)?;

    // (a) supervised fine-tuning of the base on the worked answers.
    let pretrain_dir = stages.join("pretrain");
    let task = LlamaRftTask {
        base: base.dir.clone(),
        stage: config.pretrain.clone(),
        train: sft_data.clone(),
        validation: validation.clone(),
        // `finetune.mode` is stage (c)'s: (a) trains every weight.
        lora: None,
    };
    let pretrain = train_stage::<B>(&task, &pretrain_dir, control, control.stop_after, device)?;
    let mut steps_done = pretrain.steps_done;
    if pretrain.status != Status::Completed {
        return interrupted(control, started, steps_done);
    }
    let before = eval(&pretrain_dir, 0, &stages.join("eval-before.json"), &mut log)?;
    if control.stop.load(Ordering::SeqCst) {
        return interrupted(control, started, steps_done);
    }

    // (b) + (c) + (d), `rounds` times.
    let mut sampler_dir = pretrain_dir.clone();
    let mut kept: Vec<Example> = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut rows = Vec::new();
    let mut last: Option<(DatagenRecord, Summary, Evaluation)> = None;
    let mut generated = 0;
    let (mut datagen_seconds, mut datagen_tokens) = (0.0, 0);
    let (mut finetune_seconds, mut eval_seconds) = (0.0, 0.0);
    for round in 1..=config.rounds {
        let dir = stages.join(format!("round-{round}"));
        crate::fsutil::create_dir_all(&dir)?;
        let Some(datagen) = datagen_stage::<B>(
            config,
            &prompter,
            &split,
            round,
            &sampler_dir,
            &dir,
            control,
            &mut log,
        )?
        else {
            return interrupted(control, started, steps_done);
        };
        generated += datagen.stats.generated;
        datagen_seconds += datagen.seconds;
        datagen_tokens += datagen.stats.tokens;
        for e in &datagen.examples {
            if seen.insert((e.question.clone(), e.completion.clone())) {
                kept.push(e.clone());
            }
        }
        let mut train = sft_data.clone();
        for e in &kept {
            train.push(prompter.example(&e.question, &e.completion)?);
        }
        let task = LlamaRftTask {
            base: base.dir.clone(),
            stage: StageConfig {
                train: config.finetune.train.clone(),
                optim: config.finetune.optim.clone(),
            },
            train,
            validation: validation.clone(),
            lora: config.finetune.adapters(),
        };
        let before_round =
            config.pretrain.train.steps + u64::from(round - 1) * config.finetune.train.steps;
        let stop_after = control.stop_after.map(|n| n.saturating_sub(before_round));
        let finetune_dir = dir.join(FINETUNE);
        let finetune = train_stage::<B>(&task, &finetune_dir, control, stop_after, device)?;
        steps_done += finetune.steps_done;
        if finetune.status != Status::Completed {
            return interrupted(control, started, steps_done);
        }
        let evaluation = eval(&finetune_dir, round, &dir.join("eval.json"), &mut log)?;
        finetune_seconds += finetune.wall_s;
        eval_seconds += evaluation.seconds;
        rows.push(json!({
            "round": round,
            "generated": datagen.stats.generated,
            "correct": datagen.stats.correct,
            "kept": datagen.stats.kept,
            "questions_kept": datagen.stats.questions_kept,
            "finetune_examples": task.train.len(),
            "datagen_samples_per_s": datagen.samples_per_s,
            "datagen_tokens_per_s": datagen.tokens_per_s,
            "finetune_final_val_loss": final_val_loss(&finetune),
            "accuracy": evaluation.metrics.accuracy,
            "answer_rate": evaluation.metrics.answer_rate,
        }));
        sampler_dir = finetune_dir;
        last = Some((datagen, finetune, evaluation));
    }
    let (datagen, finetune, after) = last.expect("rounds >= 1 (validated)");
    export(&sampler_dir, &control.run_dir)?;

    let parameters = count_parameters(&cfg);
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
    m.insert("accuracy_before".into(), json!(before.metrics.accuracy));
    m.insert("accuracy_after".into(), json!(after.metrics.accuracy));
    m.insert(
        "answer_rate_before".into(),
        json!(before.metrics.answer_rate),
    );
    m.insert("answer_rate_after".into(), json!(after.metrics.answer_rate));
    m.insert("generated".into(), json!(generated));
    m.insert("kept".into(), json!(kept.len()));
    m.insert(
        "datagen_samples_per_s".into(),
        json!(generated as f64 / f64::max(datagen_seconds, 1e-9)),
    );
    m.insert(
        "datagen_tokens_per_s".into(),
        json!(datagen_tokens as f64 / f64::max(datagen_seconds, 1e-9)),
    );
    // As the GPT path's, plus the base checkpoint's own evaluation.
    m.insert(
        "stage_seconds".into(),
        json!({
            "eval_base": eval_base.seconds,
            "pretrain": pretrain.wall_s,
            "eval_before": before.seconds,
            "datagen": datagen_seconds,
            "finetune": finetune_seconds,
            "eval": eval_seconds,
        }),
    );
    m.insert("questions_kept".into(), json!(datagen.stats.questions_kept));
    m.insert("rounds".into(), json!(rows));
    m.insert("train_questions".into(), json!(split.train.len()));
    m.insert("worked_questions".into(), json!(config.worked_questions()));
    m.insert("validation_questions".into(), json!(split.validation.len()));
    m.insert("finetune_mode".into(), json!(config.finetune.mode));
    m.insert("parameters".into(), json!(parameters));
    // As the GPT path's: stage (c)'s trainable parameters, and the size of
    // its adapter file (0 in full mode).
    let (trainable, adapter_bytes) = match config.finetune.adapters() {
        Some(lora) => {
            let file = sampler_dir
                .join(llama::lora::ADAPTER_DIR)
                .join(llama::lora::PEFT_WEIGHTS);
            let bytes = std::fs::metadata(&file)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?
                .len();
            (llama::lora::num_params(&lora, &cfg) as u64, bytes)
        }
        None => (parameters, 0),
    };
    m.insert("trainable_parameters".into(), json!(trainable));
    m.insert("adapter_bytes".into(), json!(adapter_bytes));
    m.insert("eval_samples_per_s".into(), json!(after.samples_per_s));
    m.insert(
        "pretrain_initial_val_loss".into(),
        pretrain
            .metrics
            .get("initial_val_loss")
            .cloned()
            .unwrap_or(Value::Null),
    );
    m.insert("pretrain_final_val_loss".into(), final_val_loss(&pretrain));
    m.insert("finetune_final_val_loss".into(), final_val_loss(&finetune));
    finish(control, started, steps_done, Status::Completed, m)
}

/// Parameters of the checkpoint `config` starts from, when readable.
pub(crate) fn parameters_of(config: &RftConfig) -> Option<u64> {
    llama_config_of(config).map(|c| count_parameters(&c))
}

/// The shape of the checkpoint `config` starts from, when readable.
pub(crate) fn llama_config_of(config: &RftConfig) -> Option<llama::LlamaConfig> {
    match config.model.checkpoint().ok()?? {
        Init::Hf(dir) => llama::config::read(&dir).ok(),
        Init::Random(_) => Some(pretrained::tiny_llama()),
    }
}

/// Parameters of the model `cfg` describes.
pub(crate) fn count_parameters(cfg: &llama::LlamaConfig) -> u64 {
    let (d, hd, ff) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let (h, kvh, v) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.vocab_size,
    );
    let bias = |on: bool, n: usize| if on { n } else { 0 };
    let attn = d * h * hd
        + 2 * d * kvh * hd
        + h * hd * d
        + bias(cfg.qkv_bias, (h + 2 * kvh) * hd)
        + bias(cfg.o_bias, d);
    let mlp = 3 * d * ff + bias(cfg.mlp_bias, 2 * ff + d);
    let layer = attn + mlp + 2 * d;
    let head = if cfg.tie_word_embeddings { 0 } else { v * d };
    (v * d + cfg.num_hidden_layers * layer + d + head) as u64
}

/// The worked answers of `questions` as training examples.
fn reference_examples(
    prompter: &Prompter,
    questions: &[Question],
) -> anyhow::Result<Vec<LlamaExample>> {
    questions
        .iter()
        .map(|q| prompter.example(&q.text, &q.completion()))
        .collect()
}

/// `RUN_DIR/model.safetensors` and `RUN_DIR/hf/`, the final model (with
/// LoRA, the final stage's adapters in PEFT's layout in `hf/adapter/`).
fn export(stage_dir: &Path, run_dir: &Path) -> anyhow::Result<()> {
    let hf = run_dir.join("hf");
    crate::fsutil::create_dir_all(&hf)?;
    super::llama_task::copy_companions(stage_dir, &hf)?;
    let weights = stage_dir.join(llama::hf::SINGLE);
    let mut copies = vec![
        (weights.clone(), run_dir.join(llama::hf::SINGLE)),
        (weights, hf.join(llama::hf::SINGLE)),
    ];
    let adapters = stage_dir.join(llama::lora::ADAPTER_DIR);
    if adapters.is_dir() {
        let to = hf.join(llama::lora::ADAPTER_DIR);
        crate::fsutil::create_dir_all(&to)?;
        for name in [llama::lora::PEFT_WEIGHTS, llama::lora::PEFT_CONFIG] {
            copies.push((adapters.join(name), to.join(name)));
        }
    }
    for (from, to) in copies {
        std::fs::copy(&from, &to).map_err(|e| {
            anyhow::Error::new(e).context(format!("copying {} to {}", from.display(), to.display()))
        })?;
    }
    Ok(())
}

/// (b) rejection sampling with the model in `model_dir`, cached in
/// `dir/datagen.json`; None when a stop request interrupted it.
#[allow(clippy::too_many_arguments)]
fn datagen_stage<B: FusedAutodiffBackend>(
    config: &RftConfig,
    prompter: &Prompter,
    split: &Split,
    round: u32,
    model_dir: &Path,
    dir: &Path,
    control: &RunControl,
    log: &mut MetricsLog,
) -> anyhow::Result<Option<DatagenRecord>> {
    let path = dir.join("datagen.json");
    if path.exists() {
        return read_json(&path).map(Some);
    }
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();
    let model = llama::hf::load::<B::InnerBackend>(model_dir, &inner)?;
    let mut sampler = LlamaSampler::new(
        &model,
        prompter,
        config.task.max_completion_tokens,
        inner.clone(),
    );
    let record = sample_stage(&mut sampler, config, split, round, &path, control, log);
    if let Some(e) = sampler.error.take() {
        return Err(e);
    }
    record
}

/// A training stage in its own directory (see `super::run::train_stage`).
fn train_stage<B: FusedAutodiffBackend>(
    task: &LlamaRftTask,
    dir: &Path,
    control: &RunControl,
    stop_after: Option<u64>,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    if let Ok(done) = read_json::<Summary>(&dir.join("summary.json")) {
        if done.status == Status::Completed && dir.join(llama::hf::SINGLE).exists() {
            return Ok(done);
        }
    }
    crate::fsutil::create_dir_all(dir)?;
    let stage_control = control.stage(dir, control.micro_batch, stop_after);
    engine::train::<B, LlamaRftTask>(task, &stage_control, device)
}

/// (d) greedy evaluation of the checkpoint in `model_dir`, cached in `record`.
#[allow(clippy::too_many_arguments)]
fn eval_stage<B: envgen_kernels::FusedBackend>(
    config: &RftConfig,
    prompter: &Prompter,
    model_dir: &Path,
    split: &Split,
    round: u32,
    record: &Path,
    log: &mut MetricsLog,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Evaluation> {
    if record.exists() {
        return read_json(record);
    }
    let model = llama::hf::load::<B>(model_dir, device)?;
    let mut sampler = LlamaSampler::new(
        &model,
        prompter,
        config.task.max_completion_tokens,
        device.clone(),
    );
    let evaluation = evaluate_stage(&mut sampler, &split.validation, round, record, log, control);
    if let Some(e) = sampler.error.take() {
        return Err(e);
    }
    evaluation
}

#[cfg(test)]
#[path = "llama_lora_tests.rs"]
mod lora_tests;
