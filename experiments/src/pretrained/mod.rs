//! Hugging Face model directories, one entry point for every architecture
//! envgen computes: `config.json`'s `model_type` picks GPT-2
//! (`crate::gpt2::hf`) or the Llama family (`crate::llama`). Configs name
//! such a directory as `hf:DIR` (`model.init = "hf:DIR"`, `envgen sample
//! --model hf:DIR`).

pub mod chat;
pub mod generation;
#[cfg(test)]
mod hostile_tests;
pub mod tokenizer;
pub mod tokenizer_files;

use std::path::{Path, PathBuf};

use burn::prelude::*;

use crate::error::UserError;
use crate::gpt2::{self, Gpt2};
use crate::llama::{self, Llama};
pub use chat::{ChatTemplate, Message};
pub use tokenizer::HfTokenizer;

/// The prefix that marks a Hugging Face directory in a config or a flag.
pub const PREFIX: &str = "hf:";

/// A model loaded from a Hugging Face directory.
#[derive(Debug)]
pub enum Pretrained<B: Backend> {
    Gpt2 {
        config: gpt2::ModelConfig,
        model: Gpt2<B>,
    },
    Llama(Llama<B>),
}

/// The directory of an `hf:DIR` spelling; a usage error naming `what`
/// (the key or flag) for anything else.
pub fn dir_of(spec: &str, what: &str) -> anyhow::Result<PathBuf> {
    match spec.strip_prefix(PREFIX) {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => Err(UserError::usage(format!("{what} = {spec:?} is not hf:DIR"))
            .with_fix("write hf: followed by a Hugging Face model directory, e.g. hf:./SmolLM2-360M-Instruct")
            .into()),
    }
}

/// `config.json`'s `model_type` in `dir`.
pub fn model_type(dir: &Path) -> anyhow::Result<String> {
    if !dir.is_dir() {
        return Err(UserError::usage(format!("{} is not a directory", dir.display()))
            .with_fix("give a directory written by save_pretrained or downloaded from the Hub (huggingface-cli download MODEL --local-dir DIR)")
            .into());
    }
    let path = dir.join("config.json");
    let doc = llama::config::read_json(&path)?;
    doc["model_type"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| {
            UserError::usage(format!(
                "{}: `model_type` is {}, expected a string",
                path.display(),
                doc["model_type"]
            ))
            .with_fix("give a transformers config.json (it names its model_type)")
            .into()
        })
}

/// The model in `dir`, GPT-2 or Llama-family by its `model_type`.
pub fn load<B: Backend>(dir: &Path, device: &B::Device) -> anyhow::Result<Pretrained<B>> {
    match model_type(dir)?.as_str() {
        "gpt2" => {
            let (config, model) = gpt2::hf::load_pretrained(dir, device)?;
            Ok(Pretrained::Gpt2 { config, model })
        }
        // Refusals of other model types are the Llama config's, which names
        // every type envgen reads.
        _ => Ok(Pretrained::Llama(llama::hf::load(dir, device)?)),
    }
}

/// The directory's tokenizer (GPT-2 directories may go without one).
pub fn tokenizer<B: Backend>(dir: &Path, model: &Pretrained<B>) -> anyhow::Result<HfTokenizer> {
    HfTokenizer::load(dir, matches!(model, Pretrained::Gpt2 { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;

    #[test]
    fn gpt2_directories_load_through_the_same_entry_point() {
        let cfg = crate::gpt2::hf::tests::small();
        let device = Default::default();
        let dir = tempfile::tempdir().unwrap();
        let model = cfg.init::<Cpu>(&device);
        crate::gpt2::hf::save_pretrained(&model, &cfg, dir.path()).unwrap();
        match load::<Cpu>(dir.path(), &device).unwrap() {
            Pretrained::Gpt2 { config, .. } => assert_eq!(config, cfg),
            Pretrained::Llama(_) => panic!("a GPT-2 directory loaded as Llama"),
        }
        let tok = tokenizer(dir.path(), &load::<Cpu>(dir.path(), &device).unwrap()).unwrap();
        assert_eq!(
            tok.decode(&tok.encode("Hello world").unwrap()),
            "Hello world"
        );

        let spec = format!("hf:{}", dir.path().display());
        assert_eq!(dir_of(&spec, "model.init").unwrap(), dir.path());
        let e = dir_of("./dir", "model.init").unwrap_err();
        assert!(e.to_string().contains("model.init"), "{e}");
        // Another model_type is refused with the ones envgen reads.
        let doc = serde_json::json!({"model_type": "mamba"});
        std::fs::write(dir.path().join("config.json"), doc.to_string()).unwrap();
        let e = load::<Cpu>(dir.path(), &device).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
        assert!(
            e.to_string().contains("\"mamba\"") && e.to_string().contains("qwen2"),
            "{e}"
        );
        let e = load::<Cpu>(&dir.path().join("nope"), &device).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
    }
}
