//! Batched generation with a KV cache: one prefill, then one token per row
//! per step.
//!
//! Per-row lengths, not left padding. Left padding puts every row's last
//! prompt token in the same column, but then each row needs its own
//! position ids and a mask over its pad keys, and pad keys sit in the cache
//! for the rest of the generation. Here every row is at the same position
//! at every step, so RoPE angles and the causal mask are shared and no pad
//! token is ever attended to: the prefill feeds the first `min(prompt
//! length)` tokens of every row at once, and then each step feeds, per row,
//! either its next prompt token (a row whose prompt is longer is still
//! reading it) or the token it just sampled. A row's tokens, positions and
//! attention are exactly those of generating it alone; the price is that
//! prompt tokens beyond the shortest prompt go through one step each
//! (RFT's prompts share a template, so they are close in length).
//!
//! Finished rows leave the batch (their cache rows are dropped), so the
//! cost follows the rows still generating. Row `i` samples from its own
//! generator seeded by (`seed`, `i`): a row's sample does not depend on the
//! other rows of its batch. RFT gives each row its own seed instead
//! (`GenerateOptions::row_seeds`), so a sample does not depend on its
//! place in the batch either.

use burn::prelude::*;
use burn::tensor::TensorData;
use rand::{rngs::StdRng, SeedableRng};

use super::model::{KvCache, Llama};
use crate::error::UserError;
use crate::sampling::{self, Sampling};

/// How to continue a batch of prompts.
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    /// Greedy (the first of equal largest logits, as `argmax`; the
    /// default), or temperature, top-k and top-p as transformers applies
    /// them.
    pub sampling: Sampling,
    pub seed: u64,
    /// One seed per row (RFT: one per question and sample), so that a row
    /// draws the same tokens in any batch at any position; empty = row `i`
    /// is seeded by (`seed`, `i`).
    pub row_seeds: Vec<u64>,
    /// A row stops after emitting one of these (kept in its tokens).
    pub eos_token_ids: Vec<u32>,
    /// A row stops once its decoded continuation contains one of these
    /// (checked on text, so a stop string split across tokens is found).
    pub stop_strings: Vec<String>,
}

/// Why a row stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Eos,
    StopString,
    /// `max_new_tokens`, or the model's `max_position_embeddings`.
    Length,
}

impl Finish {
    pub fn name(self) -> &'static str {
        match self {
            Finish::Eos => "eos",
            Finish::StopString => "stop_string",
            Finish::Length => "length",
        }
    }
}

/// One row's continuation (prompt not included).
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub finish: Finish,
}

/// Turns a row's generated tokens into text (for the stop strings).
pub type Decode<'a> = &'a dyn Fn(&[u32]) -> String;

/// What generating `rows` rows of up to `length` tokens each holds besides
/// the weights (engine::budget): the key/value cache of every layer, the
/// rows' next-token logits and their tokens. In f64, so that `--batch 1e9`
/// is refused by the check rather than aborting in the allocator
/// (issue #40); `key` names the knob (`--batch`, `datagen.gen_batch`).
pub fn memory_part(
    cfg: &super::LlamaConfig,
    rows: usize,
    length: usize,
    key: &str,
) -> crate::engine::budget::Part {
    let (rows, length) = (rows as f64, length as f64);
    let kv =
        2.0 * cfg.num_hidden_layers as f64 * cfg.num_key_value_heads as f64 * cfg.head_dim as f64;
    let bytes = 4.0 * rows * (length * kv + cfg.vocab_size as f64 + length);
    crate::engine::budget::Part::data(key, rows, bytes)
}

