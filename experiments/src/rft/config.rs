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
];
pub const DEFAULT_PRESET: &str = "tiny";

/// The science config of an RFT run (`config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "RftTable")]
pub struct RftConfig {
    /// Rounds of (b) sampling + (c) fine-tuning, each starting from the
    /// previous round's weights (STaR iterates; 1 = the RFT paper's single pass).
    #[serde(default = "one_round")]
    pub rounds: u32,
    pub task: TaskConfig,
    /// The byte-level GPT's sizes, or `init` alone: a pretrained checkpoint
    /// (`super::pretrained`).
    pub model: RftModel,
    /// Stage (a): supervised training on the reference worked answers.
    pub pretrain: StageConfig,
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
    pretrain: StageConfig,
    datagen: DatagenConfig,
    finetune: FinetuneTable,
}

impl From<RftTable> for RftConfig {
    fn from(t: RftTable) -> Self {
        let family = ModelPath::lora_family(&t.model);
        RftConfig {
            rounds: t.rounds,
            task: t.task,
            model: t.model,
            pretrain: t.pretrain,
            datagen: t.datagen,
            finetune: t.finetune.resolve(family),
        }
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
    pub train: TrainConfig,
    pub optim: OptimConfig,
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
    train: TrainConfig,
    optim: OptimConfig,
}

impl FinetuneTable {
    fn resolve(self, family: Family) -> FinetuneConfig {
        let lora = match self.mode {
            FinetuneMode::Lora => Some(
                self.lora
                    .map(|l| l.resolve(family))
                    .unwrap_or_else(|| LoraConfig::defaults_for(family)),
            ),
            FinetuneMode::Full => self.lora.map(|l| l.resolve(family)),
        };
        FinetuneConfig {
            mode: self.mode,
            lora,
            train: self.train,
            optim: self.optim,
        }
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
}

impl RftConfig {
    /// Checks beyond the schema; every error names the key and the fix.
    pub fn validate(&self, origin: &str) -> anyhow::Result<()> {
        self.pretrain.train.validate(origin, "pretrain.train")?;
        self.pretrain.optim.validate(origin, "pretrain.optim")?;
        self.finetune.train.validate(origin, "finetune.train")?;
        self.finetune.optim.validate(origin, "finetune.optim")?;
        self.model.validate()?;
        // The one place a run's model path is decided before it starts.
        let path = ModelPath::of(&self.model)?;
        path.check_checkpoint()?;
        // The GPT's sizes: [model]'s, or a GPT-2 checkpoint's (None: Llama).
        let sizes = path.gpt_sizes(&self.model)?;
        if path == ModelPath::Scratch {
            engine::budget::check(origin, &self.model.memory_parts())?;
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
        if !self.task.prompt_format.is_plain() {
            return path.chat_template().map(drop);
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
    loaded.science.validate(origin)?;
    Ok(loaded)
}
