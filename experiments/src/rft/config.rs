//! The `rft` science config: the task, the stages, the fine-tuning mode.

use serde::{Deserialize, Serialize};

use super::datagen::DatagenConfig;
use super::model_path::ModelPath;
pub use super::pretrained::{Init, RftModel};
use super::task::{generate_split_with, Split, UnitTable};
use crate::data::Tokenizer;
use crate::engine::{self, OptimConfig, TrainConfig};
use crate::error::UserError;
use crate::lora::{Family, LoraConfig, LoraTable};

pub const EXPERIMENT: &str = "rft";

/// Presets bundled into the binary: (name, TOML text).
pub const PRESETS: &[(&str, &str)] = &[
    ("tiny", include_str!("../../presets/rft/tiny.toml")),
    (
        "tiny-llama",
        include_str!("../../presets/rft/tiny-llama.toml"),
    ),
    (
        "smollm2-360m",
        include_str!("../../presets/rft/smollm2-360m.toml"),
    ),
    ("homework", include_str!("../../presets/rft/homework.toml")),
];
pub const DEFAULT_PRESET: &str = "tiny";

/// The science config of an RFT run (`config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RftTable")]
pub struct RftConfig {
    /// Rounds of (b) sampling + (c) fine-tuning, each starting from the
    /// previous round's weights (STaR iterates; 1 = the RFT paper's single pass).
    #[serde(default = "one_round")]
    pub rounds: u32,
    pub task: TaskConfig,
    /// The byte-level GPT's sizes, or `init` alone: a pretrained checkpoint
    /// (`super::pretrained`).
    pub model: RftModel,
    /// Stage (a): supervised training on the reference worked answers;
    /// None (`[pretrain] skip = true`, a checkpoint only) samples round 1
    /// from the base itself, as HW3 samples its CoT-prompted base model.
    #[serde(serialize_with = "write_pretrain")]
    pub pretrain: Option<StageConfig>,
    /// Stage (b): rejection sampling.
    pub datagen: DatagenConfig,
    /// Stage (c): fine-tuning on the kept completions.
    pub finetune: FinetuneConfig,
}

pub(crate) fn one_round() -> u32 {
    1
}

/// The config as written: read through this so that `[finetune.lora]`'s
/// defaults can depend on the model family (`model.init` or not).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RftTable {
    #[serde(default = "one_round")]
    rounds: u32,
    task: TaskConfig,
    model: RftModel,
    pretrain: PretrainTable,
    datagen: DatagenConfig,
    finetune: FinetuneTable,
}

impl TryFrom<RftTable> for RftConfig {
    type Error = String;
    fn try_from(t: RftTable) -> Result<Self, String> {
        let family = ModelPath::lora_family(&t.model);
        Ok(RftConfig {
            rounds: t.rounds,
            task: t.task,
            model: t.model,
            pretrain: t.pretrain.resolve()?,
            datagen: t.datagen,
            finetune: t.finetune.resolve(family)?,
        })
    }
}

/// `[pretrain]` as written: `train` and `optim`, or `skip = true` alone.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PretrainTable {
    #[serde(default)]
    skip: bool,
    train: Option<TrainConfig>,
    optim: Option<OptimConfig>,
}

impl PretrainTable {
    fn resolve(self) -> Result<Option<StageConfig>, String> {
        let fix = engine::config::FIX_MARKER;
        match (self.skip, self.train, self.optim) {
            (true, None, None) => Ok(None),
            (true, _, _) => Err(format!(
                "pretrain.skip = true, but [pretrain.train] or [pretrain.optim] is set too.{fix}remove the tables (no stage (a) runs) or skip = true"
            )),
            (false, Some(train), Some(optim)) => Ok(Some(StageConfig { train, optim })),
            (false, train, _) => {
                let missing = if train.is_none() { "train" } else { "optim" };
                Err(format!(
                    "[pretrain.{missing}] is missing.{fix}write stage (a)'s [pretrain.train] and [pretrain.optim], or `[pretrain] skip = true` to sample from the base checkpoint itself"
                ))
            }
        }
    }
}

