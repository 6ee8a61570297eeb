//! The packed quantized-weights file (`.envq`), format version 1.
//!
//! Safetensors cannot hold quantized tensors (see the research notes), so
//! envgen stores them in this small format, laid out byte by byte in
//! docs/experiments/quantize.md. All integers are little-endian.
//!
//! ```text
//! header (64 bytes)
//!   0  8  magic  b"ENVQUANT"
//!   8  2  u16    format version (1)
//!  10  2  u16    flags (0; readers reject anything else)
//!  12  4  u32    tensor count
//!  16  8  u64    table length in bytes
//!  24  8  u64    payload length in bytes
//!  32 32  sha256 of table ‖ payload
//! table (one entry per tensor, in order)
//!      2  u16    name length n, then n bytes of UTF-8 name
//!      1  u8     scheme: 1 int8 per-channel, 2 int4 symmetric, 3 int4 asymmetric,
//!                4 f32 (stored as is)
//!      1  u8     layout: 0 the model's tensor is [rows, cols]; 1 it is the
//!                transpose (a Burn Linear weight [d_in, d_out] is stored as
//!                [d_out, d_in] so that rows are output channels)
//!      4  u32    group size (int8: the column count; f32: 0)
//!      8  u64    rows
//!      8  u64    cols
//!      8  u64    scales offset   ┐ in bytes from the payload's start; lengths
//!      8  u64    offsets offset  │ follow from shape and scheme: 2 bytes per
//!      8  u64    codes offset    ┘ group for scales/offsets, codes as stored
//! payload
//!      scales (fp16), offsets (fp16, asymmetric only), codes — per tensor
//!      (f32: no scales, codes = 4 little-endian bytes per value)
//! ```
//!
//! The codes are [`QuantizedTensor::codes`] verbatim: INT8 one byte per
//! weight, INT4 two per byte with the even (flat, row-major) index in the
//! low nibble. A tensor read back is bit-for-bit the tensor written.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use half::f16;
use sha2::{Digest, Sha256};

use super::schemes::{QuantizedTensor, Scheme};
use crate::error::UserError;

pub const MAGIC: [u8; 8] = *b"ENVQUANT";
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 64;
/// Conventional file extension.
pub const EXTENSION: &str = "envq";

const SCHEME_INT8: u8 = 1;
const SCHEME_INT4_SYM: u8 = 2;
const SCHEME_INT4_ASYM: u8 = 3;
const SCHEME_F32: u8 = 4;

#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub tensor: QuantizedTensor,
    /// The model holds the transpose of `tensor` (`[cols, rows]`).
    pub transposed: bool,
}

fn corrupt(origin: &str, what: impl std::fmt::Display) -> anyhow::Error {
    UserError::usage(format!("{origin}: {what}"))
        .with_fix("this is not an intact envgen .envq file: re-create it with `envgen run quantize`, or pass the right path")
        .into()
}

/// Serialize `tensors` into the version-1 layout.
pub fn encode_packed(tensors: &[NamedTensor]) -> anyhow::Result<Vec<u8>> {
    let mut names = HashSet::new();
    let mut table = Vec::new();
    let mut payload = Vec::new();
    for NamedTensor {
        name,
        tensor,
        transposed,
    } in tensors
    {
        let invalid = |what: String| -> anyhow::Error {
            UserError::failed(format!("cannot pack tensor '{name}': {what}")).into()
        };
        if name.is_empty() || name.len() > usize::from(u16::MAX) {
            return Err(invalid(format!(
                "a name must be 1 to 65535 bytes, it is {}",
                name.len()
            )));
        }
        if !names.insert(name.as_str()) {
            return Err(invalid("the name appears twice".to_string()));
        }
        if let Some(problem) = tensor.inconsistency() {
            return Err(invalid(problem));
        }
        let (code, group) = match tensor.scheme {
            Scheme::Int8PerChannel => (SCHEME_INT8, tensor.cols),
            Scheme::Int4Symmetric { group } => (SCHEME_INT4_SYM, group),
            Scheme::Int4Asymmetric { group } => (SCHEME_INT4_ASYM, group),
            Scheme::Float32 => (SCHEME_F32, 0),
        };
        let group =
            u32::try_from(group).map_err(|_| invalid(format!("group size {group} exceeds u32")))?;
        table.extend_from_slice(&(name.len() as u16).to_le_bytes());
        table.extend_from_slice(name.as_bytes());
        table.extend_from_slice(&[code, u8::from(*transposed)]);
        table.extend_from_slice(&group.to_le_bytes());
        for value in [tensor.rows, tensor.cols] {
            table.extend_from_slice(&(value as u64).to_le_bytes());
        }
        for part in [&tensor.scales, &tensor.offsets] {
            table.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            payload.extend(part.iter().flat_map(|h| h.to_le_bytes()));
        }
        table.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        payload.extend_from_slice(&tensor.codes);
    }
    let count = u32::try_from(tensors.len()).map_err(|_| {
        UserError::failed(format!("cannot pack {} tensors in one file", tensors.len()))
    })?;
    Ok(assemble(count, &table, &payload))
}

