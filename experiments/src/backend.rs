//! Backend selection: `flex` on CPU, `cuda` on NVIDIA GPUs.

use crate::cuda_stack::CudaStack;
use crate::error::UserError;

/// The CPU backend used for training (pure Rust, SIMD gemm, rayon).
pub type Cpu = burn::backend::Flex;
/// The CPU backend with autodiff, for training.
pub type CpuTrain = burn::backend::Autodiff<Cpu>;

#[cfg(feature = "cuda")]
pub type Cuda = burn::backend::Cuda;
#[cfg(feature = "cuda")]
pub type CudaTrain = burn::backend::Autodiff<Cuda>;

/// Whether this binary was built with the CUDA backend.
pub fn cuda_compiled() -> bool {
    cfg!(feature = "cuda")
}

/// What the user asked for (`--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Auto,
    Cpu,
    Cuda,
}

/// What will actually run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    Cpu,
    Cuda,
}

impl Resolved {
    pub fn name(self) -> &'static str {
        match self {
            Resolved::Cpu => "cpu",
            Resolved::Cuda => "cuda",
        }
    }
    /// The device as the manifest records it.
    pub fn device(self) -> &'static str {
        match self {
            Resolved::Cpu => "flex:cpu",
            Resolved::Cuda => "cuda:0",
        }
    }
}

/// Whether this process resolved the CUDA backend to train on (a process
/// trains on one backend): its parameters then live in device memory, which
/// the memory check (engine::budget) does not count against the host's.
pub fn trains_on_gpu() -> bool {
    ON_GPU.load(std::sync::atomic::Ordering::SeqCst)
}

static ON_GPU: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process's CUDA device is envgen's labelled stand-in driver
/// (the tests' `libcuda.so.1`, whose kernels compute nothing): its losses are
/// whatever the buffers held, so engine::health does not call them
/// degenerate; the readiness check has already said what the device is.
pub fn computes_nothing() -> bool {
    STANDIN.load(std::sync::atomic::Ordering::SeqCst)
}

static STANDIN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `auto` = CUDA when compiled in and ready (see [`cuda_ready`]), else CPU.
pub fn resolve(choice: BackendChoice) -> anyhow::Result<Resolved> {
    let resolved = resolve_choice(choice)?;
    ON_GPU.store(
        resolved == Resolved::Cuda,
        std::sync::atomic::Ordering::SeqCst,
    );
    Ok(resolved)
}

fn resolve_choice(choice: BackendChoice) -> anyhow::Result<Resolved> {
    match choice {
        BackendChoice::Cpu => Ok(Resolved::Cpu),
        BackendChoice::Auto => {
            if !cuda_compiled() || !std::path::Path::new("/dev/nvidiactl").exists() {
                return Ok(Resolved::Cpu);
            }
            match cuda_ready() {
                Ok(()) => Ok(Resolved::Cuda),
                Err(e) => {
                    eprintln!(
                        "envgen: --backend auto: the GPU is not usable, training on the CPU: {e}"
                    );
                    Ok(Resolved::Cpu)
                }
            }
        }
        BackendChoice::Cuda if !cuda_compiled() => Err(UserError::usage(
            "--backend cuda: this envgen was built without the `cuda` feature",
        )
        .with_fix("rebuild with default features, or use --backend cpu")
        .into()),
        BackendChoice::Cuda => {
            cuda_ready()?;
            Ok(Resolved::Cuda)
        }
    }
}

/// Everything `--backend cuda` needs, checked before any run directory is
/// made, each missing piece with its own message and fix (exit 3): the
/// driver and a device, NVRTC (+ builtins), the CUDA headers, an NVRTC no
/// newer than the driver ([`CudaStack`]); then one bf16 matrix product is
/// compiled, run and compared with the exact answer. Runs once per process.
pub fn cuda_ready() -> Result<(), UserError> {
    static READY: std::sync::OnceLock<Result<(), UserError>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            let stack = CudaStack::probe();
            stack.activate().map_err(|p| p.to_user_error())?;
            #[cfg(feature = "cuda")]
            crate::kernel_cache::configure(&stack);
            smoke_test(&stack)
        })
        .clone()
}

