//! `envgen run hrm-sudoku`: the dataset, the training loop with the ACT
//! carry, periodic evaluation on held-out puzzles, checkpoints and resume.
//!
//! The loop is HRM's own (one ACT segment per step, two optimizers, a carry
//! that outlives the step), so it does not fit the engine's AdamW `Task`
//! loop; it shares the engine's run directory, metrics log, checkpoint
//! layout, progress bar and stop/resume contract instead.
//!
//! Schedule (as the reference's `pretrain.py`): an *epoch* is one example
//! per train group (original puzzle), so a run takes
//! `ceil(epochs · groups / global_batch)` optimizer steps and evaluates
//! every `eval_interval` epochs, converted to steps the same way.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::{Tensor, TensorData};
use envgen_kernels::{FusedAutodiffBackend, FusedBackend};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::act::{ActState, PuzzleBatch};
use super::config::{HrmPreset, BUILTIN_PRESETS};
pub use super::data::{evaluate, prepare_dataset, EvalMetrics, Sampler};
use super::model::{parameter_count, Carry, HrmModel};
use super::sudoku::dataset::{self, SudokuDataset};
use super::train::{HrmTrainer, StepMetrics};
use crate::engine::checkpoint;
use crate::engine::rundir::{finish_run, read_json, write_json, MetricsLog, Status, Summary};
use crate::engine::safetensors_io;
use crate::engine::task::RunControl;
use crate::engine::train::{inner_device_of, progress_bar};
use crate::engine::{health, LossScaler, ScaledStep};
use crate::error::UserError;
use crate::experiment::{self, ExperimentInfo, TypedExperiment};
use crate::fsutil::write_atomic;

pub const EXPERIMENT: &str = "hrm-sudoku";
pub const DEFAULT_PRESET: &str = "tiny";

/// `envgen run hrm-sudoku` in the experiment registry.
pub struct HrmExperiment;
pub static HRM: HrmExperiment = HrmExperiment;

impl TypedExperiment for HrmExperiment {
    type Config = HrmPreset;
    const INFO: ExperimentInfo = ExperimentInfo {
        name: EXPERIMENT,
        description: "HRM (Hierarchical Reasoning Model) on Sudoku: tiny CPU run up to the Sudoku-Extreme-1k paper setup",
        presets: BUILTIN_PRESETS,
        default_preset: DEFAULT_PRESET,
        headline_metric: "exact_accuracy",
    };
    fn validate(&self, config: &HrmPreset, origin: &str) -> anyhow::Result<()> {
        check(config, origin)
    }
    fn batch_size(&self, config: &HrmPreset) -> usize {
        config.train.global_batch_size
    }
    fn parameters(&self, config: &HrmPreset) -> Option<u64> {
        Some(parameters(config) as u64)
    }
    fn run_typed(
        &self,
        config: &HrmPreset,
        control: &RunControl,
        backend: crate::backend::Resolved,
    ) -> anyhow::Result<Summary> {
        // The data paths were checked where the run was resolved; inside a
        // container or on a Slurm node they may be mounted elsewhere.
        config.validate("config.toml")?;
        run(config, control, backend)
    }
    fn line(&self, summary: &Summary) -> String {
        let m = &summary.metrics;
        format!(
            "{:?} after {} steps in {:.1} s: held-out blank-cell accuracy {} (initial {}), exact {}, mean ACT steps {}, {} steps/s",
            summary.status,
            summary.steps_done,
            summary.wall_s,
            experiment::fmt_metric(m.get("cell_accuracy")),
            experiment::fmt_metric(m.get("initial_cell_accuracy")),
            experiment::fmt_metric(m.get("exact_accuracy")),
            experiment::fmt_metric(m.get("mean_act_steps")),
            experiment::fmt_metric(m.get("steps_per_s")),
        )
    }
}

/// The preset's own checks plus: data paths it names exist, and the run
/// fits in memory.
fn check(preset: &HrmPreset, origin: &str) -> anyhow::Result<()> {
    preset.validate(origin)?;
    crate::engine::budget::check(origin, &memory_parts(preset))?;
    let data = &preset.data;
    for (key, path) in [
        ("data.dir", &data.dir),
        ("data.train_csv", &data.train_csv),
        ("data.test_csv", &data.test_csv),
    ] {
        if let Some(path) = path {
            if !Path::new(path).exists() {
                return Err(UserError::usage(format!("{key} = {path}: no such file or directory"))
                    .with_fix("give an existing path (CSV files in the Sudoku-Extreme layout `source,q,a,rating`, or a directory from `envgen sudoku build-dataset`)")
                    .into());
            }
        }
    }
    Ok(())
}

