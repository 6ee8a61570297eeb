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
use burn::tensor::{ElementConversion, TensorData};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::datagen::{build_dataset, DatagenConfig, DatagenStats, Example, Sampler};
use super::task::{generate_split_with, Question, Split, UnitTable, END_OF_COMPLETION};
use super::verify::{score, Metrics};
use crate::data::Tokenizer;
use crate::engine::rundir::{read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::{self, OptimConfig, RunControl, Task, TrainConfig};
use crate::error::UserError;
use crate::gpt2::lora::{self, LoraConfig};
use crate::gpt2::{self, hf, BatchSampleOptions, Gpt2, ModelConfig};
use crate::registry::{ExperimentInfo, TypedExperiment};

pub const EXPERIMENT: &str = "rft";

/// Presets bundled into the binary: (name, TOML text).
pub const PRESETS: &[(&str, &str)] = &[("tiny", include_str!("../../presets/rft/tiny.toml"))];
pub const DEFAULT_PRESET: &str = "tiny";

/// The science config of an RFT run (`config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RftConfig {
    /// Rounds of (b) sampling + (c) fine-tuning, each starting from the
    /// previous round's weights (STaR iterates; 1 = the RFT paper's single pass).
    #[serde(default = "one_round")]
    pub rounds: u32,
    pub task: TaskConfig,
    pub model: ModelConfig,
    /// Stage (a): supervised training on the reference worked answers.
    pub pretrain: StageConfig,
    /// Stage (b): rejection sampling.
    pub datagen: DatagenConfig,
    /// Stage (c): fine-tuning on the kept completions.
    pub finetune: FinetuneConfig,
}

fn one_round() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// Seed of the question generator (same seed, same questions everywhere).
    pub seed: u64,
    /// Training questions: stage (b) samples answers for all of them and
    /// the verifier checks those answers against the known result.
    pub train_questions: usize,
    /// How many of the training questions (the first ones) come with a
    /// worked reference answer for stage (a). The rest have only their
    /// result, as in STaR/RFT, where the model must find the reasoning
    /// itself. Unset = every training question is worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worked_questions: Option<usize>,
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
#[serde(from = "FinetuneTable")]
pub struct FinetuneConfig {
    /// `full` updates every weight; `lora` freezes them and trains low-rank
    /// adapters ([`gpt2::lora`]), merged into the weights at the end.
    pub mode: FinetuneMode,
    /// The adapters (`[finetune.lora]`): only with `mode = "lora"`, where a
    /// missing table means the defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    pub train: TrainConfig,
    pub optim: OptimConfig,
}

/// The `[finetune]` table as written. Read through this so that LoRA mode
/// without a `[finetune.lora]` table gets the defaults filled in, and
/// config.toml records them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinetuneTable {
    mode: FinetuneMode,
    #[serde(default)]
    lora: Option<LoraConfig>,
    train: TrainConfig,
    optim: OptimConfig,
}

impl From<FinetuneTable> for FinetuneConfig {
    fn from(table: FinetuneTable) -> Self {
        let lora = match table.mode {
            FinetuneMode::Lora => Some(table.lora.unwrap_or_default()),
            FinetuneMode::Full => table.lora,
        };
        Self {
            mode: table.mode,
            lora,
            train: table.train,
            optim: table.optim,
        }
    }
}

impl FinetuneConfig {
    /// The adapters to train: `Some` exactly in LoRA mode.
    pub fn adapters(&self) -> Option<LoraConfig> {
        match self.mode {
            FinetuneMode::Lora => Some(self.lora.clone().unwrap_or_default()),
            FinetuneMode::Full => None,
        }
    }
}

