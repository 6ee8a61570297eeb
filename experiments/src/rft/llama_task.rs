//! The RFT stages' model work on a pretrained Llama-family checkpoint:
//! tokenizing with the checkpoint's tokenizer, the engine [`Task`] of
//! stages (a) and (c) (full fine-tuning from the base checkpoint with the
//! completion-only loss of `super::train`), and generation for (b) and (d).

use std::ops::Range;
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::{ElementConversion, TensorData};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use super::config::StageConfig;
use super::datagen::{Completion, Row, Sampler};
use super::prompt::Prompter;
use super::task::END_OF_COMPLETION;
use crate::engine::{OptimConfig, Task, TrainConfig};
use crate::llama::{self, GenerateOptions, Llama};
use crate::lora::LoraConfig;

/// Files of a Hugging Face directory besides the weights that a fine-tuned
/// copy keeps (transformers and `envgen sample` read them).
const COMPANIONS: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    crate::pretrained::chat::TEMPLATE_FILE,
];

/// A training example in the checkpoint's tokens: the prompt as generation
/// sees it, then the completion (its end included), and where the
/// completion starts (the loss covers it alone). `super::prompt::Prompter`
/// makes them.
#[derive(Debug, Clone)]
pub(crate) struct LlamaExample {
    tokens: Vec<u32>,
    completion_start: usize,
}

impl LlamaExample {
    pub(crate) fn new(mut prompt: Vec<u32>, completion: Vec<u32>) -> Self {
        let completion_start = prompt.len();
        prompt.extend(completion);
        Self {
            tokens: prompt,
            completion_start,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    pub(crate) fn prompt_ids(&self) -> &[u32] {
        &self.tokens[..self.completion_start]
    }

    pub(crate) fn completion_ids(&self) -> &[u32] {
        &self.tokens[self.completion_start..]
    }
}

/// The engine task of stages (a) and (c): the base checkpoint trained on
/// `train` (RFT fine-tunes the base model in every round, not the previous
/// round's weights), every weight of it or, with `lora`, fresh adapters on
/// its frozen weights.
pub struct LlamaRftTask {
    pub(crate) base: PathBuf,
    pub(crate) stage: StageConfig,
    pub(crate) train: Vec<LlamaExample>,
    pub(crate) validation: Vec<LlamaExample>,
    /// Stage (c) with `finetune.mode = "lora"`.
    pub(crate) lora: Option<LoraConfig>,
}

impl LlamaRftTask {
    /// Example of row `row` of the batch of `step` (as `RftTrainTask`'s).
    fn example_index(&self, step: u64, row: usize) -> usize {
        super::train::example_index(self.stage.train.seed, step, row, self.train.len())
    }
}

/// Mean cross-entropy over the completion tokens of `examples`, right-padded
/// (prompt and padding positions carry weight 0).
pub(crate) fn completion_loss<B: FusedBackend>(
    model: &Llama<B>,
    examples: &[&LlamaExample],
    device: &B::Device,
) -> Tensor<B, 1> {
    let t = examples
        .iter()
        .map(|e| e.tokens.len().saturating_sub(1))
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
    let y = Tensor::<B, 1, Int>::from_data(TensorData::new(y, [b * t]), device);
    let w = Tensor::<B, 1>::from_data(TensorData::new(w, [b * t]), device);
    let logits = model.forward(x);
    let vocab = logits.dims()[2];
    let losses = envgen_kernels::cross_entropy(logits.reshape([b * t, vocab]), y);
    (losses * w).sum() / count
}

impl<B: FusedAutodiffBackend> Task<B> for LlamaRftTask {
    type Model = Llama<B>;

    fn train_config(&self) -> &TrainConfig {
        &self.stage.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.stage.optim
    }

    fn init_model(&self, device: &B::Device) -> anyhow::Result<Llama<B>> {
        let model = llama::hf::load::<B>(&self.base, device)?;
        // The same adapted structure on a fresh start and on resume: the
        // engine then loads a checkpoint's weights and adapters by path.
        Ok(match &self.lora {
            Some(lora) => llama::lora::attach(lora, model, device),
            None => model,
        })
    }

    fn loss(
        &self,
        model: &Llama<B>,
        step: u64,
        rows: Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 1> {
        let batch: Vec<&LlamaExample> = rows
            .map(|r| &self.train[self.example_index(step, r)])
            .collect();
        completion_loss(model, &batch, device)
    }

    fn evaluate(
        &self,
        model: &<Llama<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        super::train::mean_validation_loss(&self.validation, micro_batch, |batch| {
            completion_loss(model, batch, device).into_scalar().elem()
        })
    }

    fn units_per_row(&self) -> (usize, &'static str) {
        (1, "samples")
    }

    /// The stage directory becomes a Hugging Face directory: the weights as
    /// `model.safetensors` under transformers' names (adapters merged),
    /// next to copies of the base's config.json and tokenizer files; with
    /// LoRA also the adapters alone in PEFT's layout (`adapter/`).
    fn finish(&self, model: &Llama<B>, run_dir: &Path) -> anyhow::Result<()> {
        copy_companions(&self.base, run_dir)?;
        let merged = match &self.lora {
            Some(lora) => {
                let dir = run_dir.join(llama::lora::ADAPTER_DIR);
                llama::lora::save_peft(model, lora, &self.base, &dir)?;
                llama::lora::merge(model.clone())
            }
            None => model.clone(),
        };
        llama::save::save_safetensors(&merged, &run_dir.join(llama::hf::SINGLE))
    }
}

/// Copy the base's config.json and tokenizer files into `to`.
pub(crate) fn copy_companions(base: &Path, to: &Path) -> anyhow::Result<()> {
    copy_files(base, &COMPANIONS, to)
}

/// Copy each of `names` that `base` has into `to`, by fsutil's rule for
/// files of a user directory: a link out of `base` (`chat_template.jinja →
/// /etc/shadow`), a FIFO or a device is refused, never copied into the run
/// directory (issue #40). `exists`, not `is_file`, so such a file is
/// refused rather than skipped as absent.
pub(crate) fn copy_files(base: &Path, names: &[&str], to: &Path) -> anyhow::Result<()> {
    check_files(base, names)?;
    for name in names {
        let from = base.join(name);
        if from.exists() || from.is_symlink() {
            crate::fsutil::copy_user_file(base, &from, &to.join(name))?;
        }
    }
    Ok(())
}

/// Each of `names` that `base` has, by the same rule (a stat each, nothing
/// read): what [`copy_files`] would refuse, refused before a run directory
/// is made (issue #40).
pub(crate) fn check_files(base: &Path, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        let path = base.join(name);
        if path.exists() || path.is_symlink() {
            crate::fsutil::user_file(base, &path, crate::fsutil::limit::WEIGHTS)?;
        }
    }
    Ok(())
}

/// Continues prompts with a Llama: each row's question in the tokens
/// `task.prompt_format` gives it, batched KV-cached generation with each
/// row's own seed, stopping at the end-of-completion marker, the model's
/// end-of-sequence ids or (chat) the template's end of turn.
pub struct LlamaSampler<'a, B: Backend> {
    pub model: &'a Llama<B>,
    pub prompter: &'a Prompter<'a>,
    pub max_new_tokens: usize,
    pub device: B::Device,
    /// The first generation error; `Sampler::sample` cannot return one.
    pub error: Option<anyhow::Error>,
}

impl<'a, B: Backend> LlamaSampler<'a, B> {
    pub fn new(
        model: &'a Llama<B>,
        prompter: &'a Prompter<'a>,
        max_new_tokens: usize,
        device: B::Device,
    ) -> Self {
        Self {
            model,
            prompter,
            max_new_tokens,
            device,
            error: None,
        }
    }

