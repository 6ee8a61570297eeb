//! `envgen run rft`: the four stages of rejection-sampling fine-tuning as
//! resumable steps of one run directory.
//!
//! ```text
//! RUN_DIR/
//!   config.toml manifest.json summary.json metrics.jsonl model.safetensors
//!   stages/pretrain/   (a) engine run: checkpoints/, metrics.jsonl, summary.json, model.safetensors
//!   stages/eval-before.json   (d, before) greedy accuracy on the held-out questions
//!   stages/datagen.json       (b) kept examples + counts + samples/s
//!   stages/finetune/   (c) engine run on the kept set, started from (a)'s weights
//!   stages/eval-after.json    (d, after)
//! ```
//!
//! A stage is done when its file (or its engine `summary.json` with status
//! completed) exists; `--resume` skips finished stages and continues an
//! interrupted training stage from its last checkpoint.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::datagen::{build_dataset, DatagenConfig, DatagenStats, Example, Sampler};
use super::task::{generate_split_with, Question, Split, UnitTable, END_OF_COMPLETION};
use super::verify::{score, Metrics};
use crate::data::Tokenizer;
use crate::engine::rundir::{read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::{self, OptimConfig, RunControl, Task, TrainConfig};
use crate::error::UserError;
use crate::gpt2::{self, hf, BatchSampleOptions, Gpt2, ModelConfig};
use crate::registry::{self, Experiment, ResolvedConfig};

pub const EXPERIMENT: &str = "rft";

/// Presets bundled into the binary: (name, TOML text).
pub const PRESETS: &[(&str, &str)] = &[("tiny", include_str!("../../presets/rft/tiny.toml"))];
pub const DEFAULT_PRESET: &str = "tiny";

/// The science config of an RFT run (`config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RftConfig {
    pub task: TaskConfig,
    pub model: ModelConfig,
    /// Stage (a): supervised training on the reference worked answers.
    pub pretrain: StageConfig,
    /// Stage (b): rejection sampling.
    pub datagen: DatagenConfig,
    /// Stage (c): fine-tuning on the kept completions.
    pub finetune: FinetuneConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// Seed of the question generator (same seed, same questions everywhere).
    pub seed: u64,
    pub train_questions: usize,
    /// Held-out questions for stage (d).
    pub validation_questions: usize,
    /// Restrict questions to these units (singular names from
    /// presets/rft/units.toml); empty = every unit.
    #[serde(default)]
    pub units: Vec<String>,
    /// Completions are cut after this many tokens (and at the block size).
    pub max_completion_tokens: usize,
    /// Decimal places of the values in questions (0 = whole numbers).
    #[serde(default = "default_max_decimals")]
    pub max_decimals: u32,
}

fn default_max_decimals() -> u32 {
    super::task::MAX_DECIMALS
}