impl RftConfig {
    /// Checks beyond the schema; every error names the key and the fix.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.finetune.mode == FinetuneMode::Full && self.finetune.lora.is_some() {
            return Err(UserError::usage(
                "[finetune.lora] is set but finetune.mode = \"full\" trains every weight",
            )
            .with_fix("set finetune.mode = \"lora\" or remove the [finetune.lora] table")
            .into());
        }
        if let Some(lora) = self.finetune.adapters() {
            lora.validate(&self.model, "finetune.lora")?;
        }
        for (key, value) in [
            ("task.train_questions", self.task.train_questions),
            ("task.validation_questions", self.task.validation_questions),
            ("task.worked_questions", self.worked_questions()),
            ("rounds", self.rounds as usize),
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
        if self.worked_questions() > self.task.train_questions {
            return Err(UserError::usage(format!(
                "task.worked_questions = {} exceeds task.train_questions = {}",
                self.worked_questions(),
                self.task.train_questions
            ))
            .with_fix("the worked questions are the first training questions: lower task.worked_questions or raise task.train_questions")
            .into());
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

    /// Training questions with a worked answer for stage (a).
    pub fn worked_questions(&self) -> usize {
        self.task
            .worked_questions
            .unwrap_or(self.task.train_questions)
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
    /// Train LoRA adapters on frozen weights: stage (c) with
    /// `finetune.mode = "lora"`.
    lora: Option<LoraConfig>,
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
        // Stage (c) is the one that starts from (a)'s weights.
        let lora = init_from.as_ref().and(config.finetune.adapters());
        Self {
            model: config.model.clone(),
            stage: stage.clone(),
            train,
            validation,
            init_from,
            lora,
        }
    }

    /// Stage (a)'s task: supervised training on the worked answers of the
    /// first `task.worked_questions` training questions, from a fresh init.
    /// (Also the recovery fine-tune of a pruned rft model, `quant::prune`.)
    pub fn reference(config: &RftConfig, split: &Split) -> Self {
        let reference = split.train[..config.worked_questions()]
            .iter()
            .map(|q| tokenize(&q.prompt(), &q.training_text()))
            .collect();
        Self::new(config, &config.pretrain, reference, split, None)
    }

    /// Example of row `row` of the batch of `step`: a pure function of
    /// (seed, step, row), as the engine requires.
    fn example_index(&self, step: u64, row: usize) -> usize {
        // splitmix64 finalizer: spreads the mixed bits before the modulo.
        let mut z = engine::row_seed(self.stage.train.seed, step, row);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % self.train.len() as u64) as usize
    }
}

/// Mean cross-entropy over the completion tokens of `examples` (prompt and
/// padding positions carry weight 0).
fn completion_loss<B: FusedBackend>(
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
    let y = Tensor::<B, 2, Int>::from_data(TensorData::new(y, [b, t]), device);
    let w = Tensor::<B, 1>::from_data(TensorData::new(w, [b * t]), device);
    (model.token_losses(x, y) * w).sum() / count
}

impl<B: FusedAutodiffBackend> Task<B> for RftTrainTask {
    type Model = Gpt2<B>;

    fn train_config(&self) -> &TrainConfig {
        &self.stage.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.stage.optim
    }

    fn init_model(&self, device: &B::Device) -> anyhow::Result<Gpt2<B>> {
        let model = self
            .model
            .init_from::<B>(self.init_from.as_deref(), device)?;
        // The same adapted structure on a fresh start and on resume: the
        // engine then loads a checkpoint's weights and adapters by path.
        Ok(match &self.lora {
            Some(lora) => lora.attach(model, device),
            None => model,
        })
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

    /// Writes `model.safetensors`, a plain GPT (adapters merged), and in
    /// LoRA mode the adapters alone to `adapter.safetensors`.
    fn finish(&self, model: &Gpt2<B>, run_dir: &Path) -> anyhow::Result<()> {
        if self.lora.is_some() {
            lora::save_adapters(model, &run_dir.join(ADAPTER_FILE))?;
        }
        hf::save(&lora::merge(model.clone()), &run_dir.join(MODEL_FILE))
    }
}

const MODEL_FILE: &str = "model.safetensors";
const ADAPTER_FILE: &str = "adapter.safetensors";

// ---------------------------------------------------------------------------
// Generation: the GPT as the datagen `Sampler`, and greedy evaluation.

/// Continues prompts with the GPT: byte tokens, batched KV-cached sampling,
/// stopping at the end-of-completion newline.
pub struct GptSampler<'a, B: FusedBackend> {
    pub model: &'a Gpt2<B>,
    pub config: &'a ModelConfig,
    pub max_new_tokens: usize,
    pub seed: u64,
    pub device: B::Device,
    /// Sampler calls so far: each call draws from fresh seeds.
    calls: u64,
}