/// Continue each prompt. `decode` turns a row's generated tokens into text
/// for the stop strings (needed only when there are any).
pub fn generate<B: Backend>(
    model: &Llama<B>,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    decode: Option<Decode<'_>>,
    device: &B::Device,
) -> anyhow::Result<Vec<Generation>> {
    let cfg = model.config();
    let limit = cfg.max_position_embeddings;
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() || p.len() > limit {
            return Err(UserError::usage(format!(
                "prompt {i} has {} tokens; the model takes 1 to {limit} (max_position_embeddings)",
                p.len()
            ))
            .with_fix("give a non-empty prompt that fits the model's context")
            .into());
        }
        if let Some(&t) = p.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return Err(UserError::usage(format!(
                "prompt {i} holds token {t}, outside the model's vocabulary of {}",
                cfg.vocab_size
            ))
            .with_fix("encode the prompt with the checkpoint's own tokenizer.json")
            .into());
        }
    }
    if !opts.stop_strings.is_empty() && decode.is_none() {
        return Err(
            UserError::usage("stop strings need a tokenizer to decode with")
                .with_fix("pass the checkpoint's tokenizer")
                .into(),
        );
    }
    let mut rows: Vec<Vec<u32>> = prompts.to_vec();
    let mut finish: Vec<Option<Finish>> = prompts
        .iter()
        .map(|p| (opts.max_new_tokens == 0 || p.len() >= limit).then_some(Finish::Length))
        .collect();
    if !opts.row_seeds.is_empty() && opts.row_seeds.len() != prompts.len() {
        anyhow::bail!(
            "{} row seeds for {} prompts: give one per prompt or none",
            opts.row_seeds.len(),
            prompts.len()
        );
    }
    let mut rngs: Vec<StdRng> = (0..rows.len())
        .map(|i| {
            let seed = opts.row_seeds.get(i).copied();
            StdRng::seed_from_u64(seed.unwrap_or_else(|| row_seed(opts.seed, i)))
        })
        .collect();
    // Rows still generating, in cache order.
    let mut active: Vec<usize> = (0..rows.len()).filter(|&i| finish[i].is_none()).collect();
    if active.is_empty() {
        return Ok(done(rows, prompts, finish));
    }
    let mut cache = KvCache::new(model.layers.len());
    let prefill = active.iter().map(|&i| rows[i].len()).min().unwrap_or(1);
    let tokens: Vec<i64> = active
        .iter()
        .flat_map(|&i| rows[i][..prefill].iter().map(|&t| i64::from(t)))
        .collect();
    let input =
        Tensor::<B, 2, Int>::from_data(TensorData::new(tokens, [active.len(), prefill]), device);
    let mut logits = last_logits(model, input, &mut cache);
    loop {
        crate::engine::health::finite_output(&logits, "the model")?;
        let position = cache.len();
        let vocab = logits.len() / active.len();
        for (slot, &i) in active.iter().enumerate() {
            if position < rows[i].len() {
                continue; // still reading its prompt
            }
            let token = sampling::pick(
                &logits[slot * vocab..(slot + 1) * vocab],
                &opts.sampling,
                &mut rngs[i],
            );
            rows[i].push(token);
            let generated = &rows[i][prompts[i].len()..];
            finish[i] = if opts.eos_token_ids.contains(&token) {
                Some(Finish::Eos)
            } else if stops(generated, &opts.stop_strings, decode) {
                Some(Finish::StopString)
            } else if generated.len() >= opts.max_new_tokens || rows[i].len() >= limit {
                Some(Finish::Length)
            } else {
                None
            };
        }
        let keep: Vec<usize> = (0..active.len())
            .filter(|&slot| finish[active[slot]].is_none())
            .collect();
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            active = keep.iter().map(|&slot| active[slot]).collect();
            cache.retain_rows(&keep, device);
        }
        let tokens: Vec<i64> = active
            .iter()
            .map(|&i| i64::from(rows[i][position]))
            .collect();
        let input =
            Tensor::<B, 2, Int>::from_data(TensorData::new(tokens, [active.len(), 1]), device);
        logits = last_logits(model, input, &mut cache);
    }
    Ok(done(rows, prompts, finish))
}

/// Logits `[time · vocab]` of one sequence by the full forward (no cache):
/// what the cached path is checked against.
pub fn logits_of<B: Backend>(model: &Llama<B>, tokens: &[u32], device: &B::Device) -> Vec<f32> {
    let data: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
    let input = Tensor::<B, 2, Int>::from_data(TensorData::new(data, [1, tokens.len()]), device);
    model
        .forward(input)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_default()
}

fn done(rows: Vec<Vec<u32>>, prompts: &[Vec<u32>], finish: Vec<Option<Finish>>) -> Vec<Generation> {
    rows.into_iter()
        .zip(prompts)
        .zip(finish)
        .map(|((row, prompt), finish)| Generation {
            tokens: row[prompt.len()..].to_vec(),
            finish: finish.unwrap_or(Finish::Length),
        })
        .collect()
}

/// Feed `input` and return the next-token logits of each row's last
/// position, `[rows · vocab]` (the head runs on the last position only).
fn last_logits<B: Backend>(
    model: &Llama<B>,
    input: Tensor<B, 2, Int>,
    cache: &mut KvCache<B>,
) -> Vec<f32> {
    let [rows, t] = input.dims();
    let hidden = model.forward_cached(input, cache);
    let d = hidden.dims()[2];
    let last = hidden.slice([0..rows, t - 1..t, 0..d]);
    model
        .logits(last)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_default()
}

fn stops(generated: &[u32], stop_strings: &[String], decode: Option<Decode<'_>>) -> bool {
    match decode {
        Some(decode) if !stop_strings.is_empty() => {
            let text = decode(generated);
            stop_strings.iter().any(|s| text.contains(s.as_str()))
        }
        _ => false,
    }
}

