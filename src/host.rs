//! What envgen knows about a machine: the "host snapshot" that `doctor`
//! prints, verdicts are computed from, and every run manifest records.
//!
//! Field names follow docs/cli.md (`envgen doctor --json`);
//! fields may be added, never renamed.

use serde::{Deserialize, Serialize};

/// Where the GPU facts came from, in the contract's probing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HostSource {
    Nvml,
    NvidiaSmi,
    Proc,
    Assumed,
    #[default]
    None,
}

/// The market a GPU is sold into; it decides forward compatibility.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuClass {
    Datacenter,
    Workstation,
    Consumer,
    Embedded,
}

/// One GPU as seen on the host (or assumed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Gpu {
    pub index: u32,
    /// The name as the driver reports it, e.g. "NVIDIA A30".
    pub name: String,
    /// "8.0"; `None` when neither the driver nor the knowledge base knows it.
    pub compute_capability: Option<String>,
    pub memory_mib: Option<u64>,
    pub class: Option<GpuClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The device minor number (`/dev/nvidiaN`), when the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_number: Option<u32>,
    /// The knowledge-base entry this GPU matched, if any (e.g. "a30").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_id: Option<String>,
}

/// The host snapshot. Probes fill what they can; absent facts stay `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Host {
    /// Kernel driver version, e.g. "535.261.03".
    pub driver_version: Option<String>,
    /// The newest CUDA the driver supports (cuDriverGetVersion), e.g. "12.2".
    pub cuda_driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
    pub source: HostSource,
    /// What the probes could not find or read, in words (e.g. "NVML: libnvidia-ml.so.1
    /// not found"); absence of a tool is normal and noted here, not an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Everything else the probes found (toolkit, cuDNN, NVRTC, container
    /// runtimes, Slurm, OS). Kept as a typed struct filled by `probe`.
    #[serde(flatten)]
    pub software: Software,
}

/// Host software relevant to running images and experiments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Software {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_toolkit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudnn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvrtc: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_runtimes: Vec<ContainerRuntime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<Slurm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_count: Option<u32>,
}

/// A container runtime found on the host (docker, podman, apptainer, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ContainerRuntime {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// For Docker: whether an `nvidia` runtime is registered, CDI spec dirs, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Slurm as seen from this host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Slurm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gres: Vec<String>,
}
