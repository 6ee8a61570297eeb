//! Quantize / dequantize throughput on a GPT-2-sized MLP matrix (768 × 3072).
//!
//! Run (optimizing this crate like its dependencies already are):
//! `cargo run -p envgen-experiments --example quant_bench --config 'profile.dev.package.envgen-experiments.opt-level=3'`
//! Throughput is f32 megabytes (1e6 bytes of input weights) per second.

use std::time::Instant;

use envgen_experiments::quant::schemes::{dequantize, error_stats, quantize, Scheme};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

fn main() -> anyhow::Result<()> {
    let (rows, cols) = (768, 3072);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let weights: Vec<f32> = (0..rows * cols)
        .map(|_| 0.02 * rng.sample::<f32, _>(StandardNormal))
        .collect();
    let megabytes = (weights.len() * 4) as f64 / 1e6;
    let repeats = 5;
    println!("scheme           bpw     quantize MB/s  dequantize MB/s  rel_err");
    for scheme in [
        Scheme::Int8PerChannel,
        Scheme::Int4Symmetric { group: 32 },
        Scheme::Int4Symmetric { group: 128 },
        Scheme::Int4Asymmetric { group: 32 },
    ] {
        let start = Instant::now();
        let mut tensor = quantize(&weights, rows, cols, scheme)?;
        for _ in 1..repeats {
            tensor = quantize(&weights, rows, cols, scheme)?;
        }
        let quantize_s = start.elapsed().as_secs_f64() / repeats as f64;
        let start = Instant::now();
        let mut restored = dequantize(&tensor);
        for _ in 1..repeats {
            restored = dequantize(&tensor);
        }
        let dequantize_s = start.elapsed().as_secs_f64() / repeats as f64;
        let stats = error_stats(&weights, &restored)?;
        println!(
            "{:<16} {:<7.3} {:>13.0} {:>16.0}  {:.4}",
            scheme.name(),
            tensor.bits_per_weight(),
            megabytes / quantize_s,
            megabytes / dequantize_s,
            stats.rel_frobenius
        );
    }
    Ok(())
}
