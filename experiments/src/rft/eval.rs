//! Greedy-decoding accuracy on held-out questions, and loading a trained
//! model (full weights or a LoRA adapter) back.

use std::path::Path;
use std::time::Instant;

use envgen_kernels::FusedBackend;
use serde::{Deserialize, Serialize};

use super::datagen::{greedy_completions, Completion, Row, Sampler};
use super::task::{Question, END_OF_COMPLETION};
use super::verify::{score, Metrics};
use crate::data::Tokenizer;
use crate::gpt2::{self, BatchSampleOptions, Gpt2, ModelConfig};

pub(crate) const MODEL_FILE: &str = "model.safetensors";
pub(crate) const ADAPTER_FILE: &str = "adapter.safetensors";

// ---------------------------------------------------------------------------
// Generation: the GPT as the datagen `Sampler`, and greedy evaluation.

/// Continues prompts with the GPT: byte tokens, batched KV-cached sampling
/// with one generator per row (its [`Row::seed`]), stopping at the
/// end-of-completion newline.
pub struct GptSampler<'a, B: FusedBackend> {
    pub model: &'a Gpt2<B>,
    pub config: &'a ModelConfig,
    pub max_new_tokens: usize,
    pub device: B::Device,
}

impl<'a, B: FusedBackend> GptSampler<'a, B> {
    pub fn new(
        model: &'a Gpt2<B>,
        config: &'a ModelConfig,
        max_new_tokens: usize,
        device: B::Device,
    ) -> Self {
        Self {
            model,
            config,
            max_new_tokens,
            device,
        }
    }
}

impl<B: FusedBackend> Sampler for GptSampler<'_, B> {
    fn sample(&mut self, rows: &[Row<'_>], temperature: f32) -> Vec<Completion> {
        let tokenizer = Tokenizer::byte();
        let stop = tokenizer.encode(END_OF_COMPLETION);
        let prompts: Vec<Vec<u32>> = rows.iter().map(|r| tokenizer.encode(r.prompt)).collect();
        let seeds: Vec<u64> = rows.iter().map(|r| r.seed).collect();
        let opts = BatchSampleOptions {
            max_new_tokens: self.max_new_tokens,
            temperature,
            top_k: None,
            seed: 0,
            stop_token: stop.first().copied(),
        };
        gpt2::sample_rows(
            self.model,
            self.config,
            &prompts,
            &seeds,
            opts,
            &self.device,
        )
        .iter()
        .map(|t| Completion {
            text: tokenizer.decode(t),
            tokens: t.len(),
        })
        .collect()
    }
}

/// Stage (d): greedy completions of the held-out questions, graded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    pub metrics: Metrics,
    pub samples_per_s: f64,
    /// Wall time of the evaluation (absent in records from before: 0).
    #[serde(default)]
    pub seconds: f64,
    /// The first few (question, completion) pairs, for reading.
    pub examples: Vec<(String, String)>,
}

/// Greedy accuracy / answer rate of `model` on `questions`, `gen_batch`
/// rows per generation call; `on_batch` sees the questions done.
pub fn evaluate_accuracy<B: FusedBackend>(
    model: &Gpt2<B>,
    config: &ModelConfig,
    questions: &[Question],
    max_new_tokens: usize,
    gen_batch: usize,
    device: &B::Device,
    on_batch: &mut dyn FnMut(usize),
) -> Evaluation {
    let mut sampler = GptSampler::new(model, config, max_new_tokens, device.clone());
    evaluate_with(&mut sampler, questions, gen_batch, on_batch)
}

/// [`evaluate_accuracy`] with any [`Sampler`].
pub fn evaluate_with(
    sampler: &mut dyn Sampler,
    questions: &[Question],
    gen_batch: usize,
    on_batch: &mut dyn FnMut(usize),
) -> Evaluation {
    let started = Instant::now();
    let prompts: Vec<String> = questions.iter().map(Question::prompt).collect();
    let completions: Vec<String> = greedy_completions(sampler, &prompts, gen_batch, on_batch)
        .into_iter()
        .map(|c| c.text)
        .collect();
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
        seconds,
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
