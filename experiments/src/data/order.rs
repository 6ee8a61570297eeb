//! Which tokens each row of each step trains on.
//!
//! Every order is a pure function of (seed, step, row), so a resumed run
//! (which restores the step) continues at exactly the same position, and
//! a rank's rows do not depend on how many ranks there are.
//!
//! - `sequential` is llm.c's `DataLoader` (`llmc/dataloader.h`,
//!   https://github.com/karpathy/llm.c/blob/master/llmc/dataloader.h) and
//!   build-nanogpt's `DataLoaderLite`: shards in name order; within a shard,
//!   global batch k covers tokens k·B·T … (k+1)·B·T (+1 for the targets),
//!   and row g of it (rank r holds rows r·B/P … ) starts at k·B·T + g·T, so
//!   each rank reads its strided slice of the shard. A shard of n tokens
//!   gives (n − 1) / (B·T) global batches (the tail is skipped, as in
//!   llm.c); after the last shard the next epoch begins.
//! - `shuffled` is llm.c's `should_shuffle`: the same batches, but every
//!   epoch visits the shards, and the batches within each shard, in an order
//!   drawn from (seed, epoch).
//! - `random` is nanoGPT's `get_batch`: each row a window drawn with
//!   replacement from (seed, step, row).

use std::sync::Mutex;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::shards::MappedShard;
use crate::error::UserError;

/// `[data].order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataOrder {
    Random,
    Sequential,
    Shuffled,
}

impl DataOrder {
    pub fn name(self) -> &'static str {
        match self {
            DataOrder::Random => "random",
            DataOrder::Sequential => "sequential",
            DataOrder::Shuffled => "shuffled",
        }
    }
}

/// A token stream in segments: one in-memory vector (generated corpus,
/// text) or memory-mapped shards. Windows never cross a segment boundary.
#[derive(Debug)]
pub enum Tokens {
    Memory(Vec<u32>),
    Mapped(Vec<MappedShard>),
}

impl Tokens {
    pub fn segment_lens(&self) -> Vec<usize> {
        match self {
            Tokens::Memory(v) => vec![v.len()],
            Tokens::Mapped(shards) => shards.iter().map(MappedShard::len).collect(),
        }
    }

