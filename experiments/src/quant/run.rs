//! `envgen run quantize --set source=RUN_DIR`: quantize a finished run's
//! weights with every configured scheme, write each as a `.envq` file, load
//! that file back and measure the source experiment's own quality metric.
//!
//! ```text
//! RUN_DIR/packed/<scheme>.envq    the packed model (every tensor; see pack.rs)
//! RUN_DIR/packed/<scheme>.json    that scheme's row of the table (resume skips it)
//! RUN_DIR/summary.json            metrics.schemes[] = the rows, f32 baseline first
//! ```
//!
//! A source kind is a [`SourceRun`]: the GPT experiments (gpt2: validation
//! perplexity; rft: held-out accuracy) implement it here. HRM runs are
//! refused until that experiment's checkpoint format is settled (issue #3);
//! adding it means one more `SourceRun` and one arm in [`open_source`].

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param, Quantizer};
use burn::prelude::*;
use burn::tensor::quantization::{Calibration, QuantLevel, QuantParam, QuantScheme, QuantValue};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::pack::{read_packed, write_packed, NamedTensor};
use super::schemes::{bits_per_weight, dequantize, quantize, Scheme};
use crate::backend::{Cpu, CpuTrain};
use crate::engine::rundir::{read_json, write_json, Manifest, Status, Summary};
use crate::engine::safetensors_io::NamedTensors;
use crate::engine::{self, RunControl, Task};
use crate::error::UserError;
use crate::gpt2::{hf, Gpt2, Gpt2Config, Gpt2Task, ModelConfig};
use crate::registry::{self, Experiment, ResolvedConfig};
use crate::rft::run::{evaluate_accuracy, RftConfig};
use crate::rft::Question;

pub const EXPERIMENT: &str = "quantize";
pub const PRESETS: &[(&str, &str)] = &[("tiny", include_str!("../../presets/quantize/tiny.toml"))];
pub const DEFAULT_PRESET: &str = "tiny";

/// The science config of a quantization run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantizeConfig {
    /// Run directory of a completed gpt2 or rft run.
    pub source: PathBuf,
    /// Scheme names: `int8`, `int4-sym-gN`, `int4-asym-gN` (envgen's packed
    /// formats) and `burn-q8-block32` / `burn-q4-block32` (Burn's built-in
    /// quantized tensors, evaluated in memory).
    pub schemes: Vec<String>,
}

/// A scheme from the config.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    /// envgen's RTN schemes, written to and evaluated from a `.envq` file.
    Packed(Scheme),
    /// Burn's `quantize_weights` with a symmetric block scheme.
    Burn { bits: u8, block: u8 },
}

impl Method {
    fn parse(name: &str) -> anyhow::Result<Self> {
        let burn = |bits: u8| Method::Burn { bits, block: 32 };
        match name {
            "burn-q8-block32" => Ok(burn(8)),
            "burn-q4-block32" => Ok(burn(4)),
            "f32" => Err(UserError::usage("schemes: `f32` is the baseline, always measured")
                .with_fix("leave it out of `schemes`")
                .into()),
            other => Scheme::parse(other).map(Method::Packed).map_err(|_| {
                UserError::usage(format!("schemes: unknown scheme `{other}`"))
                    .with_fix("use int8, int4-sym-gN, int4-asym-gN (N = 32, 64, 128, …), burn-q8-block32 or burn-q4-block32")
                    .into()
            }),
        }
    }
}

impl QuantizeConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.source.as_os_str().is_empty() {
            return Err(UserError::usage("source is not set: quantize needs a trained run")
                .with_fix("pass --set source=RUN_DIR (a completed `envgen run gpt2` or `envgen run rft` directory)")
                .into());
        }
        if self.schemes.is_empty() {
            return Err(UserError::usage("schemes is empty")
                .with_fix("list at least one scheme, e.g. --set 'schemes=[\"int8\"]'")
                .into());
        }
        for name in &self.schemes {
            Method::parse(name)?;
        }
        source_kind(&self.source)?;
        Ok(())
    }
}

pub fn load_config(
    text: &str,
    origin: &str,
    overrides: &[String],
) -> anyhow::Result<engine::Loaded<QuantizeConfig>> {
    let loaded: engine::Loaded<QuantizeConfig> = engine::load(text, origin, overrides)?;
    loaded.science.validate()?;
    Ok(loaded)
}

// ---------------------------------------------------------------------------
// Sources.