/// Header (with the checksum) followed by the table and payload.
fn assemble(count: u32, table: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + table.len() + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(table.len() as u64).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(
        &Sha256::new()
            .chain_update(table)
            .chain_update(payload)
            .finalize(),
    );
    out.extend_from_slice(table);
    out.extend_from_slice(payload);
    out
}

/// Write `tensors` to `path` atomically: a temporary file next to it is
/// written, synced and renamed over `path`, so readers never see half a file.
pub fn write_packed(path: &Path, tensors: &[NamedTensor]) -> anyhow::Result<()> {
    let bytes = encode_packed(tensors)?;
    let file_name = path.file_name().ok_or_else(|| {
        UserError::usage(format!("{}: not a file path", path.display()))
            .with_fix("name a file, e.g. runs/<id>/weights.envq")
    })?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(".tmp-{}", std::process::id()));
    let temp: PathBuf = path.with_file_name(temp_name);
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    written.map_err(|err| {
        let _ = std::fs::remove_file(&temp);
        UserError::from_io(
            format!("cannot write {}", path.display()),
            &err,
            (
                crate::error::ErrorKind::Usage,
                "check that the directory exists and is writable",
            ),
        )
        .into()
    })
}

/// Read every tensor of the file at `path`.
pub fn read_packed(path: &Path) -> anyhow::Result<Vec<NamedTensor>> {
    let bytes = std::fs::read(path).map_err(|err| {
        UserError::usage(format!("cannot read {}: {err}", path.display()))
            .with_fix("pass the path of a .envq file written by `envgen run quantize`")
    })?;
    decode_packed(&bytes, &path.display().to_string())
}

/// Parse a version-1 file; `origin` names it in errors. Never panics, and
/// allocates only after checking sizes against the input.
pub fn decode_packed(bytes: &[u8], origin: &str) -> anyhow::Result<Vec<NamedTensor>> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt(
            origin,
            "wrong magic: not an envgen quantized-weights (.envq) file",
        ));
    }
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(
            origin,
            format!(
                "truncated: {} bytes, the header alone is {HEADER_LEN}",
                bytes.len()
            ),
        ));
    }
    let mut header = Cursor::new(&bytes[MAGIC.len()..HEADER_LEN]);
    let version = header.u16().unwrap_or_default();
    if version != VERSION {
        return Err(UserError::usage(format!(
            "{origin}: format version {version}; this envgen reads version {VERSION}"
        ))
        .with_fix("read it with the envgen release that wrote it, or re-create it")
        .into());
    }
    let flags = header.u16().unwrap_or_default();
    if flags != 0 {
        return Err(corrupt(
            origin,
            format!("unknown header flags {flags:#06x}"),
        ));
    }
    let count = header.u32().unwrap_or_default();
    let table_len = header.u64().unwrap_or_default();
    let payload_len = header.u64().unwrap_or_default();
    let checksum = header.take(32).unwrap_or_default();
    let promised = table_len
        .checked_add(payload_len)
        .and_then(|body| body.checked_add(HEADER_LEN as u64));
    match promised {
        Some(total) if total == bytes.len() as u64 => {}
        Some(total) if total > bytes.len() as u64 => {
            return Err(corrupt(
                origin,
                format!("truncated: the header promises {total} bytes, the file has {}", bytes.len()),
            ))
        }
        _ => {
            return Err(corrupt(
                origin,
                format!(
                    "the header's lengths (table {table_len}, payload {payload_len}) do not match the file's {} bytes",
                    bytes.len()
                ),
            ))
        }
    }
    let body = &bytes[HEADER_LEN..];
    if Sha256::digest(body).as_slice() != checksum {
        return Err(corrupt(
            origin,
            "checksum mismatch: the table or payload changed after writing (corrupt file)",
        ));
    }
    let (table, payload) = body.split_at(table_len as usize);
    let mut cursor = Cursor::new(table);
    let mut names = HashSet::new();
    let mut tensors = Vec::new();
    for index in 0..count {
        let entry = read_entry(&mut cursor, payload)
            .map_err(|what| corrupt(origin, format!("tensor #{index}: {what}")))?;
        if !names.insert(entry.name.clone()) {
            return Err(corrupt(
                origin,
                format!("tensor name '{}' appears twice", entry.name),
            ));
        }
        tensors.push(entry);
    }
    if !cursor.rest().is_empty() {
        return Err(corrupt(
            origin,
            format!(
                "{} bytes left in the tensor table after {count} tensors",
                cursor.rest().len()
            ),
        ));
    }
    Ok(tensors)
}

