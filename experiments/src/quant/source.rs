//! What `envgen run quantize` reads: a completed run directory of one of the
//! experiments that train a model, and how that model is scored.
//!
//! A source kind is a [`SourceRun`]: its weights, which 2-D tensors the
//! model holds transposed, and an `evaluate` returning the run's own metric.
//!
//! | experiment | model | metric (`metric`) | throughput |
//! |---|---|---|---|
//! | `gpt2` | the engine's GPT | validation perplexity, `exp(val loss)` (`val_perplexity`) | `tokens_per_s` |
//! | `rft` | the engine's GPT | greedy held-out accuracy (`accuracy`) | `samples_per_s` |
//! | `hrm-sudoku` | HRM | held-out blank-cell accuracy (`cell_accuracy`; `exact_accuracy` too) | `samples_per_s` |

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param, Quantizer};
use burn::prelude::*;
use burn::tensor::quantization::{Calibration, QuantScheme};
use serde::{Deserialize, Serialize};

use crate::backend::{Cpu, CpuTrain};
use crate::engine::rundir::{read_json, Status, Summary};
use crate::engine::safetensors_io::NamedTensors;
use crate::engine::{self, params, Task};
use crate::error::UserError;
use crate::gpt2::{hf, Gpt2, Gpt2Config, Gpt2Task, ModelConfig};
use crate::hrm::config::HrmPreset;
use crate::hrm::data::{evaluate as evaluate_hrm, prepare_dataset};
use crate::hrm::model::HrmModel;
use crate::hrm::sudoku::dataset::SudokuDataset;
use crate::rft::Question;
use crate::rft::{config::RftConfig, eval::evaluate_accuracy, train::RftTrainTask};

/// Weights as (name, shape, row-major f32 values), in the model's order.
pub type Weights = Vec<(String, Vec<usize>, Vec<f32>)>;

/// A quality measurement of one set of weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    pub value: f64,
    /// Throughput of the evaluation, in `SourceRun::throughput_field` units per second.
    pub per_s: f64,
    /// The value of `SourceRun::secondary_metric`, when the source has one.
    pub secondary: Option<f64>,
}

/// What quantization needs from a trained run.
pub trait SourceRun {
    /// The experiment that wrote the run (`gpt2`, `rft`, `hrm-sudoku`).
    fn kind(&self) -> &'static str;
    /// The run's own quality metric, e.g. `val_perplexity`.
    fn metric(&self) -> &'static str;
    /// A second number worth a column (HRM: `exact_accuracy`).
    fn secondary_metric(&self) -> Option<&'static str> {
        None
    }
    /// `tokens_per_s` or `samples_per_s`.
    fn throughput_field(&self) -> &'static str;
    /// The trained weights.
    fn weights(&self) -> &[(String, Vec<usize>, Vec<f32>)];
    /// Whether the model holds the 2-D tensor `name` transposed (a Burn
    /// Linear's `[d_in, d_out]`), so that its rows are not output channels.
    fn is_transposed(&self, name: &str) -> bool;
    /// Quality of a full set of weights (the source's names).
    fn evaluate(&self, weights: &NamedTensors) -> anyhow::Result<Quality>;
    /// Quality after Burn's own `quantize_weights` with `scheme`, and the
    /// bytes the quantized parameters occupy in memory.
    fn evaluate_burn(&self, scheme: QuantScheme) -> anyhow::Result<(Quality, usize)>;
    /// The GPT behind a gpt2 or rft run: what structured pruning works on.
    fn as_gpt(&self) -> Option<&GptSource> {
        None
    }
}

/// The source's weights as a name → tensor map.
pub fn named(weights: &[(String, Vec<usize>, Vec<f32>)]) -> NamedTensors {
    weights
        .iter()
        .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
        .collect()
}

