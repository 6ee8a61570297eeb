//! TensorBoard event files for a run: `events.out.tfevents.<secs>.<host>.envgen`
//! in the run directory mirrors `metrics.jsonl` line by line (tags and
//! steps: docs/cli.md, "`envgen runs`"), with config.toml as text and as
//! hyperparameters (`tensorboard_hparams.rs`). It lies in the run directory
//! itself, not in a subfolder, because TensorBoard names a run by the folder
//! of its event files relative to `--logdir`: `tensorboard --logdir runs/`
//! lists each run by its id (issue #44; a `tb/` subfolder showed as
//! `RUN_ID/tb`). One converter ([`Scalars`]) serves the live path
//! (`MetricsLog` appends as it logs), the rebuild when a run (re)starts and
//! `envgen runs export --tensorboard`. Each line's events carry the
//! line's own `time` as their wall time (a resumed run, or one exported a
//! year later, keeps the times its steps ran at); a line without one (a
//! user command's own lines, or a file from before the field) gets the
//! time it is converted: as it is logged live, the moment of an export.
//!
//! The file format is written here by hand: TFRecord framing (u64 length,
//! masked CRC32C of the length, data, masked CRC32C of the data) around
//! `Event` protobufs. The one Rust writer crate (tensorboard-rs, last
//! released 2022) pulls in protobuf 2 and an image library; the handful of
//! fields a scalar or a text summary needs is a few lines of wire format.
//! CRC-32C is a compile-time table here too: the `crc32c` crate would be
//! one more download for a fresh clone's `--offline` build
//! (tests/it/places/fresh_clone.rs) for twenty lines.
//! Field numbers, as TensorBoard 2.21 declares them (the descriptors of
//! `tensorboard/compat/proto/{event,summary,tensor,tensor_shape,types}_pb2.py`):
//! Event: wall_time = 1 (double), step = 2 (int64), file_version = 3,
//! summary = 5. Summary: value = 1. Summary.Value: tag = 1,
//! simple_value = 2 (float), tensor = 8, metadata = 9. SummaryMetadata:
//! plugin_data = 1; PluginData: plugin_name = 1. TensorProto: dtype = 1
//! (DT_STRING = 7), tensor_shape = 2, string_val = 8.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

use super::run_files::{read_metrics_text, refuse_symlink, unix_now, TIME_KEY};
use crate::fsutil::write_atomic;

#[path = "tensorboard_hparams.rs"]
pub mod hparams;