/// Stage (a) as config.toml writes it: its tables, or `skip = true`.
fn write_pretrain<S: serde::Serializer>(
    pretrain: &Option<StageConfig>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Skipped {
        skip: bool,
    }
    match pretrain {
        Some(stage) => stage.serialize(s),
        None => Skipped { skip: true }.serialize(s),
    }
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
    /// How a pretrained checkpoint is shown a question: `plain` text
    /// (`Q\nA: `), or `chat`, the user turn rendered with the checkpoint's
    /// chat template (`super::prompt`). Unwritten when plain, so configs
    /// from before keep their config_hash.
    #[serde(default, skip_serializing_if = "PromptFormat::is_plain")]
    pub prompt_format: PromptFormat,
    /// A system turn before each question (`prompt_format = "chat"` only);
    /// unset = none, and the template's own default if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Worked examples shown before each question (`prompt_format =
    /// "chat"` only): the first `few_shot` training questions and their
    /// reference answers as earlier user/assistant turns, in sampling,
    /// evaluation and training prompts alike (HW3's CoT model prompts its
    /// base with such a chat). 0 = none; unwritten then.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub few_shot: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl TaskConfig {
    /// The training and held-out questions of this task.
    pub fn split(&self) -> anyhow::Result<Split> {
        let table = UnitTable::builtin()?.restricted(&self.units)?;
        generate_split_with(
            &table,
            self.seed,
            self.train_questions,
            self.validation_questions,
            self.max_decimals,
        )
    }
}

/// `task.prompt_format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptFormat {
    #[default]
    Plain,
    Chat,
}

impl PromptFormat {
    pub fn is_plain(&self) -> bool {
        *self == PromptFormat::Plain
    }
}

pub(crate) fn default_max_decimals() -> u32 {
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinetuneConfig {
    /// `full` updates every weight; `lora` freezes them and trains low-rank
    /// adapters (`crate::gpt2::lora`, `crate::llama::lora`), merged into
    /// the weights at the end.
    pub mode: FinetuneMode,
    /// The adapters (`[finetune.lora]`): only with `mode = "lora"`, where a
    /// missing table (or key) means the model family's defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Passes over each round's training set: stage (c) then runs
    /// `ceil(examples × epochs / batch_size)` steps ([`Self::steps_for`])
    /// instead of a fixed `train.steps`, as Yuan et al. 2023 fine-tune for a
    /// fixed number of epochs (3 by issue #42's reading; their released
    /// train_7b.sh, OFA-Sys/gsm8k-ScRel, takes them as an argument)
    /// whatever the number of kept paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u32>,
    /// What each round trains on ([`TrainOn`]); unset = the recipe's
    /// default (from a base: worked answers plus every kept sample; from
    /// scratch: the round's kept samples).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_on: Option<TrainOn>,
    pub train: TrainConfig,
    pub optim: OptimConfig,
}

/// `finetune.train_on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainOn {
    /// The kept samples only (HW3's RFT set; from a base, the union over
    /// the rounds so far).
    Kept,
    /// The worked answers of stage (a) plus the kept samples (the paper's
    /// RFT set: the SFT data augmented).
    WorkedAndKept,
}

/// The `[finetune]` table as written. Read through this so that LoRA mode
/// without a `[finetune.lora]` table (or without its `targets`) gets the
/// family's defaults filled in, and config.toml records them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FinetuneTable {
    mode: FinetuneMode,
    #[serde(default)]
    lora: Option<LoraTable>,
    #[serde(default)]
    epochs: Option<u32>,
    #[serde(default)]
    train_on: Option<TrainOn>,
    train: TrainConfig,
    optim: OptimConfig,
}

