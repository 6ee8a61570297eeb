//! Scalars from the TensorBoard event files a user's command writes
//! (`envgen run --tensorboard-dir DIR -- CMD`), as rows of the run's
//! `metrics.jsonl`, so that `runs show/list/compare/report/watch` see
//! what `SummaryWriter.add_scalar` logged without a change to the code.
//!
//! The format is TFRecord framing (length, masked CRC-32C of the length,
//! the bytes, their masked CRC) around `Event` protobufs. Read by hand for
//! the same reason it is written by hand (`engine::tensorboard`): the only
//! Rust crates for it are unmaintained or pull a protobuf toolchain, and
//! the part needed is a few fields: `Event.step` (2), `Event.summary` (5)
//! → `Summary.value` (1) → `Value.tag` (1), `simple_value` (2), or a
//! scalar `tensor` (8: `TensorProto.float_val` 5 / `double_val` 6) as
//! TensorFlow 2 writes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envgen_experiments::engine::tensorboard::crc32c;
use serde_json::{Map, Value};

/// One scalar: its step, its tag and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub step: u64,
    pub tag: String,
    pub value: f64,
}

/// Every scalar of every event file under `dir` (recursively; files whose
/// name holds `tfevents`), in file-name order, then as written. Records
/// that fail their checksum are skipped; a file cut short (still being
/// written) ends at its last whole record.
pub fn scalars(dir: &Path) -> Vec<Scalar> {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.file_name().to_string_lossy().contains("tfevents"))
        .map(|e| e.into_path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        if let Ok(bytes) = std::fs::read(&file) {
            for record in records(&bytes) {
                event_scalars(record, &mut out);
            }
        }
    }
    out
}

/// Append the scalars under `dir` to `metrics` (JSON lines): one row per
/// step, `{"step": S, TAG: VALUE, …}`, steps in order. Returns the rows written.
pub fn import(dir: &Path, metrics: &Path) -> std::io::Result<usize> {
    let mut rows: BTreeMap<u64, Map<String, Value>> = BTreeMap::new();
    let mut dropped = 0usize;
    for scalar in scalars(dir) {
        // A tag named `step` would overwrite the row's step (issue #40).
        if scalar.tag == "step" {
            dropped += 1;
            continue;
        }
        let Some(number) = serde_json::Number::from_f64(scalar.value) else {
            continue;
        };
        rows.entry(scalar.step)
            .or_default()
            .insert(scalar.tag, Value::Number(number));
    }
    if dropped > 0 {
        eprintln!(
            "envgen: warning: {dropped} TensorBoard scalar(s) tagged `step` under {} not imported (the name is the row's step)",
            dir.display()
        );
    }
    if rows.is_empty() {
        return Ok(0);
    }
    let mut text = String::new();
    for (step, tags) in &rows {
        let mut row = Map::new();
        row.insert("step".into(), Value::from(*step));
        row.extend(tags.clone());
        text.push_str(&Value::Object(row).to_string());
        text.push('\n');
    }
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(metrics)?
        .write_all(text.as_bytes())?;
    Ok(rows.len())
}

fn masked(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The payloads of the whole, intact TFRecords in `bytes`.
fn records(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while bytes.len() >= 12 {
        let (len_bytes, rest) = bytes.split_at(8);
        let len_crc = u32::from_le_bytes(rest[..4].try_into().unwrap_or_default());
        if masked(crc32c(len_bytes)) != len_crc {
            break; // not a record boundary: nothing after it can be trusted
        }
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default());
        let rest = &rest[4..];
        let Some(total) = usize::try_from(len).ok().and_then(|l| l.checked_add(4)) else {
            break;
        };
        if rest.len() < total {
            break; // cut short: the writer is still at it
        }
        let (data, crc) = rest[..total].split_at(total - 4);
        if masked(crc32c(data)) == u32::from_le_bytes(crc.try_into().unwrap_or_default()) {
            out.push(data);
        }
        bytes = &rest[total..];
    }
    out
}