#[cfg(feature = "cuda")]
fn smoke_test(stack: &CudaStack) -> Result<(), UserError> {
    use burn::tensor::{DType, Tensor, TensorData};
    use std::sync::{Arc, Mutex};

    // Small integers: exact in bf16, and every sum (|x| <= 2 * 2 * 32) is
    // exact in bf16 and f32, so the right answer is known to the bit.
    let (m, k, n) = (64, 32, 64);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 3) % 5) as f32 - 2.0).collect();
    let mut expected = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            expected[i * n + j] = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
        }
    }

    crate::notice!("envgen: CUDA backend: {}", stack.describe());
    // Burn reports CUDA failures by panicking, often on a worker thread:
    // keep the first panic message to say what failed.
    let first_panic: Arc<Mutex<Option<String>>> = Arc::default();
    let previous = std::panic::take_hook();
    {
        let first_panic = first_panic.clone();
        std::panic::set_hook(Box::new(move |info| {
            let mut slot = first_panic.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                *slot = Some(info.to_string());
            }
        }));
    }
    let outcome = std::panic::catch_unwind(|| {
        let device = burn::backend::cuda::CudaDevice::default();
        let ta = Tensor::<Cuda, 2>::from_data(TensorData::new(a.clone(), [m, k]), &device)
            .cast(DType::BF16);
        let tb = Tensor::<Cuda, 2>::from_data(TensorData::new(b.clone(), [k, n]), &device)
            .cast(DType::BF16);
        ta.matmul(tb).cast(DType::F32).into_data().to_vec::<f32>()
    });
    std::panic::set_hook(previous);
    let got = match outcome {
        Ok(Ok(values)) => values,
        Ok(Err(e)) => {
            return Err(crate::cuda_stack::classify_failure(&format!("{e:?}")).to_user_error())
        }
        Err(_) => {
            let message = first_panic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_default();
            return Err(crate::cuda_stack::classify_failure(&message).to_user_error());
        }
    };
    let standin = stack.is_standin();
    let max_error = got
        .iter()
        .zip(&expected)
        .map(|(g, e)| (g - e).abs())
        .fold(0f32, f32::max);
    if standin {
        STANDIN.store(true, std::sync::atomic::Ordering::SeqCst);
        eprintln!(
            "envgen: CUDA backend: the driver is envgen's stand-in (kernels compute nothing): \
             the test kernel's result is not checked"
        );
    } else if got.len() != expected.len() || max_error != 0.0 {
        return Err(UserError::environment(format!(
            "--backend cuda: the test kernel (a 64x32x64 bf16 matrix product) ran but computed \
             wrong values (largest error {max_error})"
        ))
        .with_fix("check the GPU with `nvidia-smi -q` (ECC errors) and report it with `envgen doctor --json`"));
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn smoke_test(_stack: &CudaStack) -> Result<(), UserError> {
    Ok(())
}

/// Evaluate `$body` with the type alias `$B` set to the training backend
/// `$backend` resolved to (`CpuTrain` or `CudaTrain`):
/// `with_train_backend!(backend, B => train::<B, _>(task, control, &Default::default()))`.
///
/// A macro because the body must be instantiated once per backend type, and
/// a Rust closure cannot be generic over a type parameter.
#[macro_export]
macro_rules! with_train_backend {
    ($backend:expr, $B:ident => $body:expr) => {
        match $backend {
            $crate::backend::Resolved::Cpu => {
                type $B = $crate::backend::CpuTrain;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::backend::Resolved::Cuda => {
                type $B = $crate::backend::CudaTrain;
                $body
            }
            #[cfg(not(feature = "cuda"))]
            $crate::backend::Resolved::Cuda => {
                Err($crate::error::UserError::usage("this build has no CUDA backend").into())
            }
        }
    };
}
