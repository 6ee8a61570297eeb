//! Token shards, memory-mapped and read window by window: llm.c `.bin`
//! shards (1024-byte header, then uint16 or uint32 tokens), build-nanogpt
//! `.npy` shards (a NumPy uint16 array) and nanoGPT's raw uint16
//! `train.bin` / `val.bin`.
//!
//! Formats: llm.c `dev/data/data_common.py::write_datafile`
//! (https://github.com/karpathy/llm.c/blob/master/dev/data/data_common.py)
//! writes 256 little-endian int32s — magic, version, token count — then the
//! tokens; magic 20240520 is GPT-2 (uint16; version 1, and version 2 in
//! forks that keep the layout), magic 20240801 version 7 is Llama-3
//! (uint32). build-nanogpt's `fineweb.py` saves each shard with `np.save`
//! (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html):
//! `\x93NUMPY`, a version, a header length, a Python-dict header naming
//! dtype, order and shape, then the raw array. nanoGPT's `prepare.py` writes
//! the uint16 stream with no header.
//!
//! Nothing is read into memory as a whole: a shard is checked once with
//! bounded buffered reads (sha256 for provenance, the largest id), then
//! mapped; training copies out only the windows it uses, so memory does
//! not grow with the data set (tests/it/train/gpt2_data_cli.rs measures it).

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use sha2::{Digest, Sha256};

use crate::error::UserError;

use super::DataFile;

/// llm.c header: 256 int32s.
pub const LLMC_HEADER_BYTES: usize = 1024;
/// llm.c GPT-2 shards: uint16 tokens.
pub const LLMC_MAGIC_GPT2: i32 = 20240520;
/// Header versions of uint16 GPT-2 shards (1 in llm.c; 2 keeps the layout).
pub const LLMC_VERSIONS_GPT2: [i32; 2] = [1, 2];
/// llm.c Llama-3 shards: uint32 tokens.
pub const LLMC_MAGIC_LLAMA3: i32 = 20240801;
pub const LLMC_VERSION_LLAMA3: i32 = 7;
/// NumPy's `.npy` magic string.
const NPY_MAGIC: &[u8] = b"\x93NUMPY";

const CHUNK_BYTES: usize = 1 << 20;

/// How a shard file lays out its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardFormat {
    /// llm.c `.bin`: 1024-byte header, then the tokens.
    Llmc,
    /// build-nanogpt `.npy`: a 1-D NumPy uint16 array.
    Npy,
    /// nanoGPT `train.bin`: raw uint16, no header.
    Raw,
}

impl ShardFormat {
    fn regenerate(self) -> &'static str {
        match self {
            ShardFormat::Llmc => "regenerate the shard with llm.c's dev/data scripts (write_datafile), or point [data].path at the right file",
            ShardFormat::Npy => "regenerate the shard with build-nanogpt's fineweb.py (np.save of a uint16 array), or point [data].path at the right file",
            ShardFormat::Raw => "regenerate it with nanoGPT's data/*/prepare.py, or use source = \"llmc\" / \"npy\" / \"text\" if it is another format",
        }
    }
}

/// One memory-mapped shard: where its tokens start and how wide they are.
#[derive(Debug)]
pub struct MappedShard {
    pub file: DataFile,
    /// The largest token id in the shard (checked against the vocabulary).
    pub max_id: u32,
    map: Mmap,
    data_offset: usize,
    width: usize,
    len: usize,
}

fn corrupt(path: &Path, format: ShardFormat, message: String) -> anyhow::Error {
    UserError::usage(format!("{}: {message}", path.display()))
        .with_fix(format.regenerate())
        .into()
}

