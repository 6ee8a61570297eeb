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

pub mod data;
mod drivers;
mod gpus;
pub mod report;
pub mod require;
pub mod summary;
pub mod verdict;
pub mod version;

use std::collections::HashMap;

pub use verdict::{evaluate, CheckRequest, Precision, Reason, Status, Verdict};

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::host::GpuClass;
use data::{CudaFile, CudnnRow, PrecisionFeature};
use gpus::GpuName;
use version::{parse_compute_capability, Version};

const GPUS_TOML: &str = include_str!("../../env/gpus.toml");
const CUDA_TOML: &str = include_str!("../../env/cuda.toml");
const CUDNN_TOML: &str = include_str!("../../env/cudnn.toml");
const PRECISION_TOML: &str = include_str!("../../env/precision.toml");
const IMAGES_TOML: &str = include_str!("../../env/images.toml");
const PYTORCH_TOML: &str = include_str!("../../env/pytorch.toml");

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
    /// An NGC framework image: its entrypoint picks a CUDA compatibility mode
    /// at start and warns (or prints an error and starts anyway) instead of
    /// being refused by the container runtime (see `[ngc_runtime]`).
    #[serde(default)]
    pub ngc_entrypoint: bool,
    /// For an NGC image: the NVIDIA_REQUIRE_CUDA of the `nvidia/cuda` tags of
    /// its CUDA version, used as the list of driver branches its
    /// forward-compatibility libraries support (not a runtime gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_compat_rule: Option<String>,
    /// "catalog", "profile", "envgen-image" (a built envgen image in the
    /// local daemon: its profile's facts, overridden by the image's env) or
    /// "docker" (any other local image).
    pub origin: String,
}

/// A GPU model as the knowledge base describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    pub id: String,
    pub name: String,
    pub compute_capability: String,
    pub memory_mib: Option<u64>,
    /// For an SM-only spec (`sm_120`) this is `Consumer`, the class with the
    /// fewest guarantees; `sm_only` tells callers the class is not known.
    pub class: GpuClass,
    /// True when the spec was made from an SM alone (`--assume-gpu sm_120`).
    #[serde(default)]
    pub sm_only: bool,
    /// For a family answer ("A100") whose rows differ only in memory: the
    /// smallest and largest memory of its rows (`memory_mib` is then `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_range_mib: Option<(u64, u64)>,
    /// For a family answer: the ids of the rows it stands for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<String>,
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    #[serde(default)]
    pub source: String,
}

/// A PyTorch wheel build: one release × CUDA variant of `env/pytorch.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WheelFacts {
    /// "2.6.0+cu124"
    pub spec: String,
    /// The CUDA runtime the wheel bundles, e.g. "12.4".
    pub cuda: String,
    /// Compute capabilities with SASS ("8.6") and with PTX.
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
    pub unconfirmed: Vec<String>,
    pub source: String,
}

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
}