impl FinetuneTable {
    fn resolve(self, family: Family) -> Result<FinetuneConfig, String> {
        let lora = self.lora.map(|l| l.resolve(family)).transpose()?;
        let lora = match self.mode {
            FinetuneMode::Lora => Some(lora.unwrap_or_else(|| LoraConfig::defaults_for(family))),
            FinetuneMode::Full => lora,
        };
        Ok(FinetuneConfig {
            mode: self.mode,
            lora,
            epochs: self.epochs,
            train_on: self.train_on,
            train: self.train,
            optim: self.optim,
        })
    }
}

impl FinetuneConfig {
    /// The adapters to train: `Some` exactly in LoRA mode.
    pub fn adapters(&self) -> Option<LoraConfig> {
        match self.mode {
            // `lora` is always Some here when read from a config.
            FinetuneMode::Lora => Some(self.lora.clone().unwrap_or_default()),
            FinetuneMode::Full => None,
        }
    }

    /// Stage (c)'s steps on `examples` training examples: `epochs` passes
    /// at `train.batch_size` rows per step, rounded up (a last partial
    /// batch is a step), at least 1; or the fixed `train.steps`. Rows are
    /// drawn with replacement (`super::completion::example_index`), so an
    /// example is seen `epochs` times on average, not exactly.
    pub fn steps_for(&self, examples: usize) -> u64 {
        match self.epochs {
            Some(epochs) => {
                let rows = examples as u64 * u64::from(epochs);
                rows.div_ceil(self.train.batch_size.max(1) as u64).max(1)
            }
            None => self.train.steps,
        }
    }

    /// `epochs` against `train.steps`: exactly one of them says how long
    /// stage (c) is. Exit 2 naming both keys.
    fn check_length(&self, origin: &str) -> anyhow::Result<()> {
        match (self.epochs, self.train.steps) {
            (Some(0), _) => Err(UserError::usage(format!("{origin}: finetune.epochs = 0"))
                .with_fix("set finetune.epochs to 1 or more (Yuan et al. 2023 use 3)")
                .into()),
            (Some(epochs), steps) if steps > 0 => Err(UserError::usage(format!(
                "{origin}: finetune.epochs = {epochs} and finetune.train.steps = {steps} both say how long stage (c) is"
            ))
            .with_fix("keep one: finetune.epochs (steps follow from the kept samples) or finetune.train.steps (fixed)")
            .into()),
            (Some(_), _) => {
                let train = TrainConfig { steps: 1, ..self.train.clone() };
                Ok(train.validate(origin, "finetune.train")?)
            }
            (None, _) => Ok(self.train.validate(origin, "finetune.train")?),
        }
    }
}