/// A quality measurement of one set of weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    pub value: f64,
    /// Throughput of the evaluation, in `SourceRun::throughput_unit`s per second.
    pub per_s: f64,
}

/// What quantization needs from a trained run.
pub trait SourceRun {
    /// The experiment that wrote the run (`gpt2`, `rft`).
    fn kind(&self) -> &'static str;
    /// The run's own quality metric, e.g. `val_perplexity`.
    fn metric(&self) -> &'static str;
    /// `tokens_per_s` or `samples_per_s`.
    fn throughput_field(&self) -> &'static str;
    /// The trained weights: name → (shape, values), and whether the model
    /// holds each 2-D tensor transposed (a Linear's [d_in, d_out]).
    fn weights(&self) -> &[(String, Vec<usize>, Vec<f32>)];
    fn is_transposed(&self, name: &str) -> bool;
    /// Quality of a full set of weights (same names and shapes).
    fn evaluate(&self, weights: &NamedTensors) -> anyhow::Result<Quality>;
    /// Quality after Burn's own `quantize_weights` with `scheme`, and the
    /// bytes the quantized parameters occupy in memory.
    fn evaluate_burn(&self, scheme: QuantScheme) -> anyhow::Result<(Quality, usize)>;
}

/// How a GPT run is scored.
enum GptMetric {
    /// gpt2: the engine's validation loss, reported as perplexity.
    Perplexity(Box<Gpt2Task>),
    /// rft: greedy accuracy on the held-out questions.
    Accuracy {
        questions: Vec<Question>,
        max_new_tokens: usize,
    },
}

/// A gpt2 or rft run: both train the engine's GPT.
pub struct GptSource {
    kind: &'static str,
    model: ModelConfig,
    weights: Vec<(String, Vec<usize>, Vec<f32>)>,
    metric: GptMetric,
    micro_batch: usize,
}

/// Validation windows per forward pass in gpt2 evaluation.
const EVAL_MICRO_BATCH: usize = 16;
/// Questions scored per batch in rft evaluation.
const ACCURACY_BATCH: usize = 128;

impl GptSource {
    fn model_from(&self, weights: &NamedTensors) -> anyhow::Result<Gpt2<Cpu>> {
        hf::load_tensors(
            self.model.init::<Cpu>(&Default::default()),
            weights,
            "quantized weights",
        )
    }

    fn score(&self, model: &Gpt2<Cpu>) -> Quality {
        let device = Default::default();
        let started = Instant::now();
        match &self.metric {
            GptMetric::Perplexity(task) => {
                let loss =
                    <Gpt2Task as Task<CpuTrain>>::evaluate(task, model, self.micro_batch, &device);
                let train = &task.config.train;
                let tokens =
                    (train.eval_batches * train.batch_size).max(1) * task.config.model.block_size;
                Quality {
                    value: loss.exp(),
                    per_s: tokens as f64 / started.elapsed().as_secs_f64().max(1e-9),
                }
            }
            GptMetric::Accuracy {
                questions,
                max_new_tokens,
            } => {
                let eval = evaluate_accuracy(
                    model,
                    &self.model,
                    questions,
                    *max_new_tokens,
                    ACCURACY_BATCH,
                    &device,
                );
                Quality {
                    value: eval.metrics.accuracy,
                    per_s: eval.samples_per_s,
                }
            }
        }
    }
}

impl SourceRun for GptSource {
    fn kind(&self) -> &'static str {
        self.kind
    }
    fn metric(&self) -> &'static str {
        match self.metric {
            GptMetric::Perplexity(_) => "val_perplexity",
            GptMetric::Accuracy { .. } => "accuracy",
        }
    }
    fn throughput_field(&self) -> &'static str {
        match self.metric {
            GptMetric::Perplexity(_) => "tokens_per_s",
            GptMetric::Accuracy { .. } => "samples_per_s",
        }
    }
    fn weights(&self) -> &[(String, Vec<usize>, Vec<f32>)] {
        &self.weights
    }
    fn is_transposed(&self, name: &str) -> bool {
        // Every 2-D tensor but the embeddings is a Burn Linear weight [d_in, d_out].
        !matches!(name, "wte.weight" | "wpe.weight")
    }
    fn evaluate(&self, weights: &NamedTensors) -> anyhow::Result<Quality> {
        Ok(self.score(&self.model_from(weights)?))
    }
    fn evaluate_burn(&self, scheme: QuantScheme) -> anyhow::Result<(Quality, usize)> {
        let f32_weights: NamedTensors = self
            .weights
            .iter()
            .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
            .collect();
        let model = self.model_from(&f32_weights)?;
        // Burn panics on operations a backend lacks for quantized tensors:
        // report that as this scheme's failure, not the whole run's.
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut quantizer = Quantizer {
                calibration: Calibration::MinMax,
                scheme,
            };
            let model = model.quantize_weights(&mut quantizer);
            let bytes = parameter_bytes(&model);
            (self.score(&model), bytes)
        }))
        .map_err(|panic| {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            UserError::failed(format!("Burn's quantized model failed: {text}")).into()
        })
    }
}