/// A protobuf field: its number and its value.
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one protobuf message; stops at the first malformed one.
fn fields(mut bytes: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some((key, rest)) = varint(bytes) else {
            break;
        };
        let (number, wire) = (key >> 3, key & 7);
        let parsed = match wire {
            0 => varint(rest).map(|(v, r)| (Field::Varint(v), r)),
            1 => (rest.len() >= 8).then(|| {
                let (v, r) = rest.split_at(8);
                (
                    Field::Fixed64(u64::from_le_bytes(v.try_into().unwrap_or_default())),
                    r,
                )
            }),
            2 => varint(rest).and_then(|(len, r)| {
                let len = usize::try_from(len).ok()?;
                (r.len() >= len).then(|| (Field::Bytes(&r[..len]), &r[len..]))
            }),
            5 => (rest.len() >= 4).then(|| {
                let (v, r) = rest.split_at(4);
                (
                    Field::Fixed32(u32::from_le_bytes(v.try_into().unwrap_or_default())),
                    r,
                )
            }),
            _ => None,
        };
        let Some((field, rest)) = parsed else { break };
        out.push((number, field));
        bytes = rest;
    }
    out
}

fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// The scalars of one `Event`.
fn event_scalars(event: &[u8], out: &mut Vec<Scalar>) {
    let event = fields(event);
    let step = event
        .iter()
        .find_map(|(n, f)| match (n, f) {
            (2, Field::Varint(v)) => Some(*v),
            _ => None,
        })
        .unwrap_or(0);
    // `Event.step` is an int64: -1 arrives as 2^64 - 1. A negative step is
    // no step of a run, so its scalars are not imported (issue #40).
    if i64::try_from(step).is_err() {
        return;
    }
    for (number, field) in &event {
        let (5, Field::Bytes(summary)) = (number, field) else {
            continue;
        };
        for (number, field) in fields(summary) {
            let (1, Field::Bytes(value)) = (number, field) else {
                continue;
            };
            if let Some((tag, value)) = summary_value(value) {
                out.push(Scalar { step, tag, value });
            }
        }
    }
}

/// `Summary.Value`: its tag and its scalar (a `simple_value`, or a
/// one-element float/double `tensor`).
fn summary_value(bytes: &[u8]) -> Option<(String, f64)> {
    let mut tag = None;
    let mut value = None;
    for (number, field) in fields(bytes) {
        match (number, field) {
            (1, Field::Bytes(t)) => tag = Some(String::from_utf8_lossy(t).into_owned()),
            (2, Field::Fixed32(v)) => value = Some(widen(f32::from_bits(v))),
            (8, Field::Bytes(tensor)) => value = value.or_else(|| tensor_scalar(tensor)),
            _ => {}
        }
    }
    Some((tag?, value?))
}

