//! Batched sampling with a key/value cache, for workloads that continue many
//! prompts at once (RFT's rejection sampling and greedy evaluation).
//!
//! [`super::sample`] re-runs the whole context for every new token, which is
//! fine for one prompt; sampling thousands of completions that way costs
//! ~context-length times more. Here each step feeds exactly one token per row
//! through the model's own layers and appends its keys/values to a cache.
//! Rows need no padding: every row starts at position 0 and is fed its own
//! prompt tokens until its prompt is used up, then its sampled tokens (rows
//! with shorter prompts simply start sampling earlier). Finished rows leave
//! the batch, so the cost follows the rows still generating.

use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::{Int, TensorData};
use envgen_kernels::autocast::{full, half};
use envgen_kernels::FusedBackend;
use rand::{rngs::StdRng, SeedableRng};

use super::model::{layer_norm, Block, Gpt2, ModelConfig};
use crate::lora::adapter;
use crate::sampling::{self, Sampling};

/// How to continue a batch of prompts.
#[derive(Debug, Clone, Copy)]
pub struct BatchSampleOptions {
    /// At most this many new tokens per row (the context is also capped at
    /// the model's block size).
    pub max_new_tokens: usize,
    /// Greedy, or temperature, top-k and top-p as transformers applies them.
    pub sampling: Sampling,
    /// [`sample_batch`]: row `i` draws from its own generator seeded by
    /// (`seed`, `i`). [`sample_rows`] takes each row's seed instead.
    pub seed: u64,
    /// A row stops after emitting this token (it is kept in the output).
    pub stop_token: Option<u32>,
}

/// Keys and values of one layer: `[rows, heads, positions, head_dim]`.
struct LayerCache<B: FusedBackend> {
    keys: Tensor<B, 4>,
    values: Tensor<B, 4>,
}

/// For each prompt, the tokens generated after it (prompt not included).
pub fn sample_batch<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    prompts: &[Vec<u32>],
    opts: BatchSampleOptions,
    device: &B::Device,
) -> Vec<Vec<u32>> {
    let seeds: Vec<u64> = (0..prompts.len()).map(|i| row_seed(opts.seed, i)).collect();
    sample_rows(model, cfg, prompts, &seeds, opts, device)
}

/// [`sample_batch`] with each row's own seed (`seeds[i]` for `prompts[i]`;
/// `opts.seed` is unused). A row's tokens depend only on its prompt and
/// seed, never on the rows beside it: each row has its own generator, and
/// every operation of a step is row-wise (on the CPU backend the row's
/// numbers are bit-identical whatever the batch holds; see the tests).
/// This is what lets a caller pick the batch for speed alone.
pub fn sample_rows<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    prompts: &[Vec<u32>],
    seeds: &[u64],
    opts: BatchSampleOptions,
    device: &B::Device,
) -> Vec<Vec<u32>> {
    let stop = |token: u32| opts.stop_token == Some(token);
    sample_rows_until(model, cfg, prompts, seeds, opts, &stop, device)
}

