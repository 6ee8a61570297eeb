//! Structured pruning of a GPT source with a short recovery fine-tune, then
//! quantization of what is left: the `[prune]` table of `envgen run quantize`.
//!
//! Pruning *removes* units, it does not mask them: each block keeps
//! `n_head − round(head_fraction · n_head)` heads (of the full width) and
//! `4·n_embd − round(mlp_fraction · 4·n_embd)` MLP neurons, chosen by
//! magnitude (`schemes::prune_heads` / `prune_mlp`), so the pruned model is
//! a smaller GPT (`ModelConfig::init_shaped`) and its files are smaller.
//!
//! ```text
//! RUN_DIR/pruned/model.safetensors    pruned, before recovery
//! RUN_DIR/pruned/recovery/            recovery fine-tune of the pruned model (an engine run dir)
//! RUN_DIR/pruned/control/             the same fine-tune of the *unpruned* model
//! RUN_DIR/pruned/<scheme>.envq        the pruned, recovered model packed
//! RUN_DIR/pruned/<row>.json           each row of the table (a resumed run skips done rows)
//! ```
//!
//! The recovery fine-tune continues the source's own training task (gpt2:
//! its token stream; rft: stage (a)'s worked answers) for `recovery_steps`
//! at `recovery_lr`. The control row gives the unpruned model the same
//! extra training, so a reader can tell recovered capacity from extra steps.

use std::path::Path;
use std::sync::atomic::Ordering;

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::model::{evaluate_packed, matrix_bits, pack_weights};
use super::pack::{write_packed, EXTENSION};
use super::schemes::{prune_heads, prune_mlp, transpose, Scheme};
use super::source::{named, GptKind, GptSource, Quality, SourceRun, Weights};
use crate::backend::CpuTrain;
use crate::engine::rundir::{read_json, write_json, Status, Summary};
use crate::engine::safetensors_io::{self, NamedTensors};
use crate::engine::{self, OptimConfig, RunControl, Task, TrainConfig};
use crate::error::UserError;
use crate::fsutil::write_atomic;
use crate::gpt2::{hf, Gpt2, ModelConfig};

/// `[prune]` in a quantize config. Absent = no pruning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneConfig {
    /// Share of each block's MLP neurons removed, in [0, 1).
    #[serde(default)]
    pub mlp_fraction: f64,
    /// Share of each block's attention heads removed, in [0, 1).
    #[serde(default)]
    pub head_fraction: f64,
    /// Optimizer steps of the recovery fine-tune (0: none).
    #[serde(default = "default_recovery_steps")]
    pub recovery_steps: u64,
    /// Peak learning rate of the recovery fine-tune (the source's warmup
    /// and cosine schedule, shortened to `recovery_steps`).
    #[serde(default = "default_recovery_lr")]
    pub recovery_lr: f64,
    /// Packed schemes applied to the pruned, recovered model.
    #[serde(default = "default_schemes")]
    pub schemes: Vec<String>,
}

fn default_recovery_steps() -> u64 {
    50
}
fn default_recovery_lr() -> f64 {
    1e-3
}
fn default_schemes() -> Vec<String> {
    vec!["int4-sym-g32".into()]
}

fn prune_error(what: impl std::fmt::Display, fix: &str) -> anyhow::Error {
    UserError::usage(format!("prune: {what}"))
        .with_fix(fix)
        .into()
}

impl PruneConfig {
    /// Checks that need no source: ranges and scheme names.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (key, value) in [
            ("mlp_fraction", self.mlp_fraction),
            ("head_fraction", self.head_fraction),
        ] {
            if !(0.0..1.0).contains(&value) {
                return Err(prune_error(
                    format!("{key} = {value} is outside [0, 1)"),
                    "give the share of units to remove, e.g. 0.5",
                ));
            }
        }
        if self.mlp_fraction == 0.0 && self.head_fraction == 0.0 {
            return Err(prune_error(
                "mlp_fraction and head_fraction are both 0: nothing to prune",
                "set prune.mlp_fraction and/or prune.head_fraction, or drop the [prune] table",
            ));
        }
        if !(self.recovery_lr.is_finite() && self.recovery_lr > 0.0) {
            return Err(prune_error(
                format!("recovery_lr = {} must be positive", self.recovery_lr),
                "e.g. prune.recovery_lr = 1e-3",
            ));
        }
        for name in &self.schemes {
            Scheme::parse(name).map_err(|_| {
                prune_error(
                    format!("schemes: `{name}` is not a packed scheme"),
                    "use int8, int4-sym-gN or int4-asym-gN (Burn's in-memory schemes are not applied to pruned models)",
                )
            })?;
        }
        Ok(())
    }

    /// Units kept out of `total` when removing `fraction` of them.
    fn kept(total: usize, fraction: f64) -> usize {
        total - (fraction * total as f64).round() as usize
    }

    /// (heads, MLP neurons) each block keeps; an error when pruning would
    /// remove every unit of a kind.
    pub fn shape(&self, model: &ModelConfig) -> anyhow::Result<(usize, usize)> {
        let heads = Self::kept(model.n_head, self.head_fraction);
        let hidden = Self::kept(4 * model.n_embd, self.mlp_fraction);
        if heads == 0 || hidden == 0 {
            return Err(prune_error(
                format!(
                    "head_fraction {} of {} heads / mlp_fraction {} of {} neurons leaves no unit",
                    self.head_fraction,
                    model.n_head,
                    self.mlp_fraction,
                    4 * model.n_embd
                ),
                "lower the fraction: at least one head and one neuron per block must stay",
            ));
        }
        Ok((heads, hidden))
    }
}

