//! Token shard readers: llm.c `.bin` shards (1024-byte header, then uint16 or
//! uint32 tokens) and nanoGPT's raw uint16 `train.bin` / `val.bin`.
//!
//! Formats (see docs/experiments/gpt2-data.md): llm.c
//! `dev/data/data_common.py::write_datafile` writes 256 little-endian int32s —
//! magic, version, token count — then the tokens; magic 20240520 version 1 is
//! GPT-2 (uint16), magic 20240801 version 7 is Llama-3 (uint32). nanoGPT's
//! `prepare.py` writes the uint16 stream with no header.
//!
//! Files are read in bounded chunks and hashed (sha256) in the same pass.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::UserError;

use super::DataFile;

/// llm.c header: 256 int32s.
pub const LLMC_HEADER_BYTES: usize = 1024;
/// llm.c GPT-2 shards: uint16 tokens.
pub const LLMC_MAGIC_GPT2: i32 = 20240520;
pub const LLMC_VERSION_GPT2: i32 = 1;
/// llm.c Llama-3 shards: uint32 tokens.
pub const LLMC_MAGIC_LLAMA3: i32 = 20240801;
pub const LLMC_VERSION_LLAMA3: i32 = 7;

const CHUNK_BYTES: usize = 1 << 20;

/// Tokens of one file, with its provenance.
#[derive(Debug, Clone)]
pub struct Shard {
    pub tokens: Vec<u32>,
    pub file: DataFile,
}

fn open(path: &Path) -> anyhow::Result<(File, u64)> {
    let file = File::open(path).map_err(|e| {
        UserError::usage(format!("cannot open token file {}: {e}", path.display()))
            .with_fix("check [data].path / [data].val_path")
    })?;
    let len = file
        .metadata()
        .map_err(|e| UserError::usage(format!("cannot stat {}: {e}", path.display())))?
        .len();
    Ok((file, len))
}

fn read_error(path: &Path, e: std::io::Error) -> anyhow::Error {
    UserError::usage(format!("cannot read token file {}: {e}", path.display()))
        .with_fix("check that the file is readable and not being written")
        .into()
}