impl<'a, B: FusedBackend> GptSampler<'a, B> {
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

impl<B: FusedBackend> Sampler for GptSampler<'_, B> {
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
pub fn evaluate_accuracy<B: FusedBackend>(
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
pub fn load_model<B: FusedBackend>(
    config: &ModelConfig,
    path: &Path,
    device: &B::Device,
) -> anyhow::Result<Gpt2<B>> {
    config.init_from::<B>(Some(path), device)
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
pub fn run<B: FusedAutodiffBackend>(
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

    // (a) supervised training on the reference answers.
    let pretrain_dir = stages.join("pretrain");
    let task = RftTrainTask::reference(config, &split);
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
            return interrupted(control, started, steps_done + stage_steps(&dir));
        };
        steps_done += result.finetune.steps_done;
        weights = dir.join(FINETUNE).join(MODEL_FILE);
        rounds.push(result);
    }
    std::fs::copy(&weights, control.run_dir.join(MODEL_FILE))?;
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
    m.insert("pretrain_final_val_loss".into(), final_val_loss(&pretrain));
    m.insert(
        "finetune_final_val_loss".into(),
        final_val_loss(&last.finetune),
    );
    finish(control, started, steps_done, Status::Completed, m)
}

const FINETUNE: &str = "finetune";

fn final_val_loss(stage: &Summary) -> Value {
    stage
        .metrics
        .get("final_val_loss")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Steps an interrupted fine-tuning stage in `round_dir` got through.
fn stage_steps(round_dir: &Path) -> u64 {
    read_json::<Summary>(&round_dir.join(FINETUNE).join("summary.json")).map_or(0, |s| s.steps_done)
}

/// What one RFT round produced.
struct RoundResult {
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
fn rft_round<B: FusedAutodiffBackend>(
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
    std::fs::create_dir_all(dir)?;
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
            config.datagen.seed.wrapping_add(u64::from(round - 1)),
            inner.clone(),
        );
        let t0 = Instant::now();
        let dataset = build_dataset(&mut sampler, &split.train, &config.datagen)?;
        let seconds = t0.elapsed().as_secs_f64();
        if control.stop.load(Ordering::SeqCst) {
            // Rejection sampling has no partial record: it reruns on resume.
            return Ok(None);
        }
        let record = DatagenRecord {
            stats: dataset.stats,
            seconds,
            samples_per_s: dataset.stats.generated as f64 / seconds.max(1e-9),
            examples: dataset.examples,
        };
        write_json(&datagen_path, &record)?;
        log.write(&json!({"stage": "datagen", "round": round,
            "generated": record.stats.generated, "kept": record.stats.kept,
            "samples_per_s": record.samples_per_s}))?;
        record
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
        &dir.join("eval.json"),
        log,
        &inner,
    )?;
    Ok(Some(RoundResult {
        round,
        datagen,
        finetune,
        eval,
    }))
}

/// `trainable_parameters` of stage (c) and `adapter_bytes`, the size of its
/// adapter file (0 in full mode, which trains every parameter).
fn finetune_size_metrics(
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
fn train_stage<B: FusedAutodiffBackend>(
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
    let stage_control = control.stage(dir, control.micro_batch, stop_after);
    engine::train::<B, RftTrainTask>(task, &stage_control, device)
}

/// Greedy evaluation of the weights at `model_path`, cached in `record`
/// (and logged to metrics.jsonl when computed).
fn eval_stage<B: FusedBackend>(
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
    };
    fn validate(&self, config: &RftConfig, _origin: &str) -> anyhow::Result<()> {
        config.validate()
    }
    fn batch_size(&self, config: &RftConfig) -> usize {
        config.pretrain.train.batch_size
    }
    fn parameters(&self, config: &RftConfig) -> Option<u64> {
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
mod tests {
    use super::*;

    fn preset() -> RftConfig {
        load_config(PRESETS[0].1, "preset tiny", &[])
            .unwrap()
            .science
    }

    fn with(overrides: &[&str]) -> anyhow::Result<RftConfig> {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Ok(load_config(PRESETS[0].1, "preset tiny", &overrides)?.science)
    }

    #[test]
    fn tiny_preset_is_valid_and_lora_is_configured_in_lora_mode_only() {
        let config = preset();
        assert_eq!(config.datagen.oversample, 16);
        assert_eq!(config.datagen.temperature, 0.7);
        assert_eq!(config.finetune.mode, FinetuneMode::Full);
        assert_eq!(config.finetune.adapters(), None);
        let err = with(&["model.block_size=32"]).unwrap_err();
        assert!(format!("{err:#}").contains("model.block_size"), "{err:#}");

        // `mode = "lora"` alone: the default adapters, recorded in config.toml.
        let lora = with(&["finetune.mode=lora"]).unwrap();
        assert_eq!(lora.finetune.lora, Some(LoraConfig::default()));
        let text = engine::config::to_canonical_toml(&lora).unwrap();
        assert!(text.contains("[finetune.lora]\nrank = 8"), "{text}");
        // Full mode's config.toml (and hash) is what it was before LoRA.
        let text = engine::config::to_canonical_toml(&config).unwrap();
        assert!(!text.contains("lora"), "{text}");
        let small = with(&["finetune.mode=lora", "finetune.lora={rank=4, alpha=8}"]).unwrap();
        assert_eq!(small.finetune.adapters().map(|l| l.scale()), Some(2.0));

        for (overrides, names) in [
            (
                &["finetune.mode=lora", "finetune.lora={rank=65}"][..],
                "finetune.lora.rank = 65",
            ),
            (
                &["finetune.mode=lora", "finetune.lora={rank=0}"],
                "finetune.lora.rank = 0",
            ),
            (
                &["finetune.mode=lora", "finetune.lora={alpha=-1}"],
                "finetune.lora.alpha = -1",
            ),
            (
                &[
                    "finetune.mode=lora",
                    "finetune.lora={targets=[\"mlp.c_gate\"]}",
                ],
                "mlp.c_gate",
            ),
            (&["finetune.mode=lora", "finetune.lora={rnak=4}"], "rnak"),
            (&["finetune.lora={rank=4}"], "[finetune.lora] is set"),
        ] {
            let err = with(overrides).unwrap_err();
            assert!(format!("{err:#}").contains(names), "{overrides:?}: {err:#}");
            assert_eq!(crate::error::exit_code_of(&err), 2, "{overrides:?}");
        }
    }

    /// Stage (c) in LoRA mode on a small GPT: straight through vs stopped
    /// after 2 steps and resumed give the same bytes; the base weights stay
    /// frozen; the saved model is a plain (merged) GPT.
    #[test]
    fn lora_finetuning_freezes_the_base_and_resumes_bit_exactly() {
        type B = crate::backend::CpuTrain;
        let config = with(&[
            "finetune.mode=lora",
            "finetune.lora={rank=2}",
            "model.n_layer=1",
            "model.n_embd=16",
            "task.train_questions=8",
            "task.worked_questions=4",
            "task.validation_questions=2",
            "finetune.train.steps=4",
            "finetune.train.batch_size=4",
            "finetune.train.checkpoint_every=2",
        ])
        .unwrap();
        let split = config.split().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let base_path = tmp.path().join("base.safetensors");
        let base = config.model.init::<B>(&Default::default());
        hf::save(&base, &base_path).unwrap();
        let examples: Vec<Tokenized> = split
            .train
            .iter()
            .map(|q| tokenize(&q.prompt(), &q.training_text()))
            .collect();
        let stage = StageConfig {
            train: config.finetune.train.clone(),
            optim: config.finetune.optim.clone(),
        };
        let task = RftTrainTask::new(&config, &stage, examples, &split, Some(base_path));
        assert!(task.lora.is_some());
        let train = |name: &str, resume: bool, stop_after: Option<u64>| {
            let run_dir = tmp.path().join(name);
            std::fs::create_dir_all(&run_dir).unwrap();
            let control = RunControl {
                run_dir,
                micro_batch: 4,
                resume,
                stop_after,
                ..Default::default()
            };
            engine::train::<B, _>(&task, &control, &Default::default()).unwrap()
        };
        assert_eq!(train("straight", false, None).status, Status::Completed);
        assert_eq!(train("resumed", false, Some(2)).status, Status::Interrupted);
        assert_eq!(train("resumed", true, None).status, Status::Completed);
        for file in [MODEL_FILE, ADAPTER_FILE] {
            let read = |run: &str| std::fs::read(tmp.path().join(run).join(file)).unwrap();
            assert_eq!(
                read("straight"),
                read("resumed"),
                "{file} differs after resume"
            );
        }

        let tuned =
            crate::engine::safetensors_io::read(&tmp.path().join("straight").join(MODEL_FILE))
                .unwrap();
        let before: std::collections::HashMap<String, Vec<f32>> = hf::named_weights(&base)
            .into_iter()
            .map(|(name, _, values)| (name, values))
            .collect();
        // Untouched by LoRA: bit-identical to the base.
        for name in ["wte.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.bias"] {
            assert_eq!(tuned[name].1, before[name], "{name} changed");
        }
        // Adapted and merged: the plain GPT's attention weights moved.
        assert_ne!(
            tuned["h.0.attn.c_attn.weight"].1,
            before["h.0.attn.c_attn.weight"]
        );
        assert_eq!(
            tuned.len(),
            before.len(),
            "model.safetensors is a plain GPT"
        );
        let adapters =
            crate::engine::safetensors_io::read(&tmp.path().join("straight").join(ADAPTER_FILE))
                .unwrap();
        assert_eq!(adapters.len(), 2 * 4 * config.model.n_layer);
        assert!(adapters.contains_key("h.0.mlp.c_fc_lora.b"));
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