/// Canonical form of an image reference: Docker Hub's implicit registry and
/// `library/` namespace removed, lower case.
pub fn normalize_reference(reference: &str) -> String {
    let mut rest = reference.trim().to_ascii_lowercase();
    for registry in ["docker.io/", "index.docker.io/", "registry-1.docker.io/"] {
        if let Some(stripped) = rest.strip_prefix(registry) {
            rest = stripped.to_string();
        }
    }
    match rest.strip_prefix("library/") {
        Some(stripped) => stripped.to_string(),
        None => rest,
    }
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
        kb.sm_specs = cuda
            .sm
            .iter()
            .filter_map(|sm| {
                let (cc, _) = parse_compute_capability(&sm.sm)?;
                let id = format!("sm_{}{}", cc.major(), cc.minor());
                Some(GpuSpec {
                    name: id.clone(),
                    id,
                    compute_capability: cc.to_string(),
                    memory_mib: None,
                    class: GpuClass::Consumer,
                    sm_only: true,
                    memory_range_mib: None,
                    variants: Vec::new(),
                    unconfirmed: vec!["class (described by SM only)".into()],
                    source: sm.source.clone(),
                })
            })
            .collect();
        kb.images = expand_images(&images);
        kb.ngc_runtime = Some(images.ngc_runtime.clone());
        for (index, image) in kb.images.iter().enumerate() {
            kb.image_refs
                .insert(normalize_reference(&image.reference), index);
        }
        kb.base_cudas = kb
            .images
            .iter()
            .filter(|image| image.reference.starts_with("nvidia/cuda:"))
            .filter_map(|image| image.cuda.as_deref().and_then(Version::parse))
            .collect();
        kb.base_cudas.sort();
        kb.base_cudas.dedup();
        kb.wheels = pytorch
            .wheel
            .into_iter()
            .flat_map(|row| {
                let cuda = wheel_variant_cuda(&row.variant).unwrap_or_default();
                row.releases
                    .iter()
                    .map(|release| WheelFacts {
                        spec: format!("{release}+{}", row.variant),
                        cuda: cuda.clone(),
                        sass: row.sass.clone(),
                        ptx: row.ptx.clone(),
                        unconfirmed: row.unconfirmed.clone(),
                        source: row.source.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        kb.cuda = Some(cuda);
        kb.cudnn = cudnn.row;
        kb.precision = precision.feature;
        Ok(kb)
    }

    /// A catalog image by reference (`docker.io/`, `library/` and case ignored).
    pub fn image(&self, reference: &str) -> Option<ImageFacts> {
        self.image_refs
            .get(&normalize_reference(reference))
            .and_then(|index| self.images.get(*index))
            .cloned()
    }

    /// Every image in the catalog.
    pub fn images(&self) -> &[ImageFacts] {
        &self.images
    }

    /// Every GPU model in `env/gpus.toml`.
    pub fn gpus(&self) -> &[GpuSpec] {
        &self.gpus
    }

    /// Every PyTorch wheel build in `env/pytorch.toml`.
    pub fn wheels(&self) -> &[WheelFacts] {
        &self.wheels
    }

    /// A PyTorch wheel build such as "2.7.1+cu128"; unknown → usage error (exit 2)
    /// naming the value and listing the known builds.
    pub fn wheel(&self, spec: &str) -> Result<&WheelFacts> {
        let wanted = spec.trim().to_ascii_lowercase();
        if let Some(wheel) = self.wheels.iter().find(|w| w.spec == wanted) {
            return Ok(wheel);
        }
        let release = wanted.split('+').next().unwrap_or_default();
        let same_release: Vec<&str> = self
            .wheels
            .iter()
            .filter(|w| w.spec.starts_with(&format!("{release}+")))
            .map(|w| w.spec.as_str())
            .collect();
        let bare_release = !wanted.contains('+') && !same_release.is_empty();
        let known = if same_release.is_empty() {
            self.wheels
                .iter()
                .map(|w| w.spec.as_str())
                .collect::<Vec<_>>()
        } else {
            same_release
        };
        let problem = if bare_release {
            "names a PyTorch release but not its CUDA variant (each variant is a different build)"
        } else {
            "is not a PyTorch wheel build envgen knows"
        };
        Err(UserError::usage(format!("--pytorch `{spec}` {problem}"))
            .with_fix(format!(
                "name the release and CUDA variant, one of: {} (add builds to env/pytorch.toml)",
                known.join(", ")
            ))
            .into())
    }

    /// The cuDNN 9.x support-matrix rows.
    pub fn cudnn_rows(&self) -> &[CudnnRow] {
        &self.cudnn
    }

    /// The precision feature named `name` ("bf16", "fp8", …).
    pub fn precision_feature(&self, name: &str) -> Option<&PrecisionFeature> {
        self.precision.iter().find(|f| f.name == name)
    }

    /// The newest `nvidia/cuda` version in the catalog at or below `cuda` (major.minor).
    pub fn newest_base_at_most(&self, cuda: &Version) -> Option<String> {
        self.base_cudas
            .iter()
            .rev()
            .find(|v| &v.major_minor() <= cuda)
            .map(Version::to_string)
    }

    /// The oldest `nvidia/cuda` version in the catalog at or above `cuda`.
    pub fn oldest_base_at_least(&self, cuda: &Version) -> Option<String> {
        self.base_cudas
            .iter()
            .find(|v| &v.major_minor() >= cuda)
            .map(Version::to_string)
    }
}

/// "cu128" → "12.8", "cu130" → "13.0", "cu117" → "11.7".
fn wheel_variant_cuda(variant: &str) -> Option<String> {
    let digits = variant.strip_prefix("cu")?;
    if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(2);
    Some(format!("{major}.{minor}"))
}

/// The NVIDIA_REQUIRE_CUDA rule of a CUDA x.y image: `cuda>=x.y` or any of
/// the (brand, driver branch) pairs the shape for that major lists.
fn require_cuda_rule(shapes: &[data::RequireCudaShape], cuda: &Version) -> Option<(String, bool)> {
    let shape = shapes.iter().find(|s| s.cuda_major == cuda.major())?;
    let mut rule = format!("cuda>={}", cuda.major_minor());
    for branch in &shape.driver_branches {
        for brand in &shape.brands {
            rule.push_str(&format!(
                " brand={brand},driver>={branch},driver<{}",
                branch + 1
            ));
        }
    }
    Some((rule, !shape.unconfirmed.is_empty()))
}

/// The NVIDIA_REQUIRE_CUDA of the `nvidia/cuda` tags of one CUDA version, and
/// what about it is UNCONFIRMED: the verbatim string of `[[require_cuda_exact]]`
/// when there is one for exactly this version; else the one of another patch
/// release of the same minor (the rule names only `cuda>=X.Y`, and NVIDIA
/// lists its brand/branch alternatives per minor; marked as borrowed); else
/// the generated rule.
fn base_require_cuda(file: &data::ImagesFile, cuda: &str) -> Option<(String, Vec<String>)> {
    let version = Version::parse(cuda)?;
    let exact_of = |row: &data::RequireCudaExact| Version::parse(&row.cuda);
    if let Some(exact) = file
        .require_cuda_exact
        .iter()
        .find(|row| exact_of(row).as_ref() == Some(&version))
    {
        return Some((exact.rule.clone(), exact.unconfirmed.clone()));
    }
    if let Some(sibling) = file
        .require_cuda_exact
        .iter()
        .find(|row| exact_of(row).is_some_and(|v| v.major_minor() == version.major_minor()))
    {
        let mut notes = sibling.unconfirmed.clone();
        notes.push(format!(
            "require_cuda (the {} tags' rule, same minor)",
            sibling.cuda
        ));
        return Some((sibling.rule.clone(), notes));
    }
    let (rule, shaky) = require_cuda_rule(&file.require_cuda, &version)?;
    let notes = if shaky {
        vec!["require_cuda (brand / driver branch lists)".to_string()]
    } else {
        Vec::new()
    };
    Some((rule, notes))
}

/// Catalog rows → [`ImageFacts`]: NGC releases one-to-one, `nvidia/cuda`
/// rows expanded to every version × Ubuntu × flavour tag.
fn expand_images(file: &data::ImagesFile) -> Vec<ImageFacts> {
    let mut images = Vec::new();
    for row in &file.ngc_pytorch {
        // NGC images are not built FROM nvidia/cuda: they carry their own
        // NVIDIA_REQUIRE_CUDA ([ngc_runtime], `cuda>=9.0`) and an entrypoint
        // that picks the compatibility mode. The minimum driver comes from
        // `cuda` via env/cuda.toml, not from the published `driver_min_linux`,
        // which is lower than the toolkit's own driver for CUDA 12.8 and 13.x.
        let runtime = &file.ngc_runtime;
        let mut unconfirmed = row.unconfirmed.clone();
        unconfirmed.extend(runtime.unconfirmed.iter().cloned());
        let require = Some(runtime.require_cuda.clone());
        let forward_compat_rule = row
            .cuda
            .as_deref()
            .and_then(|cuda| base_require_cuda(file, cuda))
            .map(|(rule, _)| rule);
        images.push(ImageFacts {
            reference: format!("nvcr.io/nvidia/pytorch:{}-py3", row.tag),
            cuda: row.cuda.clone(),
            cudnn: row.cudnn.clone(),
            pytorch: row.pytorch.clone(),
            ubuntu: row.ubuntu.clone(),
            min_compute_capability: row.min_compute_capability.clone(),
            require_cuda: require,
            unconfirmed,
            ngc_entrypoint: true,
            forward_compat_rule,
            origin: "catalog".into(),
            ..ImageFacts::default()
        });
    }
    for row in &file.cuda_base {
        for cuda in &row.cuda {
            let rule = base_require_cuda(file, cuda);
            for ubuntu in &row.ubuntu {
                let flavours = [
                    ("runtime".to_string(), false),
                    ("devel".to_string(), false),
                    (format!("{}-runtime", row.cudnn_infix), true),
                    (format!("{}-devel", row.cudnn_infix), true),
                ];
                for (flavour, with_cudnn) in flavours {
                    let mut unconfirmed: Vec<String> = row
                        .unconfirmed
                        .iter()
                        .filter(|u| {
                            u.as_str() != "other flavours"
                                || !flavour.ends_with("-devel")
                                || !with_cudnn
                        })
                        .map(|u| {
                            if u == "other flavours" {
                                "tag existence (only -cudnn-devel tags are listed in the source)"
                                    .to_string()
                            } else {
                                u.clone()
                            }
                        })
                        .collect();
                    if with_cudnn {
                        unconfirmed.push("cudnn minor version".into());
                    }
                    if let Some((_, notes)) = &rule {
                        unconfirmed.extend(notes.iter().cloned());
                    }
                    images.push(ImageFacts {
                        reference: format!("nvidia/cuda:{cuda}-{flavour}-ubuntu{ubuntu}"),
                        cuda: Some(cuda.clone()),
                        cudnn: with_cudnn.then(|| row.cudnn.clone()),
                        ubuntu: Some(ubuntu.clone()),
                        require_cuda: rule.as_ref().map(|(text, _)| text.clone()),
                        unconfirmed,
                        origin: "catalog".into(),
                        ..ImageFacts::default()
                    });
                }
            }
        }
    }
    images
}

#[cfg(test)]
mod tests;
