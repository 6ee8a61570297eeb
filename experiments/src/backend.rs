//! Backend selection: `flex` on CPU, `cuda` on NVIDIA GPUs.

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