/// One training stage: the engine's loop and optimizer knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    pub train: TrainConfig,
    pub optim: OptimConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinetuneMode {
    Full,
    Lora,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinetuneConfig {
    /// `full` updates every weight. `lora` is refused with the reason (see
    /// [`RftConfig::validate`]).
    pub mode: FinetuneMode,
    pub train: TrainConfig,
    pub optim: OptimConfig,
}

impl RftConfig {
    /// Checks beyond the schema; every error names the key and the fix.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.finetune.mode == FinetuneMode::Lora {
            // Burn 0.21 has no LoRA: `Module::apply_lora` / `LoraAdapter`
            // arrive in burn-core 0.22 (pre-releases). Full fine-tuning of
            // the tiny GPT takes seconds, so a hand-written adapter would buy
            // nothing here yet.
            return Err(UserError::usage(
                "finetune.mode = \"lora\": Burn 0.21 (the version envgen is built on) has no LoRA adapters; they arrive with burn 0.22 (Module::apply_lora)",
            )
            .with_fix("use --set finetune.mode=full (full fine-tuning)")
            .into());
        }
        for (key, value) in [
            ("task.train_questions", self.task.train_questions),
            ("task.validation_questions", self.task.validation_questions),
            (
                "task.max_completion_tokens",
                self.task.max_completion_tokens,
            ),
        ] {
            if value == 0 {
                return Err(UserError::usage(format!("{key} = 0"))
                    .with_fix(format!("set {key} to 1 or more"))
                    .into());
            }
        }
        if self.model.vocab_size < Tokenizer::byte().vocab_size() {
            return Err(UserError::usage(format!(
                "model.vocab_size = {}: the RFT GPT reads bytes (256 tokens)",
                self.model.vocab_size
            ))
            .with_fix("--set model.vocab_size=256")
            .into());
        }
        if self.model.n_head == 0 || self.model.n_embd % self.model.n_head != 0 {
            return Err(UserError::usage(format!(
                "model.n_head = {} does not divide model.n_embd = {}",
                self.model.n_head, self.model.n_embd
            ))
            .with_fix("pick n_head dividing n_embd")
            .into());
        }
        self.datagen.validate()?;
        let longest = self.longest_example()?;
        if longest > self.model.block_size {
            return Err(UserError::usage(format!(
                "model.block_size = {} is shorter than the longest training example ({longest} bytes)",
                self.model.block_size
            ))
            .with_fix(format!("--set model.block_size={}", longest.next_multiple_of(32)))
            .into());
        }
        Ok(())
    }

    pub fn split(&self) -> anyhow::Result<Split> {
        let table = UnitTable::builtin()?.restricted(&self.task.units)?;
        generate_split_with(
            &table,
            self.task.seed,
            self.task.train_questions,
            self.task.validation_questions,
            self.task.max_decimals,
        )
    }

    fn longest_example(&self) -> anyhow::Result<usize> {
        let split = self.split()?;
        Ok(split
            .train
            .iter()
            .chain(&split.validation)
            .map(|q| q.training_text().len())
            .max()
            .unwrap_or(0))
    }
}

/// Parse, override and check an RFT config.
pub fn load_config(
    text: &str,
    origin: &str,
    overrides: &[String],
) -> anyhow::Result<engine::Loaded<RftConfig>> {
    let loaded: engine::Loaded<RftConfig> = engine::load(text, origin, overrides)?;
    loaded.science.validate()?;
    Ok(loaded)
}

// ---------------------------------------------------------------------------
// Training on (prompt, completion) pairs: the loss covers completion tokens.

/// A tokenized training example: the bytes of prompt + completion and where
/// the completion starts.
#[derive(Debug, Clone)]
struct Tokenized {
    tokens: Vec<u32>,
    completion_start: usize,
}

fn tokenize(prompt: &str, text: &str) -> Tokenized {
    let tokenizer = Tokenizer::byte();
    Tokenized {
        tokens: tokenizer.encode(text),
        completion_start: tokenizer.encode(prompt).len(),
    }
}

/// The engine task of stages (a) and (c).
pub struct RftTrainTask {
    model: ModelConfig,
    stage: StageConfig,
    train: Vec<Tokenized>,
    validation: Vec<Tokenized>,
    /// Start from these weights (stage c) instead of a fresh init (stage a).
    init_from: Option<PathBuf>,
}

impl RftTrainTask {
    fn new(
        config: &RftConfig,
        stage: &StageConfig,
        train: Vec<Tokenized>,
        split: &Split,
        init_from: Option<PathBuf>,
    ) -> Self {
        let validation = split
            .validation
            .iter()
            .map(|q| tokenize(&q.prompt(), &q.training_text()))
            .collect();
        Self {
            model: config.model.clone(),
            stage: stage.clone(),
            train,
            validation,
            init_from,
        }
    }