/// Bytes of every float parameter's data as the backend stores it.
fn parameter_bytes<B: Backend, M: Module<B>>(model: &M) -> usize {
    struct Bytes(usize);
    impl<B: Backend> ModuleVisitor<B> for Bytes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 += param.val().into_data().as_bytes().len();
        }
    }
    let mut visitor = Bytes(0);
    model.visit(&mut visitor);
    visitor.0
}

fn source_error(dir: &Path, what: impl std::fmt::Display, fix: &str) -> anyhow::Error {
    UserError::usage(format!("source {}: {what}", dir.display()))
        .with_fix(fix)
        .into()
}

const SOURCE_FIX: &str =
    "pass --set source=RUN_DIR naming a completed `envgen run gpt2` or `envgen run rft` directory";

/// The kind of a completed run directory quantize can read (`gpt2`, `rft`);
/// a usage error (exit 2) naming the problem for anything else.
pub fn source_kind(dir: &Path) -> anyhow::Result<&'static str> {
    if !dir.is_dir() {
        return Err(source_error(dir, "no such directory", SOURCE_FIX));
    }
    let manifest: Manifest = read_json(&dir.join("manifest.json")).map_err(|_| {
        source_error(
            dir,
            "not a run directory (no readable manifest.json)",
            SOURCE_FIX,
        )
    })?;
    let kind: &'static str = match manifest.experiment.as_str() {
        "gpt2" => "gpt2",
        "rft" => "rft",
        "hrm-sudoku" => {
            return Err(source_error(
                dir,
                "is an hrm-sudoku run; quantizing HRM checkpoints is not supported yet (their format is settled by the HRM issue #3)",
                "quantize a gpt2 or rft run for now",
            ))
        }
        other => {
            return Err(source_error(
                dir,
                format!("is a `{other}` run; quantize reads gpt2 and rft runs"),
                SOURCE_FIX,
            ))
        }
    };
    let status = read_json::<Summary>(&dir.join("summary.json"))
        .map(|s| s.status)
        .ok();
    let weights_path = dir.join("model.safetensors");
    if status != Some(Status::Completed) || !weights_path.is_file() {
        return Err(source_error(
            dir,
            format!(
                "the {kind} run is not completed (status {}, model.safetensors {})",
                status.map_or("unknown".to_string(), |s| format!("{s:?}").to_lowercase()),
                if weights_path.is_file() {
                    "present"
                } else {
                    "missing"
                }
            ),
            "finish it first (`envgen run --resume RUN_DIR`), or pick a completed run",
        ));
    }
    Ok(kind)
}

/// Open a run directory as a quantization source.
/// `micro_batch`: rows per forward pass when evaluating (a speed knob).
pub fn open_source(dir: &Path, micro_batch: usize) -> anyhow::Result<Box<dyn SourceRun>> {
    let kind = source_kind(dir)?;
    let weights_path = dir.join("model.safetensors");
    let config_text = std::fs::read_to_string(dir.join("config.toml"))
        .map_err(|e| source_error(dir, format!("cannot read config.toml: {e}"), SOURCE_FIX))?;
    let origin = dir.join("config.toml").display().to_string();
    let (model, metric) = match kind {
        "gpt2" => {
            let config: Gpt2Config = engine::load(&config_text, &origin, &[])?.science;
            let model = config.model.clone();
            (
                model,
                GptMetric::Perplexity(Box::new(Gpt2Task::new(config)?)),
            )
        }
        _ => {
            let config: RftConfig = engine::load(&config_text, &origin, &[])?.science;
            let questions = config.split()?.validation;
            (
                config.model.clone(),
                GptMetric::Accuracy {
                    questions,
                    max_new_tokens: config.task.max_completion_tokens,
                },
            )
        }
    };
    let loaded = hf::load(model.init::<Cpu>(&Default::default()), &weights_path)?;
    Ok(Box::new(GptSource {
        kind,
        weights: hf::named_weights(&loaded),
        model,
        metric,
        micro_batch: micro_batch.max(1),
    }))
}

