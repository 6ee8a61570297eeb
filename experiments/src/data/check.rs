//! Which files a `[data]` table names, and the checks a run makes of them
//! before it trains; shared by `load` and by the CLI, which makes them
//! before a run directory exists (and for `--dry-run`), so a data folder
//! the run would refuse is refused first and leaves nothing behind.
//!
//! The checks read each shard's header and size, never its tokens: a
//! dry run stays fast on terabytes. The token scan (sha256, largest id)
//! is left to `load`.

use std::path::PathBuf;

use super::{required_path, shards, usage, DataConfig, DataSource, TokenizerKind};

/// The shard files of a token-shard source, in training order.
#[derive(Debug)]
pub struct ShardSet {
    pub format: shards::ShardFormat,
    pub train: Vec<PathBuf>,
    pub val: Vec<PathBuf>,
}

/// The files of a shard source (`llmc`, `npy`, `nanogpt`), matched as the
/// run matches them; errors name the key and, when a folder holds another
/// format's shards, the `data.source` that reads them.
pub fn shard_set(cfg: &DataConfig) -> anyhow::Result<ShardSet> {
    let source = match cfg.source {
        DataSource::Llmc => "llmc",
        DataSource::Npy => "npy",
        _ => "nanogpt",
    };
    if cfg.tokenizer == TokenizerKind::Char {
        return Err(usage(
            format!("[data].tokenizer = \"char\" cannot be used with source = \"{source}\": the shards carry no character vocabulary"),
            "use source = \"text\" for char-level training, or tokenizer = \"gpt2\" for GPT-2 shards",
        ));
    }
    if cfg.corpus_bytes.is_some() || cfg.val_fraction.is_some() {
        return Err(usage(
            format!("[data].corpus_bytes / val_fraction are not used with source = \"{source}\""),
            "remove them; the shards are already split into train and val",
        ));
    }
    let path = required_path(cfg, source)?;
    match cfg.source {
        DataSource::Llmc | DataSource::Npy => {
            let (extension, format) = if cfg.source == DataSource::Llmc {
                ("bin", shards::ShardFormat::Llmc)
            } else {
                ("npy", shards::ShardFormat::Npy)
            };
            let train = shards::shard_files(path, shards::Split::Train, extension)?;
            let val = match &cfg.val_path {
                Some(val) => shards::shard_files(val, shards::Split::Val, extension)?,
                None if path.is_dir() => shards::shard_files(path, shards::Split::Val, extension)?,
                None => {
                    return Err(usage(
                        format!("[data].val_path is missing; {} is not a shard directory", path.display()),
                        &format!("set val_path to the validation shard(s), or path to a directory holding *_train_*.{extension} and *_val_*.{extension}"),
                    ))
                }
            };
            Ok(ShardSet { format, train, val })
        }
        _ => {
            let (train, val) = if path.is_dir() {
                (
                    path.join("train.bin"),
                    cfg.val_path.clone().unwrap_or_else(|| path.join("val.bin")),
                )
            } else {
                let val = cfg.val_path.clone().ok_or_else(|| {
                    usage(
                        format!("[data].val_path is missing; {} is a file, not a nanoGPT data directory", path.display()),
                        "set val_path to val.bin, or path to the directory holding train.bin and val.bin",
                    )
                })?;
                (path.to_path_buf(), val)
            };
            Ok(ShardSet {
                format: shards::ShardFormat::Raw,
                train: vec![train],
                val: vec![val],
            })
        }
    }
}

/// The checks a run makes of its data before training, short of reading
/// the tokens: the files are matched and every shard's header and size
/// are checked; a text file must be readable. `generated` needs nothing.
pub fn check_files(cfg: &DataConfig) -> anyhow::Result<()> {
    match cfg.source {
        DataSource::Generated => Ok(()),
        DataSource::Text => {
            let path = required_path(cfg, "text")?;
            std::fs::File::open(path).map(drop).map_err(|e| {
                usage(
                    format!("cannot read [data].path {}: {e}", path.display()),
                    "point path at an existing UTF-8 text file",
                )
            })
        }
        DataSource::Llmc | DataSource::Npy | DataSource::Nanogpt => {
            let set = shard_set(cfg)?;
            for file in set.train.iter().chain(&set.val) {
                shards::layout(file, set.format)?;
            }
            Ok(())
        }
    }
}