    /// Example of row `row` of the batch of `step`: a pure function of
    /// (seed, step, row), as the engine requires.
    fn example_index(&self, step: u64, row: usize) -> usize {
        let mixed = self
            .stage
            .train
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(step.wrapping_mul(0xBF58_476D_1CE4_E5B9))
            .wrapping_add((row as u64).wrapping_mul(0x94D0_49BB_1331_11EB));
        // splitmix64 finalizer: spreads the mixed bits before the modulo.
        let mut z = mixed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % self.train.len() as u64) as usize
    }
}

/// Mean cross-entropy over the completion tokens of `examples` (prompt and
/// padding positions carry weight 0).
fn completion_loss<B: Backend>(
    model: &Gpt2<B>,
    examples: &[&Tokenized],
    device: &B::Device,
) -> Tensor<B, 1> {
    let t = examples
        .iter()
        .map(|e| e.tokens.len() - 1)
        .max()
        .unwrap_or(1)
        .max(1);
    let b = examples.len();
    let (mut x, mut y, mut w) = (
        Vec::with_capacity(b * t),
        Vec::with_capacity(b * t),
        Vec::with_capacity(b * t),
    );
    for e in examples {
        for i in 0..t {
            let inside = i + 1 < e.tokens.len();
            x.push(e.tokens.get(i).map_or(0, |&v| i64::from(v)));
            y.push(if inside {
                i64::from(e.tokens[i + 1])
            } else {
                0
            });
            w.push(if inside && i + 1 >= e.completion_start {
                1.0f32
            } else {
                0.0
            });
        }
    }
    let count: f32 = w.iter().sum::<f32>().max(1.0);
    let x = Tensor::<B, 2, Int>::from_data(TensorData::new(x, [b, t]), device);
    let y = Tensor::<B, 2, Int>::from_data(TensorData::new(y, [b * t, 1]), device);
    let w = Tensor::<B, 1>::from_data(TensorData::new(w, [b * t]), device);
    let logits = model.forward(x);
    let v = logits.dims()[2];
    let picked = log_softmax(logits.reshape([b * t, v]), 1)
        .gather(1, y)
        .reshape([b * t]);
    (picked * w).sum().neg() / count
}

impl<B: AutodiffBackend> Task<B> for RftTrainTask {
    type Model = Gpt2<B>;

    fn train_config(&self) -> &TrainConfig {
        &self.stage.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.stage.optim
    }

    fn init_model(&self, device: &B::Device) -> anyhow::Result<Gpt2<B>> {
        let model = self.model.init::<B>(device);
        match &self.init_from {
            Some(path) => hf::load(model, path),
            None => Ok(model),
        }
    }

    fn loss(
        &self,
        model: &Gpt2<B>,
        step: u64,
        rows: Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 1> {
        let batch: Vec<&Tokenized> = rows
            .map(|r| &self.train[self.example_index(step, r)])
            .collect();
        completion_loss(model, &batch, device)
    }

    fn evaluate(
        &self,
        model: &<Gpt2<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        // Completion loss on the held-out reference answers (a fixed set).
        let mut total = 0.0;
        let mut rows = 0usize;
        for chunk in self.validation.chunks(micro_batch.max(1)) {
            let batch: Vec<&Tokenized> = chunk.iter().collect();
            let loss: f64 = completion_loss(model, &batch, device).into_scalar().elem();
            total += loss * chunk.len() as f64;
            rows += chunk.len();
        }
        total / rows.max(1) as f64
    }

    fn units_per_row(&self) -> (usize, &'static str) {
        (1, "samples")
    }

    fn finish(&self, model: &Gpt2<B>, run_dir: &Path) -> anyhow::Result<()> {
        hf::save(model, &run_dir.join(MODEL_FILE))
    }
}

const MODEL_FILE: &str = "model.safetensors";

// ---------------------------------------------------------------------------
// Generation: the GPT as the datagen `Sampler`, and greedy evaluation.

/// Continues prompts with the GPT: byte tokens, batched KV-cached sampling,
/// stopping at the end-of-completion newline.
pub struct GptSampler<'a, B: Backend> {
    pub model: &'a Gpt2<B>,
    pub config: &'a ModelConfig,
    pub max_new_tokens: usize,
    pub seed: u64,
    pub device: B::Device,
    /// Sampler calls so far: each call draws from fresh seeds.
    calls: u64,
}