// ---------------------------------------------------------------------------
// Packing a whole model.

/// Every tensor of `source`: 2-D ones quantized with `scheme` (rows = output
/// channels), the rest kept in f32.
pub fn pack_model(source: &dyn SourceRun, scheme: Scheme) -> anyhow::Result<Vec<NamedTensor>> {
    source
        .weights()
        .iter()
        .map(|(name, shape, values)| {
            let tensor = match shape.as_slice() {
                [rows, cols] if source.is_transposed(name) => {
                    quantize(&transpose(values, *rows, *cols), *cols, *rows, scheme)?
                }
                [rows, cols] => quantize(values, *rows, *cols, scheme)?,
                _ => quantize(values, 1, values.len(), Scheme::Float32)?,
            };
            Ok(NamedTensor {
                name: name.clone(),
                transposed: shape.len() == 2 && source.is_transposed(name),
                tensor,
            })
        })
        .collect()
}

/// The model's tensors back from a packed file (original names, shapes, layout).
pub fn unpack_model(
    tensors: &[NamedTensor],
    source: &dyn SourceRun,
) -> anyhow::Result<NamedTensors> {
    let shapes: HashMap<&str, &Vec<usize>> = source
        .weights()
        .iter()
        .map(|(n, s, _)| (n.as_str(), s))
        .collect();
    let mut out = NamedTensors::new();
    for t in tensors {
        let values = dequantize(&t.tensor);
        let (rows, cols) = (t.tensor.rows, t.tensor.cols);
        let values = if t.transposed {
            transpose(&values, rows, cols)
        } else {
            values
        };
        // 1-D tensors are stored as one row: take the model's shape.
        let shape = shapes.get(t.name.as_str()).map_or_else(
            || {
                if t.transposed {
                    vec![cols, rows]
                } else {
                    vec![rows, cols]
                }
            },
            |s| (*s).clone(),
        );
        out.insert(t.name.clone(), (shape, values));
    }
    Ok(out)
}

/// Row-major `[rows, cols]` → `[cols, rows]`.
fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// Quality of the model stored in a `.envq` file (what the table reports).
pub fn evaluate_packed(source: &dyn SourceRun, path: &Path) -> anyhow::Result<Quality> {
    let tensors = read_packed(path)?;
    source.evaluate(&unpack_model(&tensors, source)?)
}

// ---------------------------------------------------------------------------
// The run.

/// One row of `metrics.schemes[]`.
fn row(
    source: &dyn SourceRun,
    scheme: &str,
    bits: f64,
    bytes: usize,
    quality: Quality,
    baseline: Option<f64>,
) -> Map<String, Value> {
    let params: usize = source.weights().iter().map(|(_, _, v)| v.len()).sum();
    let delta = baseline
        .filter(|b| *b != 0.0)
        .map(|b| (quality.value - b) / b * 100.0);
    let mut m = Map::new();
    m.insert("scheme".into(), json!(scheme));
    m.insert("bits_per_weight".into(), json!(bits));
    m.insert("bytes".into(), json!(bytes));
    m.insert(
        "compression".into(),
        json!((4 * params) as f64 / bytes.max(1) as f64),
    );
    m.insert("metric".into(), json!(source.metric()));
    m.insert("metric_value".into(), json!(quality.value));
    m.insert("metric_delta_pct".into(), json!(delta.unwrap_or(0.0)));
    m.insert(source.throughput_field().into(), json!(quality.per_s));
    m
}

/// Nominal bits per weight of the quantized (2-D) tensors under `scheme`.
fn matrix_bits(source: &dyn SourceRun, scheme: Scheme) -> f64 {
    let (mut bits, mut weights) = (0.0, 0usize);
    for (name, shape, values) in source.weights() {
        if let [rows, cols] = shape.as_slice() {
            let (r, c) = if source.is_transposed(name) {
                (*cols, *rows)
            } else {
                (*rows, *cols)
            };
            bits += bits_per_weight(scheme, r, c) * values.len() as f64;
            weights += values.len();
        }
    }
    bits / weights.max(1) as f64
}