/// Where runs from before issue #44 kept their event files: a resumed one
/// has them removed (the run's own folder has the same events now).
pub const LEGACY_TB_DIR: &str = "tb";
/// How envgen's event files end, to tell them from other writers' files.
const SUFFIX: &str = ".envgen";

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
pub fn crc32c(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };
    !bytes.iter().fold(!0u32, |crc, &b| {
        TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// TFRecord's masked CRC (a CRC of data that holds CRCs is weak otherwise).
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord around `data`.
pub fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// A protobuf message being written: the wire types the events need.
#[derive(Default)]
struct Proto(Vec<u8>);

impl Proto {
    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u32) {
        self.raw_varint(u64::from((field << 3) | wire));
    }
    fn varint(mut self, field: u32, v: u64) -> Self {
        self.key(field, 0);
        self.raw_varint(v);
        self
    }
    fn double(mut self, field: u32, v: f64) -> Self {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn float(mut self, field: u32, v: f32) -> Self {
        self.key(field, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, field: u32, bytes: &[u8]) -> Self {
        self.key(field, 2);
        self.raw_varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }
    fn message(self, field: u32, m: Proto) -> Self {
        self.bytes(field, &m.0)
    }
}

fn event(step: u64, wall_time: f64, body: Proto) -> Vec<u8> {
    let e = Proto::default()
        .double(1, wall_time)
        .varint(2, step)
        .message(5, body);
    record(&e.0)
}

/// The first event of every file: TensorBoard reads the file version
/// "brain.Event:2" (no out-of-order-step purging).
fn file_version() -> Vec<u8> {
    let e = Proto::default()
        .double(1, unix_now())
        .bytes(3, b"brain.Event:2");
    record(&e.0)
}

/// Scalars at `step`, logged at `wall_time`, one summary value each.
fn scalars_event(step: u64, wall_time: f64, scalars: &[(String, f64)]) -> Vec<u8> {
    let summary = scalars.iter().fold(Proto::default(), |s, (tag, v)| {
        let value = Proto::default()
            .bytes(1, tag.as_bytes())
            .float(2, *v as f32);
        s.message(1, value)
    });
    event(step, wall_time, summary)
}

/// A text summary (TensorBoard's Text tab) at `step`.
fn text_event(step: u64, tag: &str, text: &str) -> Vec<u8> {
    let plugin = Proto::default().bytes(1, b"text");
    let metadata = Proto::default().message(1, plugin);
    let tensor = Proto::default()
        .varint(1, 7)
        .message(2, Proto::default())
        .bytes(8, text.as_bytes());
    let value = Proto::default()
        .bytes(1, tag.as_bytes())
        .message(9, metadata)
        .message(8, tensor);
    event(step, unix_now(), Proto::default().message(1, value))
}

/// Turns `metrics.jsonl` lines into (step, scalars): the tag rules of
/// docs/cli.md. It remembers the last training step, which GPU sampler
/// lines (they have none) are plotted at.
#[derive(Debug, Default)]
pub struct Scalars {
    last_step: u64,
}

impl Scalars {
    pub fn of_line(&mut self, line: &Value) -> Option<(u64, Vec<(String, f64)>)> {
        let fields = line.as_object()?;
        let mut out = Vec::new();
        if let Some(gpus) = fields.get("gpu").and_then(Value::as_array) {
            for gpu in gpus {
                let index = gpu.get("index").and_then(Value::as_u64).unwrap_or(0);
                for (key, v) in gpu.as_object().into_iter().flatten() {
                    if key != "index" {
                        flatten(&format!("gpu/{index}/{key}"), v, &mut out);
                    }
                }
            }
            return Some((self.last_step, out));
        }
        let step = match fields.get("step").and_then(Value::as_u64) {
            Some(step) => {
                self.last_step = step;
                step
            }
            None => fields
                .get("round")
                .and_then(Value::as_u64)
                .unwrap_or(self.last_step),
        };
        let stage = fields.get("stage").and_then(Value::as_str);
        for (key, v) in fields {
            if key != "step" && key != TIME_KEY {
                let group = stage.unwrap_or_else(|| group_of(key));
                flatten(&format!("{group}/{key}"), v, &mut out);
            }
        }
        Some((step, out))
    }
}

/// Which TensorBoard section a metric of a training line goes to.
fn group_of(key: &str) -> &'static str {
    match key {
        k if k.ends_with("_per_s") || k == "step_ms" => "throughput",
        "lr" | "grad_norm" | "loss_scale" | "skipped" | "scale_raised" | "skipped_steps"
        | "scale_raises" => "optim",
        k if k.starts_with("val_") || k.starts_with("hellaswag") => "eval",
        "exact_accuracy" | "cell_accuracy" | "mean_act_steps" | "accuracy" | "answer_rate" => {
            "eval"
        }
        _ => "train",
    }
}

/// Numbers (and booleans as 0/1) under `tag`; objects and arrays below it
/// joined with `/`; strings and nulls are not scalars.
fn flatten(tag: &str, v: &Value, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => out.extend(n.as_f64().map(|f| (tag.to_string(), f))),
        Value::Bool(b) => out.push((tag.to_string(), f64::from(u8::from(*b)))),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, v)| flatten(&format!("{tag}/{k}"), v, out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(&format!("{tag}/{i}"), v, out)),
        Value::String(_) | Value::Null => {}
    }
}

/// The events of the complete lines of `text`, and how many bytes they
/// span (a last line without its newline is still being written).
fn events_of(text: &str, scalars: &mut Scalars) -> (Vec<u8>, usize) {
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    let mut out = Vec::new();
    for line in text[..complete].lines() {
        let Ok(parsed) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some((step, values)) = scalars.of_line(&parsed) {
            if !values.is_empty() {
                out.extend(scalars_event(step, time_of(&parsed), &values));
            }
        }
    }
    (out, complete)
}

