//! Token data for the language-model experiments: the `[data]` table of a
//! science config, and `load` that turns it into train/val token streams.
//!
//! Sources: envgen's generated corpus (default, nothing downloaded), llm.c
//! `.bin` shards, build-nanogpt `.npy` shards, nanoGPT `train.bin`/`val.bin`,
//! or a plain UTF-8 text file. Shards are memory-mapped, never read whole.

pub mod check;
pub mod corpus;
pub mod identity;
pub mod order;
pub mod shards;
pub mod tokenizer;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::UserError;

pub use order::{Batches, DataOrder, Position, Tokens};
pub use tokenizer::{Tokenizer, TokenizerKind};

/// Default validation share for `generated` and `text` (nanoGPT uses 0.1).
pub const DEFAULT_VAL_FRACTION: f64 = 0.1;

/// Where the tokens come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataSource {
    /// envgen's seeded grammar corpus (see `corpus`).
    Generated,
    /// llm.c `.bin` shards: a file, a directory, or a glob.
    Llmc,
    /// build-nanogpt `.npy` shards (uint16): a file, a directory, or a glob.
    Npy,
    /// nanoGPT raw uint16 `train.bin` / `val.bin`.
    Nanogpt,
    /// A plain UTF-8 text file, split into train/val.
    Text,
}

/// The `[data]` table of a science config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub source: DataSource,
    /// Train file or directory (not for `generated`).
    #[serde(default)]
    pub path: Option<PathBuf>,
    #[serde(default)]
    pub val_path: Option<PathBuf>,
    #[serde(default)]
    pub tokenizer: TokenizerKind,
    /// `generated`: corpus size in bytes (default 1 MiB).
    #[serde(default)]
    pub corpus_bytes: Option<usize>,
    /// `generated` / `text`: share of the stream kept for validation (default 0.1).
    #[serde(default)]
    pub val_fraction: Option<f64>,
    /// `generated`: grammar sampling seed.
    #[serde(default)]
    pub seed: u64,
    /// Which windows each step trains on (see `order`): `sequential`
    /// (llm.c's, the default for llmc/npy shards), `shuffled`, or `random`
    /// (nanoGPT's, the default for the other sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<DataOrder>,
}

impl DataConfig {
    /// The data order in effect: as set, or the source's own default.
    pub fn order(&self) -> DataOrder {
        self.order.unwrap_or(match self.source {
            DataSource::Llmc | DataSource::Npy => DataOrder::Sequential,
            DataSource::Generated | DataSource::Text | DataSource::Nanogpt => DataOrder::Random,
        })
    }
}

/// A file the tokens came from, for provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    pub path: PathBuf,
    pub sha256: String,
    pub tokens: usize,
}

/// Train and val token streams, ready for batching.
#[derive(Debug)]
pub struct TokenData {
    pub train: Tokens,
    pub val: Tokens,
    pub vocab_size: usize,
    pub tokenizer: Tokenizer,
    /// The exact entropy rate of the generated corpus, per token of this
    /// tokenizer: the best loss any model can reach (`None` for other sources).
    pub entropy_nats_per_token: Option<f64>,
    pub files: Vec<DataFile>,
}

/// Load the token data a `[data]` table describes.
pub fn load(cfg: &DataConfig) -> anyhow::Result<TokenData> {
    match cfg.source {
        DataSource::Generated => load_generated(cfg),
        DataSource::Text => load_text(cfg),
        DataSource::Llmc | DataSource::Npy | DataSource::Nanogpt => load_shards(cfg),
    }
}

