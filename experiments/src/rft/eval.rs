//! Greedy-decoding accuracy on held-out questions, and loading a trained
//! model (full weights or a LoRA adapter) back.

use std::path::Path;
use std::time::Instant;

use envgen_kernels::FusedBackend;
use serde::{Deserialize, Serialize};

use super::datagen::Sampler;
use super::task::{Question, END_OF_COMPLETION};
use super::verify::{score, Metrics};
use crate::data::Tokenizer;
use crate::gpt2::{self, BatchSampleOptions, Gpt2, ModelConfig};

pub(crate) const MODEL_FILE: &str = "model.safetensors";
pub(crate) const ADAPTER_FILE: &str = "adapter.safetensors";

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