/// What an HRM run holds in memory at least (engine::budget): the
/// parameters' training state (as [`parameter_count`], in f64 so that an
/// absurd width cannot overflow before it is refused), one row's
/// activations over both modules, and generated puzzles (each example's
/// 81 input and 81 label cells, at least a byte each).
fn memory_parts(preset: &HrmPreset) -> Vec<crate::engine::budget::Part> {
    use crate::engine::budget::Part;
    let m = &preset.model;
    let d = m.hidden as f64;
    let inter = (m.expansion * d * 2.0 / 3.0 / 256.0).ceil() * 256.0;
    let layers = (m.h_layers as f64) + (m.l_layers as f64);
    let vocab = m.vocab as f64;
    let blocks = layers * (4.0 * d * d + 3.0 * d * inter);
    let embeddings = 2.0 * vocab * d + (m.num_puzzle_ids as f64) * (m.puzzle_emb_len as f64) * d;
    let (key, value) = match (embeddings > blocks, m.h_layers.max(m.l_layers) > m.hidden) {
        (true, _) if m.num_puzzle_ids > m.vocab => ("model.num_puzzle_ids", m.num_puzzle_ids),
        (true, _) => ("model.vocab", m.vocab),
        (false, true) => ("model.h_layers/l_layers", m.h_layers.max(m.l_layers)),
        (false, false) => ("model.hidden", m.hidden),
    };
    let seq = (m.seq_len as f64) + (m.puzzle_emb_len as f64);
    let mut parts = vec![
        Part::parameters(key, value, blocks + embeddings + 2.0 * d + 2.0),
        Part::activations("model.hidden", m.hidden, seq, d, layers),
    ];
    let data = &preset.data;
    if data.dir.is_none() && data.train_csv.is_none() {
        let examples = (data.train_puzzles as f64) * (1.0 + data.augmentations as f64)
            + data.test_puzzles as f64;
        parts.push(Part::data(
            "data.train_puzzles",
            format!(
                "{} (× {} augmentations)",
                data.train_puzzles, data.augmentations
            ),
            examples * 2.0 * (m.seq_len as f64),
        ));
    }
    parts
}

/// Trainable parameters (what `experiments describe` reports).
pub fn parameters(preset: &HrmPreset) -> usize {
    parameter_count(&preset.model)
}

/// Optimizer steps of a run and how often it evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub total_steps: u64,
    pub eval_every: u64,
}

impl Plan {
    pub fn new(preset: &HrmPreset, train_groups: usize) -> Self {
        let train = &preset.train;
        let steps_for = |epochs: usize| {
            (epochs as u64 * train_groups as u64).div_ceil(train.global_batch_size as u64)
        };
        Plan {
            total_steps: steps_for(train.epochs).max(1),
            eval_every: steps_for(train.eval_interval).max(1),
        }
    }
}

/// Loop state saved next to the weights.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LoopState {
    step: u64,
    initial_eval: Option<EvalMetrics>,
    last_eval: Option<EvalMetrics>,
    last_loss: Option<f64>,
    /// Segments of the training rows that halted since the last evaluation.
    halted_steps_sum: u64,
    halted_rows: u64,
    /// Mean of the window above at the last evaluation.
    mean_act_steps: Option<f64>,
    wall_s: f64,
    /// ACT bookkeeping of every row of the global batch (act.safetensors
    /// holds its tensors).
    act_steps: Vec<usize>,
    act_halted: Vec<bool>,
    /// The trainer's optimizer updates and fp16 loss scaler (absent in
    /// checkpoints from before fp16 support: updates = steps, no scaler).
    #[serde(default)]
    optimizer_steps: Option<u64>,
    #[serde(default)]
    loss_scaler: Option<LossScaler>,
}

/// Train `preset` in `control.run_dir` on the resolved backend.
pub fn run(
    preset: &HrmPreset,
    control: &RunControl,
    backend: crate::backend::Resolved,
) -> anyhow::Result<Summary> {
    crate::with_train_backend!(backend, B => train::<B>(preset, control, &Default::default()))
}