pub fn run(config: &QuantizeConfig, control: &RunControl) -> anyhow::Result<Summary> {
    config.validate()?;
    let started = Instant::now();
    let source = open_source(&config.source, EVAL_MICRO_BATCH)?;
    let packed_dir = control.run_dir.join("packed");
    std::fs::create_dir_all(&packed_dir)?;

    let f32_weights: NamedTensors = source
        .weights()
        .iter()
        .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
        .collect();
    let baseline = source.evaluate(&f32_weights)?;
    let source_bytes = std::fs::metadata(config.source.join("model.safetensors"))?.len() as usize;
    let mut rows = vec![row(
        &*source,
        "f32",
        32.0,
        source_bytes,
        baseline,
        Some(baseline.value),
    )];
    let mut status = Status::Completed;
    for name in &config.schemes {
        if control.stop.load(Ordering::SeqCst) {
            status = Status::Interrupted;
            break;
        }
        let record = packed_dir.join(format!("{name}.json"));
        if let Ok(done) = read_json::<Map<String, Value>>(&record) {
            rows.push(done);
            continue;
        }
        let m = match Method::parse(name)? {
            Method::Packed(scheme) => {
                let path = packed_dir.join(format!("{name}.{}", super::pack::EXTENSION));
                write_packed(&path, &pack_model(&*source, scheme)?)?;
                // The table reports the file as loaded back, not the
                // in-memory tensors that were written.
                let quality = evaluate_packed(&*source, &path)?;
                let bytes = std::fs::metadata(&path)?.len() as usize;
                let mut m = row(
                    &*source,
                    name,
                    matrix_bits(&*source, scheme),
                    bytes,
                    quality,
                    Some(baseline.value),
                );
                m.insert(
                    "file".into(),
                    json!(format!(
                        "packed/{}",
                        path.file_name().unwrap_or_default().to_string_lossy()
                    )),
                );
                m
            }
            Method::Burn { bits, block } => burn_row(&*source, name, bits, block, baseline),
        };
        write_json(&record, &m)?;
        rows.push(m);
    }
    let mut metrics = Map::new();
    metrics.insert("source".into(), json!(config.source));
    metrics.insert("source_kind".into(), json!(source.kind()));
    metrics.insert("metric".into(), json!(source.metric()));
    metrics.insert(
        "parameters".into(),
        json!(source
            .weights()
            .iter()
            .map(|(_, _, v)| v.len())
            .sum::<usize>()),
    );
    metrics.insert(
        "schemes".into(),
        Value::Array(rows.into_iter().map(Value::Object).collect()),
    );
    let summary = Summary {
        status,
        wall_s: started.elapsed().as_secs_f64(),
        steps_done: 0,
        metrics,
    };
    engine::rundir::finish_run(&control.run_dir, &summary)?;
    Ok(summary)
}

/// Burn's built-in block quantization, evaluated in memory: its quantized
/// tensors cannot be saved to safetensors, so `bytes` is what the quantized
/// parameters occupy in memory (`in_memory: true`).
fn burn_row(
    source: &dyn SourceRun,
    name: &str,
    bits: u8,
    block: u8,
    baseline: Quality,
) -> Map<String, Value> {
    let value = if bits == 8 {
        QuantValue::Q8S
    } else {
        QuantValue::Q4S
    };
    let scheme = QuantScheme::default()
        .with_value(value)
        .with_level(QuantLevel::block([block]))
        .with_param(QuantParam::F32);
    // Nominal: b-bit codes plus one f32 scale per block.
    let nominal_bits = f64::from(bits) + 32.0 / f64::from(block);
    match source.evaluate_burn(scheme) {
        Ok((quality, bytes)) => {
            let mut m = row(
                source,
                name,
                nominal_bits,
                bytes,
                quality,
                Some(baseline.value),
            );
            m.insert("in_memory".into(), json!(true));
            m
        }
        Err(err) => {
            let mut m = Map::new();
            m.insert("scheme".into(), json!(name));
            m.insert("bits_per_weight".into(), json!(nominal_bits));
            m.insert("metric".into(), json!(source.metric()));
            m.insert("error".into(), json!(format!("{err:#}")));
            m
        }
    }
}

/// `quantize` in the experiment registry.
pub struct QuantizeExperiment;
pub static QUANTIZE: QuantizeExperiment = QuantizeExperiment;

