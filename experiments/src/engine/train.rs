//! The iteration-based training loop every experiment shares.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::config::OptimConfig;
use super::distributed::{writes_files, Collective, World};
use super::micro_batches::{accumulate_micro_batches, StepShape};
use super::optim::{clip_scale, global_grad_norm, learning_rate, AdamW};
use super::precision::{LossScaler, ScaledStep};
use super::rundir::{finish_run, read_json, write_json, MetricsLog, Status, Summary};
use super::task::{EvalShare, RunControl, Task};
use super::{checkpoint, health, safetensors_io};
use crate::fsutil::write_atomic;

/// Loop state saved next to the weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LoopState {
    /// Steps completed.
    step: u64,
    initial_val_loss: Option<f64>,
    last_val_loss: Option<f64>,
    last_train_loss: Option<f64>,
    wall_s: f64,
    /// Optimizer updates applied (fewer than `step` when fp16 skipped
    /// overflowing steps); absent in checkpoints from before fp16 support,
    /// where it equals `step`.
    #[serde(default)]
    optimizer_steps: Option<u64>,
    /// The fp16 loss scaler's state, so a resumed run scales as an
    /// uninterrupted one does.
    #[serde(default)]
    loss_scaler: Option<LossScaler>,
    /// The last evaluation's [`Task::eval_extras`], for the summary of a
    /// resumed run.
    #[serde(default)]
    last_eval_extras: Option<Map<String, Value>>,
}

/// Add `extras` to a metrics record (an object).
fn merge(record: &mut Value, extras: Map<String, Value>) {
    if let Some(object) = record.as_object_mut() {
        object.extend(extras);
    }
}

/// Train; writes metrics, checkpoints and summary.json into the run dir and
/// returns the summary (status completed or interrupted).
pub fn train<B: AutodiffBackend, T: Task<B>>(
    task: &T,
    control: &RunControl,
    device: &B::Device,
) -> anyhow::Result<Summary> {
    let train_cfg = task.train_config().clone();
    let optim_cfg = task.optim_config().clone();
    let world = control.world.as_ref();
    let leader = writes_files(world);
    let shape = StepShape::new(
        task,
        control.micro_batch,
        world.map_or(1, |w| w.size),
        world.map_or(0, |w| w.rank),
    )?;
    let micro_batch = shape.micro_batch;
    let collective = world
        .map(|w| Collective::<B::InnerBackend>::join(w, &inner_device_of::<B>(device)))
        .transpose()?;
    B::seed(device, train_cfg.seed);
    // Mixed precision for everything below on this thread (forward,
    // backward and evaluation); see engine::precision.
    let _autocast = envgen_kernels::autocast::enter(control.precision.autocast_dtype());
    let mut model = task.init_model(device)?;
    let mut optimizer = AdamW::<B::InnerBackend>::new(optim_cfg.clone());
    let mut state = LoopState {
        step: 0,
        initial_val_loss: None,
        last_val_loss: None,
        last_train_loss: None,
        wall_s: 0.0,
        optimizer_steps: None,
        loss_scaler: None,
        last_eval_extras: None,
    };
    let ckpt_root = control.run_dir.join(checkpoint::CHECKPOINTS);
    if control.resume {
        let (m, s) = load_checkpoint::<B, T>(&ckpt_root, model, &mut optimizer, device)?;
        model = m;
        state = s;
    }
    let mut metrics = leader
        .then(|| {
            let path = control.run_dir.join("metrics.jsonl");
            match control.resume {
                true => MetricsLog::open(&path, Some(state.step)),
                false => MetricsLog::fresh(&path),
            }
        })
        .transpose()?;
    if state.initial_val_loss.is_none() {
        // Every rank takes part (the task's evaluations are shared out);
        // the leader alone has the validation loss and writes the record.
        let (val, extras) = evaluate(task, &model, micro_batch, collective.as_ref(), device)?;
        if let (Some(val), Some(metrics)) = (val, metrics.as_mut()) {
            state.initial_val_loss = Some(val);
            let mut record = json!({"step": 0, "val_loss": val});
            merge(&mut record, extras);
            metrics.write(&record)?;
        }
    }

    if state.loss_scaler.is_none() {
        state.loss_scaler = control.precision.loss_scaler();
    }
    let bar =
        progress_bar(control.progress && leader, train_cfg.steps, state.step).counting("step");
    if let Some(label) = &control.label {
        bar.set_prefix(format!("{label} "));
    }
    let session_start = Instant::now();
    let wall_before = state.wall_s;
    let mut status = Status::Completed;
    let mut diverged: Option<String> = None;
    let mut session_units = 0u64;
    let panics = health::PanicWatch::start();

    while state.step < train_cfg.steps {
        let step = state.step;
        let started = Instant::now();
        let lr = learning_rate(&optim_cfg, step, train_cfg.steps);
        // fp16: the loss is scaled up before backward (engine::precision).
        let loss_scale = state.loss_scaler.as_ref().map_or(1.0, |s| s.scale);
        let (grads, loss_sum) =
            accumulate_micro_batches(task, &model, step, &shape, loss_scale, device);
        let stop = control.stop.load(Ordering::SeqCst);
        let (mut grads, loss_sum, stop_requested) =
            agree_across_ranks::<B, T>(collective.as_ref(), &model, grads, loss_sum, stop)?;
        let update;
        (model, update) = optimizer_step::<B, T>(
            model,
            &mut optimizer,
            &mut grads,
            lr,
            &optim_cfg,
            &mut state,
        );
        state.step += 1;
        state.last_train_loss = Some(loss_sum);
        let step_s = started.elapsed().as_secs_f64();
        crate::kernel_cache::step_done();
        session_units += shape.units_per_step as u64;
        let line = StepLine {
            step,
            lr,
            loss_sum,
            loss_scale,
            update,
            step_s,
        };
        log_step(
            task,
            &model,
            &mut state,
            &line,
            &shape,
            (metrics.as_mut(), collective.as_ref()),
            device,
        )?;
        bar.set_message(format!(
            "loss {loss_sum:.4} {:.0} {}/s",
            shape.units_per_step as f64 / step_s,
            shape.unit
        ));
        bar.set_position(state.step);
        if let Some(why) = failure(&panics, &line.update, loss_sum, state.step) {
            diverged = Some(why);
            status = Status::Failed;
            break;
        }
        let interrupted = stop_requested
            || control
                .stop_after
                .is_some_and(|n| state.step >= n && state.step < train_cfg.steps);
        let periodic =
            train_cfg.checkpoint_every > 0 && state.step % train_cfg.checkpoint_every == 0;
        if leader && (interrupted || periodic || state.step == train_cfg.steps) {
            state.wall_s = wall_before + session_start.elapsed().as_secs_f64();
            save_checkpoint::<B, T>(&ckpt_root, &model, &optimizer, &state)?;
        }
        if interrupted && state.step < train_cfg.steps {
            status = Status::Interrupted;
            break;
        }
    }
    bar.finish_and_clear();
    if status == Status::Completed && leader {
        task.finish(&model, &control.run_dir)?;
    }
    let session_s = session_start.elapsed().as_secs_f64();
    let session = Session {
        status,
        diverged,
        wall_s: wall_before + session_s,
        units_per_s: session_units as f64 / session_s.max(1e-9),
    };
    let summary = summarize(task, &state, &shape, session, world);
    if leader {
        finish_run(&control.run_dir, &summary)?;
    }
    Ok(summary)
}

