//! The GPU code paths without a GPU: one training step of the tiny gpt2 and
//! the tiny hrm-sudoku model on Burn's `wgpu` backend (CubeCL, the JIT
//! kernel family `cuda` uses: fusion, autotune, the attention kernels and
//! envgen's composed fused-op fallbacks), run by Mesa's software Vulkan
//! driver lavapipe, compared with the same step on the CPU backend.
//!
//! `./scripts/test.sh` installs `mesa-vulkan-drivers` and sets
//! ENVGEN_TEST_REQUIRE_VULKAN=1, so there the test must run. Elsewhere (a
//! developer machine without any Vulkan driver) it says why it skips.
//!
//! Tolerance: both backends compute in f32 but sum in different orders
//! (CubeCL's tiled matmul and reductions, autotuned, vs gemm and Flex); the
//! measured difference was 5e-7 on the loss and 5e-7 of the largest
//! gradient. 1e-4 of each parameter's own largest gradient (1e-5 relative
//! on the loss) leaves room for a different autotuned kernel while still
//! catching any layout or dtype bug, which shows up as O(1) differences.
//! gpt2 also takes one AdamW step on each backend (the optimizer's kernels
//! run on wgpu too) and must land on the same weights, and its attention
//! must have run through burn-cubecl's autotuned attention kernels (the
//! autotune cache, fresh for this process, says so).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use burn::backend::wgpu::WgpuDevice;
use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorData;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use burn::optim::GradientsParams;
use envgen_experiments::engine::load;
use envgen_experiments::engine::optim::AdamW;
use envgen_experiments::gpt2::{Gpt2Config, PRESETS};
use envgen_experiments::hrm::act::{act_train_step, ActState, HaltPolicy, PuzzleBatch};
use envgen_experiments::hrm::config::HrmPreset;
use envgen_experiments::hrm::loss::hrm_loss;
use envgen_experiments::hrm::model::HrmModel;

type Cpu = Autodiff<Flex>;
type Gpu = Autodiff<Wgpu>;

/// Where CubeCL keeps this process's autotune results: a fresh directory,
/// set before the first kernel runs, so what it holds afterwards says which
/// kernel families this process tuned (the attention check below).
fn autotune_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        use cubecl_runtime::config::{cache::CacheConfig, CubeClRuntimeConfig, RuntimeConfig};
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("lavapipe-autotune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut storage = CubeClRuntimeConfig::storage().lock();
        assert!(
            storage.is_none(),
            "CubeCL was configured before this test could"
        );
        let mut config = CubeClRuntimeConfig::default().override_from_env();
        config.autotune.cache = CacheConfig::File(dir.clone());
        *storage = Some(std::sync::Arc::new(config));
        dir
    })
}

/// The names of the files under `dir`, recursively.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            names.extend(file_names(&path));
        } else {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names
}

