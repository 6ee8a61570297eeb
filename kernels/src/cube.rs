//! CubeCL backends: every operation composed from Burn ops (the fusion
//! backend merges the element-wise chains into kernels), attention forward
//! through the backend's own attention (burn-cubecl's flash-attention
//! kernels, chosen by autotune), attention backward recomputed from q, k, v.

#[cfg(feature = "cuda")]
impl crate::FusedBackend for burn::backend::Cuda {}

#[cfg(feature = "wgpu")]
impl crate::FusedBackend for burn::backend::Wgpu {}
