//! The next token, chosen as transformers' `generate` chooses it: greedy
//! (the first of equal largest logits), or a draw from the logits after
//! transformers' sampling processors, in their order — temperature, then
//! top-k, then top-p (`GenerationMixin._get_logits_processor` in
//! transformers/generation/utils.py, read in the test venv's transformers
//! 5.24: `TemperatureLogitsWarper` when temperature ≠ 1, `TopKLogitsWarper`
//! when top_k ≠ 0, `TopPLogitsWarper` when top_p < 1, appended in that
//! order to the `LogitsProcessorList`). Every sampler of envgen (GPT-2's
//! and Llama's, RFT's datagen, `envgen sample`) picks its tokens here.
//!
//! Each processor is written from transformers/generation/logits_process.py
//! (same version):
//!
//! - temperature divides the logits (in f32, as torch does);
//! - top-k keeps every token whose scaled logit is not below the k-th
//!   largest (`scores < topk(scores, k)[-1]` is removed), so tokens tied
//!   with the k-th are all kept;
//! - top-p sorts the survivors ascending, sums their softmax from the
//!   least likely up, removes those whose running sum is `<= 1 - top_p`,
//!   and always keeps the most likely. Ties at the nucleus edge are broken
//!   here by id (the lower id counts as the more likely); torch leaves
//!   their order to its sort.
//!
//! The draw is one uniform number per token over the kept tokens in
//! descending order, so a seed gives the same tokens on every machine.

use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// transformers' `GenerationConfig` default for `top_k` when a checkpoint
/// and the caller say nothing (`_get_default_generation_params` in
/// transformers/generation/configuration_utils.py, 5.24: `"top_k": 50`).
pub const TRANSFORMERS_TOP_K: usize = 50;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// 0 = greedy; otherwise the logits are divided by it.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (ties with the last included);
    /// 0 = no top-k filter.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability
    /// reaches `top_p`; 1 = no nucleus filter.
    pub top_p: f32,
}

/// Greedy: what transformers does when neither the checkpoint nor the
/// caller asks for sampling (`do_sample` defaults to False).
impl Default for Sampling {
    fn default() -> Self {
        Self::greedy()
    }
}