/// Burn's `quantize_weights` applied by `quantize`, then `score`d. Burn
/// panics on operations a backend lacks for quantized tensors: that is
/// reported as this scheme's failure, not the whole run's.
/// Returns the quality and the bytes the parameters then occupy.
fn burn_quantized<M: Module<Cpu>>(
    model: M,
    scheme: QuantScheme,
    quantize: impl FnOnce(M, &mut Quantizer) -> M,
    score: impl FnOnce(&M) -> Quality,
) -> anyhow::Result<(Quality, usize)> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut quantizer = Quantizer {
            calibration: Calibration::MinMax,
            scheme,
        };
        let model = quantize(model, &mut quantizer);
        (score(&model), parameter_bytes(&model))
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

fn per_s(units: usize, started: Instant) -> f64 {
    units as f64 / started.elapsed().as_secs_f64().max(1e-9)
}

// ---------------------------------------------------------------------------
// GPT runs (gpt2, rft).

/// How a GPT run is scored and, for pruning, trained further.
pub enum GptKind {
    /// gpt2: the engine's validation loss as perplexity; recovery continues
    /// the run's own training task.
    Gpt2(Box<Gpt2Task>),
    /// rft: greedy held-out accuracy; recovery is stage (a)'s supervised
    /// task on the worked answers.
    Rft {
        task: Box<RftTrainTask>,
        questions: Vec<Question>,
        max_new_tokens: usize,
    },
}

/// A gpt2 or rft run: both train the engine's GPT.
pub struct GptSource {
    pub kind: GptKind,
    pub model: ModelConfig,
    weights: Weights,
    micro_batch: usize,
}

/// Rows per generation call in rft evaluation (greedy rows do not depend
/// on it).
const ACCURACY_BATCH: usize = 128;

impl GptSource {
    /// A model of the shape `weights` have: the full model, or a pruned one
    /// with fewer heads or MLP neurons per block (read from block 0's
    /// `c_attn` and `c_fc`; pruning keeps the same count in every block).
    fn model_from(&self, weights: &NamedTensors) -> anyhow::Result<Gpt2<Cpu>> {
        let (heads, hidden) = shape_of(&self.model, weights);
        hf::load_tensors(
            self.model
                .init_shaped::<Cpu>(heads, hidden, &Default::default()),
            weights,
            "quantized weights",
        )
    }

    fn score(&self, model: &Gpt2<Cpu>) -> Quality {
        let device = Default::default();
        let started = Instant::now();
        match &self.kind {
            GptKind::Gpt2(task) => {
                let loss =
                    <Gpt2Task as Task<CpuTrain>>::evaluate(task, model, self.micro_batch, &device);
                let train = &task.config.train;
                let tokens =
                    (train.eval_batches * train.batch_size).max(1) * task.config.model.block_size;
                Quality {
                    value: loss.exp(),
                    per_s: per_s(tokens, started),
                    secondary: None,
                }
            }
            GptKind::Rft {
                questions,
                max_new_tokens,
                ..
            } => {
                let eval = evaluate_accuracy(
                    model,
                    &self.model,
                    questions,
                    *max_new_tokens,
                    ACCURACY_BATCH,
                    &device,
                    &mut |_| {},
                );
                Quality {
                    value: eval.metrics.accuracy,
                    per_s: eval.samples_per_s,
                    secondary: None,
                }
            }
        }
    }
}

/// (attention heads, MLP neurons) per block of a GPT with `weights`.
pub fn shape_of(model: &ModelConfig, weights: &NamedTensors) -> (usize, usize) {
    let width = |name: &str| {
        weights
            .get(name)
            .and_then(|(shape, _)| shape.get(1).copied())
    };
    let head_dim = model.n_embd / model.n_head;
    let heads = width("h.0.attn.c_attn.weight").map_or(model.n_head, |w| w / (3 * head_dim));
    let hidden = width("h.0.mlp.c_fc.weight").unwrap_or(4 * model.n_embd);
    (heads, hidden)
}

