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

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use envgen_kernels::FusedAutodiffBackend;

use super::checkpoint_run::{metrics, record_base, BaseRecord, Outcome, Rounds};
use super::config::{Init, RftConfig, StageConfig};
use super::eval::Evaluation;
use super::llama_task::{LlamaExample, LlamaRftTask, LlamaSampler};
use super::prompt::Prompter;
use super::run::{
    evaluate_stage, finish, interrupted, sample_stage, stage_ended, DatagenRecord, FINETUNE, STAGES,
};
use super::task::Question;
use super::{pretrained, task::Split};
use crate::engine::rundir::{read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::{self, RunControl};
use crate::error::UserError;
use crate::llama;
use crate::pretrained::HfTokenizer;

/// The base checkpoint's directory, made first for `random:`, and its
/// record; a resumed run refuses a directory whose content changed.
fn base_checkpoint(config: &RftConfig, init: &Init, stages: &Path) -> anyhow::Result<BaseRecord> {
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
    record_base(config, &dir, stages)
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
        return stage_ended(control, started, steps_done, Some(&pretrain));
    }
    let before = eval(&pretrain_dir, 0, &stages.join("eval-before.json"), &mut log)?;
    if control.stop.load(Ordering::SeqCst) {
        return interrupted(control, started, steps_done);
    }

    // (b) + (c) + (d), `rounds` times.
    let mut sampler_dir = pretrain_dir.clone();
    let mut rounds = Rounds::default();
    let mut last: Option<(DatagenRecord, Summary, Evaluation)> = None;
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
        rounds.add_samples(&datagen);
        let mut train = sft_data.clone();
        for e in rounds.kept() {
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
            return stage_ended(control, started, steps_done, Some(&finetune));
        }
        let evaluation = eval(&finetune_dir, round, &dir.join("eval.json"), &mut log)?;
        rounds.finish_round(round, &datagen, task.train.len(), &finetune, &evaluation);
        sampler_dir = finetune_dir;
        last = Some((datagen, finetune, evaluation));
    }
    let (datagen, finetune, after) = last.expect("rounds >= 1 (validated)");
    export(&sampler_dir, &control.run_dir)?;

    let parameters = count_parameters(&cfg);
    // Stage (c)'s trainable parameters, and the size of its adapter file
    // (0 in full mode).
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
    let outcome = Outcome {
        base: &base,
        eval_base: &eval_base,
        before: &before,
        after: &after,
        pretrain: &pretrain,
        finetune: &finetune,
        datagen: &datagen,
        parameters,
        trainable,
        adapter_bytes,
    };
    let m = metrics(config, &split, rounds, outcome);
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
