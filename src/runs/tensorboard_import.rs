//! Scalars from the TensorBoard event files a user's command writes
//! (`envgen run --tensorboard-dir DIR -- CMD`), as rows of the run's
//! `metrics.jsonl`, so that `runs show/list/compare/report/watch` see
//! what `SummaryWriter.add_scalar` logged without a change to the code.
//!
//! A scalar is a `simple_value` (TF1, PyTorch's `add_scalar`) or a
//! one-number `tensor` of the `scalars` plugin (or of none): `float_val`
//! and its kin (PyTorch's `add_scalar(new_style=True)`) or `tensor_content`
//! (TensorFlow 2, Keras, Flax); the bytes are read in `tensorboard_read`.
//! Event files in subfolders are TensorBoard runs of their own
//! (`add_scalars("loss", {"train": …})` writes tag `loss` into
//! `loss_train/`): their keys are `SUBFOLDER/TAG`, as TensorBoard shows
//! run `…/loss_train`, tag `loss` (docs/running.md, "TensorBoard").
//! Whatever is not imported is named in a warning, with why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::tensorboard_read::{event_values, records, Payload};

/// One scalar: its step, its key (the tag, behind the subfolder of its
/// event file), its value and when it was logged (unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub step: u64,
    pub key: String,
    pub value: f64,
    pub wall_time: f64,
}

/// Values of one key (or records of one file) that were not imported.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub count: usize,
    /// Why (the first reason seen).
    pub why: String,
}

/// What the event files under a folder hold for the import.
#[derive(Debug, Default)]
pub struct Read {
    pub scalars: Vec<Scalar>,
    /// By key (or by file, for records that cannot be read).
    pub skipped: BTreeMap<String, Skipped>,
}

impl Read {
    fn skip(&mut self, what: String, why: impl Into<String>) {
        let entry = self.skipped.entry(what).or_insert_with(|| Skipped {
            count: 0,
            why: why.into(),
        });
        entry.count += 1;
    }
}

/// Every scalar of every event file under `dir` (recursively; files whose
/// name holds `tfevents`), in file-name order, then as written. Records
/// that fail their checksum are skipped (and counted); a file cut short
/// (still being written) ends at its last whole record.
pub fn scalars(dir: &Path) -> Read {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.file_name().to_string_lossy().contains("tfevents"))
        .map(|e| e.into_path())
        .collect();
    files.sort();
    let prefixes = run_prefixes(dir, &files);
    let mut read = Read::default();
    // TensorBoard takes a tag's plugin from the first value that names one
    // (TF2 may write the metadata once); later values without it inherit.
    let mut plugins: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (file, prefix) in files.iter().zip(prefixes) {
        let bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(e) => {
                read.skip(file.display().to_string(), format!("cannot be read: {e}"));
                continue;
            }
        };
        let (events, corrupt) = records(&bytes);
        for _ in 0..corrupt {
            read.skip(file.display().to_string(), "a record fails its checksum");
        }
        for value in events.into_iter().flat_map(event_values) {
            let key = format!("{prefix}{}", value.tag);
            let plugin = plugins.entry(key.clone()).or_default();
            if plugin.is_none() {
                plugin.clone_from(&value.plugin);
            }
            let plugin = plugin.clone();
            let number = match value.payload {
                Payload::Simple(x) => Ok(x),
                Payload::Tensor(x) if matches!(plugin.as_deref(), None | Some("scalars")) => x,
                Payload::Tensor(_) => Err(format!(
                    "data of TensorBoard's {} plugin, not a scalar",
                    plugin.unwrap_or_default()
                )),
                Payload::Other(what) => Err(format!("{what}, not a scalar")),
            };
            // A negative step is no step of a run (issue #40); a tag named
            // `step` or `time` would overwrite the row's own field.
            let number = match (number, u64::try_from(value.step)) {
                (Err(why), _) => Err(why),
                (Ok(_), Err(_)) => Err(format!("a negative step ({})", value.step)),
                (Ok(_), _) if key == "step" || key == "time" => {
                    Err(format!("the name of the row's `{key}` field"))
                }
                (Ok(x), Ok(step)) => Ok((x, step)),
            };
            match number {
                Ok((number, step)) => read.scalars.push(Scalar {
                    step,
                    key,
                    value: number,
                    wall_time: value.wall_time,
                }),
                Err(why) => read.skip(key, why),
            }
        }
    }
    read
}

