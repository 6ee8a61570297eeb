//! The data a science config trains on, identified by content rather than
//! by where it lies: `config_hash` hashes the config with `data.path` /
//! `data.val_path` replaced by this identity, so the same shards under
//! `/scratch/me/fineweb` on a cluster and `~/data/fineweb` on a workstation
//! give the same hash (issue #39). Where the files lay is a hardware fact:
//! config.toml keeps the path as given and the manifest's `data_files`
//! record each file's path and full sha256.
//!
//! What identifies a file: its name (not its folder), its size, and the
//! sha256 of its first and last 64 KiB. A full sha256 would read every
//! byte of shards that run to terabytes each time a run is planned (a dry
//! run, a sweep's values, a resume's check); the header (token count,
//! dtype, shape) and size pin the layout, and the sampled ends tell apart
//! shards re-tokenized or regenerated with another seed. The full sha256
//! the run computes when it reads the tokens is in the manifest.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{check, DataConfig, DataSource};
use crate::error::UserError;

/// Bytes hashed at each end of a file.
const SAMPLE_BYTES: u64 = 64 * 1024;

/// `science` as `config_hash` hashes it: with a file-backed `[data]`
/// table's `path` and `val_path` replaced by the content identity of the
/// files they name. Everything else (and configs without such a table) is
/// unchanged.
pub fn science_for_hash(science: &toml::Value) -> anyhow::Result<toml::Value> {
    let Some(table) = science.get("data") else {
        return Ok(science.clone());
    };
    let Ok(cfg) = table.clone().try_into::<DataConfig>() else {
        return Ok(science.clone());
    };
    let (train, val) = match cfg.source {
        DataSource::Generated => return Ok(science.clone()),
        _ if cfg.path.is_none() => return Ok(science.clone()),
        DataSource::Text => (vec![cfg.path.clone().unwrap_or_default()], Vec::new()),
        _ => {
            let set = check::shard_set(&cfg)?;
            (set.train, set.val)
        }
    };
    let mut hashed = science.clone();
    if let Some(data) = hashed.get_mut("data").and_then(|d| d.as_table_mut()) {
        data.insert("path".into(), identity_of(&train)?.into());
        if !val.is_empty() {
            data.insert("val_path".into(), identity_of(&val)?.into());
        }
    }
    Ok(hashed)
}

/// `content:sha256:<hex>` over each file's name, size and sampled ends,
/// in training order.
fn identity_of(files: &[PathBuf]) -> anyhow::Result<String> {
    let mut all = Sha256::new();
    for file in files {
        let name = file
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let (size, sample) = sampled_ends(file)?;
        all.update(format!("{name}\t{size}\t{}\n", hex::encode(sample)).as_bytes());
    }
    Ok(format!("content:sha256:{}", hex::encode(all.finalize())))
}

/// A file's size and the sha256 of its first and last [`SAMPLE_BYTES`].
fn sampled_ends(path: &Path) -> anyhow::Result<(u64, [u8; 32])> {
    let unreadable = |e: std::io::Error| -> anyhow::Error {
        UserError::usage(format!("cannot read data file {}: {e}", path.display()))
            .with_fix("point [data].path at readable files (check permissions)")
            .into()
    };
    let mut file = std::fs::File::open(path).map_err(unreadable)?;
    let size = file.metadata().map_err(unreadable)?.len();
    let mut hasher = Sha256::new();
    let mut buffer = Vec::new();
    (&mut file)
        .take(SAMPLE_BYTES)
        .read_to_end(&mut buffer)
        .map_err(unreadable)?;
    hasher.update(&buffer);
    if size > SAMPLE_BYTES {
        let tail_start = size.saturating_sub(SAMPLE_BYTES).max(SAMPLE_BYTES);
        file.seek(SeekFrom::Start(tail_start)).map_err(unreadable)?;
        buffer.clear();
        file.read_to_end(&mut buffer).map_err(unreadable)?;
        hasher.update(&buffer);
    }
    Ok((size, hasher.finalize().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn science(path: &Path) -> toml::Value {
        toml::from_str(&format!(
            "[data]\nsource = \"nanogpt\"\npath = {:?}\ntokenizer = \"gpt2\"\n",
            path.display().to_string()
        ))
        .unwrap()
    }

    fn write(dir: &Path, train: &[u8]) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("train.bin"), train).unwrap();
        std::fs::write(dir.join("val.bin"), [7u8, 0]).unwrap();
    }

    #[test]
    fn the_same_files_in_two_places_hash_alike_and_other_bytes_do_not() {
        let tmp = tempfile::tempdir().unwrap();
        let (here, there) = (tmp.path().join("workstation"), tmp.path().join("cluster/x"));
        write(&here, &[1, 0, 2, 0]);
        write(&there, &[1, 0, 2, 0]);
        let hash = |dir: &Path| {
            crate::engine::config_hash(&science_for_hash(&science(dir)).unwrap()).unwrap()
        };
        assert_eq!(hash(&here), hash(&there));
        let hashed = science_for_hash(&science(&here)).unwrap();
        assert!(hashed["data"]["path"]
            .as_str()
            .unwrap()
            .starts_with("content:sha256:"));
        // Two shards of one size, other tokens: another hash.
        write(&there, &[1, 0, 3, 0]);
        assert_ne!(hash(&here), hash(&there));
        // Generated data has no files: the science is hashed as it is.
        let generated: toml::Value = toml::from_str("[data]\nsource = \"generated\"\n").unwrap();
        assert_eq!(science_for_hash(&generated).unwrap(), generated);
    }
}
