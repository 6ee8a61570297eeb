//! The compatibility knowledge base (`env/*.toml`, embedded at build time)
//! and the pure verdict engine over it.
//!
//! Interface used by `doctor`, `image` and `run` (keep these names):
//! - [`KnowledgeBase::embedded`] — the parsed `env/` data;
//! - [`KnowledgeBase::lookup_gpu`] / [`KnowledgeBase::enrich`] /
//!   [`KnowledgeBase::assumed_host`] — GPU names ↔ facts;
//! - [`KnowledgeBase::image`] / [`KnowledgeBase::images`] — catalog images as [`ImageFacts`];
//! - [`KnowledgeBase::wheel`] — a PyTorch wheel build (`--pytorch 2.6.0+cu124`);
//! - [`evaluate`] — host × request → verdicts (no I/O);
//! - [`report`] — host and verdicts as the text `doctor` prints (and
//!   `run --where docker` refuses an image with).
//!
//! Facts live in `env/*.toml` (each row cites its source); this module only
//! parses them into typed tables and expands compact rows.

mod catalog;
pub mod data;
pub mod devices;
mod drivers;
mod gpus;
pub mod mig;
pub mod report;
pub mod require;
pub mod summary;
pub mod verdict;
pub mod version;
mod wheels;

use std::collections::HashMap;

pub use catalog::{normalize_reference, ImageFacts};
pub use gpus::GpuSpec;
pub use verdict::{evaluate, CheckRequest, HardwarePrecision, Reason, Verdict, VerdictStatus};
pub use wheels::WheelFacts;

use crate::error::{Result, UserError};
use data::{CudaFile, CudnnRow, PrecisionFeature};
use version::Version;

const GPUS_TOML: &str = include_str!("../../env/gpus.toml");
const CUDA_TOML: &str = include_str!("../../env/cuda.toml");
const CUDNN_TOML: &str = include_str!("../../env/cudnn.toml");
const PRECISION_TOML: &str = include_str!("../../env/precision.toml");
const IMAGES_TOML: &str = include_str!("../../env/images.toml");
const PYTORCH_TOML: &str = include_str!("../../env/pytorch.toml");

/// The parsed `env/` data.
#[derive(Debug, Default)]
pub struct KnowledgeBase {
    gpus: Vec<GpuSpec>,
    /// Normalized (brand-stripped) name / alias / id / family → what it stands for.
    gpu_names: HashMap<String, GpuName>,
    /// Normalized name / alias / id → its one row (families not included):
    /// how a probed GPU's exact name is matched.
    gpu_rows: HashMap<String, usize>,
    /// One merged spec per family whose rows agree (see [`GpuName::Family`]).
    family_specs: Vec<GpuSpec>,
    /// One SM-only spec per SM in `env/cuda.toml`.
    sm_specs: Vec<GpuSpec>,
    images: Vec<ImageFacts>,
    /// Normalized reference → index into `images`.
    image_refs: HashMap<String, usize>,
    /// The distinct CUDA versions of the `nvidia/cuda` tags, ascending (for fixes).
    base_cudas: Vec<Version>,
    wheels: Vec<WheelFacts>,
    cuda: Option<CudaFile>,
    cudnn: Vec<CudnnRow>,
    precision: Vec<PrecisionFeature>,
    ngc_runtime: Option<data::NgcRuntime>,
    /// Which boards split into MIG slices, and what a slice lacks.
    mig: data::MigFacts,
}

/// What a normalized GPU name stands for (the index `gpus.rs` builds).
#[derive(Debug, Clone)]
enum GpuName {
    /// One row of `env/gpus.toml` (its id, name or an alias).
    Row(usize),
    /// A family whose rows agree on every fact a verdict reads: index into `family_specs`.
    Family(usize),
    /// A family whose rows differ in compute capability or class: row indices.
    Ambiguous(Vec<usize>),
}

fn parse_toml<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T> {
    toml::from_str(text).map_err(|err| {
        UserError::usage(format!("env/{file} is invalid: {err}"))
            .with_fix(format!("fix env/{file} (see env/README.md) and rebuild"))
            .into()
    })
}

impl KnowledgeBase {
    /// The knowledge base compiled into this binary.
    pub fn embedded() -> &'static KnowledgeBase {
        static KB: std::sync::OnceLock<KnowledgeBase> = std::sync::OnceLock::new();
        KB.get_or_init(|| {
            // The data is compiled in and a unit test parses it, so a failure
            // here is a build defect, not bad user input.
            KnowledgeBase::parse_embedded()
                .expect("embedded env/*.toml must parse (see compat tests)")
        })
    }

    /// Parse the embedded `env/*.toml` (what [`embedded`](Self::embedded) caches).
    pub fn parse_embedded() -> Result<KnowledgeBase> {
        let gpus: data::GpusFile = parse_toml("gpus.toml", GPUS_TOML)?;
        let cuda: CudaFile = parse_toml("cuda.toml", CUDA_TOML)?;
        let cudnn: data::CudnnFile = parse_toml("cudnn.toml", CUDNN_TOML)?;
        let precision: data::PrecisionFile = parse_toml("precision.toml", PRECISION_TOML)?;
        let images: data::ImagesFile = parse_toml("images.toml", IMAGES_TOML)?;
        let pytorch: data::PytorchFile = parse_toml("pytorch.toml", PYTORCH_TOML)?;

        let mut kb = KnowledgeBase::default();
        kb.index_gpus(gpus.gpu)?;
        kb.mig = gpus.mig;
        kb.sm_specs = gpus::sm_specs(&cuda);
        kb.index_images(&images);
        kb.wheels = wheels::wheel_facts(pytorch);
        kb.cuda = Some(cuda);
        kb.cudnn = cudnn.row;
        kb.precision = precision.feature;
        Ok(kb)
    }

    /// The cuDNN 9.x support-matrix rows.
    pub fn cudnn_rows(&self) -> &[CudnnRow] {
        &self.cudnn
    }

    /// The precision feature named `name` ("bf16", "fp8", …).
    pub fn precision_feature(&self, name: &str) -> Option<&PrecisionFeature> {
        self.precision.iter().find(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests;
