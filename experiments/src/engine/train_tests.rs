//! Tests of the shared training loop (engine::train).

use std::ops::Range;

use super::*;
use crate::backend::CpuTrain;
use crate::engine::config::TrainConfig;
use crate::engine::precision::Precision;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

#[derive(Module, Debug)]
struct Line<B: Backend> {
    layer: Linear<B>,
}

/// Least squares on fixed data; the loss of step `poisoned` (0-based) is
/// multiplied by +inf, so that step's gradients overflow whatever the
/// loss scale: a forced fp16 overflow.
struct Regression {
    train: TrainConfig,
    optim: OptimConfig,
    poisoned: Option<u64>,
    /// At this step (0-based) a worker thread panics and the loss goes on
    /// as if nothing happened: what a backend's device thread does.
    worker_panic: Option<u64>,
}

impl Regression {
    fn new(steps: u64, poisoned: Option<u64>) -> Self {
        let train: TrainConfig = toml::from_str(&format!(
            "steps = {steps}\nbatch_size = 8\neval_every = 100\neval_batches = 1\nseed = 3"
        ))
        .unwrap();
        Self {
            train,
            optim: toml::from_str("lr = 0.05\nwarmup_steps = 0").unwrap(),
            poisoned,
            worker_panic: None,
        }
    }

    fn mse<B: Backend>(layer: &Linear<B>, device: &B::Device) -> Tensor<B, 1> {
        let x: Vec<f32> = (0..32).map(|i| (i % 7) as f32 / 7.0 - 0.4).collect();
        let y: Vec<f32> = (0..8).map(|i| i as f32 / 4.0 - 1.0).collect();
        let x = Tensor::<B, 2>::from_data(burn::tensor::TensorData::new(x, [8, 4]), device);
        let y = Tensor::<B, 2>::from_data(burn::tensor::TensorData::new(y, [8, 1]), device);
        let err = layer.forward(x) - y;
        (err.clone() * err).mean()
    }
}

impl Task<CpuTrain> for Regression {
    type Model = Line<CpuTrain>;
    fn train_config(&self) -> &TrainConfig {
        &self.train
    }
    fn optim_config(&self) -> &OptimConfig {
        &self.optim
    }
    fn init_model(&self, device: &burn::tensor::Device<CpuTrain>) -> anyhow::Result<Self::Model> {
        // A constant start, not the backend's RNG: that generator is
        // global, and other tests running in parallel threads draw
        // from it, which made the two runs compared below start apart.
        Ok(Line {
            layer: LinearConfig::new(4, 1)
                .with_initializer(burn::nn::Initializer::Constant { value: 0.1 })
                .init(device),
        })
    }
    fn loss(
        &self,
        model: &Self::Model,
        step: u64,
        _rows: Range<usize>,
        device: &burn::tensor::Device<CpuTrain>,
    ) -> Tensor<CpuTrain, 1> {
        if self.worker_panic == Some(step) {
            let worker = std::thread::Builder::new()
                .name("test-worker".into())
                .spawn(|| panic!("kernel launch failed (test)"))
                .unwrap();
            assert!(worker.join().is_err());
        }
        let loss = Self::mse(&model.layer, device);
        if self.poisoned == Some(step) {
            loss * f64::INFINITY
        } else {
            loss
        }
    }
    fn evaluate(
        &self,
        model: &Line<crate::backend::Cpu>,
        _micro_batch: usize,
        device: &burn::tensor::Device<crate::backend::Cpu>,
    ) -> f64 {
        Self::mse(&model.layer, device).into_scalar().elem::<f64>()
    }
    fn units_per_row(&self) -> (usize, &'static str) {
        (1, "rows")
    }
}

fn control(dir: &Path, stop_after: Option<u64>) -> RunControl {
    RunControl {
        run_dir: dir.to_path_buf(),
        micro_batch: 8,
        stop_after,
        precision: Precision::Fp16,
        ..Default::default()
    }
}