/// When a metrics line was logged: its `time`, or now (see the header).
fn time_of(line: &Value) -> f64 {
    line.get(TIME_KEY)
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite() && *t > 0.0)
        .unwrap_or_else(unix_now)
}

/// envgen's event files in `dir`, sorted.
fn our_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("events.out.tfevents.") && n.ends_with(SUFFIX))
        })
        .collect();
    files.sort();
    files
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .unwrap_or_else(|| "localhost".into())
}

/// Write `dir`'s event file afresh from `metrics` (the text of a
/// metrics.jsonl) and `config` (config.toml, as text at step 0), atomically,
/// under the name it had (a TensorBoard watching it keeps one file); other
/// envgen event files there (stale) are removed. Returns the file and the
/// bytes of `metrics` it covers.
pub fn write_dir(
    dir: &Path,
    metrics: &str,
    config: Option<&str>,
) -> anyhow::Result<(PathBuf, usize, Scalars)> {
    refuse_symlink(dir, "TensorBoard folder", "folder")?;
    crate::fsutil::create_dir_all(dir)?;
    let existing = our_files(dir);
    let path = existing.first().cloned().unwrap_or_else(|| {
        let secs = unix_now() as u64;
        dir.join(format!("events.out.tfevents.{secs}.{}{SUFFIX}", host()))
    });
    let mut bytes = file_version();
    if let Some(config) = config {
        bytes.extend(text_event(0, "config", &format!("```toml\n{config}\n```")));
        let hparams = hparams::of_config(config);
        if !hparams.is_empty() {
            bytes.extend(hparams::session_start_event(&hparams));
        }
    }
    let mut scalars = Scalars::default();
    let (events, covered) = events_of(metrics, &mut scalars);
    bytes.extend(events);
    write_atomic(&path, &bytes)?;
    for stale in existing.iter().skip(1) {
        std::fs::remove_file(stale).with_context(|| format!("removing {}", stale.display()))?;
    }
    Ok((path, covered, scalars))
}

/// Write `dir`'s own event file (kept under its name, as [`write_dir`]
/// does) holding only the HParams experiment of the runs exported into its
/// subfolders: every config key of `run_dirs` and, as metrics, the scalar
/// tags of the keys their summary.json's `metrics` has (each run's last
/// value of the tag is its metric in the dashboard).
pub fn write_experiment(dir: &Path, run_dirs: &[&Path]) -> anyhow::Result<PathBuf> {
    refuse_symlink(dir, "TensorBoard folder", "folder")?;
    crate::fsutil::create_dir_all(dir)?;
    let mut all_hparams = std::collections::BTreeMap::new();
    let mut metrics = std::collections::BTreeSet::new();
    for run_dir in run_dirs {
        for (name, v) in hparams::of_config(&config_of(run_dir).unwrap_or_default()) {
            all_hparams.entry(name).or_insert(v);
        }
        metrics.extend(final_metric_tags(run_dir)?);
    }
    let metrics: Vec<String> = metrics.into_iter().collect();
    let existing = our_files(dir);
    let path = existing.first().cloned().unwrap_or_else(|| {
        let secs = unix_now() as u64;
        dir.join(format!("events.out.tfevents.{secs}.{}{SUFFIX}", host()))
    });
    let mut bytes = file_version();
    bytes.extend(hparams::experiment_event(&all_hparams, &metrics));
    write_atomic(&path, &bytes)?;
    Ok(path)
}

