//! The typed shape of `env/*.toml` (every table rejects unknown keys).

use serde::Deserialize;

use crate::host::GpuClass;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpusFile {
    pub mig: MigFacts,
    pub gpu: Vec<GpuRow>,
}

/// Multi-Instance GPU: which boards can be split, and what a slice lacks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigFacts {
    /// Row ids of the GPUs the MIG user guide lists.
    pub boards: Vec<String>,
    /// What changes on a slice, in words (doctor's note).
    pub limits: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRow {
    pub id: String,
    pub name: String,
    pub compute_capability: String,
    pub memory_mib: Option<u64>,
    pub class: GpuClass,
    /// `false` for a chip without the tensor cores of its compute capability
    /// (Turing TU116/TU117); absent means it has what its SM has.
    pub tensor_cores: Option<bool>,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Names people type that several rows may share ("A100", "RTX 4090"):
    /// a query equal to one resolves to every row that lists it.
    #[serde(default)]
    pub family: Vec<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaFile {
    pub release: Vec<CudaRelease>,
    pub minor_compat: Vec<MinorCompat>,
    pub forward_compat: ForwardCompat,
    pub driver_branch: Vec<DriverBranch>,
    pub sm: Vec<SmSupport>,
    pub architecture: Vec<Architecture>,
    pub legacy_gpu: LegacyGpu,
}

/// What a driver branch newer than a GPU's last one logs before it ignores
/// the GPU; `{gpu}`, `{branch}` and `{driver}` are filled in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyGpu {
    pub message: String,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

/// The oldest driver that can drive a GPU architecture at all (the toolkit
/// driver of the first CUDA release with its SM) and, once NVIDIA has ended
/// its support, the last driver branch that still does.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Architecture {
    pub name: String,
    pub compute_capabilities: Vec<String>,
    pub first_cuda: String,
    pub min_driver_linux: String,
    /// "Last Driver Support" of NVIDIA's architecture matrix (470, 580); none
    /// while support is ongoing.
    pub last_driver_branch: Option<u32>,
    pub last_driver_source: Option<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaRelease {
    pub version: String,
    pub driver_min_linux: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinorCompat {
    pub major: u32,
    pub driver_min_linux: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardCompat {
    pub classes: Vec<GpuClass>,
    pub error_code: u32,
    pub error_name: String,
    pub error_text: String,
    pub unmodelled_exception: String,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverBranch {
    pub branch: u32,
    pub kind: String,
    pub eol: String,
    pub max_cuda_major: u32,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmSupport {
    pub sm: String,
    pub first_cuda: Option<String>,
    pub last_cuda: Option<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudnnFile {
    pub row: Vec<CudnnRow>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudnnRow {
    pub cudnn: String,
    pub cuda_min: String,
    pub cuda_max: String,
    pub driver_min_linux: String,
    pub compute_capabilities: Vec<String>,
    pub note: Option<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrecisionFile {
    pub feature: Vec<PrecisionFeature>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrecisionFeature {
    pub name: String,
    pub min_compute_capability: String,
    /// From this compute capability the format runs on tensor cores; below
    /// it (down to the minimum) without them.
    pub tensor_cores_from: Option<String>,
    /// SMs above the minimum that lack the format (the Jetson TX2's 6.2 for INT8).
    #[serde(default)]
    pub excluded_compute_capabilities: Vec<String>,
    pub note: Option<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesFile {
    pub ngc_pytorch: Vec<NgcPytorchRow>,
    pub cuda_base: Vec<CudaBaseRow>,
    pub require_cuda: Vec<RequireCudaShape>,
    #[serde(default)]
    pub require_cuda_exact: Vec<RequireCudaExact>,
    pub ngc_runtime: NgcRuntime,
}

/// What every NGC framework image sets and its entrypoint does at start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NgcRuntime {
    /// The image's own NVIDIA_REQUIRE_CUDA ("cuda>=9.0").
    pub require_cuda: String,
    /// What the entrypoint prints when it enables each compatibility mode.
    pub forward_compat_notice: String,
    pub minor_compat_notice: String,
    /// Printed when no mode can bridge the driver; `{built_for}` and `{driver}`
    /// are filled in.
    pub unavailable_error: String,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NgcPytorchRow {
    pub tag: String,
    pub pytorch: Option<String>,
    pub cuda: Option<String>,
    pub cudnn: Option<String>,
    pub ubuntu: Option<String>,
    pub python: Option<String>,
    /// The "requires NVIDIA Driver release N or later" of the release notes,
    /// as published (a branch such as "575"). Recorded, not used for verdicts:
    /// it is below the CUDA toolkit's own driver for CUDA 12.8 and 13.x, so
    /// the minimum driver is derived from `cuda` via env/cuda.toml instead.
    pub driver_min_linux: Option<String>,
    /// The data-center driver releases the notes say also work ("470.57",
    /// "525.85", …), as published. Recorded, not used for verdicts (the CUDA 13
    /// notes repeat the 12.x list; the image's NVIDIA_REQUIRE_CUDA decides).
    #[serde(default)]
    pub forward_compat_branches: Vec<String>,
    /// "Release YY.MM supports CUDA compute capability X.Y and later".
    pub min_compute_capability: Option<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaBaseRow {
    pub cuda: Vec<String>,
    pub ubuntu: Vec<String>,
    pub cudnn_infix: String,
    pub cudnn: String,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequireCudaShape {
    pub cuda_major: u32,
    pub brands: Vec<String>,
    pub driver_branches: Vec<u32>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

/// A verbatim NVIDIA_REQUIRE_CUDA for the `nvidia/cuda` tags of one CUDA version.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequireCudaExact {
    /// The full CUDA version of the tags ("12.9.1").
    pub cuda: String,
    pub rule: String,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PytorchFile {
    pub wheel: Vec<WheelRow>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WheelRow {
    pub releases: Vec<String>,
    pub variant: String,
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    pub source: String,
}
