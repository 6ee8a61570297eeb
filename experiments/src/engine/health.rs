//! What fails a run while it trains, checked by every training loop after
//! each step (engine::train, HRM's loop): a loss that is not a number, and
//! a panic on any thread of the process. Either way the run ends `failed`
//! at that step (exit 1, the reason in `metrics.error`) instead of going on
//! to "complete" with garbage.
//!
//! Panics matter because Burn's backends report failures by panicking on
//! their own threads (CubeCL's device thread, rayon workers): the training
//! thread then goes on with whatever the tensors hold. A CUDA run without
//! NVRTC once panicked ~2,300 times that way and still ended "completed"
//! with losses of 1e-42 (issue #21).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// A loss this close to zero is no training result: cross-entropy in f32
/// cannot get there by learning (a memorized batch still costs ~1e-7 per
/// token), while a backend that computed nothing reads back zeros or
/// denormals (the 1e-42 losses of issue #21).
const DEGENERATE_LOSS: f64 = 1e-30;

/// The error of a run whose loss stopped being a number at `step`
/// (1-based), or became degenerate; `lr_key` is the config key to lower.
pub fn diverged(loss: f64, step: u64, lr_key: &str) -> Option<String> {
    if !loss.is_finite() {
        return Some(format!(
            "diverged: the training loss is {loss} at step {step}; lower {lr_key} or use fp32"
        ));
    }
    (loss.abs() < DEGENERATE_LOSS && !crate::backend::computes_nothing()).then(|| {
        format!(
            "degenerate: the training loss is {loss:e} at step {step}, which no model reaches by \
             training: the backend computed nothing (check `envgen doctor`, or use --backend cpu)"
        )
    })
}

/// A model's output that is not a number is a failure too, in generation
/// as in training (issue #40): NaN weights once sampled `\u0000` tokens and
/// exited 0. `what` names the model (a checkpoint directory, a run).
/// Failed (exit 1), `diverged: …` as a training run's reason.
pub fn finite_output(values: &[f32], what: &str) -> anyhow::Result<()> {
    match values.iter().find(|v| !v.is_finite()) {
        None => Ok(()),
        Some(v) => Err(crate::error::UserError::failed(format!(
            "diverged: {what} computes logits of {v}: its weights are not a trained model's"
        ))
        .with_fix("check the checkpoint for NaN or infinite weights, or give another one")
        .into()),
    }
}

/// Panics on any thread since the process started.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Each active watch (by id): the count when it started, and the first
/// panic since ("thread 'NAME' panicked at …"). More than one only where
/// runs overlap in one process (the unit tests).
static WATCHES: Mutex<BTreeMap<u64, (usize, Option<String>)>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Panics on any thread while a run trains. Starting one installs a panic
/// hook (once per process) chained to the one before it: without an
/// active watch it only calls that one; with one, it records the watch's
/// first panic and prints it through that one, and counts the rest without
/// printing them (a backend failing on every kernel panics thousands of
/// times).
pub struct PanicWatch {
    id: u64,
}

impl PanicWatch {
    pub fn start() -> Self {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                COUNT.fetch_add(1, Ordering::SeqCst);
                let mut watches = lock_watches();
                if watches.is_empty() {
                    drop(watches);
                    return previous(info);
                }
                let thread = std::thread::current();
                let name = thread.name().unwrap_or("<unnamed>");
                let mut first_of_a_watch = false;
                for (_, first) in watches.values_mut() {
                    if first.is_none() {
                        *first = Some(format!("thread '{name}' {info}"));
                        first_of_a_watch = true;
                    }
                }
                drop(watches);
                if first_of_a_watch {
                    previous(info);
                }
            }));
        });
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        lock_watches().insert(id, (COUNT.load(Ordering::SeqCst), None));
        PanicWatch { id }
    }

    /// The run's error if any thread panicked since the watch started:
    /// the first panic's message and how many there were, at `step`.
    pub fn failure(&self, step: u64) -> Option<String> {
        let (start, first) = lock_watches().get(&self.id).cloned()?;
        let first = first?;
        let count = COUNT.load(Ordering::SeqCst).saturating_sub(start);
        let more = match count {
            0 | 1 => String::new(),
            n => format!(" (and {} more panics)", n - 1),
        };
        Some(format!(
            "a thread panicked during step {step}, so its results cannot be trusted: {first}{more}; \
             a backend failure (run `envgen doctor`) or a bug in envgen (please report it)"
        ))
    }
}

impl Drop for PanicWatch {
    fn drop(&mut self) {
        lock_watches().remove(&self.id);
    }
}

fn lock_watches() -> std::sync::MutexGuard<'static, BTreeMap<u64, (usize, Option<String>)>> {
    WATCHES.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_that_is_not_a_number_names_the_step_and_the_key() {
        assert_eq!(diverged(2.5, 3, "optim.lr"), None);
        let why = diverged(f64::NAN, 7, "train.lr").unwrap();
        assert!(
            why.contains("NaN at step 7") && why.contains("train.lr"),
            "{why}"
        );
        assert!(diverged(f64::INFINITY, 1, "optim.lr").is_some());
        // What a backend that computed nothing reads back.
        for nothing in [0.0, -0.0, 1.4e-42] {
            let why = diverged(nothing, 2, "optim.lr").unwrap();
            assert!(
                why.starts_with("degenerate:") && why.contains("step 2"),
                "{why}"
            );
        }
        assert_eq!(diverged(1e-6, 2, "optim.lr"), None);
    }

    #[test]
    fn an_output_that_is_not_a_number_fails_naming_the_model() {
        assert!(finite_output(&[0.5, -3.0, 1e30], "m").is_ok());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let err = finite_output(&[0.5, bad], "hf:/ckpt").unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 1);
            let text = err.to_string();
            assert!(
                text.starts_with("diverged:") && text.contains("hf:/ckpt"),
                "{text}"
            );
        }
    }
}