impl Experiment for QuantizeExperiment {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn description(&self) -> &'static str {
        "post-training INT8/INT4 weight quantization of a gpt2 or rft run (--set source=RUN_DIR)"
    }
    fn presets(&self) -> &'static [(&'static str, &'static str)] {
        PRESETS
    }
    fn default_preset(&self) -> &'static str {
        DEFAULT_PRESET
    }
    fn resolve(
        &self,
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> anyhow::Result<ResolvedConfig> {
        let loaded = load_config(text, origin, overrides)?;
        Ok(ResolvedConfig {
            preset: None,
            science: registry::canonical(&loaded.science)?,
            // Nothing is trained: one "row" per step keeps the CLI's
            // micro-batch arithmetic trivial.
            batch_size: 1,
            hardware: loaded.hardware,
            parameters: None,
        })
    }
    fn run(
        &self,
        science: &toml::Value,
        control: &RunControl,
        _backend: crate::backend::Resolved,
    ) -> anyhow::Result<Summary> {
        // Evaluation runs on the CPU backend whatever was asked: the packed
        // weights are dequantized to f32 there (see docs/experiments/quantize.md).
        let config: QuantizeConfig = registry::typed(science, "config.toml")?;
        run(&config, control)
    }
    fn summary_line(&self, summary: &Summary) -> String {
        summary_line(summary)
    }
}

/// The one line printed after a run.
pub fn summary_line(summary: &Summary) -> String {
    let rows = summary
        .metrics
        .get("schemes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let parts: Vec<String> = rows
        .iter()
        .map(|r| {
            let num = |k: &str| r.get(k).and_then(Value::as_f64);
            match (num("metric_value"), num("compression")) {
                (Some(v), Some(c)) => format!(
                    "{} {:.4} ({:+.2}%, {:.1}x)",
                    r["scheme"].as_str().unwrap_or("?"),
                    v,
                    num("metric_delta_pct").unwrap_or(0.0),
                    c
                ),
                _ => format!("{} failed", r["scheme"].as_str().unwrap_or("?")),
            }
        })
        .collect();
    format!(
        "{:?} in {:.1} s: {} — {}",
        summary.status,
        summary.wall_s,
        summary
            .metrics
            .get("metric")
            .and_then(Value::as_str)
            .unwrap_or("metric"),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_names_and_missing_source_are_usage_errors() {
        let text = PRESETS[0].1;
        let err = load_config(text, "preset tiny", &[]).unwrap_err();
        assert!(
            format!("{err:#}").contains("--set source=RUN_DIR"),
            "{err:#}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
        let loaded: engine::Loaded<QuantizeConfig> =
            engine::load(text, "preset tiny", &[]).unwrap();
        assert!(loaded.science.schemes.contains(&"int4-sym-g32".to_string()));
        let err = load_config(
            text,
            "preset tiny",
            &["source=/tmp/x".into(), "schemes=[\"int3\"]".into()],
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("int3"), "{err:#}");
        let err =
            load_config(text, "preset tiny", &["source=/nonexistent/run".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("no such directory"), "{err:#}");
    }

    #[test]
    fn transpose_round_trips() {
        let v: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let t = transpose(&v, 2, 3);
        assert_eq!(t, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(transpose(&t, 3, 2), v);
    }

    #[test]
    fn wrong_sources_are_usage_errors_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let check = |path: &Path, expected: &str| {
            let err = source_kind(path).err().expect("an error");
            let text = format!("{err:#}");
            assert!(text.contains(expected), "{text}");
            assert_eq!(crate::error::exit_code_of(&err), 2);
        };
        check(&dir.path().join("nope"), "no such directory");
        check(dir.path(), "not a run directory");
        let manifest = |experiment: &str| {
            json!({"run_id": "x", "experiment": experiment, "preset": null,
                   "config_hash": "sha256:0", "profile": {"micro_batch": 1, "grad_accum": 1,
                   "precision": "f32", "backend": "cpu", "device": "cpu"},
                   "started_at": "", "finished_at": null})
        };
        write_json(&dir.path().join("manifest.json"), &manifest("hrm-sudoku")).unwrap();
        check(dir.path(), "not supported yet");
        write_json(&dir.path().join("manifest.json"), &manifest("quantize")).unwrap();
        check(dir.path(), "is a `quantize` run");
        write_json(&dir.path().join("manifest.json"), &manifest("gpt2")).unwrap();
        check(dir.path(), "not completed");
    }
}