impl MappedShard {
    /// Open, check and map one shard.
    pub fn open(path: &Path, format: ShardFormat) -> anyhow::Result<Self> {
        let (data_offset, width, count, len) = sized_layout(path, format)?;
        let (sha256, max_id) = scan(path, data_offset, width)?;
        let file = File::open(path).map_err(|e| read_error(path, 0, e))?;
        // SAFETY: the map is read-only; a file changed underneath would show
        // different tokens (as a read() would), never unsound memory: the
        // length is re-checked below and every access is bounds-checked.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| {
            UserError::environment(format!("cannot memory-map {}: {e}", path.display()))
                .with_fix("check that the file system supports mmap (local disk, NFS, Lustre do)")
        })?;
        if map.len() as u64 != len {
            return Err(corrupt(
                path,
                format,
                format!(
                    "the file changed size while being read ({len} → {} bytes)",
                    map.len()
                ),
            ));
        }
        Ok(Self {
            file: DataFile {
                path: path.to_path_buf(),
                sha256,
                tokens: count,
            },
            max_id,
            map,
            data_offset,
            width,
            len: count,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tokens `range` of the shard (the only bytes of it that are touched).
    pub fn tokens(&self, range: Range<usize>) -> Vec<u32> {
        let range = range.start.min(self.len)..range.end.min(self.len);
        let bytes = &self.map[self.data_offset + range.start * self.width
            ..self.data_offset + range.end * self.width];
        decode(bytes, self.width)
    }
}

/// (data offset, token width, token count) of a shard, from its header and
/// size alone: what a dry run checks without reading the tokens.
pub fn layout(path: &Path, format: ShardFormat) -> anyhow::Result<(usize, usize, usize)> {
    sized_layout(path, format).map(|(offset, width, count, _)| (offset, width, count))
}

/// [`layout`] and the file's size in bytes.
fn sized_layout(path: &Path, format: ShardFormat) -> anyhow::Result<(usize, usize, usize, u64)> {
    let (mut file, len) = open(path)?;
    let mut head = vec![0u8; (len as usize).min(LLMC_HEADER_BYTES.max(4096))];
    file.read_exact(&mut head)
        .map_err(|e| read_error(path, 0, e))?;
    let (offset, width, count) = match format {
        ShardFormat::Llmc => llmc_layout(path, &head, len)?,
        ShardFormat::Npy => npy_layout(path, &head, len)?,
        ShardFormat::Raw => raw_layout(path, len)?,
    };
    Ok((offset, width, count, len))
}

fn decode(bytes: &[u8], width: usize) -> Vec<u32> {
    match width {
        2 => bytes
            .chunks_exact(2)
            .map(|t| u32::from(u16::from_le_bytes([t[0], t[1]])))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
            .collect(),
    }
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

fn read_error(path: &Path, offset: u64, e: std::io::Error) -> anyhow::Error {
    UserError::usage(format!(
        "cannot read token file {} at byte offset {offset}: {e}",
        path.display()
    ))
    .with_fix("check that the file is readable and not being written")
    .into()
}

/// One pass of bounded reads over the whole file: its sha256 and the
/// largest token id after `data_offset`. Buffered reads, not the map, so
/// the check leaves no pages of the file in the process's resident set.
fn scan(path: &Path, data_offset: usize, width: usize) -> anyhow::Result<(String, u32)> {
    let (mut file, _) = open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut offset = 0u64;
    let mut max_id = 0u32;
    // Token bytes split across two reads wait here for the rest.
    let mut pending: Vec<u8> = Vec::with_capacity(4);
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| read_error(path, offset, e))?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        hasher.update(chunk);
        let skip = (data_offset as u64).saturating_sub(offset).min(n as u64) as usize;
        offset += n as u64;
        let mut body = &chunk[skip..];
        if !pending.is_empty() {
            let need = (width - pending.len()).min(body.len());
            pending.extend_from_slice(&body[..need]);
            body = &body[need..];
            if pending.len() == width {
                max_id = max_id.max(decode(&pending, width)[0]);
                pending.clear();
            }
        }
        let whole = body.len() / width * width;
        max_id = max_id.max(max_token(&body[..whole], width));
        pending.extend_from_slice(&body[whole..]);
    }
    Ok((hex::encode(hasher.finalize()), max_id))
}