impl<'a, B: Backend> GptSampler<'a, B> {
    pub fn new(
        model: &'a Gpt2<B>,
        config: &'a ModelConfig,
        max_new_tokens: usize,
        seed: u64,
        device: B::Device,
    ) -> Self {
        Self {
            model,
            config,
            max_new_tokens,
            seed,
            device,
            calls: 0,
        }
    }
}

impl<B: Backend> Sampler for GptSampler<'_, B> {
    fn sample(&mut self, prompts: &[String], n: usize, temperature: f32) -> Vec<Vec<String>> {
        let tokenizer = Tokenizer::byte();
        let stop = tokenizer.encode(END_OF_COMPLETION);
        let rows: Vec<Vec<u32>> = prompts
            .iter()
            .flat_map(|p| std::iter::repeat_n(tokenizer.encode(p), n))
            .collect();
        let opts = BatchSampleOptions {
            max_new_tokens: self.max_new_tokens,
            temperature,
            top_k: None,
            seed: self
                .seed
                .wrapping_add(self.calls.wrapping_mul(0x5851_F42D_4C95_7F2D)),
            stop_token: stop.first().copied(),
        };
        self.calls += 1;
        let out = gpt2::sample_batch(self.model, self.config, &rows, opts, &self.device);
        out.chunks(n.max(1))
            .map(|group| group.iter().map(|t| tokenizer.decode(t)).collect())
            .collect()
    }
}

/// Stage (d): greedy completions of the held-out questions, graded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    pub metrics: Metrics,
    pub samples_per_s: f64,
    /// The first few (question, completion) pairs, for reading.
    pub examples: Vec<(String, String)>,
}

/// Greedy accuracy / answer rate of `model` on `questions`.
pub fn evaluate_accuracy<B: Backend>(
    model: &Gpt2<B>,
    config: &ModelConfig,
    questions: &[Question],
    max_new_tokens: usize,
    batch: usize,
    device: &B::Device,
) -> Evaluation {
    let started = Instant::now();
    let mut sampler = GptSampler::new(model, config, max_new_tokens, 0, device.clone());
    let mut completions = Vec::with_capacity(questions.len());
    for chunk in questions.chunks(batch.max(1)) {
        let prompts: Vec<String> = chunk.iter().map(Question::prompt).collect();
        completions.extend(sampler.sample(&prompts, 1, 0.0).into_iter().flatten());
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    let metrics = score(
        completions
            .iter()
            .zip(questions)
            .map(|(c, q)| (c.as_str(), q.answer)),
    );
    Evaluation {
        metrics,
        samples_per_s: questions.len() as f64 / seconds,
        examples: questions
            .iter()
            .zip(&completions)
            .take(5)
            .map(|(q, c)| (q.text.clone(), c.clone()))
            .collect(),
    }
}

/// Load a GPT saved by `hf::save` for inference.
pub fn load_model<B: Backend>(
    config: &ModelConfig,
    path: &Path,
    device: &B::Device,
) -> anyhow::Result<Gpt2<B>> {
    hf::load(config.init::<B>(device), path)
}

// ---------------------------------------------------------------------------
// The stages.

/// Stage (b)'s record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DatagenRecord {
    stats: DatagenStats,
    seconds: f64,
    samples_per_s: f64,
    examples: Vec<Example>,
}

const STAGES: &str = "stages";
/// Questions graded per greedy-evaluation batch.
const EVAL_BATCH: usize = 128;

