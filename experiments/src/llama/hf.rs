//! Loading a Llama-family Hugging Face directory: `config.json`
//! (`super::config`), the weights in `model.safetensors` or sharded as
//! `model-0000X-of-0000N.safetensors` listed by
//! `model.safetensors.index.json`, memory-mapped and widened to f32 tensor
//! by tensor (bf16/f16 checkpoints become f32 models).
//!
//! Tensors the model does not use (an old checkpoint's
//! `rotary_emb.inv_freq` buffers, a tied checkpoint's copy of the
//! embedding as `lm_head.weight`) are ignored; a missing one, or one of
//! the wrong shape, is a usage error naming the tensor and the file, and
//! a head that contradicts `tie_word_embeddings` is refused.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use burn::prelude::*;
use memmap2::Mmap;
use safetensors::SafeTensors;
use serde_json::Value;

use super::config::{self, LlamaConfig};
use super::model::Llama;
use crate::engine::safetensors_io;
use crate::error::UserError;

pub const SINGLE: &str = "model.safetensors";
pub const INDEX: &str = "model.safetensors.index.json";

/// The model in `dir` and its config.
pub fn load<B: Backend>(dir: &Path, device: &B::Device) -> anyhow::Result<Llama<B>> {
    let cfg = config::read(dir)?;
    load_with(dir, &cfg, device)
}

/// The weights in `dir` as the model `cfg` describes.
pub fn load_with<B: Backend>(
    dir: &Path,
    cfg: &LlamaConfig,
    device: &B::Device,
) -> anyhow::Result<Llama<B>> {
    let files = weight_files(dir)?;
    let maps = files
        .iter()
        .map(|path| map(path))
        .collect::<anyhow::Result<Vec<Mmap>>>()?;
    let mut shards = Vec::with_capacity(maps.len());
    for (path, map) in files.iter().zip(&maps) {
        shards.push(SafeTensors::deserialize(map).map_err(|e| {
            UserError::usage(format!("{}: not a safetensors file: {e}", path.display()))
                .with_fix("download the checkpoint again")
        })?);
    }
    // Which shard holds each tensor (the files themselves, not the index's
    // claim, so a stale index cannot send us to the wrong file).
    let mut holder: HashMap<String, usize> = HashMap::new();
    // A tensor in two shards is refused: which copy transformers uses
    // depends on the index, and silently taking either is a guess.
    for (i, shard) in shards.iter().enumerate() {
        for name in shard.names() {
            if let Some(first) = holder.insert(name.to_string(), i) {
                return Err(UserError::usage(format!(
                    "{}: tensor `{name}` is in both {} and {}",
                    dir.display(),
                    files[first].display(),
                    files[i].display()
                ))
                .with_fix("download the checkpoint again (each tensor belongs in one shard)")
                .into());
            }
        }
    }
    check_head(dir, cfg, &holder, &shards, &files)?;
    let mut source = |name: &str, shape: &[usize]| -> anyhow::Result<Vec<f32>> {
        let Some(&i) = holder.get(name) else {
            return Err(UserError::usage(format!(
                "{}: no tensor `{name}` in {}",
                dir.display(),
                names_of(&files)
            ))
            .with_fix(format!(
                "check that config.json matches the weights (model_type {:?}, tie_word_embeddings {})",
                cfg.model_type, cfg.tie_word_embeddings
            ))
            .into());
        };
        let origin = files[i].display().to_string();
        let view = shards[i].tensor(name)?;
        if view.shape() != shape {
            return Err(UserError::usage(format!(
                "{origin}: tensor `{name}` has shape {:?}, config.json implies {shape:?}",
                view.shape()
            ))
            .with_fix("check that config.json belongs to these weights")
            .into());
        }
        safetensors_io::values_of(&view, name, &origin)
    };
    Llama::build(cfg, &mut source, device)
}

const HEAD: &str = "lm_head.weight";
const EMBEDDING: &str = "model.embed_tokens.weight";

