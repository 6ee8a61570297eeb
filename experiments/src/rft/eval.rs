//! Greedy-decoding accuracy on held-out questions, and loading a trained
//! model (full weights or a LoRA adapter) back.

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use envgen_kernels::FusedBackend;
use serde::{Deserialize, Serialize};

use super::datagen::{greedy_completions, Completion, Row, Sampler};
use super::task::Question;
use super::tokens::RftTokenizer;
use super::verify::{score, Metrics};
use crate::gpt2::{self, BatchSampleOptions, Gpt2, ModelConfig};
use crate::sampling::Sampling;

pub(crate) const MODEL_FILE: &str = "model.safetensors";
pub(crate) const ADAPTER_FILE: &str = "adapter.safetensors";

// ---------------------------------------------------------------------------
// Generation: the GPT as the datagen `Sampler`, and greedy evaluation.

/// Continues prompts with the GPT: byte tokens (or a GPT-2 checkpoint's,
/// [`GptSampler::with_tokenizer`]), batched KV-cached sampling with one
/// generator per row (its [`Row::seed`]), stopping at the end-of-completion
/// newline (and a checkpoint's end-of-sequence token).
pub struct GptSampler<'a, B: FusedBackend> {
    pub model: &'a Gpt2<B>,
    pub config: &'a ModelConfig,
    pub max_new_tokens: usize,
    pub device: B::Device,
    tokens: Cow<'a, RftTokenizer>,
    /// The first tokenizing error; `Sampler::sample` cannot return one.
    pub error: Option<anyhow::Error>,
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
            tokens: Cow::Owned(RftTokenizer::Bytes),
            error: None,
        }
    }

    /// Prompts and completions in `tokens` instead of bytes.
    pub fn with_tokenizer(self, tokens: &'a RftTokenizer) -> Self {
        Self {
            tokens: Cow::Borrowed(tokens),
            ..self
        }
    }

    fn try_sample(&self, rows: &[Row<'_>], sampling: &Sampling) -> anyhow::Result<Vec<Completion>> {
        let tokens = &*self.tokens;
        let prompts = rows
            .iter()
            .map(|r| tokens.encode_prompt(r.prompt))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let seeds: Vec<u64> = rows.iter().map(|r| r.seed).collect();
        let opts = BatchSampleOptions {
            max_new_tokens: self.max_new_tokens,
            sampling: *sampling,
            seed: 0,
            stop_token: None,
        };
        let stops = |token: u32| tokens.ends_completion(token);
        Ok(gpt2::sample_rows_until(
            self.model,
            self.config,
            &prompts,
            &seeds,
            opts,
            &stops,
            &self.device,
        )
        .iter()
        .map(|t| Completion {
            text: tokens.decode(t),
            tokens: t.len(),
        })
        .collect())
    }
}

impl<B: FusedBackend> Sampler for GptSampler<'_, B> {
    fn sample(&mut self, rows: &[Row<'_>], sampling: &Sampling) -> Vec<Completion> {
        match self.try_sample(rows, sampling) {
            Ok(out) => out,
            Err(e) => {
                self.error.get_or_insert(e);
                // Graded as wrong; the caller reports `error`.
                let empty = Completion {
                    text: String::new(),
                    tokens: 0,
                };
                vec![empty; rows.len()]
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rft::datagen::Row;
    use crate::rft::tokens::tests::merging_tokenizer;

    /// The GPT's sampler in a checkpoint's tokens stops each row right
    /// after its first completion-ending token (newline text or eos), and
    /// otherwise runs to the token limit.
    #[test]
    fn the_sampler_stops_a_row_at_its_first_ending_token() {
        use crate::backend::Cpu;
        use crate::gpt2::ModelConfig;

        let dir = tempfile::tempdir().unwrap();
        let tokenizer = merging_tokenizer(dir.path());
        let eos = tokenizer.token_id("<|endoftext|>").unwrap();
        let tokens = RftTokenizer::Hf {
            tokenizer,
            eos: vec![eos],
            context: 64,
        };
        let cfg = ModelConfig {
            n_layer: 1,
            n_head: 2,
            n_embd: 16,
            block_size: 64,
            vocab_size: 300,
            dropout: 0.0,
        };
        let model = cfg.init::<Cpu>(&Default::default());
        let max = 12;
        let mut sampler =
            GptSampler::new(&model, &cfg, max, Default::default()).with_tokenizer(&tokens);
        let rows: Vec<Row> = (0..64)
            .map(|seed| Row {
                prompt: "How many grams are in 2 kilograms?\nA: ",
                seed,
            })
            .collect();
        // A random model at a high temperature: near-uniform draws over
        // the vocabulary, so some rows end early and some run out.
        let out = sampler.sample(
            &rows,
            &Sampling {
                temperature: 5.0,
                top_k: 0,
                top_p: 1.0,
            },
        );
        assert!(sampler.error.is_none());
        let (mut ended, mut ran_out) = (0, 0);
        for completion in &out {
            assert!(completion.tokens >= 1 && completion.tokens <= max);
            // Only the last token may end the completion: the text holds a
            // newline only in its trailing whitespace (the last token's; an
            // eos decodes to nothing).
            let body = completion.text.trim_end();
            assert!(!body.contains('\n'), "{completion:?}");
            if completion.tokens < max {
                ended += 1;
            } else {
                ran_out += 1;
            }
        }
        assert!(ended > 0 && ran_out > 0, "{ended} ended, {ran_out} ran out");
    }
}