/// How this session of the run ended, for its summary.
struct Session {
    status: Status,
    /// Why the run failed, when it diverged or a thread panicked.
    diverged: Option<String>,
    /// Wall time of every session so far.
    wall_s: f64,
    units_per_s: f64,
}

/// `summary.json`'s content: the final and initial losses, the speed, the
/// loss scaler's counts, the task's extras and its last evaluations.
fn summarize<B: AutodiffBackend, T: Task<B>>(
    task: &T,
    state: &LoopState,
    shape: &StepShape,
    session: Session,
    world: Option<&World>,
) -> Summary {
    let unit = shape.unit;
    let mut m = Map::new();
    if let Some(why) = &session.diverged {
        m.insert("error".into(), json!(why));
    }
    m.insert("final_train_loss".into(), json!(state.last_train_loss));
    m.insert("final_val_loss".into(), json!(state.last_val_loss));
    m.insert("initial_val_loss".into(), json!(state.initial_val_loss));
    m.insert(format!("{unit}_per_s"), json!(session.units_per_s));
    m.insert(format!("{unit}_per_step"), json!(shape.units_per_step));
    if let Some(scaler) = &state.loss_scaler {
        scaler.summarize(&mut m);
    }
    m.extend(task.summary_extras());
    for (key, value) in state.last_eval_extras.clone().unwrap_or_default() {
        m.insert(format!("final_{key}"), value);
    }
    let mut summary = Summary {
        status: session.status,
        wall_s: session.wall_s,
        steps_done: state.step,
        metrics: m,
    };
    if let Some(w) = world {
        summary.metrics.insert("world_size".into(), json!(w.size));
    }
    summary
}

/// What a step did, for its metrics line.
struct StepLine {
    /// The step's index (0-based; the line says `step + 1`).
    step: u64,
    lr: f64,
    loss_sum: f64,
    loss_scale: f64,
    update: Update,
    step_s: f64,
}