impl Sampling {
    pub const fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
        }
    }

    /// `generate(do_sample=True, temperature=t)` with nothing else said:
    /// transformers' top-k of 50, no nucleus.
    pub const fn transformers(temperature: f32) -> Self {
        Self {
            temperature,
            top_k: TRANSFORMERS_TOP_K,
            top_p: 1.0,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// What is wrong with these settings, by key (`temperature`, `top_p`),
    /// for the caller to name its own file or flag; None when they are
    /// usable.
    pub fn problem(&self) -> Option<(&'static str, String, &'static str)> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Some((
                "temperature",
                self.temperature.to_string(),
                "use a temperature >= 0 (0 = greedy; 0.6-0.8 is usual for sampling)",
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Some((
                "top_p",
                self.top_p.to_string(),
                "use a top_p in (0, 1], e.g. 0.9, or 1 for no nucleus filter",
            ));
        }
        None
    }
}

/// The first index of the largest logit.
fn argmax(logits: &[f32]) -> usize {
    logits
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

/// Token ids by decreasing logit, equal logits by increasing id.
fn descending(scores: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    // Stable: equal scores keep id order, so the draw is reproducible.
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

/// The tokens a draw may pick, most likely first, with their unnormalized
/// weights `exp(score - max)` (the softmax before its division).
fn kept(logits: &[f32], sampling: &Sampling) -> Vec<(usize, f64)> {
    // TemperatureLogitsWarper: only when temperature != 1, in f32.
    let scores: Vec<f32> = if sampling.temperature == 1.0 {
        logits.to_vec()
    } else {
        logits.iter().map(|&l| l / sampling.temperature).collect()
    };
    let order = descending(&scores);
    let mut count = order.len();
    // TopKLogitsWarper: drop what is below the k-th largest score.
    if sampling.top_k > 0 && sampling.top_k < order.len() {
        let kth = scores[order[sampling.top_k - 1]];
        count = order.iter().take_while(|&&i| scores[i] >= kth).count();
    }
    let max = f64::from(scores[order[0]]);
    let weights: Vec<f64> = order[..count]
        .iter()
        .map(|&i| (f64::from(scores[i]) - max).exp())
        .collect();
    // TopPLogitsWarper: from the least likely up, drop while the running
    // probability stays <= 1 - top_p; the most likely always stays.
    if sampling.top_p < 1.0 {
        let total: f64 = weights.iter().sum();
        let floor = (1.0 - f64::from(sampling.top_p)) * total;
        let mut below = 0.0;
        while count > 1 {
            below += weights[count - 1];
            if below > floor {
                break;
            }
            count -= 1;
        }
    }
    order[..count]
        .iter()
        .zip(&weights)
        .map(|(&i, &w)| (i, w))
        .collect()
}

/// The probability of every token under `sampling` (0 for the filtered
/// ones): what transformers' `softmax(LogitsProcessorList(...)(logits))`
/// gives. Greedy puts all of it on the argmax.
pub fn distribution(logits: &[f32], sampling: &Sampling) -> Vec<f64> {
    let mut probs = vec![0.0; logits.len()];
    if logits.is_empty() {
        return probs;
    }
    if sampling.is_greedy() {
        probs[argmax(logits)] = 1.0;
        return probs;
    }
    let kept = kept(logits, sampling);
    let total: f64 = kept.iter().map(|&(_, w)| w).sum();
    for (i, w) in kept {
        probs[i] = w / total;
    }
    probs
}

/// The next token under `sampling`; draws one number from `rng` unless
/// greedy.
pub fn pick(logits: &[f32], sampling: &Sampling, rng: &mut StdRng) -> u32 {
    if sampling.is_greedy() || logits.len() <= 1 {
        return argmax(logits) as u32;
    }
    let kept = kept(logits, sampling);
    let total: f64 = kept.iter().map(|&(_, w)| w).sum();
    let mut u = rng.random::<f64>() * total;
    for &(i, w) in &kept {
        if u < w {
            return i as u32;
        }
        u -= w;
    }
    kept[kept.len() - 1].0 as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn sampling(temperature: f32, top_k: usize, top_p: f32) -> Sampling {
        Sampling {
            temperature,
            top_k,
            top_p,
        }
    }

    #[test]
    fn top_k_keeps_ties_with_the_kth_and_top_p_the_most_likely() {
        let logits = [1.0, 3.0, 2.0, 2.0, 0.0];
        let p = distribution(&logits, &sampling(1.0, 2, 1.0));
        // The 2nd largest is 2.0, held by ids 2 and 3: both stay.
        assert!(p[1] > 0.0 && p[2] > 0.0 && p[3] > 0.0, "{p:?}");
        assert_eq!((p[0], p[4]), (0.0, 0.0));
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // A tiny nucleus keeps the most likely alone.
        let p = distribution(&logits, &sampling(1.0, 0, 1e-6));
        assert_eq!(p, vec![0.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(
            distribution(&logits, &Sampling::greedy()),
            vec![0.0, 1.0, 0.0, 0.0, 0.0]
        );
    }

    #[test]
    fn draws_follow_the_distribution_and_never_leave_it() {
        let logits: Vec<f32> = (0..20).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let s = sampling(0.7, 5, 0.8);
        let p = distribution(&logits, &s);
        let mut rng = StdRng::seed_from_u64(3);
        let mut counts = [0usize; 20];
        let n = 20_000;
        for _ in 0..n {
            counts[pick(&logits, &s, &mut rng) as usize] += 1;
        }
        for (i, (&c, &q)) in counts.iter().zip(&p).enumerate() {
            if q == 0.0 {
                assert_eq!(c, 0, "token {i} was filtered out");
            } else {
                let f = c as f64 / n as f64;
                // 5 standard deviations of a binomial frequency.
                let sd = (q * (1.0 - q) / n as f64).sqrt();
                assert!((f - q).abs() < 5.0 * sd + 1e-9, "token {i}: {f} vs {q}");
            }
        }
    }

    #[test]
    fn bad_settings_are_named() {
        assert_eq!(sampling(-1.0, 0, 1.0).problem().unwrap().0, "temperature");
        assert_eq!(
            sampling(f32::NAN, 0, 1.0).problem().unwrap().0,
            "temperature"
        );
        assert_eq!(sampling(1.0, 0, 0.0).problem().unwrap().0, "top_p");
        assert_eq!(sampling(1.0, 0, 1.5).problem().unwrap().0, "top_p");
        assert!(Sampling::transformers(0.7).problem().is_none());
    }
}