/// Run (or resume) every stage in `control.run_dir`.
pub fn run<B: AutodiffBackend>(
    config: &RftConfig,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    config.validate()?;
    let started = Instant::now();
    let stages = control.run_dir.join(STAGES);
    std::fs::create_dir_all(&stages)?;
    let mut log = MetricsLog::open(&control.run_dir.join("metrics.jsonl"), None)?;
    let split = config.split()?;
    let inner: burn::tensor::Device<B::InnerBackend> = Default::default();
    let max_new = config.task.max_completion_tokens;

    // (a) supervised training on the reference answers.
    let pretrain_dir = stages.join("pretrain");
    let reference: Vec<Tokenized> = split
        .train
        .iter()
        .map(|q| tokenize(&q.prompt(), &q.training_text()))
        .collect();
    let task = RftTrainTask::new(config, &config.pretrain, reference, &split, None);
    let pretrain = train_stage::<B>(&task, &pretrain_dir, control, control.stop_after, device)?;
    let mut steps_done = pretrain.steps_done;
    if pretrain.status != Status::Completed {
        return interrupted(control, started, steps_done);
    }
    let pretrained = pretrain_dir.join(MODEL_FILE);

    // (d, before)
    let before = eval_stage::<B::InnerBackend>(
        config,
        &pretrained,
        &split.validation,
        &stages.join("eval-before.json"),
        &mut log,
        &inner,
    )?;
    if control.stop.load(Ordering::SeqCst) {
        return interrupted(control, started, steps_done);
    }

    // (b) rejection sampling.
    let datagen_path = stages.join("datagen.json");
    let datagen: DatagenRecord = if datagen_path.exists() {
        read_json(&datagen_path)?
    } else {
        let model = load_model::<B::InnerBackend>(&config.model, &pretrained, &inner)?;
        let mut sampler = GptSampler::new(
            &model,
            &config.model,
            max_new,
            config.datagen.seed,
            inner.clone(),
        );
        let t0 = Instant::now();
        let dataset = build_dataset(&mut sampler, &split.train, &config.datagen)?;
        let seconds = t0.elapsed().as_secs_f64();
        if control.stop.load(Ordering::SeqCst) {
            // Rejection sampling has no partial record: it reruns on resume.
            return interrupted(control, started, steps_done);
        }
        let record = DatagenRecord {
            stats: dataset.stats,
            seconds,
            samples_per_s: dataset.stats.generated as f64 / seconds.max(1e-9),
            examples: dataset.examples,
        };
        write_json(&datagen_path, &record)?;
        log.write(
            &json!({"stage": "datagen", "generated": record.stats.generated,
            "kept": record.stats.kept, "samples_per_s": record.samples_per_s}),
        )?;
        record
    };
    if datagen.examples.is_empty() {
        return Err(UserError::failed(format!(
            "rft datagen kept no correct completion out of {} sampled: stage (a) did not teach the model to answer",
            datagen.stats.generated
        ))
        .with_fix("train stage (a) longer (--set pretrain.train.steps=...) or sample more (--set datagen.oversample=...)")
        .into());
    }

    // (c) fine-tuning on the kept completions, from (a)'s weights.
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
        &split,
        Some(pretrained.clone()),
    );
    let stop_after = control
        .stop_after
        .map(|n| n.saturating_sub(config.pretrain.train.steps));
    let finetune_dir = stages.join("finetune");
    let finetune = train_stage::<B>(&task, &finetune_dir, control, stop_after, device)?;
    steps_done += finetune.steps_done;
    if finetune.status != Status::Completed {
        return interrupted(control, started, steps_done);
    }
    let tuned = finetune_dir.join(MODEL_FILE);

    // (d, after)
    let after = eval_stage::<B::InnerBackend>(
        config,
        &tuned,
        &split.validation,
        &stages.join("eval-after.json"),
        &mut log,
        &inner,
    )?;
    std::fs::copy(&tuned, control.run_dir.join(MODEL_FILE))?;

    let mut m = Map::new();
    m.insert("accuracy_before".into(), json!(before.metrics.accuracy));
    m.insert("accuracy_after".into(), json!(after.metrics.accuracy));
    m.insert(
        "answer_rate_before".into(),
        json!(before.metrics.answer_rate),
    );
    m.insert("answer_rate_after".into(), json!(after.metrics.answer_rate));
    m.insert("generated".into(), json!(datagen.stats.generated));
    m.insert("kept".into(), json!(datagen.stats.kept));
    m.insert("datagen_samples_per_s".into(), json!(datagen.samples_per_s));
    m.insert("correct".into(), json!(datagen.stats.correct));
    m.insert("duplicates".into(), json!(datagen.stats.duplicates));
    m.insert(
        "wrong_reasoning".into(),
        json!(datagen.stats.wrong_reasoning),
    );
    m.insert("questions_kept".into(), json!(datagen.stats.questions_kept));
    m.insert("train_questions".into(), json!(split.train.len()));
    m.insert("validation_questions".into(), json!(split.validation.len()));
    m.insert("finetune_mode".into(), json!(config.finetune.mode));
    m.insert("parameters".into(), json!(config.model.num_params()));
    m.insert("eval_samples_per_s".into(), json!(after.samples_per_s));
    for (name, stage) in [("pretrain", &pretrain), ("finetune", &finetune)] {
        m.insert(
            format!("{name}_final_val_loss"),
            stage
                .metrics
                .get("final_val_loss")
                .cloned()
                .unwrap_or(Value::Null),
        );
    }
    finish(control, started, steps_done, Status::Completed, m)
}

