//! A finished GPT-2 run as a Hugging Face model directory other tools read
//! right (`envgen export hf`, issue #42): the weights with the embedding
//! (and so the tied head) cut to the tokenizer's real vocabulary, the
//! run's tokenizer files, and bos/eos in config.json and
//! generation_config.json.
//!
//! GPT-2's embedding is padded to 50,304 rows for fast matmuls; rows
//! 50,257… were never a target and are no token, but exported as they
//! were, `transformers`' `generate` and lm-eval could pick them. llm.c's
//! `dev/eval/export_hf.py` cuts them off the same way.

use std::path::Path;

use burn::prelude::*;
use serde_json::json;

use super::hf;
use super::model::ModelConfig;
use crate::data::Tokenizer;
use crate::error::UserError;
use crate::pretrained::tokenizer_files;

/// Write `model` (trained with `tokenizer`) into `dir`: model.safetensors
/// and config.json with `tokenizer.vocab_size()` rows, the tokenizer
/// files, and generation_config.json where the tokenizer has an end of
/// text.
pub fn export_run<B: Backend>(
    model: &super::Gpt2<B>,
    cfg: &ModelConfig,
    tokenizer: &Tokenizer,
    dir: &Path,
) -> anyhow::Result<()> {
    let vocab = tokenizer.vocab_size();
    if vocab > cfg.vocab_size {
        return Err(UserError::usage(format!(
            "model.vocab_size {} is smaller than the {} tokenizer's vocabulary ({vocab})",
            cfg.vocab_size,
            tokenizer.kind().name()
        ))
        .with_fix("export a run whose config.toml names the tokenizer it trained with")
        .into());
    }
    let weights = hf::named_weights(model)
        .into_iter()
        .map(|(name, shape, values)| crop_rows(name, shape, values, vocab))
        .collect();
    let cropped = ModelConfig {
        vocab_size: vocab,
        ..cfg.clone()
    };
    let mut config = hf::pretrained_config(&cropped);
    config["bos_token_id"] = json!(tokenizer.eot());
    config["eos_token_id"] = json!(tokenizer.eot());
    hf::write_pretrained(weights, &config, dir)?;
    tokenizer_files::write(tokenizer, cfg.block_size, dir)?;
    if let Some(generation) = tokenizer_files::generation_config(tokenizer) {
        crate::fsutil::write_atomic(
            &dir.join("generation_config.json"),
            serde_json::to_string_pretty(&generation)?.as_bytes(),
        )?;
    }
    Ok(())
}

/// `wte.weight` (the embedding, and GPT-2's tied head) keeps its first
/// `vocab` rows; every other tensor is kept whole.
fn crop_rows(
    name: String,
    mut shape: Vec<usize>,
    mut values: Vec<f32>,
    vocab: usize,
) -> (String, Vec<usize>, Vec<f32>) {
    if name == "wte.weight" {
        values.truncate(vocab * shape[1]);
        shape[0] = vocab;
    }
    (name, shape, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;

    /// A model with padded rows exports the tokenizer's rows only, and the
    /// export loads back with the same logits on those rows.
    #[test]
    fn the_export_keeps_the_tokenizers_rows_and_their_logits() {
        let cfg = ModelConfig {
            vocab_size: 300,
            ..hf::tests::small()
        };
        let device = Default::default();
        let model = cfg.init::<Cpu>(&device);
        let dir = tempfile::tempdir().unwrap();
        let char_level = Tokenizer::char_level("abcdefghij klmnop\n");
        export_run(&model, &cfg, &char_level, dir.path()).unwrap();
        let (back_cfg, back) = hf::load_pretrained::<Cpu>(dir.path(), &device).unwrap();
        assert_eq!(back_cfg.vocab_size, char_level.vocab_size());
        let idx = Tensor::<Cpu, 2, Int>::from_ints([[1, 5, 7, 17]], &device);
        let ours: Vec<f32> = model.forward(idx.clone()).into_data().to_vec().unwrap();
        let theirs: Vec<f32> = back.forward(idx).into_data().to_vec().unwrap();
        let kept: Vec<f32> = ours
            .chunks(cfg.vocab_size)
            .flat_map(|row| row[..back_cfg.vocab_size].to_vec())
            .collect();
        // Equal up to rounding: a narrower matmul sums in another order.
        assert_eq!(kept.len(), theirs.len());
        let diff = kept
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-6, "kept logits differ by {diff}");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
                .unwrap();
        assert!(config["eos_token_id"].is_null(), "{config}");
        assert!(dir.path().join("tokenizer.json").is_file());
        assert!(!dir.path().join("generation_config.json").exists());
        // A tokenizer larger than the model is refused, not cut.
        let e = export_run(&model, &cfg, &Tokenizer::gpt2(), dir.path()).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
        assert!(e.to_string().contains("vocab_size 300"), "{e}");
    }
}