/// Read all of `reader` in bounded chunks: hash every byte, and hand the
/// token bytes (after `skip` header bytes) to `on_bytes`.
fn read_hashed(
    path: &Path,
    reader: &mut impl Read,
    skip: usize,
    mut on_bytes: impl FnMut(&[u8]),
) -> anyhow::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut seen = 0usize;
    loop {
        let n = reader.read(&mut buf).map_err(|e| read_error(path, e))?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        hasher.update(chunk);
        let start = skip.saturating_sub(seen).min(n);
        seen += n;
        on_bytes(&chunk[start..]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Decode little-endian tokens of `width` bytes, keeping an incomplete tail
/// for the next chunk.
struct TokenDecoder {
    width: usize,
    pending: Vec<u8>,
    tokens: Vec<u32>,
}

impl TokenDecoder {
    fn new(width: usize, capacity: usize) -> Self {
        Self {
            width,
            pending: Vec::new(),
            tokens: Vec::with_capacity(capacity),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let whole = self.pending.len() / self.width * self.width;
        for token in self.pending[..whole].chunks_exact(self.width) {
            self.tokens.push(match self.width {
                2 => u32::from(u16::from_le_bytes([token[0], token[1]])),
                _ => u32::from_le_bytes([token[0], token[1], token[2], token[3]]),
            });
        }
        self.pending.drain(..whole);
    }
}

/// Read one llm.c `.bin` shard, checking magic, version and size.
pub fn read_llmc(path: &Path) -> anyhow::Result<Shard> {
    let (mut file, len) = open(path)?;
    let regenerate = "regenerate the shard with llm.c's dev/data scripts (write_datafile), or point [data].path at the right file";
    if (len as usize) < LLMC_HEADER_BYTES {
        return Err(UserError::usage(format!(
            "{} is not an llm.c token shard: expected a {LLMC_HEADER_BYTES}-byte header, found a {len}-byte file (truncated?)",
            path.display()
        ))
        .with_fix(regenerate)
        .into());
    }
    let mut header = [0u8; LLMC_HEADER_BYTES];
    file.read_exact(&mut header)
        .map_err(|e| read_error(path, e))?;
    let field = |i: usize| {
        i32::from_le_bytes([
            header[4 * i],
            header[4 * i + 1],
            header[4 * i + 2],
            header[4 * i + 3],
        ])
    };
    let (magic, version, count) = (field(0), field(1), field(2));
    let width = match (magic, version) {
        (LLMC_MAGIC_GPT2, LLMC_VERSION_GPT2) => 2,
        (LLMC_MAGIC_LLAMA3, LLMC_VERSION_LLAMA3) => 4,
        (LLMC_MAGIC_GPT2, v) | (LLMC_MAGIC_LLAMA3, v) => {
            let expected = if magic == LLMC_MAGIC_GPT2 {
                LLMC_VERSION_GPT2
            } else {
                LLMC_VERSION_LLAMA3
            };
            return Err(UserError::usage(format!(
                "{}: llm.c shard with magic {magic} has version {v}, expected version {expected}",
                path.display()
            ))
            .with_fix(regenerate)
            .into());
        }
        _ => {
            let hint = if len % 2 == 0 {
                " (a header-less nanoGPT train.bin? then use source = \"nanogpt\")"
            } else {
                ""
            };
            return Err(UserError::usage(format!(
                "{}: bad magic number {magic} in the header, expected {LLMC_MAGIC_GPT2} (GPT-2, uint16) or {LLMC_MAGIC_LLAMA3} (Llama-3, uint32){hint}",
                path.display()
            ))
            .with_fix(regenerate)
            .into());
        }
    };
    if count < 0 {
        return Err(UserError::usage(format!(
            "{}: the header's token count is negative ({count})",
            path.display()
        ))
        .with_fix(regenerate)
        .into());
    }
    let expected = LLMC_HEADER_BYTES as u64 + count as u64 * width as u64;
    if len != expected {
        let what = if len < expected {
            "truncated"
        } else {
            "has trailing bytes"
        };
        return Err(UserError::usage(format!(
            "{}: file is {what}: the header says {count} tokens of {width} bytes, so the size should be {expected} bytes, found {len}",
            path.display()
        ))
        .with_fix(regenerate)
        .into());
    }
    // The header was read already; hash it first, then stream the rest.
    let mut decoder = TokenDecoder::new(width, count as usize);
    let mut full = std::io::Cursor::new(header).chain(file);
    let sha256 = read_hashed(path, &mut full, LLMC_HEADER_BYTES, |b| decoder.push(b))?;
    let tokens = decoder.tokens;
    if tokens.len() != count as usize {
        return Err(UserError::usage(format!(
            "{}: read {} tokens but the header says {count} (file changed while reading?)",
            path.display(),
            tokens.len()
        ))
        .into());
    }
    Ok(Shard {
        file: DataFile {
            path: path.to_path_buf(),
            sha256,
            tokens: tokens.len(),
        },
        tokens,
    })
}

/// Read a nanoGPT raw uint16 token file (no header).
pub fn read_nanogpt(path: &Path) -> anyhow::Result<Shard> {
    let (mut file, len) = open(path)?;
    if len % 2 != 0 {
        return Err(UserError::usage(format!(
            "{}: a nanoGPT token file is raw uint16, so its size must be even; found {len} bytes",
            path.display()
        ))
        .with_fix("regenerate it with nanoGPT's data/*/prepare.py, or use source = \"llmc\" / \"text\" if it is another format")
        .into());
    }
    if len == 0 {
        return Err(
            UserError::usage(format!("{}: the token file is empty", path.display()))
                .with_fix("regenerate it with nanoGPT's data/*/prepare.py")
                .into(),
        );
    }
    let mut decoder = TokenDecoder::new(2, (len / 2) as usize);
    let sha256 = read_hashed(path, &mut file, 0, |b| decoder.push(b))?;
    let tokens = decoder.tokens;
    if !decoder.pending.is_empty() {
        return Err(UserError::usage(format!(
            "{}: odd number of bytes (file changed while reading?)",
            path.display()
        ))
        .into());
    }
    Ok(Shard {
        file: DataFile {
            path: path.to_path_buf(),
            sha256,
            tokens: tokens.len(),
        },
        tokens,
    })
}

/// Which split of an llm.c shard directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Val,
}

impl Split {
    fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

/// The llm.c shards a `path` names: a file, a directory (its
/// `*_train_*.bin` or `*_val_*.bin` files, as llm.c's scripts name them), or
/// a glob pattern; sorted by name.
pub fn llmc_files(path: &Path, split: Split) -> anyhow::Result<Vec<PathBuf>> {
    let pattern = if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    } else if path.is_dir() {
        path.join(format!("*_{}_*.bin", split.name()))
    } else {
        path.to_path_buf()
    };
    let pattern_text = pattern.to_string_lossy().into_owned();
    let entries = glob::glob(&pattern_text).map_err(|e| {
        UserError::usage(format!("[data].path {pattern_text:?} is not a valid glob pattern: {e}"))
            .with_fix("give a shard file, a directory of llm.c shards, or a pattern like data/fineweb_train_*.bin")
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let file = entry
            .map_err(|e| UserError::usage(format!("cannot read {}: {e}", e.path().display())))?;
        if file.is_file() {
            files.push(file);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(UserError::usage(format!(
            "no llm.c {} shards match {pattern_text}",
            split.name()
        ))
        .with_fix(format!(
            "point [data].{} at a .bin shard, a directory with *_{}_*.bin files, or a glob pattern",
            if split == Split::Train {
                "path"
            } else {
                "val_path"
            },
            split.name()
        ))
        .into());
    }
    Ok(files)
}

/// Read and concatenate several llm.c shards.
pub fn read_llmc_files(files: &[PathBuf]) -> anyhow::Result<(Vec<u32>, Vec<DataFile>)> {
    let mut tokens = Vec::new();
    let mut provenance = Vec::new();
    for file in files {
        let shard = read_llmc(file)?;
        tokens.extend_from_slice(&shard.tokens);
        provenance.push(shard.file);
    }
    Ok((tokens, provenance))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Write an llm.c shard the way `write_datafile` lays it out.
    pub(crate) fn llmc_bytes(
        magic: i32,
        version: i32,
        count: i32,
        tokens: &[u32],
        width: usize,
    ) -> Vec<u8> {
        let mut header = [0i32; 256];
        header[0] = magic;
        header[1] = version;
        header[2] = count;
        let mut bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
        for &t in tokens {
            if width == 2 {
                bytes.extend_from_slice(&(t as u16).to_le_bytes());
            } else {
                bytes.extend_from_slice(&t.to_le_bytes());
            }
        }
        bytes
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn error_of(result: anyhow::Result<Shard>) -> String {
        let err = result.expect_err("corrupt file must be rejected");
        assert_eq!(crate::error::exit_code_of(&err), 2);
        err.to_string()
    }

    #[test]
    fn reads_gpt2_and_llama3_shards_with_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = [15496u32, 995, 50256, 0, 1];
        let bytes = llmc_bytes(LLMC_MAGIC_GPT2, 1, 5, &tokens, 2);
        let path = write(dir.path(), "x_train_000001.bin", &bytes);
        let shard = read_llmc(&path).unwrap();
        assert_eq!(shard.tokens, tokens);
        assert_eq!(shard.file.tokens, 5);
        assert_eq!(shard.file.sha256, hex::encode(Sha256::digest(&bytes)));

        let big = [128_000u32, 7, 128_255];
        let path = write(
            dir.path(),
            "llama.bin",
            &llmc_bytes(LLMC_MAGIC_LLAMA3, 7, 3, &big, 4),
        );
        assert_eq!(read_llmc(&path).unwrap().tokens, big);
    }

    #[test]
    fn reads_a_shard_larger_than_one_chunk() {
        let dir = tempfile::tempdir().unwrap();
        // An odd token count over 1 MiB puts a token across a chunk boundary.
        let tokens: Vec<u32> = (0..(CHUNK_BYTES as u32 / 2 + 12_345))
            .map(|i| i % 50257)
            .collect();
        let path = write(
            dir.path(),
            "big.bin",
            &llmc_bytes(LLMC_MAGIC_GPT2, 1, tokens.len() as i32, &tokens, 2),
        );
        assert_eq!(read_llmc(&path).unwrap().tokens, tokens);
    }

    #[test]
    fn rejects_corrupt_llmc_shards_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let good = llmc_bytes(LLMC_MAGIC_GPT2, 1, 3, &[1, 2, 3], 2);

        let p = write(
            dir.path(),
            "magic.bin",
            &llmc_bytes(12345, 1, 3, &[1, 2, 3], 2),
        );
        let e = error_of(read_llmc(&p));
        assert!(
            e.contains("magic.bin")
                && e.contains("bad magic number 12345")
                && e.contains("20240520"),
            "{e}"
        );

        let p = write(
            dir.path(),
            "version.bin",
            &llmc_bytes(LLMC_MAGIC_GPT2, 2, 3, &[1, 2, 3], 2),
        );
        let e = error_of(read_llmc(&p));
        assert!(
            e.contains("version.bin")
                && e.contains("version 2")
                && e.contains("expected version 1"),
            "{e}"
        );

        let p = write(dir.path(), "trunc.bin", &good[..good.len() - 1]);
        let e = error_of(read_llmc(&p));
        assert!(
            e.contains("trunc.bin") && e.contains("truncated") && e.contains("1030"),
            "{e}"
        );

        let mut long = good.clone();
        long.extend_from_slice(&[0, 0]);
        let p = write(dir.path(), "long.bin", &long);
        let e = error_of(read_llmc(&p));
        assert!(
            e.contains("long.bin") && e.contains("trailing bytes"),
            "{e}"
        );

        let p = write(dir.path(), "header.bin", &good[..100]);
        let e = error_of(read_llmc(&p));
        assert!(
            e.contains("header.bin") && e.contains("1024-byte header"),
            "{e}"
        );

        let p = write(
            dir.path(),
            "neg.bin",
            &llmc_bytes(LLMC_MAGIC_GPT2, 1, -4, &[], 2),
        );
        let e = error_of(read_llmc(&p));
        assert!(e.contains("neg.bin") && e.contains("negative"), "{e}");

        let e = error_of(read_llmc(&dir.path().join("missing.bin")));
        assert!(e.contains("missing.bin"), "{e}");
    }

    #[test]
    fn nanogpt_reader_reads_uint16_and_rejects_odd_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "train.bin", &[1, 0, 0xff, 0xff, 2, 1]);
        assert_eq!(read_nanogpt(&p).unwrap().tokens, vec![1, 65535, 258]);
        let p = write(dir.path(), "odd.bin", &[1, 0, 3]);
        let e = error_of(read_nanogpt(&p));
        assert!(
            e.contains("odd.bin") && e.contains("even") && e.contains("3 bytes"),
            "{e}"
        );
        let p = write(dir.path(), "empty.bin", &[]);
        let e = error_of(read_nanogpt(&p));
        assert!(e.contains("empty.bin"), "{e}");
    }

    #[test]
    fn directory_and_glob_select_sorted_llmc_shards() {
        let dir = tempfile::tempdir().unwrap();
        let one = llmc_bytes(LLMC_MAGIC_GPT2, 1, 2, &[1, 2], 2);
        let two = llmc_bytes(LLMC_MAGIC_GPT2, 1, 1, &[3], 2);
        write(dir.path(), "fw_train_000002.bin", &two);
        write(dir.path(), "fw_train_000001.bin", &one);
        write(dir.path(), "fw_val_000000.bin", &two);
        let train = llmc_files(dir.path(), Split::Train).unwrap();
        let names: Vec<_> = train
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["fw_train_000001.bin", "fw_train_000002.bin"]);
        let (tokens, files) = read_llmc_files(&train).unwrap();
        assert_eq!(tokens, [1, 2, 3]);
        assert_eq!(files.len(), 2);
        assert_eq!(llmc_files(dir.path(), Split::Val).unwrap().len(), 1);
        let glob = dir.path().join("fw_*_00000[01].bin");
        assert_eq!(llmc_files(&glob, Split::Train).unwrap().len(), 2);
        let e = llmc_files(&dir.path().join("nothing_*.bin"), Split::Train)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nothing_*.bin"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn readers_never_panic_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            header in proptest::option::of((prop_oneof![Just(LLMC_MAGIC_GPT2), Just(LLMC_MAGIC_LLAMA3), any::<i32>()], 0i32..9, -3i32..600)),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut content = match header {
                // Plausible headers reach the size and decode paths.
                Some((magic, version, count)) => llmc_bytes(magic, version, count, &[], 2),
                None => Vec::new(),
            };
            content.extend_from_slice(&bytes);
            let path = write(dir.path(), "any.bin", &content);
            if let Ok(shard) = read_llmc(&path) {
                prop_assert_eq!(shard.file.tokens, shard.tokens.len());
            }
            if let Ok(shard) = read_nanogpt(&path) {
                prop_assert_eq!(shard.tokens.len() * 2, content.len());
            }
        }
    }
}