    /// All tokens of all segments.
    pub fn len(&self) -> usize {
        self.segment_lens().iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` tokens of segment `segment` from `start` (fewer at its end).
    pub fn window(&self, segment: usize, start: usize, len: usize) -> Vec<u32> {
        match self {
            Tokens::Memory(v) => {
                let end = (start + len).min(v.len());
                v[start.min(end)..end].to_vec()
            }
            Tokens::Mapped(shards) => shards[segment].tokens(start..start + len),
        }
    }

    /// Every token, segment after segment (tests and small data only).
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u32> {
        let lens = self.segment_lens();
        (0..lens.len())
            .flat_map(|s| self.window(s, 0, lens[s]))
            .collect()
    }

    pub fn max_id(&self) -> u32 {
        match self {
            Tokens::Memory(v) => v.iter().copied().max().unwrap_or(0),
            Tokens::Mapped(shards) => shards.iter().map(|s| s.max_id).max().unwrap_or(0),
        }
    }

    /// The window start `index` of all `len`-token windows, counted across
    /// segments: segment s holds `len_s − len` of them (its last possible
    /// start is left out, as nanoGPT's `randint(len(data) - block_size)`).
    /// `None` when no segment holds a window.
    pub fn window_start(&self, index: usize, len: usize) -> Option<(usize, usize)> {
        let mut index = index;
        for (segment, n) in self.segment_lens().into_iter().enumerate() {
            let starts = n.saturating_sub(len);
            if index < starts {
                return Some((segment, index));
            }
            index -= starts;
        }
        None
    }

    /// How many windows [`Tokens::window_start`] can name.
    pub fn window_count(&self, len: usize) -> usize {
        self.segment_lens()
            .iter()
            .map(|n| n.saturating_sub(len))
            .sum()
    }
}

/// Where one row of one step reads its `block + 1` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Completed passes over the data before this step (0 for `random`).
    pub epoch: u64,
    pub segment: usize,
    pub start: usize,
}

/// The global batches of the `sequential` and `shuffled` orders.
#[derive(Debug)]
pub struct Batches {
    /// Global batches per segment.
    per_segment: Vec<usize>,
    per_epoch: u64,
    batch_tokens: usize,
    block: usize,
    /// `shuffled`: the seed of the per-epoch permutations.
    shuffle_seed: Option<u64>,
    /// The batch order within the last (epoch, segment) used: permutations
    /// are drawn once per shard visit, not once per row.
    within: Mutex<Option<(u64, usize, Vec<u32>)>>,
}

impl Batches {
    /// `names` lists the files behind the segments (for the error when no
    /// segment holds one global batch).
    pub fn new(
        tokens: &Tokens,
        batch_size: usize,
        block: usize,
        shuffle_seed: Option<u64>,
        names: &str,
    ) -> anyhow::Result<Self> {
        let batch_tokens = batch_size * block;
        let per_segment: Vec<usize> = tokens
            .segment_lens()
            .iter()
            .map(|&n| n.saturating_sub(1) / batch_tokens.max(1))
            .collect();
        let per_epoch: u64 = per_segment.iter().map(|&b| b as u64).sum();
        if per_epoch == 0 {
            return Err(UserError::usage(format!(
                "data: no train shard holds one global batch of train.batch_size × model.block_size + 1 = {} tokens ({names})",
                batch_tokens + 1
            ))
            .with_fix("use bigger shards, a smaller train.batch_size or model.block_size, or [data].order = \"random\"")
            .into());
        }
        Ok(Self {
            per_segment,
            per_epoch,
            batch_tokens,
            block,
            shuffle_seed,
            within: Mutex::new(None),
        })
    }

    /// Global batches in one pass over the data.
    pub fn per_epoch(&self) -> u64 {
        self.per_epoch
    }

    /// Row `row` of the global batch of `step` (0-based).
    pub fn position(&self, step: u64, row: usize) -> Position {
        let epoch = step / self.per_epoch;
        let mut k = (step % self.per_epoch) as usize;
        let segments = self.segment_order(epoch);
        for segment in segments {
            let count = self.per_segment[segment];
            if k < count {
                let batch = self.batch_in_segment(epoch, segment, k);
                return Position {
                    epoch,
                    segment,
                    start: batch * self.batch_tokens + row * self.block,
                };
            }
            k -= count;
        }
        unreachable!("k < per_epoch = the sum of per_segment")
    }

    fn segment_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.per_segment.len()).collect();
        if let Some(seed) = self.shuffle_seed {
            order.shuffle(&mut rng(seed, epoch, u64::MAX));
        }
        order
    }

    fn batch_in_segment(&self, epoch: u64, segment: usize, k: usize) -> usize {
        let Some(seed) = self.shuffle_seed else {
            return k;
        };
        let mut cache = self.within.lock().unwrap_or_else(|e| e.into_inner());
        match cache.as_ref() {
            Some((e, s, order)) if *e == epoch && *s == segment => order[k] as usize,
            _ => {
                let mut order: Vec<u32> = (0..self.per_segment[segment] as u32).collect();
                order.shuffle(&mut rng(seed, epoch, segment as u64));
                let batch = order[k] as usize;
                *cache = Some((epoch, segment, order));
                batch
            }
        }
    }
}

/// A generator for (seed, epoch, what): ChaCha8, a fixed algorithm, so the
/// order is the same on every machine and rand version.
fn rng(seed: u64, epoch: u64, what: u64) -> ChaCha8Rng {
    let mut base = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_0F_DA7A);
    let mixed =
        base.random::<u64>() ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ what.rotate_left(29);
    ChaCha8Rng::seed_from_u64(mixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(lens: &[usize]) -> Tokens {
        // One in-memory vector per test is enough for window_start; the
        // multi-segment order is exercised through Batches on lengths only.
        Tokens::Memory((0..lens[0] as u32).collect())
    }

    /// Batches over fake segment lengths (no files needed for the order).
    fn batches(lens: &[usize], batch: usize, block: usize, shuffle: Option<u64>) -> Batches {
        let per_segment: Vec<usize> = lens.iter().map(|&n| (n - 1) / (batch * block)).collect();
        Batches {
            per_epoch: per_segment.iter().map(|&b| b as u64).sum(),
            per_segment,
            batch_tokens: batch * block,
            block,
            shuffle_seed: shuffle,
            within: Mutex::new(None),
        }
    }

    #[test]
    fn sequential_walks_shards_in_order_like_llmc() {
        // B·T = 4·8 = 32 tokens per global batch; shard 0 holds 3 batches
        // ((100 − 1) / 32), shard 1 holds 1 ((40 − 1) / 32), shard 2 none.
        let order = batches(&[100, 40, 20], 4, 8, None);
        assert_eq!(order.per_epoch(), 4);
        let at = |step, row| order.position(step, row);
        assert_eq!(
            at(0, 0),
            Position {
                epoch: 0,
                segment: 0,
                start: 0
            }
        );
        assert_eq!(at(0, 3).start, 24, "row g starts at g·T");
        assert_eq!(
            at(2, 1),
            Position {
                epoch: 0,
                segment: 0,
                start: 72
            }
        );
        assert_eq!(
            at(3, 0),
            Position {
                epoch: 0,
                segment: 1,
                start: 0
            }
        );
        // The epoch boundary: back to the first shard.
        assert_eq!(
            at(4, 2),
            Position {
                epoch: 1,
                segment: 0,
                start: 16
            }
        );
        assert_eq!(at(9, 0).epoch, 2);
        // Two ranks of 2 rows each read the same rows as one rank of 4:
        // rank 1's rows 2..4 are the second half of each global batch.
        for step in 0..8 {
            let starts: Vec<usize> = (0..4).map(|r| at(step, r).start).collect();
            assert_eq!(starts[2] - starts[0], 16);
            // Every window (T + 1 tokens) fits its shard.
            let p = at(step, 3);
            assert!(p.start + 8 + 1 <= [100, 40, 20][p.segment]);
        }
    }

    #[test]
    fn shuffled_visits_every_batch_once_per_epoch_in_a_seeded_order() {
        let order = batches(&[100, 70, 65], 2, 4, Some(7));
        let epoch = |e: u64| -> Vec<(usize, usize)> {
            (e * order.per_epoch()..(e + 1) * order.per_epoch())
                .map(|s| {
                    let p = order.position(s, 0);
                    assert_eq!(p.epoch, e);
                    (p.segment, p.start)
                })
                .collect()
        };
        let (first, second) = (epoch(0), epoch(1));
        let sorted = |mut v: Vec<(usize, usize)>| {
            v.sort();
            v
        };
        let plain = batches(&[100, 70, 65], 2, 4, None);
        let all: Vec<_> = (0..plain.per_epoch())
            .map(|s| {
                let p = plain.position(s, 0);
                (p.segment, p.start)
            })
            .collect();
        assert_eq!(
            sorted(first.clone()),
            sorted(all.clone()),
            "each batch once"
        );
        assert_eq!(sorted(second.clone()), all);
        assert_ne!(first, second, "epochs are shuffled differently");
        assert_ne!(first, all);
        // The same seed gives the same order (resume, other ranks).
        let again = batches(&[100, 70, 65], 2, 4, Some(7));
        assert_eq!(again.position(17, 1), order.position(17, 1));
    }

    #[test]
    fn too_small_shards_are_a_usage_error() {
        let tokens = segments(&[30]);
        let e = Batches::new(&tokens, 4, 8, None, "a_train_000.bin").unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
        let text = e.to_string();
        assert!(
            text.contains("33 tokens") && text.contains("a_train_000.bin"),
            "{text}"
        );
    }

    #[test]
    fn mapped_shards_are_segments_windows_never_cross() {
        let dir = tempfile::tempdir().unwrap();
        let mut shards = Vec::new();
        for (name, tokens) in [
            ("a_val_0.bin", (0..10).collect::<Vec<u32>>()),
            ("a_val_1.bin", (100..106).collect()),
        ] {
            let bytes = crate::data::shards::tests::llmc_bytes(
                crate::data::shards::LLMC_MAGIC_GPT2,
                1,
                tokens.len() as i32,
                &tokens,
                2,
            );
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            shards.push(MappedShard::open(&path, crate::data::shards::ShardFormat::Llmc).unwrap());
        }
        let tokens = Tokens::Mapped(shards);
        assert_eq!(tokens.segment_lens(), [10, 6]);
        assert_eq!(tokens.window_count(4), 6 + 2);
        assert_eq!(tokens.window_start(5, 4), Some((0, 5)));
        assert_eq!(tokens.window_start(6, 4), Some((1, 0)));
        assert_eq!(tokens.window(1, 1, 4), [101, 102, 103, 104]);
        assert_eq!(tokens.max_id(), 105);
        // Batches over mapped shards: B·T = 2·2, shard 0 holds 2 batches,
        // shard 1 one; step 2 reads shard 1 from its start.
        let batches = Batches::new(&tokens, 2, 2, None, "a_val_*.bin").unwrap();
        assert_eq!(batches.per_epoch(), 3);
        let p = batches.position(2, 1);
        assert_eq!((p.segment, p.start), (1, 2));
        assert_eq!(tokens.window(p.segment, p.start, 3), [102, 103, 104]);
    }

    #[test]
    fn window_starts_count_across_segments() {
        let tokens = segments(&[10]);
        assert_eq!(tokens.window_count(4), 6);
        assert_eq!(tokens.window_start(5, 4), Some((0, 5)));
        assert_eq!(tokens.window_start(6, 4), None);
        assert_eq!(tokens.window(0, 8, 4), vec![8, 9]);
    }
}