fn max_token(bytes: &[u8], width: usize) -> u32 {
    match width {
        2 => bytes
            .chunks_exact(2)
            .map(|t| u16::from_le_bytes([t[0], t[1]]))
            .max()
            .map_or(0, u32::from),
        _ => bytes
            .chunks_exact(4)
            .map(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
            .max()
            .unwrap_or(0),
    }
}

/// The data size a header promises against the file's: a short file names
/// the byte offset where it ends early.
fn check_size(
    path: &Path,
    format: ShardFormat,
    data_offset: usize,
    count: u64,
    width: usize,
    len: u64,
    what: &str,
) -> anyhow::Result<()> {
    let expected = data_offset as u64 + count * width as u64;
    if len < expected {
        return Err(corrupt(
            path,
            format,
            format!(
                "file is truncated at byte offset {len}: {what} says {count} tokens of {width} bytes after a {data_offset}-byte header, so it should be {expected} bytes"
            ),
        ));
    }
    if len > expected {
        return Err(corrupt(
            path,
            format,
            format!(
                "file has trailing bytes from byte offset {expected}: {what} says {count} tokens of {width} bytes, so the size should be {expected} bytes, found {len}"
            ),
        ));
    }
    Ok(())
}

/// (data offset, token width, token count) of an llm.c shard.
fn llmc_layout(path: &Path, head: &[u8], len: u64) -> anyhow::Result<(usize, usize, usize)> {
    let format = ShardFormat::Llmc;
    if head.starts_with(NPY_MAGIC) {
        return Err(corrupt(
            path,
            format,
            "a NumPy .npy file (\\x93NUMPY at byte offset 0), not an llm.c shard: use source = \"npy\"".into(),
        ));
    }
    if (len as usize) < LLMC_HEADER_BYTES {
        return Err(corrupt(
            path,
            format,
            format!(
                "not an llm.c token shard: expected a {LLMC_HEADER_BYTES}-byte header, the file ends at byte offset {len} (truncated?)"
            ),
        ));
    }
    let field = |i: usize| {
        i32::from_le_bytes([
            head[4 * i],
            head[4 * i + 1],
            head[4 * i + 2],
            head[4 * i + 3],
        ])
    };
    let (magic, version, count) = (field(0), field(1), field(2));
    let width = match magic {
        LLMC_MAGIC_GPT2 if LLMC_VERSIONS_GPT2.contains(&version) => 2,
        LLMC_MAGIC_LLAMA3 if version == LLMC_VERSION_LLAMA3 => 4,
        LLMC_MAGIC_GPT2 | LLMC_MAGIC_LLAMA3 => {
            let expected = if magic == LLMC_MAGIC_GPT2 {
                "1 or 2".to_string()
            } else {
                LLMC_VERSION_LLAMA3.to_string()
            };
            return Err(corrupt(
                path,
                format,
                format!(
                    "llm.c shard with magic {magic} has version {version} (byte offset 4), expected version {expected}"
                ),
            ));
        }
        _ => {
            let hint = if len % 2 == 0 {
                " (a header-less nanoGPT train.bin? then use source = \"nanogpt\")"
            } else {
                ""
            };
            return Err(corrupt(
                path,
                format,
                format!(
                    "bad magic number {magic} at byte offset 0, expected {LLMC_MAGIC_GPT2} (GPT-2, uint16) or {LLMC_MAGIC_LLAMA3} (Llama-3, uint32){hint}"
                ),
            ));
        }
    };
    if count < 0 {
        return Err(corrupt(
            path,
            format,
            format!("the header's token count (byte offset 8) is negative ({count})"),
        ));
    }
    check_size(
        path,
        format,
        LLMC_HEADER_BYTES,
        count as u64,
        width,
        len,
        "the header",
    )?;
    Ok((LLMC_HEADER_BYTES, width, count as usize))
}

/// (data offset, token width, token count) of a `.npy` uint16 array.
fn npy_layout(path: &Path, head: &[u8], len: u64) -> anyhow::Result<(usize, usize, usize)> {
    let format = ShardFormat::Npy;
    let bad = |message: String| corrupt(path, format, message);
    if !head.starts_with(NPY_MAGIC) {
        return Err(bad(format!(
            "not a NumPy .npy file: the first bytes are not \\x93NUMPY (byte offset 0){}",
            if head.len() >= 4
                && i32::from_le_bytes([head[0], head[1], head[2], head[3]]) == LLMC_MAGIC_GPT2
            {
                " but an llm.c header: use source = \"llmc\""
            } else {
                ""
            }
        )));
    }
    let (major, header_start, header_len) = match head.get(6..12) {
        Some([1, _, a, b, ..]) => (1, 10, u16::from_le_bytes([*a, *b]) as usize),
        Some([v @ (2 | 3), _, a, b, c, d]) => {
            (*v, 12, u32::from_le_bytes([*a, *b, *c, *d]) as usize)
        }
        Some([v, ..]) => {
            return Err(bad(format!(
                "unsupported .npy format version {v} at byte offset 6 (NumPy writes 1, 2 or 3)"
            )))
        }
        _ => {
            return Err(bad(format!(
                "the .npy preamble is truncated: the file ends at byte offset {len}"
            )))
        }
    };
    let data_offset = header_start + header_len;
    let Some(header) = head.get(header_start..data_offset) else {
        return Err(bad(format!(
            "the .npy header ({header_len} bytes from byte offset {header_start}, format {major}) is truncated or too long: the file ends at byte offset {len}"
        )));
    };
    let header = std::str::from_utf8(header).map_err(|e| {
        bad(format!(
            "the .npy header is not text (byte offset {})",
            header_start + e.valid_up_to()
        ))
    })?;
    let descr = npy_value(header, "descr")
        .ok_or_else(|| bad(format!("the .npy header has no 'descr': {header:?}")))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    if descr != "<u2" {
        return Err(bad(format!(
            "the .npy array has dtype {descr:?}, expected '<u2' (little-endian uint16, what build-nanogpt's fineweb.py writes)"
        )));
    }
    let order = npy_value(header, "fortran_order").ok_or_else(|| {
        bad(format!(
            "the .npy header has no 'fortran_order': {header:?}"
        ))
    })?;
    if order != "False" && order != "True" {
        return Err(bad(format!("the .npy header's fortran_order is {order:?}")));
    }
    let shape = npy_value(header, "shape")
        .ok_or_else(|| bad(format!("the .npy header has no 'shape': {header:?}")))?;
    let dims: Vec<&str> = shape
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    let count = match dims.as_slice() {
        [n] => n
            .parse::<u64>()
            .map_err(|_| bad(format!("the .npy shape {shape} is not a token count")))?,
        _ => {
            return Err(bad(format!(
                "the .npy array has shape {shape}, expected one dimension (a token stream)"
            )))
        }
    };
    check_size(path, format, data_offset, count, 2, len, "the .npy header")?;
    Ok((data_offset, 2, count as usize))
}

/// The text of `key`'s value in a `.npy` header dict (`{'descr': '<u2',
/// 'fortran_order': False, 'shape': (123,), }`), up to the next top-level comma.
fn npy_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

fn raw_layout(path: &Path, len: u64) -> anyhow::Result<(usize, usize, usize)> {
    let format = ShardFormat::Raw;
    if len % 2 != 0 {
        return Err(corrupt(
            path,
            format,
            format!(
                "a nanoGPT token file is raw uint16, so its size must be even; found {len} bytes (the last token is cut at byte offset {})",
                len - 1
            ),
        ));
    }
    if len == 0 {
        return Err(corrupt(path, format, "the token file is empty".into()));
    }
    Ok((0, 2, (len / 2) as usize))
}

/// Which split of a shard directory.
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

/// The shards a `path` names: a file, a directory (its `*_train_*.EXT` or
/// `*_val_*.EXT` files, as llm.c's and build-nanogpt's scripts name them),
/// or a glob pattern; sorted by name (the order they are trained in).
pub fn shard_files(path: &Path, split: Split, extension: &str) -> anyhow::Result<Vec<PathBuf>> {
    let pattern = if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    } else if path.is_dir() {
        path.join(format!("*_{}_*.{extension}", split.name()))
    } else {
        path.to_path_buf()
    };
    let pattern_text = pattern.to_string_lossy().into_owned();
    let entries = glob::glob(&pattern_text).map_err(|e| {
        UserError::usage(format!("[data].path {pattern_text:?} is not a valid glob pattern: {e}"))
            .with_fix(format!("give a shard file, a directory of shards, or a pattern like data/fineweb_train_*.{extension}"))
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
        let message = format!("no {} shards match {pattern_text}", split.name());
        if let Some(fix) = other_format_hint(path, split, extension) {
            return Err(UserError::usage(message).with_fix(fix).into());
        }
        return Err(UserError::usage(message)
        .with_fix(format!(
            "point [data].{} at a .{extension} shard, a directory with *_{}_*.{extension} files, or a glob pattern",
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

/// When a directory holds no shards of the configured format but shards
/// of another one (build-nanogpt's `.npy` where llm.c's `.bin` were
/// expected, or the reverse, or nanoGPT's `train.bin`), the fix names the
/// `data.source` that reads them.
fn other_format_hint(dir: &Path, split: Split, extension: &str) -> Option<String> {
    if !dir.is_dir() {
        return None;
    }
    let has = |pattern: &str| {
        glob::glob(&dir.join(pattern).to_string_lossy())
            .map(|mut entries| entries.any(|e| e.is_ok_and(|p| p.is_file())))
            .unwrap_or(false)
    };
    let split = split.name();
    let (source, found) = if extension != "npy" && has(&format!("*_{split}_*.npy")) {
        (
            "npy",
            format!("build-nanogpt .npy shards (*_{split}_*.npy)"),
        )
    } else if extension != "bin" && has(&format!("*_{split}_*.bin")) {
        ("llmc", format!("llm.c .bin shards (*_{split}_*.bin)"))
    } else if has(&format!("{split}.bin")) {
        ("nanogpt", format!("a nanoGPT {split}.bin"))
    } else {
        return None;
    };
    Some(format!(
        "{} holds {found}: --set data.source={source}",
        dir.display()
    ))
}

/// Open and map several shards of one format.
pub fn open_all(files: &[PathBuf], format: ShardFormat) -> anyhow::Result<Vec<MappedShard>> {
    files
        .iter()
        .map(|file| MappedShard::open(file, format))
        .collect()
}

#[cfg(test)]
#[path = "shards_tests.rs"]
pub(crate) mod tests;