/// The wgpu device, or `None` with the reason printed when this machine has
/// no Vulkan driver and the test command did not promise one.
fn gpu_device() -> Option<WgpuDevice> {
    autotune_dir();
    let device = WgpuDevice::DefaultDevice;
    let probe = catch_unwind(AssertUnwindSafe(|| {
        let t = Tensor::<Wgpu, 1>::from_floats([1.0, 2.0], &device);
        t.sum().into_scalar()
    }));
    match probe {
        Ok(sum) if sum == 3.0 => Some(device),
        outcome => {
            let why = format!(
                "no usable wgpu device ({}): install Mesa's lavapipe (Debian: mesa-vulkan-drivers)",
                if outcome.is_ok() {
                    "wrong result"
                } else {
                    "adapter initialisation panicked"
                }
            );
            assert!(
                std::env::var_os("ENVGEN_TEST_REQUIRE_VULKAN").is_none(),
                "ENVGEN_TEST_REQUIRE_VULKAN is set but {why}"
            );
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// Every parameter's gradient, in visiting order (the same on both backends).
struct GradsOf<'a, B: AutodiffBackend> {
    grads: &'a B::Gradients,
    out: Vec<(String, Vec<f32>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for GradsOf<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(grad) = param.val().grad(self.grads) {
            let values = grad.into_data().convert::<f32>().to_vec().unwrap();
            self.out.push((format!("{:?}", param.val().dims()), values));
        }
    }
}

fn grads_of<B: AutodiffBackend, M: Module<B>>(
    model: &M,
    grads: &B::Gradients,
) -> Vec<(String, Vec<f32>)> {
    let mut visitor = GradsOf::<B> {
        grads,
        out: Vec::new(),
    };
    model.visit(&mut visitor);
    visitor.out
}

/// Same losses within 1e-5 relative; every parameter's gradient within
/// 1e-4 of that parameter's own largest (plus 1e-7 of the model's largest,
/// for parameters whose gradient is all but zero): a tolerance relative to
/// the whole model's largest gradient barely checked the small ones.
fn assert_same_step(
    what: &str,
    loss: (f32, f32),
    grads: (Vec<(String, Vec<f32>)>, Vec<(String, Vec<f32>)>),
) {
    let (cpu_loss, gpu_loss) = loss;
    eprintln!("{what}: loss cpu {cpu_loss} wgpu {gpu_loss}");
    assert!(
        (cpu_loss - gpu_loss).abs() <= 1e-5 * cpu_loss.abs().max(1.0),
        "{what}: loss {cpu_loss} on the CPU, {gpu_loss} on wgpu"
    );
    let (cpu, gpu) = grads;
    assert_eq!(
        cpu.len(),
        gpu.len(),
        "{what}: not the same parameters got gradients"
    );
    assert!(!cpu.is_empty());
    let largest = cpu
        .iter()
        .flat_map(|(_, v)| v.iter())
        .fold(0.0f32, |m, g| m.max(g.abs()));
    let mut report = String::new();
    let mut failed = false;
    for ((shape, c), (gshape, g)) in cpu.iter().zip(&gpu) {
        assert_eq!(shape, gshape);
        assert!(
            g.iter().all(|x| x.is_finite()),
            "{what}: a non-finite gradient on wgpu ({shape})"
        );
        let own = c.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        let worst = c
            .iter()
            .zip(g)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let allowed = 1e-4 * own + 1e-7 * largest;
        failed |= worst > allowed;
        report.push_str(&format!(
            "\n  {shape}: largest {own:.3e}, difference {worst:.3e} ({:.1e} of its largest){}",
            worst / own.max(f32::MIN_POSITIVE),
            if worst > allowed { "  <-- over" } else { "" }
        ));
    }
    eprintln!("{what}: per parameter{report}");
    assert!(!failed, "{what}: gradients differ:{report}");
}

/// Every float parameter's values, in visiting order.
struct ValuesOf(Vec<Vec<f32>>);

impl<B: Backend> ModuleVisitor<B> for ValuesOf {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0
            .push(param.val().into_data().convert::<f32>().to_vec().unwrap());
    }
}

fn values_of<B: Backend, M: Module<B>>(model: &M) -> Vec<Vec<f32>> {
    let mut visitor = ValuesOf(Vec::new());
    model.visit(&mut visitor);
    visitor.0
}

/// One AdamW update (envgen's optimizer, as training runs it) on both
/// backends lands on the same weights. Adam's first step moves each weight
/// by about lr·sign(gradient): within 1e-3·lr wherever the gradient is
/// clearly non-zero (1e-3 of its parameter's largest), and by at most the
/// step (2·lr, a sign decided by rounding) where it is all but zero.
fn assert_same_update(
    what: &str,
    lr: f64,
    before: &[Vec<f32>],
    cpu: &[Vec<f32>],
    gpu: &[Vec<f32>],
    grads: &[(String, Vec<f32>)],
) {
    assert_eq!(cpu.len(), gpu.len());
    let mut moved = 0usize;
    for (i, ((c, g), w0)) in cpu.iter().zip(gpu).zip(before).enumerate() {
        let grad = grads.get(i).map(|(_, v)| v.as_slice());
        let own = grad.map_or(0.0, |v| v.iter().fold(0.0f32, |m, x| m.max(x.abs())));
        for (j, (a, b)) in c.iter().zip(g).enumerate() {
            let clear = grad.is_some_and(|v| v[j].abs() > 1e-3 * own);
            let allowed = if clear { 1e-3 * lr } else { 2.0 * lr * 1.001 } as f32;
            assert!(
                (a - b).abs() <= allowed,
                "{what}: parameter {i}[{j}] is {a} on the CPU, {b} on wgpu (lr {lr})"
            );
            moved += usize::from((a - w0[j]).abs() > 0.5 * lr as f32);
        }
    }
    assert!(moved > 0, "{what}: the update moved no weight");
    eprintln!("{what}: one AdamW step agrees ({moved} weights moved by ~lr)");
}

/// Inputs and next-token targets from `rows` sequences of `t + 1` tokens.
fn next_token_batch<B: Backend>(
    tokens: &[i64],
    rows: usize,
    t: usize,
    device: &B::Device,
) -> (Tensor<B, 2, Int>, Tensor<B, 2, Int>) {
    let all =
        Tensor::<B, 2, Int>::from_data(TensorData::new(tokens.to_vec(), [rows, t + 1]), device);
    (all.clone().narrow(1, 0, t), all.narrow(1, 1, t))
}

#[test]
fn a_tiny_gpt2_step_on_cubecl_matches_the_cpu() {
    let Some(gpu) = gpu_device() else { return };
    let text = PRESETS.iter().find(|(n, _)| *n == "tiny").unwrap().1;
    let config: Gpt2Config = load(text, "preset tiny", &[]).unwrap().science;
    let m = &config.model;
    let cpu_device = Default::default();
    <Flex as Backend>::seed(&cpu_device, 5);
    // Both models load the same record: Burn initializes parameters lazily,
    // per backend and per clone, so a model and a copy of its record would
    // not hold the same weights unless both come from the record.
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes =
        Recorder::<Cpu>::record(&recorder, m.init::<Cpu>(&cpu_device).into_record(), ()).unwrap();
    let cpu_record = Recorder::<Cpu>::load(&recorder, bytes.clone(), &cpu_device).unwrap();
    let gpu_record = Recorder::<Gpu>::load(&recorder, bytes, &gpu).unwrap();
    let cpu_model = m.init::<Cpu>(&cpu_device).load_record(cpu_record);
    let gpu_model = m.init::<Gpu>(&gpu).load_record(gpu_record);

    let (rows, t) = (config.train.batch_size, m.block_size);
    let mut rng = StdRng::seed_from_u64(9);
    let tokens: Vec<i64> = (0..rows * (t + 1))
        .map(|_| rng.random_range(0..m.vocab_size as i64))
        .collect();
    let (x, y) = next_token_batch::<Cpu>(&tokens, rows, t, &cpu_device);
    let cpu_loss = cpu_model.loss(x, y);
    let (x, y) = next_token_batch::<Gpu>(&tokens, rows, t, &gpu);
    let gpu_loss = gpu_model.loss(x, y);
    let losses = (
        cpu_loss.clone().into_scalar(),
        gpu_loss.clone().into_scalar(),
    );
    let cpu_grads = cpu_loss.backward();
    let gpu_grads = gpu_loss.backward();
    let cpu_grad_values = grads_of::<Cpu, _>(&cpu_model, &cpu_grads);
    assert_same_step(
        "gpt2 tiny",
        losses,
        (
            cpu_grad_values.clone(),
            grads_of::<Gpu, _>(&gpu_model, &gpu_grads),
        ),
    );
    // Attention went through burn-cubecl's own attention kernels (the
    // flash-attention family, picked by autotune), not a matmul-softmax
    // composition: only those leave attention autotune results.
    let tuned = file_names(autotune_dir());
    assert!(
        tuned.iter().any(|name| name.contains("attention")),
        "no attention kernel was tuned on wgpu; CubeCL tuned: {tuned:?}"
    );
    // And the optimizer's update, on each backend's own gradients.
    let lr = 1e-3;
    let before = values_of(&cpu_model);
    let mut cpu_params = GradientsParams::from_grads(cpu_grads, &cpu_model);
    let mut gpu_params = GradientsParams::from_grads(gpu_grads, &gpu_model);
    let cpu_model =
        AdamW::new(config.optim.clone()).step::<Cpu, _>(cpu_model, &mut cpu_params, lr, 1, 1.0);
    let gpu_model =
        AdamW::new(config.optim.clone()).step::<Gpu, _>(gpu_model, &mut gpu_params, lr, 1, 1.0);
    assert_same_update(
        "gpt2 tiny",
        lr,
        &before,
        &values_of(&cpu_model),
        &values_of(&gpu_model),
        &cpu_grad_values,
    );
}

/// One ACT training segment of the tiny HRM (the segment with its 1-step
/// gradient, the no-grad Q-target segment, the loss) on random puzzles.
fn hrm_step<B: envgen_kernels::FusedAutodiffBackend>(
    preset: &HrmPreset,
    device: &B::Device,
) -> (f32, Vec<(String, Vec<f32>)>) {
    // HRM draws its initial weights on the host: the same on both backends.
    let model = HrmModel::<B>::new(&preset.model, 7, device);
    let rows = 8;
    let mut rng = StdRng::seed_from_u64(11);
    let cells = 81;
    let grid = |rng: &mut StdRng| -> [u8; 81] { std::array::from_fn(|_| rng.random_range(1..=10)) };
    let inputs: Vec<[u8; 81]> = (0..rows).map(|_| grid(&mut rng)).collect();
    let labels: Vec<[u8; 81]> = (0..rows).map(|_| grid(&mut rng)).collect();
    assert_eq!(inputs[0].len(), cells);
    let batch = PuzzleBatch::<B>::from_grids(&inputs, &labels, device);
    let mut state = ActState::new(&model, batch.clone());
    state.replace_halted(&model, batch);
    let out = act_train_step(
        &model,
        &mut state,
        HaltPolicy::Forced(false),
        &mut StdRng::seed_from_u64(1),
    );
    let loss = hrm_loss(
        out.logits,
        out.batch.labels,
        out.q_halt,
        out.q_continue,
        out.target_q_continue,
    )
    .total;
    let value = loss.clone().into_scalar().elem::<f32>();
    let grads = loss.backward();
    (value, grads_of::<B, _>(&model, &grads))
}

#[test]
fn a_tiny_hrm_step_on_cubecl_matches_the_cpu() {
    let Some(gpu) = gpu_device() else { return };
    let preset = HrmPreset::builtin("tiny").unwrap();
    let (cpu_loss, cpu_grads) = hrm_step::<Cpu>(&preset, &Default::default());
    let (gpu_loss, gpu_grads) = hrm_step::<Gpu>(&preset, &gpu);
    assert_same_step("hrm tiny", (cpu_loss, gpu_loss), (cpu_grads, gpu_grads));
}