/// The weights must agree with `tie_word_embeddings` (issue #42): an
/// untied config needs its own `lm_head.weight`, and a tied one may carry
/// a copy of the embedding but not another matrix. Either contradiction
/// means config.json (or its default) is not the checkpoint's, and
/// guessing which to trust changes the logits.
fn check_head(
    dir: &Path,
    cfg: &LlamaConfig,
    holder: &HashMap<String, usize>,
    shards: &[SafeTensors],
    files: &[PathBuf],
) -> anyhow::Result<()> {
    let config = dir.join("config.json");
    let absent = "absent in config.json means false for llama and qwen2, as in transformers";
    match (cfg.tie_word_embeddings, holder.get(HEAD)) {
        (false, None) => Err(UserError::usage(format!(
            "{}: `tie_word_embeddings` is false ({absent}), but there is no `{HEAD}` in {}",
            config.display(),
            names_of(files)
        ))
        .with_fix(
            "if the head is the token embedding, set \"tie_word_embeddings\": true in config.json",
        )
        .into()),
        (true, Some(&i)) => {
            let Some(&j) = holder.get(EMBEDDING) else {
                return Ok(()); // the missing embedding is named when read
            };
            let read = |k: usize, name: &str| -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
                let view = shards[k].tensor(name)?;
                let origin = files[k].display().to_string();
                Ok((
                    view.shape().to_vec(),
                    safetensors_io::values_of(&view, name, &origin)?,
                ))
            };
            if read(i, HEAD)? == read(j, EMBEDDING)? {
                return Ok(());
            }
            Err(UserError::usage(format!(
                "{}: `tie_word_embeddings` is true, but `{HEAD}` in {} is not `{EMBEDDING}`",
                config.display(),
                files[i].display()
            ))
            .with_fix(
                "if the head is its own matrix, set \"tie_word_embeddings\": false in config.json",
            )
            .into())
        }
        _ => Ok(()),
    }
}

fn names_of(files: &[PathBuf]) -> String {
    files
        .iter()
        .filter_map(|f| f.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `model.safetensors`, or the shards the index lists (each once, in order).
pub fn weight_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let single = dir.join(SINGLE);
    // exists, not is_file: a FIFO or a link out is refused when read.
    if single.exists() {
        return Ok(vec![single]);
    }
    let index = dir.join(INDEX);
    if !index.is_file() {
        return Err(UserError::usage(format!(
            "{} has config.json but neither {SINGLE} nor {INDEX}",
            dir.display()
        ))
        .with_fix(
            "save the model with save_pretrained (safetensors is its default), or convert pytorch_model.bin to safetensors",
        )
        .into());
    }
    let doc: Value = config::read_json(&index)?;
    let Some(map) = doc["weight_map"].as_object() else {
        return Err(UserError::usage(format!(
            "{}: `weight_map` is {}, expected an object of tensor → file",
            index.display(),
            doc["weight_map"]
        ))
        .with_fix("download the checkpoint again")
        .into());
    };
    let mut files = BTreeMap::new();
    for (tensor, file) in map {
        let Some(file) = file
            .as_str()
            .filter(|f| !f.contains('/') && !f.contains(".."))
        else {
            return Err(UserError::usage(format!(
                "{}: `weight_map.{tensor}` is {file}, expected a file name in the directory",
                index.display()
            ))
            .with_fix("download the checkpoint again")
            .into());
        };
        files.insert(file.to_string(), dir.join(file));
    }
    for path in files.values() {
        if !path.exists() {
            return Err(UserError::usage(format!(
                "{} lists {}, which is missing",
                index.display(),
                path.display()
            ))
            .with_fix("download every shard of the checkpoint")
            .into());
        }
    }
    Ok(files.into_values().collect())
}

fn map(path: &Path) -> anyhow::Result<Mmap> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file = crate::fsutil::open_user_file(dir, path, crate::fsutil::limit::WEIGHTS)?;
    // SAFETY: read-only map; a file changed underneath shows other bytes
    // (as a read() would), and safetensors bounds-checks every tensor.
    unsafe { Mmap::map(&file) }.map_err(|e| {
        UserError::environment(format!("cannot memory-map {}: {e}", path.display()))
            .with_fix("check that the file system supports mmap (local disk, NFS, Lustre do)")
            .into()
    })
}

#[cfg(test)]
#[path = "hf_tests.rs"]
mod tests;