fn records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// An overflowing fp16 step is skipped: counted, the scale halved for
/// the next step, the weights left exactly as they were.
/// The panic test's worker panic reaches every run training in the process
/// at that moment (the watch is process-wide, as a CLI run is alone in its
/// process): these two take turns. Seen failing once, 2026-11-26.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn an_overflowing_fp16_step_is_skipped_and_leaves_the_weights() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("two"), tmp.path().join("poisoned"));
    for dir in [&a, &b] {
        std::fs::create_dir_all(dir).unwrap();
    }
    // Run A: steps 0 and 1 of a 3-step run (its step-2 checkpoint).
    let task = Regression::new(3, None);
    let summary = train::<CpuTrain, _>(&task, &control(&a, Some(2)), &Default::default()).unwrap();
    assert_eq!(summary.status, Status::Interrupted);
    // Run B: the same 3 steps, the last one overflowing.
    let task = Regression::new(3, Some(2));
    let summary = train::<CpuTrain, _>(&task, &control(&b, None), &Default::default()).unwrap();
    assert_eq!(summary.status, Status::Completed);
    assert_eq!(summary.metrics["skipped_steps"], 1);
    assert_eq!(summary.metrics["loss_scale"], 32768.0);

    let steps = records(&b);
    let last = steps.last().unwrap();
    assert_eq!(last["step"], 3);
    assert_eq!(last["skipped"], true);
    assert!(last["grad_norm"].is_null());
    assert_eq!(last["loss_scale"], 65536.0, "the step ran at the old scale");
    assert_eq!(steps[1]["skipped"], false);

    let weights = |dir: &Path, step: &str| {
        std::fs::read(dir.join("checkpoints").join(step).join("model.safetensors")).unwrap()
    };
    assert!(
        weights(&a, "step-00000002") == weights(&b, "step-00000003"),
        "the skipped step changed the weights"
    );
}

/// A panic on another thread in the middle of a run (a backend's worker,
/// whose failure the training thread never sees) fails the run at that
/// step with the panic's message, instead of letting it "complete".
#[test]
fn a_panic_on_a_worker_thread_fails_the_run_at_that_step() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let mut task = Regression::new(5, None);
    task.worker_panic = Some(2);
    let mut control = control(tmp.path(), None);
    control.precision = Precision::Fp32;
    let summary = train::<CpuTrain, _>(&task, &control, &Default::default()).unwrap();
    assert_eq!(summary.status, Status::Failed, "{:?}", summary.metrics);
    assert_eq!(summary.steps_done, 3, "failed at the step that panicked");
    let error = summary.metrics["error"].as_str().unwrap();
    assert!(
        error.contains("during step 3")
            && error.contains("'test-worker'")
            && error.contains("kernel launch failed (test)"),
        "{error}"
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(written["status"], "failed");
    assert_eq!(written["metrics"]["error"], error);
}

/// A checkpoint cut short (a crash or a full disk while it was written by
/// another tool) is refused on resume with a fix about checkpoints, not
/// the Hugging Face file advice of the safetensors reader (issue #40).
#[test]
fn a_truncated_checkpoint_is_refused_on_resume_with_a_checkpoint_fix() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let task = Regression::new(3, None);
    let mut stopped = control(tmp.path(), Some(2));
    stopped.precision = Precision::Fp32;
    let summary = train::<CpuTrain, _>(&task, &stopped, &Default::default()).unwrap();
    assert_eq!(summary.status, Status::Interrupted);
    let weights = tmp
        .path()
        .join("checkpoints/step-00000002/model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let mut resumed = control(tmp.path(), None);
    resumed.precision = Precision::Fp32;
    resumed.resume = true;
    let err = train::<CpuTrain, _>(&task, &resumed, &Default::default()).unwrap_err();
    let text = format!("{err:#}");
    assert_eq!(crate::error::exit_code_of(&err), 2, "{text}");
    assert!(
        text.contains("step-00000002") && text.contains("is damaged") && text.contains("latest"),
        "{text}"
    );
    assert!(!text.contains("Hugging Face"), "{text}");
}