/// The weights of `source` with every block pruned to `heads` heads and
/// `hidden` MLP neurons (Burn layouts in and out; scoring happens on the
/// output-channel-major transposes the pruning helpers take).
pub fn prune_weights(
    model: &ModelConfig,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    heads: usize,
    hidden: usize,
) -> anyhow::Result<NamedTensors> {
    let d = model.n_embd;
    let mut weights = named(weights);
    let mut take = |name: String| {
        weights.remove(&name).ok_or_else(|| {
            anyhow::Error::from(UserError::failed(format!("pruning: no tensor {name}")))
        })
    };
    let mut out = NamedTensors::new();
    for layer in 0..model.n_layer {
        let p = |suffix: &str| format!("h.{layer}.{suffix}");
        // Attention: c_attn [d, 3d] (columns q|k|v, head-major), c_proj [d, d].
        let (_, qkv) = take(p("attn.c_attn.weight"))?;
        let (_, qkv_bias) = take(p("attn.c_attn.bias"))?;
        let (_, proj) = take(p("attn.c_proj.weight"))?;
        let attn = prune_heads(
            &transpose(&qkv, d, 3 * d),
            &transpose(&proj, d, d),
            d,
            model.n_head,
            heads,
        )?;
        let [qkv_rows, _] = attn.first_shape;
        let [_, proj_cols] = attn.second_shape;
        // The head mask spread over q, k and v's columns, as in prune_heads.
        let lanes = attn
            .keep
            .iter()
            .flat_map(|&k| std::iter::repeat_n(k, d / model.n_head));
        let bias_mask: Vec<bool> = lanes.cycle().take(3 * d).collect();
        out.insert(
            p("attn.c_attn.weight"),
            (vec![d, qkv_rows], transpose(&attn.first, qkv_rows, d)),
        );
        out.insert(
            p("attn.c_attn.bias"),
            (vec![qkv_rows], select(&qkv_bias, &bias_mask)),
        );
        out.insert(
            p("attn.c_proj.weight"),
            (vec![proj_cols, d], transpose(&attn.second, d, proj_cols)),
        );
        // MLP: c_fc [d, 4d] (a column per neuron), c_proj [4d, d] (a row per neuron).
        let (_, fc) = take(p("mlp.c_fc.weight"))?;
        let (_, fc_bias) = take(p("mlp.c_fc.bias"))?;
        let (_, down) = take(p("mlp.c_proj.weight"))?;
        let mlp = prune_mlp(
            &transpose(&fc, d, 4 * d),
            &transpose(&down, 4 * d, d),
            d,
            4 * d,
            hidden,
        )?;
        out.insert(
            p("mlp.c_fc.weight"),
            (vec![d, hidden], transpose(&mlp.first, hidden, d)),
        );
        out.insert(
            p("mlp.c_fc.bias"),
            (vec![hidden], select(&fc_bias, &mlp.keep)),
        );
        out.insert(
            p("mlp.c_proj.weight"),
            (vec![hidden, d], transpose(&mlp.second, d, hidden)),
        );
    }
    // Everything else (embeddings, LayerNorms, output biases) is unchanged.
    out.extend(weights);
    Ok(out)
}

fn select(values: &[f32], mask: &[bool]) -> Vec<f32> {
    values
        .iter()
        .zip(mask)
        .filter(|(_, keep)| **keep)
        .map(|(v, _)| *v)
        .collect()
}

/// The source's training task continued from given (possibly pruned)
/// weights for a few steps: the recovery fine-tune.
pub(crate) struct Recovery<'a, T> {
    inner: &'a T,
    model: ModelConfig,
    shape: (usize, usize),
    start: &'a NamedTensors,
    train: TrainConfig,
    optim: OptimConfig,
}