fn row_seed(seed: u64, row: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((row as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;
    use crate::llama::model::{random_weights, tests::tiny};

    fn model(kv: usize) -> Llama<Cpu> {
        Llama::build(
            &tiny(kv, false),
            &mut random_weights(5, 0.5),
            &Default::default(),
        )
        .unwrap()
    }

    /// Greedy by the full forward over the whole sequence at every step:
    /// what the cache must reproduce.
    fn uncached_greedy(model: &Llama<Cpu>, prompt: &[u32], n: usize) -> Vec<u32> {
        let mut row: Vec<i64> = prompt.iter().map(|&t| i64::from(t)).collect();
        for _ in 0..n {
            let len = row.len();
            let input = Tensor::<Cpu, 2, Int>::from_data(
                TensorData::new(row.clone(), [1, len]),
                &Default::default(),
            );
            let logits: Vec<f32> = model.forward(input).into_data().to_vec().unwrap();
            let vocab = logits.len() / len;
            let last = &logits[(len - 1) * vocab..];
            row.push(
                sampling::pick(last, &Sampling::greedy(), &mut StdRng::seed_from_u64(0)) as i64,
            );
        }
        row[prompt.len()..].iter().map(|&t| t as u32).collect()
    }

    #[test]
    fn cached_batched_greedy_equals_the_uncached_forward_row_by_row() {
        for kv in [4, 2] {
            let model = model(kv);
            let prompts = vec![vec![1, 2, 3], vec![4], vec![5, 6, 7, 8, 9, 10]];
            let opts = GenerateOptions {
                max_new_tokens: 9,
                ..Default::default()
            };
            let out = generate(&model, &prompts, &opts, None, &Default::default()).unwrap();
            for (prompt, got) in prompts.iter().zip(&out) {
                assert_eq!(
                    got.tokens,
                    uncached_greedy(&model, prompt, 9),
                    "kv {kv}, prompt {prompt:?}"
                );
                assert_eq!(got.finish, Finish::Length);
            }
        }
    }

    #[test]
    fn a_batch_samples_what_each_row_samples_alone() {
        let model = model(2);
        let prompts = vec![vec![1, 2, 3, 4], vec![9], vec![5, 6]];
        let opts = GenerateOptions {
            max_new_tokens: 10,
            sampling: Sampling {
                temperature: 0.9,
                top_k: 50,
                top_p: 0.8,
            },
            seed: 42,
            ..Default::default()
        };
        let batch = generate(&model, &prompts, &opts, None, &Default::default()).unwrap();
        for (i, prompt) in prompts.iter().enumerate() {
            // Alone, the row keeps its generator by giving it row index i.
            let mut alone_prompts = vec![vec![0u32]; i];
            alone_prompts.push(prompt.clone());
            let alone = generate(&model, &alone_prompts, &opts, None, &Default::default()).unwrap();
            assert_eq!(batch[i], alone[i], "row {i}");
        }
        // With a seed per row, a row is the same at any place in any batch.
        let seeded = GenerateOptions {
            row_seeds: vec![7, 8, 9],
            ..opts.clone()
        };
        let batch_seeded = generate(&model, &prompts, &seeded, None, &Default::default()).unwrap();
        let last_alone = GenerateOptions {
            row_seeds: vec![9],
            ..opts.clone()
        };
        let alone = generate(
            &model,
            &prompts[2..],
            &last_alone,
            None,
            &Default::default(),
        )
        .unwrap();
        assert_eq!(batch_seeded[2], alone[0]);
        assert_ne!(batch_seeded[2], batch[2], "the row seed is used");
        let again = generate(&model, &prompts, &opts, None, &Default::default()).unwrap();
        assert_eq!(batch, again, "same seed, same samples");
        let other = GenerateOptions { seed: 43, ..opts };
        assert_ne!(
            batch,
            generate(&model, &prompts, &other, None, &Default::default()).unwrap()
        );
    }

    #[test]
    fn rows_stop_on_eos_stop_strings_and_the_context() {
        let model = model(2);
        let prompts = vec![vec![1, 2], vec![3]];
        let opts = GenerateOptions {
            max_new_tokens: 12,
            ..Default::default()
        };
        let free = generate(&model, &prompts, &opts, None, &Default::default()).unwrap();
        // Stop on the row's 4th greedy token as eos: 4 tokens, eos kept.
        let eos = free[0].tokens[3];
        let first = free[0].tokens.iter().position(|&t| t == eos).unwrap();
        let with_eos = GenerateOptions {
            eos_token_ids: vec![eos],
            ..opts.clone()
        };
        let out = generate(&model, &prompts, &with_eos, None, &Default::default()).unwrap();
        assert_eq!(out[0].tokens, free[0].tokens[..=first]);
        assert_eq!(out[0].finish, Finish::Eos);
        // A stop string spanning two tokens ("a5" "b9" → "5b").
        let decode = |ids: &[u32]| ids.iter().map(|t| format!("a{t}b")).collect::<String>();
        let (t1, t2) = (free[1].tokens[1], free[1].tokens[2]);
        let stop = GenerateOptions {
            stop_strings: vec![format!("{t1}ba{t2}")],
            ..opts.clone()
        };
        let out = generate(&model, &prompts, &stop, Some(&decode), &Default::default()).unwrap();
        let want = (1..=free[1].tokens.len())
            .find(|&n| decode(&free[1].tokens[..n]).contains(&stop.stop_strings[0]))
            .unwrap();
        assert_eq!(out[1].finish, Finish::StopString);
        assert_eq!(out[1].tokens, free[1].tokens[..want]);
        // The context (32 positions) caps a long prompt.
        let long = vec![vec![1u32; 30]];
        let out = generate(&model, &long, &opts, None, &Default::default()).unwrap();
        assert_eq!((out[0].tokens.len(), out[0].finish), (2, Finish::Length));
        let e = generate(&model, &[vec![]], &opts, None, &Default::default()).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
    }
}
