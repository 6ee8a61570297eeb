//! The RFT stages' model work on a pretrained Llama-family checkpoint: the
//! engine [`Task`] of stages (a) and (c) (fine-tuning the base checkpoint
//! with the completion-only loss of `crate::rft::completion`) and
//! generation for (b) and (d). Examples come in the checkpoint's tokens
//! from `crate::rft::prompt::Prompter`.

use std::ops::Range;
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::ElementConversion;
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};

use crate::engine::{OptimConfig, Task, TrainConfig};
use crate::llama::{self, GenerateOptions, Llama};
use crate::lora::LoraConfig;
use crate::rft::completion::{batch, loss_units, mean_validation_loss, CompletionBatch, Tokenized};
use crate::rft::config::StageConfig;
use crate::rft::datagen::{Completion, Row, Sampler};
use crate::rft::files::copy_files;
use crate::rft::prompt::Prompter;
use crate::sampling::Sampling;

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

/// The engine task of stages (a) and (c): the base checkpoint trained on
/// `train` (RFT fine-tunes the base model in every round, not the previous
/// round's weights), every weight of it or, with `lora`, fresh adapters on
/// its frozen weights.
pub struct LlamaRftTask {
    pub(crate) base: PathBuf,
    pub(crate) stage: StageConfig,
    pub(crate) train: Vec<Tokenized>,
    pub(crate) validation: Vec<Tokenized>,
    /// Stage (c) with `finetune.mode = "lora"`.
    pub(crate) lora: Option<LoraConfig>,
}