/// An f32 as the f64 of its shortest decimal form: `add_scalar("loss", 0.2)`
/// is stored as the f32 nearest 0.2, and reads back as 0.2, not 0.20000000298.
fn widen(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

fn tensor_scalar(tensor: &[u8]) -> Option<f64> {
    for (number, field) in fields(tensor) {
        match (number, field) {
            (5, Field::Fixed32(v)) => return Some(widen(f32::from_bits(v))),
            (5, Field::Bytes(packed)) if packed.len() == 4 => {
                return Some(widen(f32::from_le_bytes(packed.try_into().ok()?)))
            }
            (6, Field::Fixed64(v)) => return Some(f64::from_bits(v)),
            (6, Field::Bytes(packed)) if packed.len() == 8 => {
                return Some(f64::from_le_bytes(packed.try_into().ok()?))
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use envgen_experiments::engine::tensorboard::EventsFile;

    /// What envgen's own writer writes, this reader reads back.
    #[test]
    fn envgens_own_events_read_back_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = dir.path().join("metrics.jsonl");
        std::fs::write(
            &metrics,
            "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"loss\": 1.25, \"lr\": 0.5}\n",
        )
        .unwrap();
        let mut events = EventsFile::open(&metrics).unwrap();
        events.catch_up(&metrics).unwrap();
        drop(events);
        // The event file lies in the run directory itself (issue #44).
        let tb = dir.path().to_path_buf();
        let found = scalars(&tb);
        let loss: Vec<(u64, f64)> = found
            .iter()
            .filter(|s| s.tag.ends_with("loss"))
            .map(|s| (s.step, s.value))
            .collect();
        assert_eq!(loss, [(1, 2.5), (2, 1.25)], "{found:?}");
        // A record cut short at the end (a writer mid-flush) is not read.
        let file = walkdir::WalkDir::new(&tb)
            .into_iter()
            .filter_map(|e| e.ok())
            .find(|e| e.file_type().is_file())
            .unwrap()
            .into_path();
        let mut bytes = std::fs::read(&file).unwrap();
        let whole = scalars(&tb).len();
        bytes.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0]);
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(scalars(&tb).len(), whole);
        // Imported: one row per step.
        let out = dir.path().join("imported.jsonl");
        assert_eq!(import(&tb, &out).unwrap(), 2);
        let text = std::fs::read_to_string(&out).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows[1]["step"], 2);
    }

    #[test]
    fn garbage_is_no_scalar_and_no_panic() {
        for bytes in [
            &b""[..],
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            b"short",
        ] {
            assert!(records(bytes).is_empty());
            let mut out = Vec::new();
            event_scalars(bytes, &mut out);
            assert!(out.is_empty());
        }
        assert!(varint(&[0x80; 11]).is_none());
    }

    /// An `Event` of one scalar, as protobuf bytes: step (field 2, int64 as
    /// a varint), summary (5) → value (1) → tag (1), simple_value (2).
    fn event(step: i64, tag: &str, value: f32) -> Vec<u8> {
        let mut step_varint = Vec::new();
        let mut v = step as u64;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                step_varint.push(byte);
                break;
            }
            step_varint.push(byte | 0x80);
        }
        let mut value_msg = vec![0x0a, tag.len() as u8];
        value_msg.extend_from_slice(tag.as_bytes());
        value_msg.push(0x15);
        value_msg.extend_from_slice(&value.to_le_bytes());
        let mut summary = vec![0x0a, value_msg.len() as u8];
        summary.extend(value_msg);
        let mut out = vec![0x10];
        out.extend(step_varint);
        out.push(0x2a);
        out.push(summary.len() as u8);
        out.extend(summary);
        out
    }

    /// Generated steps: a negative one is never imported as a huge step,
    /// and a scalar tagged `step` never replaces the row's step.
    #[test]
    fn negative_steps_and_a_step_tag_are_not_imported() {
        for step in [-1i64, -2, i64::MIN, -(1 << 40)] {
            let mut out = Vec::new();
            event_scalars(&event(step, "loss", 1.5), &mut out);
            assert!(out.is_empty(), "step {step}: {out:?}");
        }
        for step in [0i64, 1, 7, i64::MAX] {
            let mut out = Vec::new();
            event_scalars(&event(step, "loss", 1.5), &mut out);
            assert_eq!(out.len(), 1, "step {step}");
            assert_eq!(out[0].step, step as u64);
        }
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path().join("tb");
        std::fs::create_dir(&tb).unwrap();
        let mut bytes = Vec::new();
        for payload in [
            event(3, "loss", 1.5),
            event(3, "step", 999.0),
            event(-1, "loss", 9.0),
        ] {
            let len = (payload.len() as u64).to_le_bytes();
            bytes.extend_from_slice(&len);
            bytes.extend_from_slice(&masked(crc32c(&len)).to_le_bytes());
            bytes.extend_from_slice(&payload);
            bytes.extend_from_slice(&masked(crc32c(&payload)).to_le_bytes());
        }
        std::fs::write(tb.join("events.out.tfevents.1.h"), bytes).unwrap();
        let metrics = dir.path().join("m.jsonl");
        assert_eq!(import(&tb, &metrics).unwrap(), 1);
        let row: Value =
            serde_json::from_str(std::fs::read_to_string(&metrics).unwrap().trim()).unwrap();
        assert_eq!(row, serde_json::json!({"step": 3, "loss": 1.5}));
    }
}