/// [`sample_rows`] where a row stops after the first token `stops` accepts
/// (kept in the output); `opts.stop_token` is unused. A checkpoint's
/// tokenizer has many tokens that end a completion (every token whose text
/// holds the end marker, and its end-of-sequence ids), not one.
pub fn sample_rows_until<B: FusedBackend>(
    model: &Gpt2<B>,
    cfg: &ModelConfig,
    prompts: &[Vec<u32>],
    seeds: &[u64],
    opts: BatchSampleOptions,
    stops: &dyn Fn(u32) -> bool,
    device: &B::Device,
) -> Vec<Vec<u32>> {
    // An empty prompt gets token 0 as its start, like `sample`.
    let mut rows: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| if p.is_empty() { vec![0] } else { p.clone() })
        .collect();
    let prompt_len: Vec<usize> = rows.iter().map(Vec::len).collect();
    let mut rngs: Vec<StdRng> = (0..rows.len())
        .map(|i| StdRng::seed_from_u64(seeds.get(i).copied().unwrap_or(opts.seed)))
        .collect();
    let mut finished: Vec<bool> = prompt_len
        .iter()
        .map(|&len| opts.max_new_tokens == 0 || len >= cfg.block_size)
        .collect();
    // Indices (into `rows`) of the rows still in the batch, in cache order.
    let mut active: Vec<usize> = (0..rows.len()).filter(|&i| !finished[i]).collect();
    let mut cache: Vec<Option<LayerCache<B>>> = (0..model.h.len()).map(|_| None).collect();
    let mut position = 0usize;
    while !active.is_empty() && position < cfg.block_size {
        let tokens: Vec<i64> = active
            .iter()
            .map(|&i| i64::from(rows[i][position]))
            .collect();
        let n = tokens.len();
        let input = Tensor::<B, 2, Int>::from_data(TensorData::new(tokens, [n, 1]), device);
        let logits = step(model, input, position, &mut cache);
        let logits: Vec<f32> = logits
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap_or_default();
        let vocab = logits.len() / n.max(1);
        for (slot, &i) in active.iter().enumerate() {
            // Still reading its prompt: the next token is already known.
            if position + 1 < rows[i].len() {
                continue;
            }
            let row_logits = &logits[slot * vocab..(slot + 1) * vocab];
            let token = sampling::pick(row_logits, &opts.sampling, &mut rngs[i]);
            rows[i].push(token);
            let generated = rows[i].len() - prompt_len[i];
            finished[i] =
                stops(token) || generated >= opts.max_new_tokens || rows[i].len() >= cfg.block_size;
        }
        position += 1;
        let keep: Vec<usize> = (0..active.len())
            .filter(|&slot| !finished[active[slot]])
            .collect();
        if keep.len() < active.len() {
            active = keep.iter().map(|&slot| active[slot]).collect();
            if !active.is_empty() {
                shrink(&mut cache, &keep, device);
            }
        }
    }
    rows.iter()
        .zip(&prompt_len)
        .map(|(row, &len)| row[len.min(row.len())..].to_vec())
        .collect()
}

fn row_seed(seed: u64, row: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((row as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9))
}

/// Keep only the cache rows `keep` (slots of the current batch).
fn shrink<B: FusedBackend>(
    cache: &mut [Option<LayerCache<B>>],
    keep: &[usize],
    device: &B::Device,
) {
    let index: Vec<i64> = keep.iter().map(|&k| k as i64).collect();
    let index = Tensor::<B, 1, Int>::from_data(TensorData::new(index, [keep.len()]), device);
    for layer in cache.iter_mut().flatten() {
        layer.keys = layer.keys.clone().select(0, index.clone());
        layer.values = layer.values.clone().select(0, index.clone());
    }
}

/// One token per row at `position`; returns next-token logits `[rows, vocab]`.
fn step<B: FusedBackend>(
    model: &Gpt2<B>,
    tokens: Tensor<B, 2, Int>,
    position: usize,
    cache: &mut [Option<LayerCache<B>>],
) -> Tensor<B, 2> {
    let device = tokens.device();
    let [rows, _] = tokens.dims();
    let pos =
        Tensor::<B, 1, Int>::arange(position as i64..position as i64 + 1, &device).reshape([1, 1]);
    let mut x = model.wte.forward(tokens) + model.wpe.forward(pos);
    for (block, layer) in model.h.iter().zip(cache.iter_mut()) {
        x = block_step(block, x, layer);
    }
    let x = layer_norm(&model.ln_f, x);
    let d = x.dims()[2];
    full(half(x.reshape([rows, d])).matmul(half(model.wte.weight.val()).transpose()))
}

