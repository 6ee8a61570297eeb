//! Backend selection: `flex` on CPU, `cuda` on NVIDIA GPUs.

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

/// `auto` = CUDA when compiled in and a device initialises, else CPU.
pub fn resolve(choice: BackendChoice) -> anyhow::Result<Resolved> {
    match choice {
        BackendChoice::Cpu => Ok(Resolved::Cpu),
        BackendChoice::Auto => Ok(if cuda_usable() { Resolved::Cuda } else { Resolved::Cpu }),
        BackendChoice::Cuda if !cuda_compiled() => Err(UserError::usage(
            "--backend cuda: this envgen was built without the `cuda` feature",
        )
        .with_fix("rebuild with default features, or use --backend cpu")
        .into()),
        BackendChoice::Cuda if !cuda_usable() => Err(UserError::environment(
            "--backend cuda: no CUDA device could be initialised (driver, libcuda or NVRTC missing)",
        )
        .with_fix("run `envgen doctor`, or use --backend cpu")
        .into()),
        BackendChoice::Cuda => Ok(Resolved::Cuda),
    }
}

/// Whether a CUDA device initialises. Burn panics when it cannot reach a
/// driver, so the probe runs behind `catch_unwind` with the panic message
/// silenced; a machine without NVIDIA device nodes is not even tried.
pub fn cuda_usable() -> bool {
    #[cfg(feature = "cuda")]
    {
        if !std::path::Path::new("/dev/nvidiactl").exists() {
            return false;
        }
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let ok = std::panic::catch_unwind(|| {
            let device = burn::backend::cuda::CudaDevice::default();
            let t = burn::tensor::Tensor::<Cuda, 1>::zeros([1], &device);
            t.into_data().to_vec::<f32>().is_ok()
        })
        .unwrap_or(false);
        std::panic::set_hook(hook);
        ok
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
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