fn read_entry(cursor: &mut Cursor<'_>, payload: &[u8]) -> Result<NamedTensor, String> {
    const SHORT: &str = "the tensor table ends inside this entry";
    let name_len = cursor.u16().ok_or(SHORT)?;
    let name = std::str::from_utf8(cursor.take(usize::from(name_len)).ok_or(SHORT)?)
        .map_err(|_| "its name is not UTF-8".to_string())?
        .to_string();
    let in_tensor = |what: String| format!("'{name}': {what}");
    let scheme_code = cursor.u8().ok_or(SHORT)?;
    let layout = cursor.u8().ok_or(SHORT)?;
    let group = cursor.u32().ok_or(SHORT)? as usize;
    let rows = cursor.u64().ok_or(SHORT)?;
    let cols = cursor.u64().ok_or(SHORT)?;
    let offsets: [u64; 3] = [
        cursor.u64().ok_or(SHORT)?,
        cursor.u64().ok_or(SHORT)?,
        cursor.u64().ok_or(SHORT)?,
    ];
    if layout > 1 {
        return Err(in_tensor(format!(
            "layout byte is {layout} (known: 0 as is, 1 transposed)"
        )));
    }
    let (Ok(rows), Ok(cols)) = (usize::try_from(rows), usize::try_from(cols)) else {
        return Err(in_tensor(format!(
            "shape [{rows}, {cols}] does not fit in memory"
        )));
    };
    let scheme = match scheme_code {
        SCHEME_INT8 if group == cols => Scheme::Int8PerChannel,
        SCHEME_INT8 => {
            return Err(in_tensor(format!(
                "int8 per-channel with group size {group} for {cols} columns"
            )))
        }
        SCHEME_INT4_SYM | SCHEME_INT4_ASYM if group == 0 => {
            return Err(in_tensor("group size 0".to_string()))
        }
        SCHEME_INT4_SYM => Scheme::Int4Symmetric { group },
        SCHEME_INT4_ASYM => Scheme::Int4Asymmetric { group },
        SCHEME_F32 => Scheme::Float32,
        other => {
            return Err(in_tensor(format!(
                "unknown scheme code {other} (known: 1 int8, 2 int4 symmetric, 3 int4 asymmetric, 4 f32)"
            )))
        }
    };
    let weights = rows
        .checked_mul(cols)
        .ok_or_else(|| in_tensor(format!("shape [{rows}, {cols}] overflows")))?;
    let groups = rows * scheme.groups_per_row(cols);
    let lengths = [
        groups.checked_mul(2),
        if scheme.has_offsets() {
            groups.checked_mul(2)
        } else {
            Some(0)
        },
        Some(scheme.code_bytes(weights)),
    ];
    let mut parts: [&[u8]; 3] = [&[]; 3];
    for ((part, offset), (len, what)) in parts
        .iter_mut()
        .zip(offsets)
        .zip(lengths.into_iter().zip(["scales", "offsets", "codes"]))
    {
        *part = len
            .and_then(|len| {
                let start = usize::try_from(offset).ok()?;
                payload.get(start..start.checked_add(len)?)
            })
            .ok_or_else(|| {
                in_tensor(format!(
                    "its {what} at payload offset {offset} run past the payload ({} bytes)",
                    payload.len()
                ))
            })?;
    }
    let halves = |bytes: &[u8]| -> Vec<f16> {
        bytes
            .chunks_exact(2)
            .map(|pair| f16::from_le_bytes([pair[0], pair[1]]))
            .collect()
    };
    let tensor = QuantizedTensor {
        scheme,
        rows,
        cols,
        scales: halves(parts[0]),
        offsets: halves(parts[1]),
        codes: parts[2].to_vec(),
    };
    if let Some(problem) = tensor.inconsistency() {
        return Err(in_tensor(problem));
    }
    Ok(NamedTensor {
        name,
        tensor,
        transposed: layout == 1,
    })
}

/// Little-endian reads that return `None` at the end of the input.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.bytes.len() {
            return None;
        }
        let (head, tail) = self.bytes.split_at(len);
        self.bytes = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes
    }
}

#[cfg(test)]
mod tests;
