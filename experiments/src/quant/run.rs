//! `envgen run quantize --set source=RUN_DIR`: quantize a finished run's
//! weights with every configured scheme, write each as a `.envq` file, load
//! that file back and measure the source experiment's own quality metric.
//!
//! ```text
//! RUN_DIR/packed/<scheme>.envq    the packed model (every tensor; see pack.rs)
//! RUN_DIR/packed/<scheme>.json    that scheme's row of the table (resume skips it)
//! RUN_DIR/summary.json            metrics.schemes[] = the rows, f32 baseline first
//! RUN_DIR/pruned/…                 with a [prune] table: see prune.rs
//! ```
//!
//! What a source run is and how it is scored: `source.rs`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::tensor::quantization::{QuantLevel, QuantParam, QuantScheme, QuantValue};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Packing a whole model lives in `model.rs` (shared with `prune.rs`); these
/// names stay reachable here, where they were first.
pub use super::model::{evaluate_packed, matrix_bits, pack_model, pack_weights, unpack_model};
use super::pack::write_packed;
use super::prune::{run_pruning, PruneConfig, RowInputs};
use super::schemes::Scheme;
use super::source::named;
pub use super::source::{gpt_model_of, open_source, source_kind, Quality, SourceRun};
use crate::engine::rundir::{read_json, write_json, Status, Summary};
use crate::engine::{self, RunControl};
use crate::error::UserError;
use crate::experiment::{ExperimentInfo, TypedExperiment};

pub const EXPERIMENT: &str = "quantize";
pub const PRESETS: &[(&str, &str)] = &[("tiny", include_str!("../../presets/quantize/tiny.toml"))];
pub const DEFAULT_PRESET: &str = "tiny";

/// The science config of a quantization run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantizeConfig {
    /// Run directory of a completed gpt2, rft or hrm-sudoku run.
    pub source: PathBuf,
    /// Scheme names: `int8`, `int4-sym-gN`, `int4-asym-gN` (envgen's packed
    /// formats) and `burn-q8-block32` / `burn-q4-block32` (Burn's built-in
    /// quantized tensors, evaluated in memory).
    pub schemes: Vec<String>,
    /// Structured pruning + recovery before quantizing (GPT sources only).
    /// Absent from config.toml (and its hash) when not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<PruneConfig>,
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
                .with_fix("pass --set source=RUN_DIR (a completed `envgen run gpt2`, `envgen run rft` or `envgen run hrm-sudoku` directory)")
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
        let kind = source_kind(&self.source)?;
        if let Some(prune) = &self.prune {
            prune.validate()?;
            match gpt_model_of(&self.source)? {
                // Fractions that would leave no head or neuron: refused now,
                // not after the unpruned schemes have run.
                Some(model) => {
                    prune.shape(&model)?;
                }
                None => {
                    return Err(UserError::usage(format!(
                        "prune: source {} is an {kind} run; structured pruning knows the GPT of gpt2 and rft runs",
                        self.source.display()
                    ))
                    .with_fix("drop the [prune] table (quantization alone works on HRM)")
                    .into())
                }
            }
        }
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
// The run.

fn parameter_count(weights: &[(String, Vec<usize>, Vec<f32>)]) -> usize {
    weights.iter().map(|(_, _, v)| v.len()).sum()
}

/// One row of `metrics.schemes[]`. `compression` is always against the
/// source's f32 parameters (4 bytes each), whatever the row keeps.
fn row(source: &dyn SourceRun, input: RowInputs, baseline: f64) -> Map<String, Value> {
    let source_parameters = parameter_count(source.weights());
    let delta = if baseline != 0.0 {
        (input.quality.value - baseline) / baseline * 100.0
    } else {
        0.0
    };
    let mut m = Map::new();
    m.insert("scheme".into(), json!(input.scheme));
    m.insert("bits_per_weight".into(), json!(input.bits));
    m.insert("bytes".into(), json!(input.bytes));
    m.insert(
        "compression".into(),
        json!((4 * source_parameters) as f64 / input.bytes.max(1) as f64),
    );
    m.insert("parameters".into(), json!(input.parameters));
    m.insert("metric".into(), json!(source.metric()));
    m.insert("metric_value".into(), json!(input.quality.value));
    m.insert("metric_delta_pct".into(), json!(delta));
    if let (Some(name), Some(value)) = (source.secondary_metric(), input.quality.secondary) {
        m.insert(name.into(), json!(value));
    }
    m.insert(source.throughput_field().into(), json!(input.quality.per_s));
    m
}