impl<'a, T> Recovery<'a, T> {
    pub(crate) fn new<B: AutodiffBackend>(
        inner: &'a T,
        model: &ModelConfig,
        start: &'a NamedTensors,
        config: &PruneConfig,
    ) -> Self
    where
        T: Task<B, Model = Gpt2<B>>,
    {
        let steps = config.recovery_steps;
        let mut train = inner.train_config().clone();
        train.steps = steps;
        train.eval_every = steps.max(1);
        if train.checkpoint_every > 0 {
            train.checkpoint_every = train.checkpoint_every.min(steps.max(1));
        }
        let mut optim = inner.optim_config().clone();
        optim.lr = config.recovery_lr;
        optim.warmup_steps = optim.warmup_steps.min(steps / 10);
        Self {
            inner,
            model: model.clone(),
            shape: super::source::shape_of(model, start),
            start,
            train,
            optim,
        }
    }
}

impl<B: AutodiffBackend, T: Task<B, Model = Gpt2<B>>> Task<B> for Recovery<'_, T>
where
    Gpt2<B>: AutodiffModule<B>,
{
    type Model = Gpt2<B>;

    fn train_config(&self) -> &TrainConfig {
        &self.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.optim
    }
    fn init_model(&self, device: &B::Device) -> anyhow::Result<Gpt2<B>> {
        let (heads, hidden) = self.shape;
        hf::load_tensors(
            self.model.init_shaped::<B>(heads, hidden, device),
            self.start,
            "pruned weights",
        )
    }
    fn loss(
        &self,
        model: &Gpt2<B>,
        step: u64,
        rows: std::ops::Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 1> {
        self.inner.loss(model, step, rows, device)
    }
    fn evaluate(
        &self,
        model: &<Gpt2<B> as AutodiffModule<B>>::InnerModule,
        micro_batch: usize,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> f64 {
        self.inner.evaluate(model, micro_batch, device)
    }
    fn units_per_row(&self) -> (usize, &'static str) {
        self.inner.units_per_row()
    }
    fn loss_units(&self, step: u64, rows: std::ops::Range<usize>) -> f64 {
        self.inner.loss_units(step, rows)
    }
    fn finish(&self, model: &Gpt2<B>, run_dir: &Path) -> anyhow::Result<()> {
        hf::save(model, &run_dir.join(MODEL_FILE))
    }
}

const MODEL_FILE: &str = "model.safetensors";

/// Fine-tune `start` in `dir` (resuming a checkpoint there; skipped when
/// already completed). `None` when the run was interrupted.
fn recover(
    source: &GptSource,
    start: &NamedTensors,
    config: &PruneConfig,
    dir: &Path,
    control: &RunControl,
) -> anyhow::Result<Option<NamedTensors>> {
    let model_path = dir.join(MODEL_FILE);
    let done = read_json::<Summary>(&dir.join("summary.json"))
        .is_ok_and(|s| s.status == Status::Completed);
    if !(done && model_path.is_file()) {
        crate::fsutil::create_dir_all(dir)?;
        // One micro-batch per step (the CLI's micro-batch counts quantize's
        // "rows", not the recovery's; the loss is the same); the test hook
        // stops each fine-tune after that many steps.
        let stage = control.stage(dir, usize::MAX, control.stop_after);
        let device = Default::default();
        let summary = match &source.kind {
            GptKind::Gpt2(task) => engine::train::<CpuTrain, _>(
                &Recovery::new::<CpuTrain>(&**task, &source.model, start, config),
                &stage,
                &device,
            )?,
            GptKind::Rft { task, .. } => engine::train::<CpuTrain, _>(
                &Recovery::new::<CpuTrain>(&**task, &source.model, start, config),
                &stage,
                &device,
            )?,
        };
        if summary.status != Status::Completed {
            return Ok(None);
        }
    }
    Ok(Some(safetensors_io::read(&model_path)?))
}

/// What the run hands over to build a row of `metrics.schemes[]`.
pub struct RowInputs<'a> {
    pub scheme: &'a str,
    pub bits: f64,
    pub bytes: usize,
    pub quality: Quality,
    pub parameters: usize,
}

/// The pruned rows of the table and `metrics.prune`; `None` when the run
/// was interrupted (rows done so far are on disk for the resume).
pub fn run_pruning(
    source: &dyn SourceRun,
    config: &PruneConfig,
    control: &RunControl,
    row: &dyn Fn(RowInputs) -> Map<String, Value>,
) -> anyhow::Result<Option<(Vec<Map<String, Value>>, Value)>> {
    let gpt = source.as_gpt().ok_or_else(|| {
        prune_error(
            format!(
                "a {} run cannot be pruned: structured pruning knows the GPT of gpt2 and rft runs",
                source.kind()
            ),
            "drop the [prune] table for this source",
        )
    })?;
    let (heads, hidden) = config.shape(&gpt.model)?;
    let dir = control.run_dir.join("pruned");
    crate::fsutil::create_dir_all(&dir)?;
    let pruned = prune_weights(&gpt.model, source.weights(), heads, hidden)?;
    let pruned_path = dir.join(MODEL_FILE);
    let as_list = |w: &NamedTensors| -> Weights {
        // In the source's order, so files list tensors the same way.
        source
            .weights()
            .iter()
            .filter_map(|(name, _, _)| {
                w.get(name)
                    .map(|(s, v)| (name.clone(), s.clone(), v.clone()))
            })
            .collect()
    };
    write_atomic(&pruned_path, &safetensors_io::to_bytes(&as_list(&pruned))?)?;
    let count = |w: &NamedTensors| w.values().map(|(_, v)| v.len()).sum::<usize>();
    let kept_parameters = count(&pruned);
    let file_bytes = |p: &Path| std::fs::metadata(p).map(|m| m.len() as usize);

    let mut rows = Vec::new();
    // Each row once: recorded in pruned/<name>.json, reused on resume.
    let mut cached = |name: &str,
                      make: &mut dyn FnMut() -> anyhow::Result<Option<Map<String, Value>>>|
     -> anyhow::Result<bool> {
        let record = dir.join(format!("{name}.json"));
        if let Ok(done) = read_json::<Map<String, Value>>(&record) {
            rows.push(done);
            return Ok(true);
        }
        if control.stop.load(Ordering::SeqCst) {
            return Ok(false);
        }
        match make()? {
            Some(m) => {
                write_json(&record, &m)?;
                rows.push(m);
                Ok(true)
            }
            None => Ok(false),
        }
    };

    let ok = cached("pruned", &mut || {
        Ok(Some(row(RowInputs {
            scheme: "pruned",
            bits: 32.0,
            bytes: file_bytes(&pruned_path)?,
            quality: gpt.evaluate(&pruned)?,
            parameters: kept_parameters,
        })))
    })?;
    if !ok {
        return Ok(None);
    }
    let recovery_dir = dir.join("recovery");
    let ok = cached("pruned+recovery", &mut || {
        let Some(weights) = recover(gpt, &pruned, config, &recovery_dir, control)? else {
            return Ok(None);
        };
        Ok(Some(row(RowInputs {
            scheme: "pruned+recovery",
            bits: 32.0,
            bytes: file_bytes(&recovery_dir.join(MODEL_FILE))?,
            quality: gpt.evaluate(&weights)?,
            parameters: kept_parameters,
        })))
    })?;
    if !ok {
        return Ok(None);
    }
    // The recovered weights as the fine-tune saved them (also on a resume).
    let recovered_list = as_list(&safetensors_io::read(&recovery_dir.join(MODEL_FILE))?);
    for name in &config.schemes {
        let scheme = Scheme::parse(name)?;
        let label = format!("pruned+recovery+{name}");
        let ok = cached(&label, &mut || {
            let path = dir.join(format!("{name}.{EXTENSION}"));
            write_packed(&path, &pack_weights(source, &recovered_list, scheme)?)?;
            let mut m = row(RowInputs {
                scheme: &label,
                bits: matrix_bits(source, &recovered_list, scheme),
                bytes: file_bytes(&path)?,
                quality: evaluate_packed(source, &path)?,
                parameters: kept_parameters,
            });
            m.insert("file".into(), json!(format!("pruned/{name}.{EXTENSION}")));
            Ok(Some(m))
        })?;
        if !ok {
            return Ok(None);
        }
    }
    // The control: the same fine-tune on the unpruned weights.
    let control_dir = dir.join("control");
    let original = named(source.weights());
    let ok = cached("unpruned+recovery", &mut || {
        let Some(weights) = recover(gpt, &original, config, &control_dir, control)? else {
            return Ok(None);
        };
        Ok(Some(row(RowInputs {
            scheme: "unpruned+recovery",
            bits: 32.0,
            bytes: file_bytes(&control_dir.join(MODEL_FILE))?,
            quality: gpt.evaluate(&weights)?,
            parameters: count(&original),
        })))
    })?;
    if !ok {
        return Ok(None);
    }
    let summary = json!({
        "mlp_fraction": config.mlp_fraction,
        "head_fraction": config.head_fraction,
        "heads_kept": heads,
        "heads": gpt.model.n_head,
        "mlp_neurons_kept": hidden,
        "mlp_neurons": 4 * gpt.model.n_embd,
        "parameters_kept": kept_parameters,
        "recovery_steps": config.recovery_steps,
        "recovery_lr": config.recovery_lr,
    });
    Ok(Some((rows, summary)))
}

#[cfg(test)]
mod tests;
