//! The token shard loader alone: how many tokens per second it can feed a
//! GPT-2 124M rank (64 rows × 1024 tokens per micro-batch, llm.c's order),
//! and the process's peak memory, on synthetic llm.c shards.
//!
//! Run (optimizing this crate like its dependencies already are):
//! `cargo run -p envgen-experiments --example shard_loader_bench --config 'profile.dev.package.envgen-experiments.opt-level=3' -- DIR [SHARDS] [MTOKENS_PER_SHARD]`
//! DIR receives the shards (default 4 shards of 100M tokens = 800 MB, the
//! size of FineWeb-Edu 10B's shards). Prints one JSON line.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use envgen_experiments::data::{self, Batches, DataConfig, DataSource, TokenizerKind};

fn write_shard(path: &Path, count: usize, seed: u64) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut header = [0i32; 256];
    header[0] = 20240520;
    header[1] = 1;
    header[2] = count as i32;
    for v in header {
        out.write_all(&v.to_le_bytes())?;
    }
    let mut state = seed.wrapping_add(1);
    for _ in 0..count {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.write_all(&(((state >> 33) % 50257) as u16).to_le_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(
        args.get(1)
            .map_or("/tmp/envgen-shard-bench", String::as_str),
    )
    .to_path_buf();
    let shards: usize = args.get(2).map_or(Ok(4), |s| s.parse())?;
    let per_shard: usize = args.get(3).map_or(Ok(100), |s| s.parse::<usize>())? * 1_000_000;
    std::fs::create_dir_all(&dir)?;
    for i in 0..shards {
        let path = dir.join(format!("bench_train_{:06}.bin", i + 1));
        if !path.exists() {
            write_shard(&path, per_shard, i as u64)?;
        }
    }
    let val = dir.join("bench_val_000000.bin");
    if !val.exists() {
        write_shard(&val, 1_000_000, 99)?;
    }
    let cfg = DataConfig {
        source: DataSource::Llmc,
        path: Some(dir.clone()),
        val_path: None,
        tokenizer: TokenizerKind::Gpt2,
        corpus_bytes: None,
        val_fraction: None,
        seed: 0,
        order: None,
    };
    // Opening = the one checking pass (size, sha256, largest id) + mmap.
    let start = Instant::now();
    let loaded = data::load(&cfg)?;
    let open_s = start.elapsed().as_secs_f64();
    let (batch, block, rows) = (512usize, 1024usize, 64usize);
    let batches = Batches::new(&loaded.train, batch, block, None, "bench")?;
    // One rank's micro-batches, as Gpt2Task::loss builds them: each row's
    // window copied out of the map and widened to i64 for the tensor.
    let steps = batches.per_epoch().min(400);
    let start = Instant::now();
    let mut checksum = 0i64;
    for step in 0..steps {
        let mut x: Vec<i64> = Vec::with_capacity(rows * (block + 1));
        for row in 0..rows {
            let p = batches.position(step, row);
            x.extend(
                loaded
                    .train
                    .window(p.segment, p.start, block + 1)
                    .iter()
                    .map(|&t| i64::from(t)),
            );
        }
        checksum = checksum.wrapping_add(x[x.len() / 2]);
    }
    let feed_s = start.elapsed().as_secs_f64();
    let tokens = steps as f64 * (rows * block) as f64;
    println!(
        "{{\"shards\": {shards}, \"tokens\": {}, \"open_s\": {open_s:.2}, \"open_mb_per_s\": {:.0}, \"micro_batches\": {steps}, \"tokens_per_s\": {:.0}, \"peak_rss_mib\": {:.1}, \"checksum\": {checksum}}}",
        loaded.train.len() + loaded.val.len(),
        (loaded.train.len() + loaded.val.len()) as f64 * 2.0 / 1e6 / open_s,
        tokens / feed_s,
        peak_rss_mib()
    );
    Ok(())
}