/// Validation windows (gpt2) or puzzles (hrm-sudoku) per forward pass when
/// evaluating: a speed knob only.
const EVAL_MICRO_BATCH: usize = 16;

pub fn run(config: &QuantizeConfig, control: &RunControl) -> anyhow::Result<Summary> {
    config.validate()?;
    let started = Instant::now();
    let source = open_source(&config.source, EVAL_MICRO_BATCH)?;
    let packed_dir = control.run_dir.join("packed");
    crate::fsutil::create_dir_all(&packed_dir)?;

    let baseline = source.evaluate(&named(source.weights()))?;
    let source_bytes = std::fs::metadata(config.source.join("model.safetensors"))?.len() as usize;
    let parameters = parameter_count(source.weights());
    let row = |input: RowInputs| row(&*source, input, baseline.value);
    let mut rows = vec![row(RowInputs {
        scheme: "f32",
        bits: 32.0,
        bytes: source_bytes,
        quality: baseline,
        parameters,
    })];
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
                let mut m = row(RowInputs {
                    scheme: name,
                    bits: matrix_bits(&*source, source.weights(), scheme),
                    bytes: std::fs::metadata(&path)?.len() as usize,
                    quality: evaluate_packed(&*source, &path)?,
                    parameters,
                });
                m.insert(
                    "file".into(),
                    json!(format!(
                        "packed/{}",
                        path.file_name().unwrap_or_default().to_string_lossy()
                    )),
                );
                m
            }
            Method::Burn { bits, block } => burn_row(&*source, name, bits, block, &row),
        };
        write_json(&record, &m)?;
        rows.push(m);
    }
    let mut prune_summary = None;
    if let (Some(prune), Status::Completed) = (&config.prune, status) {
        match run_pruning(&*source, prune, control, &row)? {
            Some((pruned_rows, summary)) => {
                rows.extend(pruned_rows);
                prune_summary = Some(summary);
            }
            None => status = Status::Interrupted,
        }
    }
    let mut metrics = Map::new();
    metrics.insert("source".into(), json!(config.source));
    metrics.insert("source_kind".into(), json!(source.kind()));
    metrics.insert("metric".into(), json!(source.metric()));
    metrics.insert("parameters".into(), json!(parameters));
    if let Some(summary) = prune_summary {
        metrics.insert("prune".into(), summary);
    }
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
    row: &dyn Fn(RowInputs) -> Map<String, Value>,
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
            let mut m = row(RowInputs {
                scheme: name,
                bits: nominal_bits,
                bytes,
                quality,
                parameters: parameter_count(source.weights()),
            });
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

impl TypedExperiment for QuantizeExperiment {
    type Config = QuantizeConfig;
    const INFO: ExperimentInfo = ExperimentInfo {
        name: EXPERIMENT,
        description: "post-training INT8/INT4 quantization (and optional structured pruning) of a gpt2, rft or hrm-sudoku run (--set source=RUN_DIR)",
        presets: PRESETS,
        default_preset: DEFAULT_PRESET,
        headline_metric: "schemes",
    };
    fn validate(&self, config: &QuantizeConfig, _origin: &str) -> anyhow::Result<()> {
        config.validate()
    }
    /// Nothing is trained: one "row" per step keeps the CLI's micro-batch
    /// arithmetic trivial.
    fn batch_size(&self, _config: &QuantizeConfig) -> usize {
        1
    }
    fn parameters(&self, _config: &QuantizeConfig) -> Option<u64> {
        None
    }
    /// Evaluation runs on the CPU backend whatever was asked: the packed
    /// weights are dequantized to f32 there (see docs/experiments/quantize.md).
    fn run_typed(
        &self,
        config: &QuantizeConfig,
        control: &RunControl,
        _backend: crate::backend::Resolved,
    ) -> anyhow::Result<Summary> {
        run(config, control)
    }
    fn line(&self, summary: &Summary) -> String {
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
    use std::path::Path;

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
        check(dir.path(), "the hrm-sudoku run is not completed");
        write_json(&dir.path().join("manifest.json"), &manifest("quantize")).unwrap();
        check(dir.path(), "is a `quantize` run");
        write_json(&dir.path().join("manifest.json"), &manifest("gpt2")).unwrap();
        check(dir.path(), "not completed");
    }
}