    fn try_sample(&self, rows: &[Row<'_>], temperature: f32) -> anyhow::Result<Vec<Completion>> {
        let prompts = rows
            .iter()
            .map(|r| self.prompter.prompt_ids(r.prompt))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let opts = GenerateOptions {
            max_new_tokens: self.max_new_tokens,
            temperature,
            top_p: 1.0,
            seed: 0,
            row_seeds: rows.iter().map(|r| r.seed).collect(),
            eos_token_ids: self.prompter.stop_ids(&self.model.config().eos_token_ids),
            stop_strings: vec![END_OF_COMPLETION.to_string()],
        };
        let tokenizer = self.prompter.tokenizer();
        let decode = |ids: &[u32]| tokenizer.decode(ids);
        let out = llama::generate(self.model, &prompts, &opts, Some(&decode), &self.device)?;
        Ok(out
            .iter()
            .map(|g| Completion {
                text: tokenizer.decode(&g.tokens),
                tokens: g.tokens.len(),
            })
            .collect())
    }
}

impl<B: Backend> Sampler for LlamaSampler<'_, B> {
    fn sample(&mut self, rows: &[Row<'_>], temperature: f32) -> Vec<Completion> {
        match self.try_sample(rows, temperature) {
            Ok(out) => out,
            Err(e) => {
                self.error.get_or_insert(e);
                // Graded as wrong; the caller reports `error`.
                rows.iter()
                    .map(|_| Completion {
                        text: String::new(),
                        tokens: 0,
                    })
                    .collect()
            }
        }
    }
}