/// What the optimizer did with a step's gradients.
struct Update {
    /// fp16's loss scaler's decision (always `Apply` without one).
    decision: ScaledStep,
    /// The true (unscaled) gradient norm, when the update was applied.
    norm: Option<f64>,
}

/// Ranks agree on everything that decides what happens next: the
/// gradients (averaged), the loss, and whether any of them was asked to
/// stop. Alone, all three pass through.
fn agree_across_ranks<B: AutodiffBackend, T: Task<B>>(
    collective: Option<&Collective<B::InnerBackend>>,
    model: &T::Model,
    grads: GradientsParams,
    loss_sum: f64,
    stop_requested: bool,
) -> anyhow::Result<(GradientsParams, f64, bool)> {
    let Some(collective) = collective else {
        return Ok((grads, loss_sum, stop_requested));
    };
    let stop = if stop_requested { 1.0 } else { 0.0 };
    let (averaged, scalars) = collective.average::<B, T::Model>(model, grads, &[loss_sum, stop])?;
    Ok((averaged, scalars[0], scalars[1] > 0.0))
}

/// The optimizer update: fp16's loss scaler decides whether it is applied
/// (an overflowing step is skipped) and by how much the gradients are
/// unscaled; the true norm is clipped to `optim.grad_clip`.
fn optimizer_step<B: AutodiffBackend, T: Task<B>>(
    model: T::Model,
    optimizer: &mut AdamW<B::InnerBackend>,
    grads: &mut GradientsParams,
    lr: f64,
    optim_cfg: &OptimConfig,
    state: &mut LoopState,
) -> (T::Model, Update) {
    let scaled_norm = global_grad_norm::<B, T::Model>(&model, grads);
    let decision = match state.loss_scaler.as_mut() {
        Some(scaler) => scaler.update(scaled_norm),
        None => ScaledStep::Apply {
            unscale: 1.0,
            raised: false,
        },
    };
    let ScaledStep::Apply { unscale, .. } = decision else {
        return (
            model,
            Update {
                decision,
                norm: None,
            },
        );
    };
    let true_norm = scaled_norm * unscale;
    let clip = clip_scale(true_norm, optim_cfg.grad_clip);
    let t = state.optimizer_steps.unwrap_or(state.step) + 1;
    let model = optimizer.step::<B, T::Model>(model, grads, lr, t, clip * unscale);
    state.optimizer_steps = Some(t);
    let update = Update {
        decision,
        norm: Some(true_norm),
    };
    (model, update)
}

/// The step's metrics line, with the validation loss and the task's
/// evaluations when one is due (every `eval_every` steps and at the end).
/// Every rank evaluates (the task shares its evaluations out through the
/// collective); only the leader has a metrics log and writes the line.
fn log_step<B: AutodiffBackend, T: Task<B>>(
    task: &T,
    model: &T::Model,
    state: &mut LoopState,
    line: &StepLine,
    shape: &StepShape,
    (metrics, collective): (
        Option<&mut MetricsLog>,
        Option<&Collective<B::InnerBackend>>,
    ),
    device: &B::Device,
) -> anyhow::Result<()> {
    let unit = shape.unit;
    let mut record = json!({
        "step": state.step,
        "loss": line.loss_sum,
        "lr": line.lr,
        "grad_norm": line.update.norm,
        format!("{unit}_per_s"): shape.units_per_step as f64 / line.step_s,
        "step_ms": line.step_s * 1e3,
    });
    if let Some(scaler) = &state.loss_scaler {
        super::precision::record_step(&mut record, line.loss_scale, line.update.decision, scaler);
    }
    merge(&mut record, task.step_extras(line.step));
    if state.step % shape.eval_every == 0 || state.step == shape.steps {
        let (val, extras) = evaluate(task, model, shape.micro_batch, collective, device)?;
        if let Some(val) = val {
            state.last_val_loss = Some(val);
            record["val_loss"] = json!(val);
        }
        state.last_eval_extras = Some(extras.clone());
        merge(&mut record, extras);
    }
    match metrics {
        Some(metrics) => metrics.write(&record),
        None => Ok(()),
    }
}

/// The validation loss (the leader's alone: the others get None) and the
/// task's other evaluations (every rank's share, summed), on the model
/// without autodiff.
fn evaluate<B: AutodiffBackend, T: Task<B>>(
    task: &T,
    model: &T::Model,
    micro_batch: usize,
    collective: Option<&Collective<B::InnerBackend>>,
    device: &B::Device,
) -> anyhow::Result<(Option<f64>, Map<String, Value>)> {
    let valid = model.valid();
    let inner = inner_device_of::<B>(device);
    let sum = |counts: &[f64]| match collective {
        Some(collective) => collective.sum_counts(counts),
        None => Ok(counts.to_vec()),
    };
    let share = match collective {
        Some(c) => EvalShare::across(c.rank(), c.ranks(), &sum),
        None => EvalShare::alone(),
    };
    let leader = share.rank == 0;
    let val = leader.then(|| task.evaluate(&valid, micro_batch, &inner));
    let extras = task.eval_extras(&valid, micro_batch, &share, &inner)?;
    Ok((val, extras))
}