/// The scalar tags of a run whose key is one of its summary's final
/// `metrics` (`eval/val_loss` for `val_loss`, or gpt2's `final_val_loss`;
/// `train/loss` for `final_train_loss`); no summary, no metrics.
fn final_metric_tags(run_dir: &Path) -> anyhow::Result<Vec<String>> {
    let Ok(summary) = std::fs::read_to_string(run_dir.join("summary.json")) else {
        return Ok(Vec::new());
    };
    let summary: Value = serde_json::from_str(&summary).unwrap_or_default();
    let Some(finals) = summary.get("metrics").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let text = read_metrics_text(&run_dir.join("metrics.jsonl"))?;
    let mut scalars = Scalars::default();
    let mut tags = std::collections::BTreeSet::new();
    for line in text.lines() {
        let parsed = serde_json::from_str::<Value>(line).ok();
        for (tag, _) in parsed
            .and_then(|v| scalars.of_line(&v))
            .map_or(vec![], |s| s.1)
        {
            let key = tag.split_once('/').map_or(tag.as_str(), |(_, key)| key);
            let in_summary = |name: &str| finals.get(name).is_some_and(Value::is_number);
            let named = in_summary(key)
                || in_summary(&format!("final_{key}"))
                || (tag == "train/loss" && in_summary("final_train_loss"));
            if !tag.starts_with("gpu/") && named {
                tags.insert(tag);
            }
        }
    }
    Ok(tags.into_iter().collect())
}

/// envgen's event files in the `tb/` of a run from before issue #44 (and
/// the folder, when nothing else is left in it): TensorBoard would show
/// the run twice, as `RUN_ID` and `RUN_ID/tb`.
fn remove_legacy_tb(run_dir: &Path) -> anyhow::Result<()> {
    let legacy = run_dir.join(LEGACY_TB_DIR);
    if legacy.is_symlink() || !legacy.is_dir() {
        return Ok(());
    }
    for stale in our_files(&legacy) {
        std::fs::remove_file(&stale).with_context(|| format!("removing {}", stale.display()))?;
    }
    // Not empty (another writer's files): left as it is.
    let _ = std::fs::remove_dir(&legacy);
    Ok(())
}

/// `config.toml` of a run directory, if it has one.
fn config_of(run_dir: &Path) -> Option<String> {
    std::fs::read_to_string(run_dir.join("config.toml")).ok()
}

/// Write the events of the run in `run_dir` (its metrics.jsonl and
/// config.toml) into `out`: the run directory itself, or an export folder.
pub fn export(run_dir: &Path, out: &Path) -> anyhow::Result<PathBuf> {
    let metrics = read_metrics_text(&run_dir.join("metrics.jsonl"))?;
    Ok(write_dir(out, &metrics, config_of(run_dir).as_deref())?.0)
}

/// The live event file of a run: rebuilt from `metrics.jsonl` when the run
/// (re)starts, then following it ([`Self::catch_up`] after each line).
pub struct EventsFile {
    file: std::fs::File,
    path: PathBuf,
    scalars: Scalars,
    /// Bytes of metrics.jsonl already turned into events.
    covered: u64,
}

impl EventsFile {
    /// Rebuild the event file beside `metrics` (no step the kept lines
    /// lack, none twice) and open it for appending.
    pub fn open(metrics: &Path) -> anyhow::Result<Self> {
        let run_dir = metrics.parent().unwrap_or(Path::new("."));
        let text = read_metrics_text(metrics)?;
        let (path, covered, scalars) = write_dir(run_dir, &text, config_of(run_dir).as_deref())?;
        remove_legacy_tb(run_dir)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Self {
            file,
            path,
            scalars,
            covered: covered as u64,
        })
    }

    /// Append the events of the lines `metrics` gained since the last call
    /// (the trainer's and the GPU sampler's alike), in one write.
    pub fn catch_up(&mut self, metrics: &Path) -> anyhow::Result<()> {
        let mut new = Vec::new();
        let mut file = std::fs::File::open(metrics)
            .with_context(|| format!("reading {}", metrics.display()))?;
        file.seek(SeekFrom::Start(self.covered))
            .and_then(|_| file.read_to_end(&mut new))
            .with_context(|| format!("reading {}", metrics.display()))?;
        // Up to the last newline: a line still being written waits.
        let complete = new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let (events, _) = events_of(
            &String::from_utf8_lossy(&new[..complete]),
            &mut self.scalars,
        );
        self.covered += complete as u64;
        if !events.is_empty() {
            self.file
                .write_all(&events)
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "tensorboard_tests.rs"]
mod tests;