/// [`Block::forward`] for a single new position, attending to the cache.
fn block_step<B: FusedBackend>(
    block: &Block<B>,
    x: Tensor<B, 3>,
    layer: &mut Option<LayerCache<B>>,
) -> Tensor<B, 3> {
    let [b, _, _] = x.dims();
    let attn = &block.attn;
    // Heads × head width; less than the model width in a head-pruned block.
    let (heads, hd) = (attn.n_head, attn.head_dim());
    let width = heads * hd;
    let qkv = adapter::forward(
        &attn.c_attn,
        attn.c_attn_lora.as_ref(),
        layer_norm(&block.ln_1, x.clone()),
    );
    let split = |i: usize| {
        qkv.clone()
            .slice([0..b, 0..1, i * width..(i + 1) * width])
            .reshape([b, 1, heads, hd])
            .swap_dims(1, 2)
    };
    let (q, k, v) = (split(0), split(1), split(2));
    let (keys, values) = match layer.take() {
        Some(old) => (
            Tensor::cat(vec![old.keys, k], 2),
            Tensor::cat(vec![old.values, v], 2),
        ),
        None => (k, v),
    };
    // The newest position may see every cached one: no mask needed.
    // Scores and softmax in f32 (the autocast rule), products in q's type.
    let scores = full(q.matmul(keys.clone().swap_dims(2, 3))) / (hd as f64).sqrt();
    let y = half(softmax(scores, 3)).matmul(values.clone());
    *layer = Some(LayerCache { keys, values });
    let x = x + full(adapter::forward(
        &attn.c_proj,
        attn.c_proj_lora.as_ref(),
        y.swap_dims(1, 2).reshape([b, 1, width]),
    ));
    x.clone() + full(block.mlp.forward(layer_norm(&block.ln_2, x)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;
    use crate::gpt2::{sample, SampleOptions};

    fn tiny() -> (ModelConfig, Gpt2<Cpu>) {
        let cfg = ModelConfig {
            n_layer: 2,
            n_head: 2,
            n_embd: 16,
            block_size: 24,
            vocab_size: 11,
            dropout: 0.0,
        };
        <Cpu as Backend>::seed(&Default::default(), 3);
        let model = cfg.init::<Cpu>(&Default::default());
        (cfg, model)
    }

    #[test]
    fn cached_greedy_matches_the_full_forward_sampler() {
        let (cfg, model) = tiny();
        matches_full_forward(&cfg, &model);
        // A pruned model: one head of width 8 and 40 MLP neurons per block.
        let pruned = cfg.init_shaped::<Cpu>(1, 40, &Default::default());
        assert_eq!(pruned.h[0].attn.head_dim(), 8);
        matches_full_forward(&cfg, &pruned);
    }

    fn matches_full_forward(cfg: &ModelConfig, model: &Gpt2<Cpu>) {
        let prompts = vec![vec![1, 2, 3], vec![4], vec![5, 6, 7, 8, 9]];
        let opts = BatchSampleOptions {
            max_new_tokens: 8,
            sampling: Sampling::greedy(),
            seed: 0,
            stop_token: None,
        };
        let batched = sample_batch(model, cfg, &prompts, opts, &Default::default());
        for (prompt, got) in prompts.iter().zip(&batched) {
            let want = sample(
                model,
                cfg,
                prompt,
                SampleOptions {
                    tokens: 8,
                    sampling: Sampling::greedy(),
                    seed: 0,
                    vocab_limit: None,
                },
                &Default::default(),
            )
            .unwrap();
            assert_eq!(got, &want, "prompt {prompt:?}");
        }
    }

    #[test]
    fn rows_stop_at_the_stop_token_and_the_block_size() {
        let (cfg, model) = tiny();
        let prompts = vec![vec![1; 20], vec![2, 3]];
        let opts = BatchSampleOptions {
            max_new_tokens: 50,
            sampling: Sampling {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
            },
            seed: 9,
            stop_token: Some(4),
        };
        let out = sample_batch(&model, &cfg, &prompts, opts, &Default::default());
        for (prompt, row) in prompts.iter().zip(&out) {
            assert!(prompt.len() + row.len() <= cfg.block_size, "{row:?}");
            if let Some(at) = row.iter().position(|&t| t == 4) {
                assert_eq!(at + 1, row.len(), "tokens after the stop token: {row:?}");
            } else {
                assert_eq!(prompt.len() + row.len(), cfg.block_size);
            }
        }
        // Same seed, different batch company: same sample for the row.
        let alone = sample_batch(&model, &cfg, &prompts[..1], opts, &Default::default());
        assert_eq!(alone[0], out[0]);
    }
}