/// Each file's key prefix: the folders between the deepest folder that
/// holds every event file and the file (`loss_train/`), empty for the
/// files in that folder itself. A writer whose files all lie in
/// `DIR/tb/` keeps its bare tags.
fn run_prefixes(dir: &Path, files: &[PathBuf]) -> Vec<String> {
    let folders: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            let parent = f.parent().unwrap_or(dir);
            parent
                .strip_prefix(dir)
                .unwrap_or(parent)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .collect();
    let common = folders.first().map_or(0, |first| {
        (0..first.len())
            .take_while(|&i| folders.iter().all(|f| f.get(i) == first.get(i)))
            .count()
    });
    folders
        .iter()
        .map(|f| f[common..].iter().map(|c| format!("{c}/")).collect())
        .collect()
}

/// Append the scalars under `dir` to `metrics` (JSON lines): one row per
/// step, `{"step": S, "time": T, KEY: VALUE, …}`, steps in order, `time`
/// the latest wall time of the step's events. What is not imported is
/// named in warnings. Returns the rows written.
pub fn import(dir: &Path, metrics: &Path) -> std::io::Result<usize> {
    let mut read = scalars(dir);
    let mut rows: BTreeMap<u64, (Map<String, Value>, f64)> = BTreeMap::new();
    for scalar in std::mem::take(&mut read.scalars) {
        let Some(number) = serde_json::Number::from_f64(scalar.value) else {
            read.skip(scalar.key, format!("{} is no JSON number", scalar.value));
            continue;
        };
        let (row, time) = rows.entry(scalar.step).or_default();
        row.insert(scalar.key, Value::Number(number));
        *time = time.max(scalar.wall_time);
    }
    warn_skipped(dir, &read.skipped);
    if rows.is_empty() {
        return Ok(0);
    }
    let mut text = String::new();
    for (step, (tags, time)) in &rows {
        let mut row = Map::new();
        row.insert("step".into(), Value::from(*step));
        if *time > 0.0 {
            row.insert("time".into(), Value::from(*time));
        }
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

/// How many keys a warning names before it counts the rest.
const NAMED: usize = 12;

fn warn_skipped(dir: &Path, skipped: &BTreeMap<String, Skipped>) {
    if skipped.is_empty() {
        return;
    }
    let total: usize = skipped.values().map(|s| s.count).sum();
    eprintln!(
        "envgen: warning: {total} TensorBoard value(s) under {} not imported:",
        dir.display()
    );
    for (what, s) in skipped.iter().take(NAMED) {
        eprintln!("envgen:   {what} ({} value(s)): {}", s.count, s.why);
    }
    if skipped.len() > NAMED {
        eprintln!("envgen:   … and {} more", skipped.len() - NAMED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::tensorboard_read::varint;
    use envgen_experiments::engine::tensorboard::{record, EventsFile};

    /// What envgen's own writer writes, this reader reads back, with the
    /// lines' times.
    #[test]
    fn envgens_own_events_read_back_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = dir.path().join("metrics.jsonl");
        std::fs::write(
            &metrics,
            "{\"step\": 1, \"loss\": 2.5, \"time\": 1700000000.25}\n{\"step\": 2, \"loss\": 1.25, \"lr\": 0.5, \"time\": 1700000001.5}\n",
        )
        .unwrap();
        let mut events = EventsFile::open(&metrics).unwrap();
        events.catch_up(&metrics).unwrap();
        drop(events);
        // The event file lies in the run directory itself (issue #44).
        let tb = dir.path().to_path_buf();
        let found = scalars(&tb);
        let loss: Vec<(u64, f64, f64)> = found
            .scalars
            .iter()
            .filter(|s| s.key.ends_with("loss"))
            .map(|s| (s.step, s.value, s.wall_time))
            .collect();
        assert_eq!(
            loss,
            [(1, 2.5, 1700000000.25), (2, 1.25, 1700000001.5)],
            "{found:?}"
        );
        // A record cut short at the end (a writer mid-flush) is not read.
        let file = walkdir::WalkDir::new(&tb)
            .into_iter()
            .filter_map(|e| e.ok())
            .find(|e| {
                e.file_type().is_file() && e.file_name().to_string_lossy().contains("tfevents")
            })
            .unwrap()
            .into_path();
        let mut bytes = std::fs::read(&file).unwrap();
        let whole = scalars(&tb).scalars.len();
        bytes.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0]);
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(scalars(&tb).scalars.len(), whole);
        // Imported: one row per step, with its time.
        let out = dir.path().join("imported.jsonl");
        assert_eq!(import(&tb, &out).unwrap(), 2);
        let text = std::fs::read_to_string(&out).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows[1]["step"], 2);
        assert_eq!(rows[1]["time"], 1700000001.5);
    }

    #[test]
    fn garbage_is_no_scalar_and_no_panic() {
        for bytes in [
            &b""[..],
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            b"short",
        ] {
            assert!(records(bytes).0.is_empty());
            assert!(event_values(bytes).is_empty());
        }
        assert!(varint(&[0x80; 11]).is_none());
    }

    /// Protobuf bytes: a varint, a length-delimited field.
    fn raw_varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn with_len(field: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(field << 3) | 2];
        raw_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    }

    /// An `Event` at `step` holding one `Summary.Value` (its fields given).
    fn event(step: i64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![0x10];
        raw_varint(step as u64, &mut out);
        out.extend(with_len(5, &with_len(1, value)));
        out
    }

    /// A `Summary.Value` of `tag` with a `simple_value`.
    fn simple(tag: &str, value: f32) -> Vec<u8> {
        let mut out = with_len(1, tag.as_bytes());
        out.push(0x15);
        out.extend_from_slice(&value.to_le_bytes());
        out
    }

    /// Generated steps: a negative one is never imported as a huge step,
    /// and a scalar tagged `step` never replaces the row's step; both, and
    /// a malformed tensor, are named in the warnings' list.
    #[test]
    fn negative_steps_a_step_tag_and_bad_tensors_are_skipped_by_name() {
        for step in [-1i64, -2, i64::MIN, -(1 << 40)] {
            let values = event_values(&event(step, &simple("loss", 1.5)));
            assert_eq!(values[0].step, step);
        }
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path().join("tb");
        std::fs::create_dir(&tb).unwrap();
        // A DT_FLOAT tensor_content of 3 bytes, and one of 3 elements.
        let dim = with_len(2, &[0x08, 3]);
        let mut short = vec![0x08, 1];
        short.extend(with_len(4, &[1, 2, 3]));
        let mut vector = vec![0x08, 1];
        vector.extend(with_len(2, &dim));
        vector.extend(with_len(4, &[0; 12]));
        let tensor = |tag: &str, t: &[u8]| {
            let mut v = with_len(1, tag.as_bytes());
            v.extend(with_len(8, t));
            v
        };
        let mut bytes = Vec::new();
        for payload in [
            event(3, &simple("loss", 1.5)),
            event(3, &simple("step", 999.0)),
            event(-1, &simple("loss", 9.0)),
            event(3, &tensor("short", &short)),
            event(3, &tensor("vector", &vector)),
        ] {
            bytes.extend(record(&payload));
        }
        std::fs::write(tb.join("events.out.tfevents.1.h"), bytes).unwrap();
        let read = scalars(&tb);
        let why = |key: &str| read.skipped[key].why.clone();
        assert_eq!(why("step"), "the name of the row's `step` field");
        assert_eq!(why("loss"), "a negative step (-1)");
        assert_eq!(
            why("short"),
            "a DT_FLOAT tensor whose tensor_content has 3 bytes, not 4"
        );
        assert_eq!(
            why("vector"),
            "a DT_FLOAT tensor of 3 elements, not one number"
        );
        let metrics = dir.path().join("m.jsonl");
        assert_eq!(import(&tb, &metrics).unwrap(), 1);
        let row: Value =
            serde_json::from_str(std::fs::read_to_string(&metrics).unwrap().trim()).unwrap();
        assert_eq!(row, serde_json::json!({"step": 3, "loss": 1.5}));
    }
}