/// A training stage in its own directory: skipped when its summary says
/// completed, resumed when it has a checkpoint, started fresh otherwise.
fn train_stage<B: AutodiffBackend>(
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
    std::fs::create_dir_all(dir)?;
    let stage_control = RunControl {
        run_dir: dir.to_path_buf(),
        micro_batch: control.micro_batch,
        resume: dir.join("checkpoints").join("latest").exists(),
        stop_after,
        stop: control.stop.clone(),
        progress: control.progress,
    };
    engine::train::<B, RftTrainTask>(task, &stage_control, device)
}

/// Greedy evaluation of the weights at `model_path`, cached in `record`
/// (and logged to metrics.jsonl when computed).
fn eval_stage<B: Backend>(
    config: &RftConfig,
    model_path: &Path,
    questions: &[Question],
    record: &Path,
    log: &mut MetricsLog,
    device: &B::Device,
) -> anyhow::Result<Evaluation> {
    if record.exists() {
        return read_json(record);
    }
    let model = load_model::<B>(&config.model, model_path, device)?;
    let evaluation = evaluate_accuracy(
        &model,
        &config.model,
        questions,
        config.task.max_completion_tokens,
        EVAL_BATCH,
        device,
    );
    write_json(record, &evaluation)?;
    let stage = record
        .file_stem()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    log.write(
        &json!({"stage": stage, "accuracy": evaluation.metrics.accuracy,
        "answer_rate": evaluation.metrics.answer_rate}),
    )?;
    Ok(evaluation)
}

/// Stop after a finished step or stage; `--resume` continues from there.
fn interrupted(control: &RunControl, started: Instant, steps_done: u64) -> anyhow::Result<Summary> {
    finish(
        control,
        started,
        steps_done,
        Status::Interrupted,
        Map::new(),
    )
}

fn finish(
    control: &RunControl,
    started: Instant,
    steps_done: u64,
    status: Status,
    metrics: Map<String, Value>,
) -> anyhow::Result<Summary> {
    // Wall time of this session plus the stages' earlier sessions is what a
    // user waited; the stages' own summaries hold their training time.
    let summary = Summary {
        status,
        wall_s: started.elapsed().as_secs_f64(),
        steps_done,
        metrics,
    };
    engine::rundir::finish_run(&control.run_dir, &summary)?;
    Ok(summary)
}