impl SourceRun for GptSource {
    fn kind(&self) -> &'static str {
        match self.kind {
            GptKind::Gpt2(_) => "gpt2",
            GptKind::Rft { .. } => "rft",
        }
    }
    fn metric(&self) -> &'static str {
        match self.kind {
            GptKind::Gpt2(_) => "val_perplexity",
            GptKind::Rft { .. } => "accuracy",
        }
    }
    fn throughput_field(&self) -> &'static str {
        match self.kind {
            GptKind::Gpt2(_) => "tokens_per_s",
            GptKind::Rft { .. } => "samples_per_s",
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
        let model = self.model_from(&named(&self.weights))?;
        burn_quantized(model, scheme, Gpt2::quantize_weights, |m| self.score(m))
    }
    fn as_gpt(&self) -> Option<&GptSource> {
        Some(self)
    }
}

// ---------------------------------------------------------------------------
// HRM runs (hrm-sudoku).

/// An hrm-sudoku run, scored on its own held-out puzzles.
pub struct HrmSource {
    preset: HrmPreset,
    dataset: SudokuDataset,
    weights: Weights,
    batch: usize,
}

impl HrmSource {
    fn model_from(&self, weights: &NamedTensors) -> anyhow::Result<HrmModel<Cpu>> {
        let model = HrmModel::<Cpu>::new(&self.preset.model, 0, &Default::default());
        params::replace::<Cpu, _>(model, "quantized weights", &|name| {
            weights.get(name).cloned()
        })
    }

    fn score(&self, model: &HrmModel<Cpu>) -> Quality {
        let started = Instant::now();
        let eval = evaluate_hrm(model, &self.dataset.test, self.batch, &Default::default());
        Quality {
            value: eval.cell_accuracy,
            per_s: per_s(eval.puzzles, started),
            secondary: Some(eval.exact_accuracy),
        }
    }
}

impl SourceRun for HrmSource {
    fn kind(&self) -> &'static str {
        "hrm-sudoku"
    }
    /// Blank-cell accuracy: small HRMs solve no puzzle exactly (the tiny
    /// preset's exact accuracy is 0), so exact accuracy alone would show no
    /// effect of quantization at all. It is reported next to it.
    fn metric(&self) -> &'static str {
        "cell_accuracy"
    }
    fn secondary_metric(&self) -> Option<&'static str> {
        Some("exact_accuracy")
    }
    fn throughput_field(&self) -> &'static str {
        "samples_per_s"
    }
    fn weights(&self) -> &[(String, Vec<usize>, Vec<f32>)] {
        &self.weights
    }
    fn is_transposed(&self, name: &str) -> bool {
        // Linear weights are `….weight` [d_in, d_out]; the embeddings
        // (`token_embedding`, `puzzle_embedding`) are a row per id.
        name.ends_with(".weight")
    }
    fn evaluate(&self, weights: &NamedTensors) -> anyhow::Result<Quality> {
        Ok(self.score(&self.model_from(weights)?))
    }
    /// Only the H and L reasoning modules (most of the weights) go through
    /// Burn's quantization; the embeddings and the heads stay f32.
    fn evaluate_burn(&self, scheme: QuantScheme) -> anyhow::Result<(Quality, usize)> {
        let quantize_reasoning = |mut m: HrmModel<Cpu>, q: &mut Quantizer| {
            m.h_level = m.h_level.quantize_weights(q);
            m.l_level = m.l_level.quantize_weights(q);
            m
        };
        let model = self.model_from(&named(&self.weights))?;
        burn_quantized(model, scheme, quantize_reasoning, |m| self.score(m))
    }
}

// ---------------------------------------------------------------------------
// Opening a run directory.

fn source_error(dir: &Path, what: impl std::fmt::Display, fix: &str) -> anyhow::Error {
    UserError::usage(format!("source {}: {what}", dir.display()))
        .with_fix(fix)
        .into()
}

const SOURCE_FIX: &str = "pass --set source=RUN_DIR naming a completed `envgen run gpt2`, `envgen run rft` or `envgen run hrm-sudoku` directory";