/// The tokenizer a `[data]` table trains with, without reading the token
/// data (shards can be terabytes). Only a char-level vocabulary needs text:
/// it is the set of characters of the corpus, as in nanoGPT.
pub fn tokenizer_of(cfg: &DataConfig) -> anyhow::Result<Tokenizer> {
    Ok(match cfg.tokenizer {
        TokenizerKind::Byte => Tokenizer::byte(),
        TokenizerKind::Gpt2 => Tokenizer::gpt2(),
        TokenizerKind::Char => match cfg.source {
            DataSource::Generated => {
                let bytes = cfg.corpus_bytes.unwrap_or(corpus::DEFAULT_CORPUS_BYTES);
                let text = corpus::Grammar::default_grammar()
                    .generate(cfg.seed, bytes)
                    .text;
                Tokenizer::char_level(&text)
            }
            _ => {
                let path = required_path(cfg, "text")?;
                let text = std::fs::read_to_string(path).map_err(|e| {
                    usage(
                        format!(
                            "cannot read [data].path {} for its characters: {e}",
                            path.display()
                        ),
                        "point path at the UTF-8 text file the run was trained on",
                    )
                })?;
                Tokenizer::char_level(&text)
            }
        },
    })
}

pub(crate) fn usage(message: String, fix: &str) -> anyhow::Error {
    UserError::usage(message).with_fix(fix).into()
}

fn val_fraction(cfg: &DataConfig) -> anyhow::Result<f64> {
    let fraction = cfg.val_fraction.unwrap_or(DEFAULT_VAL_FRACTION);
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(usage(
            format!("[data].val_fraction = {fraction} is outside (0, 1)"),
            "set val_fraction to a share such as 0.1",
        ));
    }
    Ok(fraction)
}

/// Index where the validation part begins, so that both parts are non-empty.
fn split_point(len: usize, fraction: f64) -> usize {
    let train = ((len as f64) * (1.0 - fraction)).floor() as usize;
    train.clamp(1, len.saturating_sub(1).max(1))
}

fn load_generated(cfg: &DataConfig) -> anyhow::Result<TokenData> {
    if let Some(path) = cfg.path.as_ref().or(cfg.val_path.as_ref()) {
        return Err(usage(
            format!(
                "[data].path / val_path = {} is not used with source = \"generated\"",
                path.display()
            ),
            "remove path/val_path, or set source to \"text\", \"llmc\" or \"nanogpt\"",
        ));
    }
    let bytes = cfg.corpus_bytes.unwrap_or(corpus::DEFAULT_CORPUS_BYTES);
    const MIN_BYTES: usize = 1024;
    if bytes < MIN_BYTES {
        return Err(usage(
            format!("[data].corpus_bytes = {bytes} is too small for a train/val split"),
            &format!(
                "set corpus_bytes to at least {MIN_BYTES} (default {})",
                corpus::DEFAULT_CORPUS_BYTES
            ),
        ));
    }
    let fraction = val_fraction(cfg)?;
    let grammar = corpus::Grammar::default_grammar();
    let text = grammar.generate(cfg.seed, bytes).text;
    let rate = grammar.entropy_rate().nats_per_byte;
    let mut data = split_text(&text, fraction, cfg.tokenizer)?;
    let tokens = (data.train.len() + data.val.len()) as f64;
    // Tokenizers are invertible functions of the bytes, so the stream's total
    // entropy is unchanged; per token it is the per-byte rate times bytes/token.
    data.entropy_nats_per_token = Some(rate * text.len() as f64 / tokens);
    Ok(data)
}

/// Split text by characters (nanoGPT's `data[:int(n*0.9)]`) and encode both
/// parts; a char vocabulary comes from the whole text, as in nanoGPT.
fn split_text(text: &str, fraction: f64, kind: TokenizerKind) -> anyhow::Result<TokenData> {
    let n_chars = text.chars().count();
    let cut_char = split_point(n_chars, fraction);
    let cut = text
        .char_indices()
        .nth(cut_char)
        .map_or(text.len(), |(i, _)| i);
    let (train_text, val_text) = text.split_at(cut);
    let tokenizer = match kind {
        TokenizerKind::Byte => Tokenizer::byte(),
        TokenizerKind::Char => Tokenizer::char_level(text),
        TokenizerKind::Gpt2 => Tokenizer::gpt2(),
    };
    Ok(TokenData {
        train: Tokens::Memory(tokenizer.try_encode(train_text)?),
        val: Tokens::Memory(tokenizer.try_encode(val_text)?),
        vocab_size: tokenizer.vocab_size(),
        tokenizer,
        entropy_nats_per_token: None,
        files: Vec::new(),
    })
}