/// [`run`] on the resolved backend.
pub fn run_on(
    config: &RftConfig,
    control: &RunControl,
    backend: crate::backend::Resolved,
) -> anyhow::Result<Summary> {
    match backend {
        crate::backend::Resolved::Cpu => {
            run::<crate::backend::CpuTrain>(config, control, &Default::default())
        }
        #[cfg(feature = "cuda")]
        crate::backend::Resolved::Cuda => {
            run::<crate::backend::CudaTrain>(config, control, &Default::default())
        }
        #[cfg(not(feature = "cuda"))]
        crate::backend::Resolved::Cuda => {
            Err(UserError::usage("this build has no CUDA backend").into())
        }
    }
}

/// `rft` in the experiment registry.
pub struct RftExperiment;
pub static RFT: RftExperiment = RftExperiment;

impl Experiment for RftExperiment {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn description(&self) -> &'static str {
        "rejection-sampling fine-tuning of a small GPT on verified unit-conversion answers"
    }
    fn presets(&self) -> &'static [(&'static str, &'static str)] {
        PRESETS
    }
    fn default_preset(&self) -> &'static str {
        DEFAULT_PRESET
    }
    fn resolve(
        &self,
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> anyhow::Result<ResolvedConfig> {
        let loaded = load_config(text, origin, overrides)?;
        Ok(ResolvedConfig {
            preset: None,
            science: registry::canonical(&loaded.science)?,
            batch_size: loaded.science.pretrain.train.batch_size,
            hardware: loaded.hardware,
            parameters: Some(loaded.science.model.num_params() as u64),
        })
    }
    fn run(
        &self,
        science: &toml::Value,
        control: &RunControl,
        backend: crate::backend::Resolved,
    ) -> anyhow::Result<Summary> {
        let config: RftConfig = registry::typed(science, "config.toml")?;
        run_on(&config, control, backend)
    }
    fn summary_line(&self, summary: &Summary) -> String {
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
mod tests {
    use super::*;

    fn preset() -> RftConfig {
        load_config(PRESETS[0].1, "preset tiny", &[])
            .unwrap()
            .science
    }

    #[test]
    fn tiny_preset_is_valid_and_lora_is_refused_with_a_reason() {
        let config = preset();
        assert_eq!(config.datagen.oversample, 16);
        assert_eq!(config.datagen.temperature, 0.7);
        let err =
            load_config(PRESETS[0].1, "preset tiny", &["finetune.mode=lora".into()]).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("LoRA") && text.contains("finetune.mode=full"),
            "{text}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
        let err =
            load_config(PRESETS[0].1, "preset tiny", &["model.block_size=32".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("model.block_size"), "{err:#}");
    }

    #[test]
    fn loss_covers_only_completion_tokens() {
        type B = crate::backend::Cpu;
        let device = Default::default();
        let cfg = ModelConfig {
            n_layer: 1,
            n_head: 1,
            n_embd: 8,
            block_size: 16,
            vocab_size: 256,
            dropout: 0.0,
        };
        let model = cfg.init::<B>(&device);
        let a = tokenize("ab", "abcd");
        // Only the completion "cd" is scored: changing it changes the loss.
        let b = tokenize("ab", "abce");
        let la: f64 = completion_loss(&model, &[&a], &device).into_scalar().elem();
        let lb: f64 = completion_loss(&model, &[&b], &device).into_scalar().elem();
        assert!(la.is_finite() && lb.is_finite());
        assert_ne!(la, lb);
        // A padded batch scores each example exactly as alone would.
        let short = tokenize("a", "ab");
        let lab: f64 = completion_loss(&model, &[&a, &short], &device)
            .into_scalar()
            .elem();
        let ls: f64 = completion_loss(&model, &[&short], &device)
            .into_scalar()
            .elem();
        // Token-weighted mean: a has 2 completion targets, short has 1.
        assert!(
            (lab - (2.0 * la + ls) / 3.0).abs() < 1e-5,
            "{lab} {la} {ls}"
        );
    }
}