/// Mean cross-entropy of the Llama over the completion tokens of
/// `examples`, right-padded (prompt and padding positions carry weight 0).
pub(crate) fn completion_loss<B: FusedBackend>(
    model: &Llama<B>,
    examples: &[&Tokenized],
    device: &B::Device,
) -> Tensor<B, 1> {
    let batch = CompletionBatch::new(examples, device);
    let [b, t] = batch.targets.dims();
    let logits = model.forward(batch.inputs.clone());
    let vocab = logits.dims()[2];
    let losses = envgen_kernels::cross_entropy(
        logits.reshape([b * t, vocab]),
        batch.targets.clone().reshape([b * t]),
    );
    batch.mean(losses)
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
        let batch = batch(&self.train, self.stage.train.seed, step, rows);
        completion_loss(model, &batch, device)
    }

    fn evaluate(
        &self,
        model: &<Llama<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        mean_validation_loss(&self.validation, micro_batch, |batch| {
            completion_loss(model, batch, device).into_scalar().elem()
        })
    }

    fn units_per_row(&self) -> (usize, &'static str) {
        (1, "samples")
    }

    /// The completion tokens of the rows: what the loss is a mean over
    /// (prompts are masked and lengths vary, so rows carry different
    /// numbers).
    fn loss_units(&self, step: u64, rows: Range<usize>) -> f64 {
        loss_units(&batch(&self.train, self.stage.train.seed, step, rows))
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

/// Continues prompts with a Llama: each row's question in the tokens
/// `task.prompt_format` gives it, batched KV-cached generation with each
/// row's own seed, stopping at the model's end-of-sequence ids and either
/// the end-of-completion newline (plain) or the template's end of turn
/// (chat: never at a newline, see `Prompter::stop_strings`).
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

    fn try_sample(&self, rows: &[Row<'_>], sampling: &Sampling) -> anyhow::Result<Vec<Completion>> {
        let prompts = rows
            .iter()
            .map(|r| self.prompter.prompt_ids(r.prompt))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let opts = GenerateOptions {
            max_new_tokens: self.max_new_tokens,
            sampling: *sampling,
            seed: 0,
            row_seeds: rows.iter().map(|r| r.seed).collect(),
            eos_token_ids: self.prompter.stop_ids(&self.model.config().eos_token_ids),
            stop_strings: self.prompter.stop_strings(),
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
    fn sample(&mut self, rows: &[Row<'_>], sampling: &Sampling) -> Vec<Completion> {
        match self.try_sample(rows, sampling) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pretrained::HfTokenizer;
    use crate::rft::config::PromptFormat;
    use crate::rft::pretrained;
    use crate::rft::prompt::tests::{checkpoint, question, task, CHATML};

    /// The sampler of stages (b) and (d) continues the chat ids: its
    /// greedy completion of a question is that of generating from
    /// `prompt_ids` directly, and not that of the plain prompt.
    #[test]
    fn the_sampler_generates_from_the_chat_prompt() {
        use crate::llama::{self, GenerateOptions};
        type B = crate::backend::Cpu;
        let dir = tempfile::tempdir().unwrap();
        checkpoint(dir.path(), Some(CHATML));
        let tok = HfTokenizer::load(dir.path(), false).unwrap();
        let prompter = Prompter::new(&tok, dir.path(), &task(PromptFormat::Chat, None)).unwrap();
        let cfg = llama::LlamaConfig {
            vocab_size: 259,
            ..pretrained::tiny_llama()
        };
        let device = Default::default();
        // Large weights: a random model whose continuation depends on its prompt.
        let mut weights = llama::model::random_weights(5, 0.5);
        let model = llama::Llama::<B>::build(&cfg, &mut weights, &device).unwrap();
        let prompt = question().prompt();
        let mut sampler = LlamaSampler::new(&model, &prompter, 12, device);
        let rows = [Row {
            prompt: &prompt,
            seed: 0,
        }];
        let sampled = sampler.sample(&rows, &Sampling::greedy());
        assert!(sampler.error.is_none());
        let greedy = |ids: Vec<u32>| {
            let opts = GenerateOptions {
                max_new_tokens: 12,
                row_seeds: vec![0],
                eos_token_ids: prompter.stop_ids(&cfg.eos_token_ids),
                stop_strings: prompter.stop_strings(),
                ..Default::default()
            };
            let decode = |ids: &[u32]| tok.decode(ids);
            let out = llama::generate(&model, &[ids], &opts, Some(&decode), &device).unwrap();
            tok.decode(&out[0].tokens)
        };
        let chat = greedy(prompter.prompt_ids(&prompt).unwrap());
        assert_eq!(sampled[0].text, chat);
        assert_ne!(greedy(tok.encode(&prompt).unwrap()), chat);
    }

    /// An instruct model's answer may span lines: in chat format a row
    /// runs past a newline and ends at the end of turn, eos or the length;
    /// in plain format (RFT's own one-line answers) the newline ends it.
    /// A model with all-zero weights draws uniformly over the bytes, so
    /// newlines come up in some of the 48 rows.
    #[test]
    fn chat_answers_run_past_a_newline_and_plain_ones_stop_there() {
        type B = crate::backend::Cpu;
        let dir = tempfile::tempdir().unwrap();
        checkpoint(dir.path(), Some(CHATML));
        let tok = HfTokenizer::load(dir.path(), false).unwrap();
        let cfg = llama::LlamaConfig {
            vocab_size: 259,
            ..pretrained::tiny_llama()
        };
        let device = Default::default();
        let model =
            llama::Llama::<B>::build(&cfg, &mut llama::model::random_weights(5, 0.0), &device)
                .unwrap();
        let prompt = question().prompt();
        let rows: Vec<Row> = (0..48)
            .map(|seed| Row {
                prompt: &prompt,
                seed,
            })
            .collect();
        let uniform = Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        };
        let max = 24;
        let sample = |format| {
            let prompter = Prompter::new(&tok, dir.path(), &task(format, None)).unwrap();
            let mut sampler = LlamaSampler::new(&model, &prompter, max, device);
            let out = sampler.sample(&rows, &uniform);
            assert!(sampler.error.is_none());
            out
        };
        let chat = sample(PromptFormat::Chat);
        let multi_line = chat
            .iter()
            .filter(|c| c.text.trim_end().contains('\n'))
            .count();
        assert!(
            multi_line > 0,
            "no chat row went on past a newline: {chat:?}"
        );
        let plain = sample(PromptFormat::Plain);
        let mut stopped_at_newline = 0;
        for c in &plain {
            assert!(!c.text.trim_end().contains('\n'), "{c:?}");
            stopped_at_newline += usize::from(c.tokens < max && c.text.ends_with('\n'));
        }
        assert!(stopped_at_newline > 0, "{plain:?}");
    }
}
