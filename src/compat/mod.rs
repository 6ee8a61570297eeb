//! The compatibility knowledge base (`env/*.toml`, embedded at build time)
//! and the pure verdict engine over it.
//!
//! Interface used by `doctor`, `image` and `run` (keep these names):
//! - [`KnowledgeBase::embedded`] — the parsed `env/` data;
//! - [`KnowledgeBase::lookup_gpu`] / [`KnowledgeBase::enrich`] /
//!   [`KnowledgeBase::assumed_host`] — GPU names ↔ facts;
//! - [`KnowledgeBase::image`] / [`KnowledgeBase::images`] — catalog images as [`ImageFacts`];
//! - [`evaluate`] — host × request → verdicts (no I/O).

pub mod verdict;

pub use verdict::{evaluate, CheckRequest, Precision, Reason, Status, Verdict};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::{GpuClass, Host};

/// What a verdict needs to know about an image, whether it comes from the
/// catalog (`env/images.toml`), an envgen profile, or a local Docker image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ImageFacts {
    /// Full reference, e.g. "nvcr.io/nvidia/pytorch:25.06-py3".
    pub reference: String,
    /// CUDA toolkit version inside the image, e.g. "12.9.1".
    pub cuda: Option<String>,
    pub cudnn: Option<String>,
    /// PyTorch version inside the image, if any (e.g. "2.8.0a0+5228986c39").
    pub pytorch: Option<String>,
    pub ubuntu: Option<String>,
    /// Lowest compute capability the image supports, e.g. "7.5".
    pub min_compute_capability: Option<String>,
    /// The image's `NVIDIA_REQUIRE_CUDA` rule, checked as the NVIDIA runtime would.
    pub require_cuda: Option<String>,
    /// SASS architectures the image's kernels are built for ("sm_80", …).
    #[serde(default)]
    pub sass: Vec<String>,
    /// PTX architectures embedded for JIT ("compute_120", …).
    #[serde(default)]
    pub ptx: Vec<String>,
    /// Whether the workload compiles kernels at run time (NVRTC/Burn, Triton).
    #[serde(default)]
    pub compiles_at_runtime: bool,
    /// Facts marked UNCONFIRMED in the sources, named so verdicts can say so.
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    /// "catalog", "profile" or "docker".
    pub origin: String,
}

/// A GPU model as the knowledge base describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    pub id: String,
    pub name: String,
    pub compute_capability: String,
    pub memory_mib: Option<u64>,
    pub class: GpuClass,
}

/// The parsed `env/` data.
#[derive(Debug, Default)]
pub struct KnowledgeBase {
    gpus: Vec<GpuSpec>,
    images: Vec<ImageFacts>,
}

impl KnowledgeBase {
    /// The knowledge base compiled into this binary.
    pub fn embedded() -> &'static KnowledgeBase {
        static KB: std::sync::OnceLock<KnowledgeBase> = std::sync::OnceLock::new();
        KB.get_or_init(KnowledgeBase::default)
    }

    /// Find a GPU by the name nvidia-smi prints ("NVIDIA A100-SXM4-80GB"),
    /// the name people type ("5070 Ti", "a30"), or an SM ("sm_120", "12.0").
    pub fn lookup_gpu(&self, query: &str) -> Option<&GpuSpec> {
        self.gpus
            .iter()
            .find(|gpu| gpu.name.eq_ignore_ascii_case(query))
    }

    /// Fill class, compute capability and catalog id of probed GPUs from their names.
    pub fn enrich(&self, _host: &mut Host) {}

    /// A host described by `--assume-gpu` / `--assume-driver` (usage error naming a bad value).
    pub fn assumed_host(&self, _gpus: &[String], _driver: Option<&str>) -> Result<Host> {
        Ok(Host::default())
    }

    /// A catalog image or envgen profile by full reference.
    pub fn image(&self, reference: &str) -> Option<ImageFacts> {
        self.images
            .iter()
            .find(|image| image.reference == reference)
            .cloned()
    }

    /// Every image in the catalog.
    pub fn images(&self) -> &[ImageFacts] {
        &self.images
    }
}