impl RftConfig {
    /// Checks beyond the schema; every error names the key and the fix.
    pub fn validate(&self, origin: &str) -> anyhow::Result<()> {
        if let Some(pretrain) = &self.pretrain {
            pretrain.train.validate(origin, "pretrain.train")?;
            pretrain.optim.validate(origin, "pretrain.optim")?;
        }
        self.finetune.check_length(origin)?;
        self.finetune.optim.validate(origin, "finetune.optim")?;
        self.model.validate()?;
        // The one place a run's model path is decided before it starts.
        let path = ModelPath::of(&self.model)?;
        path.check_checkpoint()?;
        // The GPT's sizes: [model]'s, or a GPT-2 checkpoint's (None: Llama).
        let sizes = path.gpt_sizes(&self.model)?;
        if path == ModelPath::Scratch {
            engine::budget::check(origin, &self.model.memory_parts())?;
            if self.pretrain.is_none() {
                return Err(UserError::usage(format!(
                    "{origin}: pretrain.skip = true, but the model is trained from scratch: a random GPT has nothing to sample"
                ))
                .with_fix("give a checkpoint (--set model.init=hf:DIR) or write [pretrain.train] and [pretrain.optim]")
                .into());
            }
        }
        if self.finetune.mode == FinetuneMode::Full && self.finetune.lora.is_some() {
            return Err(UserError::usage(
                "[finetune.lora] is set but finetune.mode = \"full\" trains every weight",
            )
            .with_fix("set finetune.mode = \"lora\" or remove the [finetune.lora] table")
            .into());
        }
        if let Some(lora) = self.finetune.adapters() {
            path.check_lora(&lora, sizes.as_ref())?;
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
        self.datagen.validate()?;
        // Rejection sampling lists every (question, sample) row before the
        // first call (issue #40: datagen.oversample = 1e9 aborted in the
        // allocator), before any run directory exists.
        let oversample = self.datagen.oversample as f64;
        let rows = engine::budget::Part::data(
            "datagen.oversample",
            self.datagen.oversample,
            self.task.train_questions as f64 * oversample * 16.0 + oversample * 24.0,
        );
        engine::budget::check(origin, &[rows])?;
        self.check_prompt_format(&path)?;
        match path {
            ModelPath::Scratch => self.check_scratch_model(),
            _ => path.check_context(&|| self.split(), self.task.max_completion_tokens),
        }
    }

    /// `task.prompt_format` and `task.system_prompt` against the model:
    /// chat needs a checkpoint with a template, a system prompt needs chat.
    /// Exit 2 before any run directory exists.
    fn check_prompt_format(&self, path: &ModelPath) -> anyhow::Result<()> {
        if self.task.few_shot > self.task.train_questions {
            return Err(UserError::usage(format!(
                "task.few_shot = {} exceeds task.train_questions = {}",
                self.task.few_shot, self.task.train_questions
            ))
            .with_fix("the examples are the first training questions: lower task.few_shot")
            .into());
        }
        if !self.task.prompt_format.is_plain() {
            return path.chat_template().map(drop);
        }
        if self.task.few_shot > 0 {
            return Err(UserError::usage(format!(
                "task.few_shot = {}, but task.prompt_format = \"plain\" has no turns to put examples in",
                self.task.few_shot
            ))
            .with_fix("--set task.prompt_format=chat (with a checkpoint that has a chat template), or task.few_shot=0")
            .into());
        }
        if self.task.system_prompt.is_some() {
            return Err(UserError::usage(
                "task.system_prompt is set, but task.prompt_format = \"plain\" has no system turn",
            )
            .with_fix("--set task.prompt_format=chat (with a checkpoint that has a chat template), or remove task.system_prompt")
            .into());
        }
        Ok(())
    }

    /// The byte-level GPT's sizes against its bytes and the task's examples.
    fn check_scratch_model(&self) -> anyhow::Result<()> {
        if self.model.vocab_size < Tokenizer::byte().vocab_size() {
            return Err(UserError::usage(format!(
                "model.vocab_size = {}: the RFT GPT reads bytes (256 tokens)",
                self.model.vocab_size
            ))
            .with_fix("--set model.vocab_size=256")
            .into());
        }
        if self.model.n_head == 0 || !self.model.n_embd.is_multiple_of(self.model.n_head) {
            return Err(UserError::usage(format!(
                "model.n_head = {} does not divide model.n_embd = {}",
                self.model.n_head, self.model.n_embd
            ))
            .with_fix("pick n_head dividing n_embd")
            .into());
        }
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

    /// Stage (a)'s loop and optimizer, or stage (c)'s where there is no
    /// stage (a) (for what only needs a seed or a batch size).
    pub fn sft_stage(&self) -> StageConfig {
        self.pretrain.clone().unwrap_or_else(|| StageConfig {
            train: self.finetune.train.clone(),
            optim: self.finetune.optim.clone(),
        })
    }

    /// Training questions with a worked answer for stage (a).
    pub fn worked_questions(&self) -> usize {
        self.task
            .worked_questions
            .unwrap_or(self.task.train_questions)
    }

    pub fn split(&self) -> anyhow::Result<Split> {
        self.task.split()
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
    loaded.science.validate(origin)?;
    Ok(loaded)
}
