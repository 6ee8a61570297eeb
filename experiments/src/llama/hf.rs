//! Loading a Llama-family Hugging Face directory: `config.json`
//! (`super::config`), the weights in `model.safetensors` or sharded as
//! `model-0000X-of-0000N.safetensors` listed by
//! `model.safetensors.index.json`, memory-mapped and widened to f32 tensor
//! by tensor (bf16/f16 checkpoints become f32 models).
//!
//! Tensors the model does not use (an old checkpoint's
//! `rotary_emb.inv_freq` buffers, a tied checkpoint's duplicate
//! `lm_head.weight`) are ignored; a missing one, or one of the wrong
//! shape, is a usage error naming the tensor and the file.

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