/// The training loop; writes metrics.jsonl, checkpoints and summary.json.
pub fn train<B: FusedAutodiffBackend>(
    preset: &HrmPreset,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary>
where
    HrmModel<B>: AutodiffModule<B, InnerModule = HrmModel<B::InnerBackend>>,
{
    let ds = prepare_dataset(&preset.data, &control.run_dir)?;
    let plan = Plan::new(preset, ds.meta.train.groups);
    let global = preset.train.global_batch_size;
    let (micro_batch, _) = crate::engine::split_batch(global, Some(control.micro_batch))?;
    B::seed(device, preset.train.seed);
    let mut sampler = Sampler::new(&ds.train, preset.train.seed, global);
    // Mixed precision for everything below on this thread (engine::precision).
    let _autocast = envgen_kernels::autocast::enter(control.precision.autocast_dtype());
    let placeholder = sampler.batch::<B>(1, device);
    let mut trainer = HrmTrainer::<B>::new(
        preset,
        plan.total_steps as usize,
        micro_batch,
        placeholder,
        device,
    );
    let inner_device = inner_device_of::<B>(device);
    let ckpt_root = control.run_dir.join(checkpoint::CHECKPOINTS);
    let mut state = LoopState::default();
    trainer.loss_scaler = control.precision.loss_scaler();
    if control.resume {
        state = load_checkpoint(&ckpt_root, &mut trainer, device)?;
    }
    let metrics_path = control.run_dir.join("metrics.jsonl");
    let mut metrics = match control.resume {
        true => MetricsLog::open(&metrics_path, Some(state.step))?,
        false => MetricsLog::fresh(&metrics_path)?,
    };
    if state.initial_eval.is_none() {
        let eval = evaluate(&trainer.model.valid(), &ds.test, micro_batch, &inner_device);
        state.initial_eval = Some(eval);
        // The total comes from the dataset's size, not from config.toml:
        // written here for readers that show step/total (`runs watch`).
        metrics.write(&json!({
            "step": 0,
            "total_steps": plan.total_steps,
            "exact_accuracy": eval.exact_accuracy,
            "cell_accuracy": eval.cell_accuracy,
        }))?;
    }

    let bar = progress_bar(control.progress, plan.total_steps, state.step).counting("step");
    let session_start = Instant::now();
    let wall_before = state.wall_s;
    let session_first_step = state.step;
    let mut status = Status::Completed;
    let mut failure: Option<String> = None;
    let panics = health::PanicWatch::start();
    while state.step < plan.total_steps {
        let fresh = sampler.batch::<B>(state.step + 1, device);
        let started = Instant::now();
        let m = trainer.train_step(fresh);
        let step_s = started.elapsed().as_secs_f64();
        state.step = m.step as u64;
        state.last_loss = Some(m.loss);
        state.halted_steps_sum += m.halted_steps.iter().sum::<usize>() as u64;
        state.halted_rows += m.halted_steps.len() as u64;
        crate::kernel_cache::step_done();
        let mut record = step_record(&m, step_s, preset.train.global_batch_size);
        if let (Some((scale, decision)), Some(scaler)) = (m.loss_scale, &trainer.loss_scaler) {
            crate::engine::precision::record_step(&mut record, scale, decision, scaler);
        }
        if state.step % plan.eval_every == 0 || state.step == plan.total_steps {
            let eval = evaluate(&trainer.model.valid(), &ds.test, micro_batch, &inner_device);
            let act = state.halted_steps_sum as f64 / state.halted_rows.max(1) as f64;
            state.last_eval = Some(eval);
            state.mean_act_steps = Some(act);
            state.halted_steps_sum = 0;
            state.halted_rows = 0;
            record["exact_accuracy"] = json!(eval.exact_accuracy);
            record["cell_accuracy"] = json!(eval.cell_accuracy);
            record["mean_act_steps"] = json!(act);
        }
        metrics.write(&record)?;
        bar.set_message(format!("loss {:.4} {:.2} steps/s", m.loss, 1.0 / step_s));
        bar.set_position(state.step);

        // As engine::train: a loss that is not a number (fp16's skipped
        // overflow steps aside) or a panic on any thread fails the run at
        // this step, before its weights are checkpointed.
        let applied = m
            .loss_scale
            .is_none_or(|(_, decision)| matches!(decision, ScaledStep::Apply { .. }));
        failure = panics.failure(state.step).or_else(|| {
            applied
                .then(|| health::diverged(m.loss, state.step, "train.lr"))
                .flatten()
        });
        if failure.is_some() {
            status = Status::Failed;
            break;
        }

        let interrupted = control.stop.load(Ordering::SeqCst)
            || control
                .stop_after
                .is_some_and(|n| state.step >= n && state.step < plan.total_steps);
        let every = preset.train.checkpoint_every as u64;
        let periodic = every > 0 && state.step % every == 0;
        if interrupted || periodic || state.step == plan.total_steps {
            state.wall_s = wall_before + session_start.elapsed().as_secs_f64();
            save_checkpoint(&ckpt_root, &trainer, &mut state)?;
        }
        if interrupted && state.step < plan.total_steps {
            status = Status::Interrupted;
            break;
        }
    }
    bar.finish_and_clear();
    if status == Status::Completed {
        // The trained weights next to the run's other outputs, as gpt2 does.
        checkpoint::save_weights::<B, HrmModel<B>>(
            &control.run_dir.join("model.safetensors"),
            &trainer.model,
        )?;
    }
    let session_s = session_start.elapsed().as_secs_f64();
    let session_steps = state.step - session_first_step;
    let summary = Summary {
        status,
        wall_s: wall_before + session_s,
        steps_done: state.step,
        metrics: {
            let mut m = summary_metrics(&state, preset, &ds, plan, session_steps, session_s);
            if let Some(why) = &failure {
                m.insert("error".into(), json!(why));
            }
            if let Some(scaler) = &trainer.loss_scaler {
                scaler.summarize(&mut m);
            }
            m
        },
    };
    finish_run(&control.run_dir, &summary)?;
    Ok(summary)
}

/// One step's metrics.jsonl line. `puzzles_per_s`: the puzzles (rows of
/// the global batch, one ACT segment each) this step trained on per second,
/// the throughput `runs report` plots next to steps/s.
pub(crate) fn step_record(m: &StepMetrics, step_s: f64, puzzles_per_step: usize) -> Value {
    json!({
        "step": m.step,
        "loss": m.loss,
        "lm_loss": m.lm_loss,
        "q_halt_loss": m.q_halt_loss,
        "q_continue_loss": m.q_continue_loss,
        "train_exact_accuracy": m.exact_accuracy,
        "train_cell_accuracy": m.cell_accuracy,
        "halted_rows": m.halted_steps.len(),
        "lr": m.lr,
        "steps_per_s": 1.0 / step_s.max(1e-9),
        "puzzles_per_s": puzzles_per_step as f64 / step_s.max(1e-9),
        "step_ms": step_s * 1e3,
    })
}

fn summary_metrics(
    state: &LoopState,
    preset: &HrmPreset,
    ds: &SudokuDataset,
    plan: Plan,
    session_steps: u64,
    session_s: f64,
) -> Map<String, Value> {
    let last = state.last_eval;
    let mut m = Map::new();
    m.insert(
        "exact_accuracy".into(),
        json!(last.map(|e| e.exact_accuracy)),
    );
    m.insert("cell_accuracy".into(), json!(last.map(|e| e.cell_accuracy)));
    m.insert("mean_act_steps".into(), json!(state.mean_act_steps));
    m.insert(
        "initial_cell_accuracy".into(),
        json!(state.initial_eval.map(|e| e.cell_accuracy)),
    );
    m.insert("final_train_loss".into(), json!(state.last_loss));
    m.insert(
        "steps_per_s".into(),
        json!(session_steps as f64 / session_s.max(1e-9)),
    );
    m.insert("total_steps".into(), json!(plan.total_steps));
    m.insert(
        "puzzles_per_step".into(),
        json!(preset.train.global_batch_size),
    );
    m.insert("test_puzzles".into(), json!(ds.test.len()));
    m.insert("train_groups".into(), json!(ds.meta.train.groups));
    m.insert("train_examples".into(), json!(ds.train.len()));
    m.insert("parameters".into(), json!(parameters(preset)));
    m
}

fn to_f32<B: FusedBackend, const D: usize, K>(t: Tensor<B, D, K>) -> (Vec<usize>, Vec<f32>)
where
    K: burn::tensor::TensorKind<B> + burn::tensor::BasicOps<B>,
{
    let shape = t.dims().to_vec();
    let values = t.into_data().convert::<f32>().to_vec().unwrap_or_default();
    (shape, values)
}

fn save_checkpoint<B: FusedAutodiffBackend>(
    root: &Path,
    trainer: &HrmTrainer<B>,
    state: &mut LoopState,
) -> anyhow::Result<()>
where
    HrmModel<B>: AutodiffModule<B>,
{
    let dir = checkpoint::step_dir(root, state.step)?;
    checkpoint::save_weights::<B, HrmModel<B>>(&dir.join("model.safetensors"), &trainer.model)?;
    let moments = trainer.optimizer.state_tensors(&trainer.model);
    write_atomic(
        &dir.join("optimizer.safetensors"),
        &safetensors_io::to_bytes(&moments)?,
    )?;
    let act = trainer.act_state();
    let mut tensors = Vec::new();
    for (name, (shape, values)) in [
        ("z_h", to_f32(act.carry.z_h)),
        ("z_l", to_f32(act.carry.z_l)),
        ("inputs", to_f32(act.batch.inputs)),
        ("labels", to_f32(act.batch.labels)),
        ("puzzle_ids", to_f32(act.batch.puzzle_ids)),
    ] {
        tensors.push((name.to_string(), shape, values));
    }
    write_atomic(
        &dir.join("act.safetensors"),
        &safetensors_io::to_bytes(&tensors)?,
    )?;
    state.act_steps = act.steps;
    state.act_halted = act.halted;
    state.optimizer_steps = Some(trainer.optimizer_steps as u64);
    state.loss_scaler = trainer.loss_scaler.clone();
    write_json(&dir.join("state.json"), state)?;
    checkpoint::publish(root, &dir)
}

fn load_checkpoint<B: FusedAutodiffBackend>(
    root: &Path,
    trainer: &mut HrmTrainer<B>,
    device: &B::Device,
) -> anyhow::Result<LoopState>
where
    HrmModel<B>: AutodiffModule<B>,
{
    let dir = checkpoint::latest(root)?;
    trainer.model = checkpoint::load_weights::<B, HrmModel<B>>(
        &dir.join("model.safetensors"),
        trainer.model.clone(),
    )?;
    let moments = safetensors_io::read(&dir.join("optimizer.safetensors"))?;
    trainer
        .optimizer
        .load_state(&trainer.model, &moments, &inner_device_of::<B>(device));
    let state: LoopState = read_json(&dir.join("state.json"))?;
    let act_path = dir.join("act.safetensors");
    let act = safetensors_io::read(&act_path)?;
    let rows = state.act_steps.len();
    let hidden = trainer.model.config().hidden;
    let seq = trainer.model.config().total_seq_len();
    let cells = dataset::SEQ_LEN;
    let get = |name: &str, shape: &[usize]| -> anyhow::Result<Vec<f32>> {
        match act.get(name) {
            Some((s, v)) if s.as_slice() == shape => Ok(v.clone()),
            _ => Err(UserError::usage(format!(
                "{}: tensor `{name}` is missing or not of shape {shape:?}",
                act_path.display()
            ))
            .with_fix("resume with the config.toml the run was started with")
            .into()),
        }
    };
    let float3 = |name: &str| -> anyhow::Result<Tensor<B, 3>> {
        let values = get(name, &[rows, seq, hidden])?;
        Ok(Tensor::from_data(
            TensorData::new(values, [rows, seq, hidden]),
            device,
        ))
    };
    let int = |name: &str, shape: Vec<usize>| -> anyhow::Result<Vec<i64>> {
        Ok(get(name, &shape)?.into_iter().map(|v| v as i64).collect())
    };
    let batch = PuzzleBatch {
        inputs: Tensor::from_data(
            TensorData::new(int("inputs", vec![rows, cells])?, [rows, cells]),
            device,
        ),
        labels: Tensor::from_data(
            TensorData::new(int("labels", vec![rows, cells])?, [rows, cells]),
            device,
        ),
        puzzle_ids: Tensor::from_data(
            TensorData::new(int("puzzle_ids", vec![rows])?, [rows]),
            device,
        ),
    };
    trainer.set_act_state(ActState {
        carry: Carry {
            z_h: float3("z_h")?,
            z_l: float3("z_l")?,
        },
        steps: state.act_steps.clone(),
        halted: state.act_halted.clone(),
        batch,
    });
    trainer.step = state.step as usize;
    trainer.optimizer_steps = state.optimizer_steps.unwrap_or(state.step) as usize;
    if state.loss_scaler.is_some() {
        trainer.loss_scaler = state.loss_scaler.clone();
    }
    Ok(state)
}