pub(crate) fn required_path<'a>(cfg: &'a DataConfig, source: &str) -> anyhow::Result<&'a Path> {
    cfg.path.as_deref().ok_or_else(|| {
        usage(
            format!("[data].path is missing; source = \"{source}\" needs it"),
            "set path to the training file (or shard directory)",
        )
    })
}

fn load_text(cfg: &DataConfig) -> anyhow::Result<TokenData> {
    let path = required_path(cfg, "text")?;
    if let Some(val) = &cfg.val_path {
        return Err(usage(
            format!(
                "[data].val_path = {} is not used with source = \"text\"",
                val.display()
            ),
            "remove val_path; the text file is split by val_fraction",
        ));
    }
    let fraction = val_fraction(cfg)?;
    let bytes = std::fs::read(path).map_err(|e| {
        usage(
            format!("cannot read [data].path {}: {e}", path.display()),
            "point path at an existing UTF-8 text file",
        )
    })?;
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    let text = String::from_utf8(bytes).map_err(|e| {
        usage(
            format!(
                "{} is not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
            "convert the file to UTF-8 (e.g. iconv -t UTF-8), or use a token shard source",
        )
    })?;
    if text.chars().count() < 2 {
        return Err(usage(
            format!(
                "{} is empty (or one character): nothing to train on",
                path.display()
            ),
            "point path at a non-empty text file",
        ));
    }
    let mut data = split_text(&text, fraction, cfg.tokenizer)?;
    data.files.push(DataFile {
        path: path.to_path_buf(),
        sha256,
        tokens: data.train.len() + data.val.len(),
    });
    Ok(data)
}

fn load_shards(cfg: &DataConfig) -> anyhow::Result<TokenData> {
    let set = check::shard_set(cfg)?;
    let (train, val) = (
        shards::open_all(&set.train, set.format)?,
        shards::open_all(&set.val, set.format)?,
    );
    let files: Vec<DataFile> = train.iter().chain(&val).map(|s| s.file.clone()).collect();
    let (train, val) = (Tokens::Mapped(train), Tokens::Mapped(val));
    let tokenizer = match cfg.tokenizer {
        TokenizerKind::Gpt2 => Tokenizer::gpt2(),
        _ => Tokenizer::byte(),
    };
    check_ids(&train, &val, &files, &tokenizer)?;
    Ok(TokenData {
        train,
        val,
        vocab_size: tokenizer.vocab_size(),
        tokenizer,
        entropy_nats_per_token: None,
        files,
    })
}

/// Every id must be inside the tokenizer's vocabulary (an embedding lookup
/// would fail far later, on the GPU, with no file name).
fn check_ids(
    train: &Tokens,
    val: &Tokens,
    files: &[DataFile],
    tokenizer: &Tokenizer,
) -> anyhow::Result<()> {
    let vocab = tokenizer.vocab_size() as u32;
    let max = train.max_id().max(val.max_id());
    if max >= vocab {
        let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
        return Err(usage(
            format!(
                "token id {max} in {} is outside the {} tokenizer's vocabulary ({vocab})",
                names.join(", "),
                tokenizer.kind().name()
            ),
            "set [data].tokenizer = \"gpt2\" for GPT-2 shards; Llama-3 (uint32) shards need a Llama-3 tokenizer, which envgen does not ship",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(bytes: usize, tokenizer: TokenizerKind) -> DataConfig {
        DataConfig {
            source: DataSource::Generated,
            path: None,
            val_path: None,
            tokenizer,
            corpus_bytes: Some(bytes),
            val_fraction: None,
            seed: 5,
            order: None,
        }
    }

    #[test]
    fn config_parses_and_rejects_unknown_fields() {
        let cfg: DataConfig = toml::from_str("source = \"generated\"\nseed = 3").unwrap();
        assert_eq!(cfg.source, DataSource::Generated);
        assert_eq!(cfg.tokenizer, TokenizerKind::Byte);
        assert_eq!(cfg.seed, 3);
        let cfg: DataConfig =
            toml::from_str("source = \"llmc\"\npath = \"d\"\ntokenizer = \"gpt2\"").unwrap();
        assert_eq!(cfg.source, DataSource::Llmc);
        let err = toml::from_str::<DataConfig>("source = \"text\"\npaht = \"x\"").unwrap_err();
        assert!(err.to_string().contains("paht"), "{err}");
        assert!(toml::from_str::<DataConfig>("source = \"Generated\"").is_err());
    }

    #[test]
    fn generated_source_splits_and_reports_the_entropy() {
        let data = load(&generated(10_000, TokenizerKind::Byte)).unwrap();
        assert_eq!(data.train.len(), 9_000);
        assert_eq!(data.val.len(), 1_000);
        assert_eq!(data.vocab_size, 256);
        let rate = corpus::entropy_rate().nats_per_byte;
        assert_eq!(data.entropy_nats_per_token, Some(rate));
        let text = corpus::generate(5, 10_000).text;
        assert_eq!(data.tokenizer.decode(&data.train.to_vec()), text[..9_000]);

        let gpt2 = load(&generated(10_000, TokenizerKind::Gpt2)).unwrap();
        assert!(
            gpt2.train.len() < 9_000 / 2,
            "BPE packs several bytes per token"
        );
        assert!(gpt2.entropy_nats_per_token.unwrap() > 2.0 * rate);

        let mut bad = generated(10_000, TokenizerKind::Byte);
        bad.path = Some("x.txt".into());
        assert!(load(&bad).unwrap_err().to_string().contains("x.txt"));
        bad = generated(10, TokenizerKind::Byte);
        assert!(load(&bad).unwrap_err().to_string().contains("corpus_bytes"));
        bad = generated(10_000, TokenizerKind::Byte);
        bad.val_fraction = Some(1.5);
        assert!(load(&bad).unwrap_err().to_string().contains("val_fraction"));
    }

    fn text_config(path: &Path, tokenizer: TokenizerKind) -> DataConfig {
        DataConfig {
            source: DataSource::Text,
            path: Some(path.to_path_buf()),
            val_path: None,
            tokenizer,
            corpus_bytes: None,
            val_fraction: None,
            seed: 0,
            order: None,
        }
    }

    #[test]
    fn text_source_char_level_like_nanogpt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input.txt");
        std::fs::write(&path, "First Citizen:\nBefore we proceed, hear me speak.\n").unwrap();
        let data = load(&text_config(&path, TokenizerKind::Char)).unwrap();
        let n = 49; // 15 + 34 characters
        assert_eq!(data.train.len() + data.val.len(), n);
        // nanoGPT's split: the first 90 % (rounded down) trains.
        assert_eq!(data.train.len(), 44);
        assert_eq!(data.vocab_size, 25); // distinct characters of the text
        let mut all = data.train.to_vec();
        all.extend(data.val.to_vec());
        assert_eq!(
            data.tokenizer.try_decode(&all).unwrap(),
            "First Citizen:\nBefore we proceed, hear me speak.\n"
        );
        assert_eq!(data.files[0].tokens, n);
        assert_eq!(data.files[0].sha256.len(), 64);
    }

    #[test]
    fn text_source_rejects_non_utf8_and_empty_files() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("latin1.txt");
        std::fs::write(&bad, b"caf\xe9 au lait").unwrap();
        let e = load(&text_config(&bad, TokenizerKind::Byte))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("latin1.txt") && e.contains("not UTF-8") && e.contains("offset 3"),
            "{e}"
        );
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, b"").unwrap();
        let e = load(&text_config(&empty, TokenizerKind::Byte))
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty.txt") && e.contains("empty"), "{e}");
        let e = load(&text_config(
            &dir.path().join("none.txt"),
            TokenizerKind::Byte,
        ))
        .unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
    }

    #[test]
    fn shard_sources_load_train_and_val_with_provenance() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, tokens: &[u32]| {
            let bytes = shards::tests::llmc_bytes(
                shards::LLMC_MAGIC_GPT2,
                1,
                tokens.len() as i32,
                tokens,
                2,
            );
            std::fs::write(dir.path().join(name), bytes).unwrap();
        };
        write("tiny_train_000001.bin", &[15496, 995]);
        write("tiny_val_000000.bin", &[50256]);
        let mut cfg = DataConfig {
            source: DataSource::Llmc,
            path: Some(dir.path().to_path_buf()),
            val_path: None,
            tokenizer: TokenizerKind::Gpt2,
            corpus_bytes: None,
            val_fraction: None,
            seed: 0,
            order: None,
        };
        let data = load(&cfg).unwrap();
        assert_eq!(data.train.to_vec(), [15496, 995]);
        assert_eq!(data.val.to_vec(), [50256]);
        assert_eq!(data.vocab_size, 50257);
        assert_eq!(data.tokenizer.decode(&data.train.to_vec()), "Hello world");
        assert_eq!(data.files.len(), 2);

        cfg.tokenizer = TokenizerKind::Byte;
        let e = load(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("outside the byte tokenizer's vocabulary")
                && e.contains("tiny_train_000001.bin")
                && e.contains("gpt2"),
            "{e}"
        );

        let nano = tempfile::tempdir().unwrap();
        std::fs::write(nano.path().join("train.bin"), [1u8, 0, 2, 0]).unwrap();
        std::fs::write(nano.path().join("val.bin"), [3u8, 0]).unwrap();
        cfg.source = DataSource::Nanogpt;
        cfg.path = Some(nano.path().to_path_buf());
        let data = load(&cfg).unwrap();
        assert_eq!(
            (data.train.to_vec(), data.val.to_vec()),
            (vec![1, 2], vec![3])
        );
        cfg.tokenizer = TokenizerKind::Char;
        assert!(load(&cfg).unwrap_err().to_string().contains("char"));

        let npy = tempfile::tempdir().unwrap();
        let write_npy = |name: &str, tokens: &[u16]| {
            let shape = format!("({},)", tokens.len());
            let bytes = shards::tests::npy_bytes("<u2", &shape, tokens);
            std::fs::write(npy.path().join(name), bytes).unwrap();
        };
        write_npy("edufineweb_train_000001.npy", &[15496, 995]);
        write_npy("edufineweb_val_000000.npy", &[50256, 15496]);
        cfg.source = DataSource::Npy;
        cfg.tokenizer = TokenizerKind::Gpt2;
        cfg.path = Some(npy.path().to_path_buf());
        let data = load(&cfg).unwrap();
        assert_eq!(data.train.to_vec(), [15496, 995]);
        assert_eq!(data.val.to_vec(), [50256, 15496]);
        assert_eq!(cfg.order(), DataOrder::Sequential);
    }

    #[test]
    fn the_tokenizer_comes_without_reading_the_token_data() {
        // A path that does not exist: the GPT-2 tokenizer needs no data.
        let cfg: DataConfig = toml::from_str(
            "source = \"llmc\"\npath = \"/nonexistent/shards\"\ntokenizer = \"gpt2\"",
        )
        .unwrap();
        assert_eq!(tokenizer_of(&cfg).unwrap().vocab_size(), 50257);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input.txt");
        std::fs::write(&path, "abcab").unwrap();
        let cfg = text_config(&path, TokenizerKind::Char);
        assert_eq!(tokenizer_of(&cfg).unwrap().vocab_size(), 3);
    }
}