/// The kind of a completed run directory quantize can read (`gpt2`, `rft`,
/// `hrm-sudoku`); a usage error (exit 2) naming the problem for anything else.
pub fn source_kind(dir: &Path) -> anyhow::Result<&'static str> {
    if !dir.is_dir() {
        return Err(source_error(dir, "no such directory", SOURCE_FIX));
    }
    /// The one field of envgen's manifest quantize needs.
    #[derive(serde::Deserialize)]
    struct RunKind {
        experiment: String,
    }
    let manifest: RunKind = read_json(&dir.join("manifest.json")).map_err(|_| {
        source_error(
            dir,
            "not a run directory (no readable manifest.json)",
            SOURCE_FIX,
        )
    })?;
    let kind: &'static str = match manifest.experiment.as_str() {
        "gpt2" => "gpt2",
        "rft" => "rft",
        "hrm-sudoku" => "hrm-sudoku",
        other => {
            return Err(source_error(
                dir,
                format!("is a `{other}` run; quantize reads gpt2, rft and hrm-sudoku runs"),
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

/// The science config a run directory recorded (`config.toml`).
fn run_config<T: serde::Serialize + serde::de::DeserializeOwned>(dir: &Path) -> anyhow::Result<T> {
    let path = dir.join("config.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| source_error(dir, format!("cannot read config.toml: {e}"), SOURCE_FIX))?;
    Ok(engine::load(&text, &path.display().to_string(), &[])?.science)
}

/// The GPT of a gpt2 or rft run directory (`None` for other kinds): what
/// the `[prune]` table is checked against before anything runs.
pub fn gpt_model_of(dir: &Path) -> anyhow::Result<Option<ModelConfig>> {
    Ok(match source_kind(dir)? {
        "gpt2" => Some(run_config::<Gpt2Config>(dir)?.model),
        "rft" => Some(
            run_config::<RftConfig>(dir)?
                .model
                .gpt_only("envgen quant")?
                .clone(),
        ),
        _ => None,
    })
}

/// Open a run directory as a quantization source.
/// `micro_batch`: rows per forward pass when evaluating (a speed knob).
pub fn open_source(dir: &Path, micro_batch: usize) -> anyhow::Result<Box<dyn SourceRun>> {
    let kind = source_kind(dir)?;
    let weights_path = dir.join("model.safetensors");
    let micro_batch = micro_batch.max(1);
    if kind == "hrm-sudoku" {
        let preset: HrmPreset = run_config(dir)?;
        preset.validate(&dir.join("config.toml").display().to_string())?;
        // The run's own held-out puzzles: `data.dir`, or the dataset the run
        // built in its directory (never rebuilt here: that would write into
        // another run's directory).
        if preset.data.dir.is_none() && !dir.join("dataset").join("dataset.json").is_file() {
            return Err(source_error(
                dir,
                "the hrm-sudoku run has no dataset/ directory to evaluate on",
                "quantize the run directory as `envgen run hrm-sudoku` left it",
            ));
        }
        let dataset = prepare_dataset(&preset.data, dir)?;
        let model = HrmModel::<Cpu>::new(&preset.model, 0, &Default::default());
        let model = engine::checkpoint::load_weights::<Cpu, _>(&weights_path, model)?;
        return Ok(Box::new(HrmSource {
            weights: params::collect::<Cpu, _>(&model, true)
                .into_iter()
                .map(|p| (p.name, p.shape, p.values))
                .collect(),
            preset,
            dataset,
            batch: micro_batch,
        }));
    }
    let (model, gpt_kind) = if kind == "gpt2" {
        let config: Gpt2Config = run_config(dir)?;
        (
            config.model.clone(),
            GptKind::Gpt2(Box::new(Gpt2Task::new(config)?)),
        )
    } else {
        let config: RftConfig = run_config(dir)?;
        let split = config.split()?;
        (
            config.model.gpt_only("envgen quant")?.clone(),
            GptKind::Rft {
                task: Box::new(RftTrainTask::reference(&config, &split)),
                questions: split.validation,
                max_new_tokens: config.task.max_completion_tokens,
            },
        )
    };
    let loaded = hf::load(model.init::<Cpu>(&Default::default()), &weights_path)?;
    Ok(Box::new(GptSource {
        kind: gpt_kind,
        weights: hf::named_weights(&loaded),
        model,
        micro_batch,
    }))
}