/// Why the run fails at this step, if it does: a loss that is not a number
/// trains nothing from here on, and a panic on any thread (a backend's
/// worker) leaves the tensors untrustworthy, so the run stops here (its
/// weights are not checkpointed) instead of going on to "complete".
/// fp16's skipped overflow steps are not divergence.
fn failure(
    panics: &health::PanicWatch,
    update: &Update,
    loss_sum: f64,
    step: u64,
) -> Option<String> {
    let applied = matches!(update.decision, ScaledStep::Apply { .. });
    panics.failure(step).or_else(|| {
        applied
            .then(|| health::diverged(loss_sum, step, "optim.lr"))
            .flatten()
    })
}

/// The inner (non-autodiff) backend's device of an autodiff device.
pub fn inner_device_of<B: AutodiffBackend>(
    device: &B::Device,
) -> burn::tensor::Device<B::InnerBackend> {
    // Autodiff<B> uses the inner backend's device type.
    let any: &dyn std::any::Any = device;
    any.downcast_ref::<burn::tensor::Device<B::InnerBackend>>()
        .cloned()
        .unwrap_or_default()
}

pub use super::progress::progress_bar;

fn save_checkpoint<B: AutodiffBackend, T: Task<B>>(
    root: &Path,
    model: &T::Model,
    optimizer: &AdamW<B::InnerBackend>,
    state: &LoopState,
) -> anyhow::Result<()> {
    let dir = checkpoint::step_dir(root, state.step)?;
    checkpoint::save_weights::<B, T::Model>(&dir.join("model.safetensors"), model)?;
    let moments = optimizer.state_tensors::<B, T::Model>(model);
    write_atomic(
        &dir.join("optimizer.safetensors"),
        &safetensors_io::to_bytes(&moments)?,
    )?;
    write_json(&dir.join("state.json"), state)?;
    checkpoint::publish(root, &dir)
}

fn load_checkpoint<B: AutodiffBackend, T: Task<B>>(
    root: &Path,
    model: T::Model,
    optimizer: &mut AdamW<B::InnerBackend>,
    device: &B::Device,
) -> anyhow::Result<(T::Model, LoopState)> {
    let dir = checkpoint::latest(root)?;
    let loaded = (|| -> anyhow::Result<(T::Model, LoopState)> {
        let model = checkpoint::load_weights::<B, T::Model>(&dir.join("model.safetensors"), model)?;
        let moments = safetensors_io::read(&dir.join("optimizer.safetensors"))?;
        optimizer.load_state::<B, T::Model>(&model, &moments, &inner_device_of::<B>(device));
        let state: LoopState = read_json(&dir.join("state.json"))?;
        Ok((model, state))
    })();
    loaded.map_err(|err| damaged_checkpoint(root, &dir, err))
}

/// A checkpoint of the run's own that does not read back (cut short by a
/// crash or a full disk) gets a fix about checkpoints, not the one for a
/// Hugging Face file the reader gives (issue #40).
fn damaged_checkpoint(root: &Path, dir: &Path, err: anyhow::Error) -> anyhow::Error {
    match err.downcast::<crate::error::UserError>() {
        Ok(mut user) => {
            user.fix = Some(format!(
                "the checkpoint {} is damaged (cut short?): write the name of an earlier \
                 step-N directory into {}, or start a new run",
                dir.display(),
                root.join("latest").display()
            ));
            user.into()
        }
        Err(err) => err,
    }
}

/// A task that runs on every backend this build has.
#[cfg(feature = "cuda")]
pub trait AnyBackendTask: Task<crate::backend::CpuTrain> + Task<crate::backend::CudaTrain> {}
#[cfg(feature = "cuda")]
impl<T: Task<crate::backend::CpuTrain> + Task<crate::backend::CudaTrain>> AnyBackendTask for T {}
/// A task that runs on every backend this build has.
#[cfg(not(feature = "cuda"))]
pub trait AnyBackendTask: Task<crate::backend::CpuTrain> {}
#[cfg(not(feature = "cuda"))]
impl<T: Task<crate::backend::CpuTrain>> AnyBackendTask for T {}

/// [`train`] on the resolved backend's default device.
pub fn train_on<T: AnyBackendTask>(
    task: &T,
    control: &RunControl,
    backend: crate::backend::Resolved,
) -> anyhow::Result<Summary> {
    crate::with_train_backend!(backend, B => train::<B, T>(task, control, &Default::default()))
}

#[cfg(test)]
#[path = "train_tests.rs"]
mod tests;
