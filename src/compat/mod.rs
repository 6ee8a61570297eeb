//! The compatibility knowledge base (`env/*.toml`, embedded at build time)
//! and the pure verdict engine over it.
//!
//! Interface used by `doctor`, `image` and `run` (keep these names):
//! - [`KnowledgeBase::embedded`] — the parsed `env/` data;
//! - [`KnowledgeBase::lookup_gpu`] / [`KnowledgeBase::enrich`] /
//!   [`KnowledgeBase::assumed_host`] — GPU names ↔ facts;
//! - [`KnowledgeBase::image`] / [`KnowledgeBase::images`] — catalog images as [`ImageFacts`];
//! - [`KnowledgeBase::wheel`] — a PyTorch wheel build (`--pytorch 2.6.0+cu124`);
//! - [`evaluate`] — host × request → verdicts (no I/O).
//!
//! Facts live in `env/*.toml` (each row cites its source); this module only
//! parses them into typed tables and expands compact rows.

pub mod data;
pub mod require;
pub mod summary;
pub mod verdict;
pub mod version;

use std::collections::HashMap;

pub use verdict::{evaluate, CheckRequest, Precision, Reason, Status, Verdict};

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::host::{Gpu, GpuClass, Host, HostSource};
use data::{CudaFile, CudnnRow, ForwardCompat, PrecisionFeature, SmSupport};
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

/// What a normalized GPU name stands for.
#[derive(Debug, Clone)]
enum GpuName {
    /// One row of `env/gpus.toml` (its id, name or an alias).
    Row(usize),
    /// A family whose rows agree on every fact a verdict reads: index into `family_specs`.
    Family(usize),
    /// A family whose rows differ in compute capability or class: row indices.
    Ambiguous(Vec<usize>),
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
}

/// Lower-case letters and digits only: "NVIDIA GeForce RTX 5070 Ti" → "nvidiageforcertx5070ti".
fn normalize_name(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The same without the vendor/brand words nvidia-smi prefixes, so "RTX 4090"
/// and "NVIDIA GeForce RTX 4090" meet.
fn strip_brand(normalized: &str) -> &str {
    let mut rest = normalized;
    for prefix in ["nvidia", "geforce", "tesla"] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    rest
}

/// The key a GPU name is indexed and looked up by: normalized, brand stripped.
fn gpu_key(name: &str) -> String {
    strip_brand(&normalize_name(name)).to_string()
}

/// The keys a family name is indexed by: its key and, for "RTX 3080", "3080".
fn family_keys(family: &str) -> Vec<String> {
    let key = gpu_key(family);
    let mut keys = vec![key.clone()];
    if let Some(rest) = key.strip_prefix("rtx") {
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            keys.push(rest.to_string());
        }
    }
    keys
}

/// "RTX 5070 Ti" → "rtx-5070-ti".
fn slug(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join("-")
}

/// MiB as whole GiB, rounded to nearest ("81559" → "80").
fn gib(mib: u64) -> u64 {
    (mib + 512) / 1024
}

fn class_name(class: GpuClass) -> String {
    serde_json::to_value(class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
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

    /// Index the rows of `env/gpus.toml`: every id, name and alias names one
    /// row (and must be unique); a `family` name may be shared by rows and
    /// stands for all of them. A family whose rows agree on every fact a
    /// verdict reads (compute capability and class) becomes one merged spec;
    /// otherwise the family name is ambiguous.
    fn index_gpus(&mut self, rows: Vec<data::GpuRow>) -> Result<()> {
        let mut families: Vec<(String, String, Vec<usize>)> = Vec::new();
        for row in rows {
            let index = self.gpus.len();
            for name in row.aliases.iter().chain([&row.name, &row.id]) {
                let key = gpu_key(name);
                if let Some(GpuName::Row(previous)) =
                    self.gpu_names.insert(key.clone(), GpuName::Row(index))
                {
                    if previous != index {
                        return Err(UserError::usage(format!(
                            "env/gpus.toml: name `{name}` is used by two GPUs"
                        ))
                        .with_fix("make every alias unique, or make it a shared `family` name")
                        .into());
                    }
                }
            }
            for family in &row.family {
                for key in family_keys(family) {
                    match families.iter_mut().find(|(k, _, _)| *k == key) {
                        Some((_, _, members)) => members.push(index),
                        None => families.push((key, family.clone(), vec![index])),
                    }
                }
            }
            self.gpus.push(GpuSpec {
                id: row.id,
                name: row.name,
                compute_capability: row.compute_capability,
                memory_mib: row.memory_mib,
                class: row.class,
                sm_only: false,
                memory_range_mib: None,
                variants: Vec::new(),
                unconfirmed: row.unconfirmed,
                source: row.source,
            });
        }
        self.gpu_rows = self
            .gpu_names
            .iter()
            .filter_map(|(key, name)| match name {
                GpuName::Row(index) => Some((key.clone(), *index)),
                _ => None,
            })
            .collect();
        for (key, family, mut members) in families {
            members.dedup();
            // A family name that is also one row's own name is that row's
            // family: the family wins. One naming a row outside it is a defect.
            if let Some(GpuName::Row(row)) = self.gpu_names.get(&key) {
                if !members.contains(row) {
                    return Err(UserError::usage(format!(
                        "env/gpus.toml: `{family}` is a family and the name of {}, which is not in it",
                        self.gpus[*row].id
                    ))
                    .with_fix("add the family to that row or remove the alias")
                    .into());
                }
            }
            let name = if members.len() == 1 {
                GpuName::Row(members[0])
            } else if let Some(spec) = self.merge_family(&family, &members) {
                self.family_specs.push(spec);
                GpuName::Family(self.family_specs.len() - 1)
            } else {
                GpuName::Ambiguous(members)
            };
            self.gpu_names.insert(key, name);
        }
        Ok(())
    }

    /// One spec for rows that agree on compute capability and class (the
    /// GPU facts verdicts read), or `None` when they differ.
    fn merge_family(&self, family: &str, members: &[usize]) -> Option<GpuSpec> {
        let rows: Vec<&GpuSpec> = members.iter().map(|i| &self.gpus[*i]).collect();
        let first = rows[0];
        if rows
            .iter()
            .any(|r| r.compute_capability != first.compute_capability || r.class != first.class)
        {
            return None;
        }
        let memories: Vec<u64> = rows.iter().filter_map(|r| r.memory_mib).collect();
        let (memory_mib, memory_range_mib) = match (memories.iter().min(), memories.iter().max()) {
            // Every variant's memory is known and equal: a plain figure.
            (Some(lo), Some(hi)) if lo == hi && memories.len() == rows.len() => (Some(*lo), None),
            (Some(lo), Some(hi)) if memories.len() == rows.len() => (None, Some((*lo, *hi))),
            _ => (None, None),
        };
        let mut id = slug(family);
        if self.gpus.iter().any(|g| g.id == id) {
            id.push_str("-family");
        }
        let mut unconfirmed: Vec<String> = Vec::new();
        for row in &rows {
            for fact in &row.unconfirmed {
                let fact = format!("{}: {fact}", row.id);
                if !unconfirmed.contains(&fact) {
                    unconfirmed.push(fact);
                }
            }
        }
        let mut sources: Vec<&str> = Vec::new();
        for row in &rows {
            if !sources.contains(&row.source.as_str()) {
                sources.push(&row.source);
            }
        }
        Some(GpuSpec {
            id,
            name: family.to_string(),
            compute_capability: first.compute_capability.clone(),
            memory_mib,
            class: first.class,
            sm_only: false,
            memory_range_mib,
            variants: rows.iter().map(|r| r.id.clone()).collect(),
            unconfirmed,
            source: sources.join(" ; "),
        })
    }

    /// Find a GPU by the name nvidia-smi prints ("NVIDIA A100-SXM4-80GB"),
    /// the name people type ("5070 Ti", "A100", "3080"), a family or merged
    /// spec's id, or an SM ("sm_120", "12.0"). Exact (case-, space- and
    /// punctuation-insensitive) matches only; an ambiguous family gives `None`.
    pub fn lookup_gpu(&self, query: &str) -> Option<&GpuSpec> {
        // An id names its row even where a family shares its key
        // ("rtx-4090" the desktop card, "RTX 4090" the family).
        let id = query.trim();
        if let Some(spec) = self
            .gpus
            .iter()
            .chain(&self.family_specs)
            .find(|s| s.id == id)
        {
            return Some(spec);
        }
        match self.gpu_name(query) {
            Some(GpuName::Row(index)) => return self.gpus.get(*index),
            Some(GpuName::Family(index)) => return self.family_specs.get(*index),
            Some(GpuName::Ambiguous(_)) => return None,
            None => {}
        }
        let (cc, _) = parse_compute_capability(query)?;
        let cc = cc.to_string();
        self.sm_specs
            .iter()
            .find(|spec| spec.compute_capability == cc)
    }

    fn gpu_name(&self, query: &str) -> Option<&GpuName> {
        let key = gpu_key(query);
        if key.is_empty() {
            return None;
        }
        self.gpu_names.get(&key)
    }

    /// Like [`lookup_gpu`](Self::lookup_gpu), but an unknown or ambiguous name
    /// is a usage error naming the value and listing the choices (with the
    /// compute capability and class that tell them apart).
    pub fn resolve_gpu(&self, query: &str) -> Result<&GpuSpec> {
        if let Some(GpuName::Ambiguous(members)) = self.gpu_name(query) {
            let choices: Vec<String> = members
                .iter()
                .map(|i| {
                    let g = &self.gpus[*i];
                    format!(
                        "{} ({}, cc {}, {})",
                        g.id,
                        g.name,
                        g.compute_capability,
                        class_name(g.class)
                    )
                })
                .collect();
            return Err(UserError::usage(format!(
                "--assume-gpu `{query}` is ambiguous: {}",
                choices.join("; ")
            ))
            .with_fix("name one of them (its id or full name), or give its SM such as sm_89")
            .into());
        }
        if let Some(spec) = self.lookup_gpu(query) {
            return Ok(spec);
        }
        let key = gpu_key(query);
        let mut close: Vec<&str> = Vec::new();
        if key.len() >= 2 {
            for (name, target) in &self.gpu_names {
                if !(name.contains(&key) || (name.len() >= 3 && key.contains(name.as_str()))) {
                    continue;
                }
                let ids: Vec<&str> = match target {
                    GpuName::Row(i) => vec![self.gpus[*i].id.as_str()],
                    GpuName::Family(i) => vec![self.family_specs[*i].id.as_str()],
                    GpuName::Ambiguous(m) => m.iter().map(|i| self.gpus[*i].id.as_str()).collect(),
                };
                for id in ids {
                    if !close.contains(&id) {
                        close.push(id);
                    }
                }
            }
        }
        close.sort_unstable();
        let choices = if close.is_empty() {
            let all: Vec<&str> = self.gpus.iter().map(|s| s.id.as_str()).collect();
            all.join(", ")
        } else {
            close.join(", ")
        };
        Err(
            UserError::usage(format!("--assume-gpu `{query}` is not a GPU envgen knows"))
                .with_fix(format!(
                    "use one of: {choices}; or an SM such as sm_120 / 12.0 (add new GPUs to env/gpus.toml)"
                ))
                .into(),
        )
    }

    /// "81920 MiB", "40–80 GiB" (a family whose variants differ in memory) or
    /// "memory unknown": how doctor describes a GPU's memory.
    pub fn memory_text(&self, gpu: &Gpu) -> String {
        if let Some(mib) = gpu.memory_mib {
            return format!("{mib} MiB");
        }
        let range = gpu
            .catalog_id
            .as_deref()
            .and_then(|id| self.lookup_gpu(id))
            .and_then(|spec| spec.memory_range_mib);
        match range {
            Some((lo, hi)) => format!("{}–{} GiB", gib(lo), gib(hi)),
            None => "memory unknown".to_string(),
        }
    }

    /// Fill class, compute capability and catalog id of probed GPUs from their
    /// names, and the driver's CUDA version from the driver version.
    pub fn enrich(&self, host: &mut Host) {
        for gpu in &mut host.gpus {
            // The driver names one device: its own row before a family.
            let exact = self
                .gpu_rows
                .get(&gpu_key(&gpu.name))
                .map(|i| &self.gpus[*i]);
            let Some(spec) = exact
                .or_else(|| self.lookup_gpu(&gpu.name))
                .filter(|spec| !spec.sm_only)
            else {
                continue;
            };
            gpu.compute_capability
                .get_or_insert_with(|| spec.compute_capability.clone());
            gpu.memory_mib = gpu.memory_mib.or(spec.memory_mib);
            gpu.class.get_or_insert(spec.class);
            gpu.catalog_id = Some(spec.id.clone());
        }
        if host.cuda_driver_version.is_none() {
            host.cuda_driver_version = host
                .driver_version
                .as_deref()
                .and_then(Version::parse)
                .and_then(|driver| self.max_cuda_for_driver(&driver))
                .map(|cuda| cuda.to_string());
        }
    }

    /// A host described by `--assume-gpu` / `--assume-driver` (usage error naming a bad value).
    pub fn assumed_host(&self, gpus: &[String], driver: Option<&str>) -> Result<Host> {
        let mut host = Host {
            source: HostSource::Assumed,
            ..Host::default()
        };
        for (index, query) in gpus.iter().enumerate() {
            let spec = self.resolve_gpu(query)?;
            host.gpus.push(Gpu {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                name: spec.name.clone(),
                compute_capability: Some(spec.compute_capability.clone()),
                memory_mib: spec.memory_mib,
                class: (!spec.sm_only).then_some(spec.class),
                catalog_id: Some(spec.id.clone()),
                ..Gpu::default()
            });
        }
        if let Some(text) = driver {
            let version = Version::parse(text).filter(|v| v.major() >= 100).ok_or_else(|| {
                UserError::usage(format!("--assume-driver `{text}` is not a driver version"))
                    .with_fix("pass the kernel driver version as nvidia-smi prints it, e.g. 535.261.03 or 570 (not a CUDA version such as 12.8)")
            })?;
            host.cuda_driver_version = self.max_cuda_for_driver(&version).map(|v| v.to_string());
            host.driver_version = Some(text.trim().to_string());
        }
        Ok(host)
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
        let known = if same_release.is_empty() {
            self.wheels
                .iter()
                .map(|w| w.spec.as_str())
                .collect::<Vec<_>>()
        } else {
            same_release
        };
        Err(UserError::usage(format!(
            "--pytorch `{spec}` is not a PyTorch wheel build envgen knows"
        ))
        .with_fix(format!(
            "name the release and CUDA variant, one of: {} (add builds to env/pytorch.toml)",
            known.join(", ")
        ))
        .into())
    }

    fn cuda_file(&self) -> Option<&CudaFile> {
        self.cuda.as_ref()
    }

    /// The newest CUDA (major.minor) a driver supports, from the toolkit-driver
    /// table. A bare branch ("570") counts as that branch's newest release.
    pub fn max_cuda_for_driver(&self, driver: &Version) -> Option<Version> {
        let bare_branch = driver.to_string().split('.').count() == 1;
        self.cuda_file()?
            .release
            .iter()
            .filter(|release| {
                Version::parse(&release.driver_min_linux).is_some_and(|min| {
                    if bare_branch {
                        min.major() <= driver.major()
                    } else {
                        &min <= driver
                    }
                })
            })
            .filter_map(|release| Version::parse(&release.version))
            .max()
            .map(|v| v.major_minor())
    }

    /// The toolkit driver a CUDA version needs for its full feature set: the
    /// exact release's, else its GA's (x.y.0), else the first of that x.y.
    pub fn toolkit_driver_min(&self, cuda: &Version) -> Option<Version> {
        let releases = &self.cuda_file()?.release;
        let same_minor = |r: &&data::CudaRelease| {
            Version::parse(&r.version).is_some_and(|v| v.major_minor() == cuda.major_minor())
        };
        releases
            .iter()
            .find(|r| Version::parse(&r.version).as_ref() == Some(cuda))
            .or_else(|| releases.iter().find(same_minor))
            .and_then(|r| Version::parse(&r.driver_min_linux))
    }

    /// The minor-version-compatibility driver minimum for a CUDA major.
    pub fn minor_compat_min(&self, major: u32) -> Option<Version> {
        self.cuda_file()?
            .minor_compat
            .iter()
            .find(|row| row.major == major)
            .and_then(|row| Version::parse(&row.driver_min_linux))
    }

    /// The CUDA major a driver belongs to for minor-version compatibility.
    pub fn driver_cuda_major(&self, driver: &Version) -> Option<u32> {
        self.cuda_file()?
            .minor_compat
            .iter()
            .filter(|row| Version::parse(&row.driver_min_linux).is_some_and(|min| &min <= driver))
            .map(|row| row.major)
            .max()
    }

    /// First/last CUDA support for a compute capability.
    pub fn sm_support(&self, cc: &Version) -> Option<&SmSupport> {
        self.cuda_file()?
            .sm
            .iter()
            .find(|sm| parse_compute_capability(&sm.sm).is_some_and(|(v, _)| &v == cc))
    }

    pub fn forward_compat(&self) -> Option<&ForwardCompat> {
        self.cuda_file().map(|cuda| &cuda.forward_compat)
    }

    /// The data-center driver branches table.
    pub fn driver_branches(&self) -> &[data::DriverBranch] {
        self.cuda_file()
            .map(|c| c.driver_branch.as_slice())
            .unwrap_or_default()
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
        let mut unconfirmed = row.unconfirmed.clone();
        // NGC images are not built FROM nvidia/cuda and their own rule was not
        // read, so they keep the generated per-major shape (not the exact
        // nvidia/cuda strings). The minimum driver comes from `cuda` via
        // env/cuda.toml, not from the published `driver_min_linux`, which is
        // lower than the toolkit's own driver for CUDA 12.8 and 13.x.
        let require = row
            .cuda
            .as_deref()
            .and_then(Version::parse)
            .and_then(|cuda| {
                unconfirmed.push(
                    "require_cuda (inferred from the CUDA base; NGC's own rule not checked)".into(),
                );
                require_cuda_rule(&file.require_cuda, &cuda).map(|(rule, _)| rule)
            });
        images.push(ImageFacts {
            reference: format!("nvcr.io/nvidia/pytorch:{}-py3", row.tag),
            cuda: row.cuda.clone(),
            cudnn: row.cudnn.clone(),
            pytorch: row.pytorch.clone(),
            ubuntu: row.ubuntu.clone(),
            min_compute_capability: row.min_compute_capability.clone(),
            require_cuda: require,
            unconfirmed,
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
mod tests {
    use super::*;

    fn kb() -> &'static KnowledgeBase {
        KnowledgeBase::embedded()
    }

    #[test]
    fn embedded_data_parses_and_is_complete() {
        let kb = KnowledgeBase::parse_embedded().expect("env/*.toml parse");
        assert!(kb.gpus.len() >= 25, "gpus: {}", kb.gpus.len());
        assert!(kb
            .images
            .iter()
            .any(|i| i.reference == "nvcr.io/nvidia/pytorch:25.12-py3"));
        assert!(kb.images.len() > 100, "images: {}", kb.images.len());
        assert!(kb
            .wheels
            .iter()
            .any(|w| w.spec == "2.7.1+cu128" && w.cuda == "12.8"));
        assert_eq!(kb.cudnn_rows().len(), 8);
        assert!(kb.gpus.iter().all(|g| !g.source.is_empty()));
    }

    /// Every NGC PyTorch release 24.01–25.12 has a row. A row's CUDA is
    /// first-hand (that month's NVIDIA release notes, cited by URL, with the
    /// published driver facts), second-hand (marked `cuda (…)` in
    /// `unconfirmed`: quotations and runtime reports), or absent (`cuda`
    /// unconfirmed). The lists below are what docs/doctor.md states.
    #[test]
    fn ngc_rows_are_complete_and_sourced() {
        let file: data::ImagesFile = toml::from_str(IMAGES_TOML).expect("images.toml");
        let tags: Vec<&str> = file.ngc_pytorch.iter().map(|r| r.tag.as_str()).collect();
        for year in [24, 25] {
            for month in 1..=12 {
                let tag = format!("{year}.{month:02}");
                assert!(tags.contains(&tag.as_str()), "no row for NGC {tag}");
            }
        }
        let (mut second_hand, mut without_cuda) = (Vec::new(), Vec::new());
        for row in &file.ngc_pytorch {
            // "cuda patch (published as …)": the notes give only major.minor.
            let cuda_caveat = row
                .unconfirmed
                .iter()
                .find(|u| u.starts_with("cuda") && !u.starts_with("cuda patch (published"));
            match (&row.cuda, cuda_caveat) {
                (None, caveat) => {
                    assert_eq!(caveat.map(String::as_str), Some("cuda"), "{}", row.tag);
                    without_cuda.push(row.tag.as_str());
                }
                (Some(_), Some(caveat)) => {
                    assert!(
                        caveat.len() > "cuda".len(),
                        "{}: say where it comes from",
                        row.tag
                    );
                    second_hand.push(row.tag.as_str());
                }
                (Some(_), None) => {
                    assert!(
                        row.source.contains("release-notes/rel-"),
                        "{}: first-hand CUDA without a release-notes page",
                        row.tag
                    );
                    // The published driver facts come with it (25.12's notes
                    // give none: they refer to the CUDA Compatibility guide).
                    if row.tag != "25.12" {
                        assert!(row.driver_min_linux.is_some(), "{}", row.tag);
                        assert!(!row.forward_compat_branches.is_empty(), "{}", row.tag);
                        assert!(row.min_compute_capability.is_some() || row.tag == "24.12");
                    }
                }
            }
            for field in ["driver_min_linux", "forward_compat_branches"] {
                let set = match field {
                    "driver_min_linux" => row.driver_min_linux.is_some(),
                    _ => !row.forward_compat_branches.is_empty(),
                };
                assert!(
                    !(set && row.unconfirmed.iter().any(|u| u == field)),
                    "{}: {field} is set and marked unconfirmed",
                    row.tag
                );
            }
        }
        assert_eq!(
            second_hand,
            ["24.09", "24.11", "25.05", "25.07", "25.09", "25.11"],
            "update docs/doctor.md (UNCONFIRMED facts) when this list changes"
        );
        assert!(
            without_cuda.is_empty(),
            "{without_cuda:?}: every release needs a CUDA (issue #15)"
        );
    }

    #[test]
    fn a_patch_release_without_its_own_rule_borrows_its_minors() {
        // 12.9.0 has no verbatim NVIDIA_REQUIRE_CUDA; 12.9.1 has. Both are
        // `cuda>=12.9` with NVIDIA's per-minor alternatives.
        let kb = KnowledgeBase::parse_embedded().unwrap();
        let rule_of = |tag: &str| kb.image(tag).and_then(|i| i.require_cuda.clone());
        let borrowed = kb.image("nvidia/cuda:12.9.0-runtime-ubuntu24.04").unwrap();
        assert_eq!(
            borrowed.require_cuda,
            rule_of("nvidia/cuda:12.9.1-runtime-ubuntu24.04")
        );
        assert!(
            borrowed
                .unconfirmed
                .iter()
                .any(|u| u.contains("the 12.9.1 tags' rule, same minor")),
            "{:?}",
            borrowed.unconfirmed
        );
        // A minor with no verbatim rule keeps the generated one.
        let generated = kb.image("nvidia/cuda:12.3.2-runtime-ubuntu22.04").unwrap();
        assert!(!generated
            .unconfirmed
            .iter()
            .any(|u| u.contains("same minor")));
    }

    #[test]
    fn exact_require_cuda_is_used_for_a_tag_that_has_one() {
        let file: data::ImagesFile = toml::from_str(IMAGES_TOML).expect("images.toml");
        let exact = file
            .require_cuda_exact
            .iter()
            .find(|row| row.cuda == "12.9.1")
            .expect("12.9.1 exact row");
        for flavour in ["runtime", "cudnn-devel"] {
            let image = kb()
                .image(&format!("nvidia/cuda:12.9.1-{flavour}-ubuntu24.04"))
                .expect("12.9.1 tag");
            assert_eq!(image.require_cuda.as_deref(), Some(exact.rule.as_str()));
            // The exact 12.9.1 string admits no GeForce forward compat.
            assert!(!exact.rule.contains("geforce"));
            assert!(image
                .unconfirmed
                .iter()
                .any(|u| u.starts_with("require_cuda (read from")));
        }
        // A minor without an exact string keeps the generated rule (which,
        // unlike the verbatim 12.9.1 one, lists GeForce brands).
        let generated = kb()
            .image("nvidia/cuda:12.3.2-runtime-ubuntu22.04")
            .and_then(|i| i.require_cuda.clone())
            .expect("12.3.2 rule");
        assert!(generated.starts_with("cuda>=12.3 brand=") && generated.contains("geforce"));
        // NVIDIA's own 12.4.1 Dockerfile lists GeForce on R470/R525/R535 too.
        let nvidia_12_4 = kb()
            .image("nvidia/cuda:12.4.1-runtime-ubuntu22.04")
            .expect("12.4.1 tag");
        assert!(nvidia_12_4
            .require_cuda
            .as_deref()
            .is_some_and(|r| r.contains("brand=geforce,driver>=535,driver<536")));
        assert!(nvidia_12_4
            .unconfirmed
            .iter()
            .any(|u| u.starts_with("require_cuda (NVIDIA's rhel9 Dockerfile")));
        // The verbatim 13.0.2 string is what the generated 13.x shape gives,
        // which checks that shape against a real image.
        let verbatim_13 = file
            .require_cuda_exact
            .iter()
            .find(|row| row.cuda == "13.0.2")
            .expect("13.0.2 exact row");
        let (generated_13, _) =
            require_cuda_rule(&file.require_cuda, &Version::parse("13.0.2").unwrap()).unwrap();
        assert_eq!(generated_13, verbatim_13.rule);
        // Every exact string parses.
        for row in &file.require_cuda_exact {
            require::RequireRule::parse(&row.rule).unwrap_or_else(|e| panic!("{}: {e}", row.cuda));
        }
    }

    #[test]
    fn gpu_names_as_printed_and_typed() {
        let id = |q: &str| kb().lookup_gpu(q).map(|g| g.id.clone());
        assert_eq!(id("NVIDIA A100-SXM4-80GB").as_deref(), Some("a100-80gb"));
        assert_eq!(id("a100-80gb").as_deref(), Some("a100-80gb"));
        assert_eq!(id("Tesla V100-SXM2-32GB").as_deref(), Some("v100-32gb"));
        // Typed, a GeForce name is its family (desktop and laptop agree).
        assert_eq!(
            id("NVIDIA GeForce RTX 5070 Ti").as_deref(),
            Some("rtx-5070-ti-family")
        );
        assert_eq!(id("5070 Ti").as_deref(), Some("rtx-5070-ti-family"));
        assert_eq!(id("rtx-5070-ti").as_deref(), Some("rtx-5070-ti"));
        assert_eq!(id("NVIDIA RTX A6000").as_deref(), Some("rtx-a6000"));
        assert_eq!(id("a30").as_deref(), Some("a30"));
        assert_eq!(id("h100").as_deref(), Some("h100"));
        assert_eq!(id("RTX 4090").as_deref(), Some("rtx-4090-family"));
        assert_eq!(id("RTX 4090 D").as_deref(), Some("rtx-4090-d"));
        for sm in ["sm_120", "12.0", "120"] {
            let spec = kb().lookup_gpu(sm).expect(sm);
            assert!(spec.sm_only && spec.compute_capability == "12.0");
        }
        assert!(kb().lookup_gpu("Radeon 7900").is_none());
    }

    #[test]
    fn every_gpu_the_brief_names_resolves_with_its_class() {
        let cases = [
            ("V100-16GB", "7.0", GpuClass::Datacenter),
            ("T4", "7.5", GpuClass::Datacenter),
            ("NVIDIA A100-PCIE-40GB", "8.0", GpuClass::Datacenter),
            ("NVIDIA A100 80GB PCIe", "8.0", GpuClass::Datacenter),
            ("A10", "8.6", GpuClass::Datacenter),
            ("A40", "8.6", GpuClass::Datacenter),
            ("RTX A4500", "8.6", GpuClass::Workstation),
            ("RTX 3090", "8.6", GpuClass::Consumer),
            (
                "NVIDIA GeForce RTX 4050 Laptop GPU",
                "8.9",
                GpuClass::Consumer,
            ),
            ("L4", "8.9", GpuClass::Datacenter),
            ("L40S", "8.9", GpuClass::Datacenter),
            ("H100 PCIe", "9.0", GpuClass::Datacenter),
            ("NVIDIA H100 80GB HBM3", "9.0", GpuClass::Datacenter),
            ("H100 NVL", "9.0", GpuClass::Datacenter),
            ("H200", "9.0", GpuClass::Datacenter),
            ("GH200", "9.0", GpuClass::Datacenter),
            ("B200", "10.0", GpuClass::Datacenter),
            ("RTX 5090", "12.0", GpuClass::Consumer),
            ("RTX PRO 6000 Blackwell", "12.0", GpuClass::Workstation),
            ("Jetson Orin", "8.7", GpuClass::Embedded),
            ("Jetson AGX Thor", "11.0", GpuClass::Embedded),
            ("GB10", "12.1", GpuClass::Workstation),
            ("B300", "10.3", GpuClass::Datacenter),
        ];
        for (name, cc, class) in cases {
            let spec = kb().lookup_gpu(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(
                (spec.compute_capability.as_str(), spec.class),
                (cc, class),
                "{name}"
            );
        }
    }

    #[test]
    fn data_files_agree_with_each_other() {
        let kb = kb();
        // Every GPU's SM has first/last-CUDA facts in cuda.toml.
        for gpu in kb.gpus() {
            let cc = Version::parse(&gpu.compute_capability).unwrap();
            assert!(kb.sm_support(&cc).is_some(), "{} has no [[sm]] row", gpu.id);
        }
        // Every image with a CUDA version has a parseable NVIDIA_REQUIRE_CUDA.
        for image in kb.images().iter().filter(|i| i.cuda.is_some()) {
            let rule = image
                .require_cuda
                .as_deref()
                .unwrap_or_else(|| panic!("{}", image.reference));
            require::RequireRule::parse(rule)
                .unwrap_or_else(|e| panic!("{}: {e}", image.reference));
            let cuda = Version::parse(image.cuda.as_deref().unwrap()).unwrap();
            assert!(
                kb.toolkit_driver_min(&cuda).is_some(),
                "{} has no toolkit driver",
                image.reference
            );
        }
        // Every wheel's CUDA variant is a release cuda.toml knows, or 11.x.
        for wheel in kb.wheels() {
            let cuda = Version::parse(&wheel.cuda).unwrap();
            assert!(
                cuda.major() == 11 || kb.toolkit_driver_min(&cuda).is_some(),
                "{}",
                wheel.spec
            );
        }
    }

    #[test]
    fn ambiguous_and_unknown_gpu_names_are_usage_errors() {
        // "A100" is no longer ambiguous: its memory variants agree on every
        // verdict fact. "RTX 6000" names three architectures.
        let a100 = kb().resolve_gpu("A100").unwrap();
        assert_eq!((a100.id.as_str(), a100.memory_mib), ("a100", None));
        assert_eq!(a100.memory_range_mib, Some((40960, 81920)));
        let err = kb().resolve_gpu("RTX 6000").unwrap_err();
        let text = crate::error::render(&err);
        assert!(
            text.contains("`RTX 6000` is ambiguous")
                && text.contains("quadro-rtx-6000 (Quadro RTX 6000, cc 7.5, workstation)")
                && text
                    .contains("rtx-6000-ada (NVIDIA RTX 6000 Ada Generation, cc 8.9, workstation)")
                && text.contains("rtx-pro-6000-blackwell (")
                && text.contains("cc 12.0, workstation"),
            "{text}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
        let err = kb().resolve_gpu("Radeon 7900").unwrap_err();
        let text = crate::error::render(&err);
        assert!(
            text.contains("`Radeon 7900` is not a GPU envgen knows"),
            "{text}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
    }

    /// What a typed `--assume-gpu` name must resolve to.
    enum Want {
        /// One answer: its id, compute capability and class.
        One(&'static str, &'static str, GpuClass),
        /// A usage error listing these ids (with cc and class).
        Ambiguous(&'static [&'static str]),
        Unknown,
    }

    #[test]
    fn typed_gpu_names_resolve_to_one_answer_or_a_listed_choice() {
        use GpuClass::{Consumer as C, Datacenter as D, Embedded as E, Workstation as W};
        use Want::*;
        let table: &[(&str, Want)] = &[
            ("A100", One("a100", "8.0", D)),
            ("a100", One("a100", "8.0", D)),
            ("NVIDIA A100-SXM4-80GB", One("a100-80gb", "8.0", D)),
            ("NVIDIA A100-PCIE-40GB", One("a100-40gb", "8.0", D)),
            ("A100 80GB", One("a100-80gb", "8.0", D)),
            ("A10", One("a10", "8.6", D)),
            ("NVIDIA A10", One("a10", "8.6", D)),
            ("A10G", One("a10g", "8.6", D)),
            ("A800", One("a800", "8.0", D)),
            ("V100", One("v100", "7.0", D)),
            ("Tesla V100-SXM2-16GB", One("v100-16gb", "7.0", D)),
            ("Tesla V100S-PCIE-32GB", One("v100s", "7.0", D)),
            ("Titan V", One("titan-v", "7.0", C)),
            ("T4", One("t4", "7.5", D)),
            ("H100", One("h100", "9.0", D)),
            ("NVIDIA H100 80GB HBM3", One("h100-sxm", "9.0", D)),
            ("NVIDIA H100 PCIe", One("h100-pcie", "9.0", D)),
            ("NVIDIA H100 NVL", One("h100-nvl", "9.0", D)),
            ("H200", One("h200", "9.0", D)),
            ("GH200", One("gh200", "9.0", D)),
            ("B200", One("b200", "10.0", D)),
            ("GB300", One("gb300", "10.3", D)),
            ("RTX 3080", One("rtx-3080-family", "8.6", C)),
            ("3080", One("rtx-3080-family", "8.6", C)),
            ("NVIDIA GeForce RTX 3080", One("rtx-3080-family", "8.6", C)),
            (
                "NVIDIA GeForce RTX 3080 Laptop GPU",
                One("rtx-3080-laptop", "8.6", C),
            ),
            ("3080 Ti", One("rtx-3080-ti-family", "8.6", C)),
            ("4090", One("rtx-4090-family", "8.9", C)),
            ("RTX 4090 Laptop", One("rtx-4090-laptop", "8.9", C)),
            ("4090 D", One("rtx-4090-d", "8.9", C)),
            ("5070 Ti", One("rtx-5070-ti-family", "12.0", C)),
            ("RTX 5070 Ti Laptop", One("rtx-5070-ti-laptop", "12.0", C)),
            (
                "NVIDIA GeForce RTX 5070 Ti Laptop GPU",
                One("rtx-5070-ti-laptop", "12.0", C),
            ),
            ("RTX 5090", One("rtx-5090-family", "12.0", C)),
            ("GTX 1660 Ti", One("gtx-1660-ti", "7.5", C)),
            ("2080 Ti", One("rtx-2080-ti", "7.5", C)),
            ("Quadro RTX 8000", One("quadro-rtx-8000", "7.5", W)),
            ("RTX A6000", One("rtx-a6000", "8.6", W)),
            ("RTX 6000 Ada", One("rtx-6000-ada", "8.9", W)),
            (
                "NVIDIA RTX 6000 Ada Generation",
                One("rtx-6000-ada", "8.9", W),
            ),
            ("RTX 4000 Ada", One("rtx-4000-ada-family", "8.9", W)),
            (
                "RTX PRO 6000 Blackwell",
                One("rtx-pro-6000-blackwell", "12.0", W),
            ),
            ("L40S", One("l40s", "8.9", D)),
            ("Jetson Orin", One("jetson-orin", "8.7", E)),
            ("Orin Nano", One("jetson-orin-nano", "8.7", E)),
            ("Jetson Thor", One("jetson-thor", "11.0", E)),
            ("DGX Spark", One("gb10", "12.1", W)),
            ("sm_120", One("sm_120", "12.0", C)),
            ("12.0", One("sm_120", "12.0", C)),
            ("120", One("sm_120", "12.0", C)),
            ("sm_110", One("sm_110", "11.0", C)),
            (
                "RTX 6000",
                Ambiguous(&["quadro-rtx-6000", "rtx-6000-ada", "rtx-pro-6000-blackwell"]),
            ),
            (
                "RTX 4000",
                Ambiguous(&["quadro-rtx-4000", "rtx-4000-ada", "rtx-pro-4000-blackwell"]),
            ),
            (
                "RTX 2000",
                Ambiguous(&["rtx-2000-ada", "rtx-pro-2000-blackwell"]),
            ),
            ("Radeon 7900", Unknown),
            ("Z100", Unknown),
            ("H10", Unknown),
            ("", Unknown),
        ];
        assert!(table.len() >= 40);
        for (query, want) in table {
            let got = kb().resolve_gpu(query);
            match (want, got) {
                (One(id, cc, class), Ok(spec)) => assert_eq!(
                    (
                        spec.id.as_str(),
                        spec.compute_capability.as_str(),
                        spec.class
                    ),
                    (*id, *cc, *class),
                    "{query}"
                ),
                (Ambiguous(ids), Err(err)) => {
                    let text = crate::error::render(&err);
                    assert!(text.contains("is ambiguous"), "{query}: {text}");
                    for id in *ids {
                        let spec = kb().lookup_gpu(id).unwrap();
                        let choice = format!(
                            "{id} ({}, cc {}, {})",
                            spec.name,
                            spec.compute_capability,
                            class_name(spec.class)
                        );
                        assert!(text.contains(&choice), "{query}: {choice} in {text}");
                    }
                    assert_eq!(crate::error::exit_code_of(&err), 2, "{query}");
                }
                (Unknown, Err(err)) => {
                    let text = crate::error::render(&err);
                    assert!(
                        text.contains("is not a GPU envgen knows"),
                        "{query}: {text}"
                    );
                    assert_eq!(crate::error::exit_code_of(&err), 2, "{query}");
                }
                (_, Ok(spec)) => panic!("{query}: resolved to {}", spec.id),
                (_, Err(err)) => panic!("{query}: {}", crate::error::render(&err)),
            }
        }
    }

    #[test]
    fn a_family_merges_only_rows_that_agree_and_shows_a_memory_range() {
        let kb = kb();
        // A10 and A100 are different GPUs, whichever is typed first.
        assert_eq!(kb.lookup_gpu("A10").unwrap().compute_capability, "8.6");
        assert_eq!(kb.lookup_gpu("A100").unwrap().compute_capability, "8.0");
        let h100 = kb.lookup_gpu("H100").unwrap();
        assert_eq!(h100.variants, ["h100-pcie", "h100-sxm", "h100-nvl"]);
        assert_eq!(h100.memory_range_mib, Some((81559, 95830)));
        // Every merged family's variants agree on what verdicts read.
        for spec in &kb.family_specs {
            for id in &spec.variants {
                let row = kb.gpus.iter().find(|g| &g.id == id).unwrap();
                assert_eq!(
                    (&row.compute_capability, row.class),
                    (&spec.compute_capability, spec.class),
                    "{} in {}",
                    id,
                    spec.id
                );
            }
            // A merged spec is found again by its id (verdicts look up catalog_id).
            assert_eq!(kb.lookup_gpu(&spec.id).map(|s| &s.id), Some(&spec.id));
        }
        // Memory text: a range for A100, unknown when a laptop variant has none.
        let host = kb
            .assumed_host(&["A100".into(), "RTX 3080".into(), "A30".into()], None)
            .unwrap();
        let text: Vec<String> = host.gpus.iter().map(|g| kb.memory_text(g)).collect();
        assert_eq!(text, ["40–80 GiB", "memory unknown", "24576 MiB"]);
        // A probed GPU keeps its exact row, not its family.
        let mut probed = Host::default();
        probed.gpus.push(Gpu {
            name: "NVIDIA GeForce RTX 3080".into(),
            ..Gpu::default()
        });
        kb.enrich(&mut probed);
        assert_eq!(probed.gpus[0].catalog_id.as_deref(), Some("rtx-3080"));
        assert_eq!(probed.gpus[0].memory_mib, Some(10240));
    }

    #[test]
    fn assumed_host_derives_the_driver_cuda() {
        let cuda = |d: &str| kb().assumed_host(&[], Some(d)).unwrap().cuda_driver_version;
        assert_eq!(cuda("535.261.03").as_deref(), Some("12.2"));
        for (branch, expected) in [
            ("535", "12.2"),
            ("550", "12.4"),
            ("570", "12.8"),
            ("575", "12.9"),
            ("580", "13.0"),
            ("590", "13.1"),
            ("595", "13.2"),
        ] {
            assert_eq!(cuda(branch).as_deref(), Some(expected), "driver {branch}");
        }
        assert!(kb().assumed_host(&[], Some("12.8")).is_err());
        let host = kb()
            .assumed_host(&["sm_120".into(), "A30".into()], None)
            .unwrap();
        assert_eq!(host.gpus[0].class, None);
        assert_eq!(host.gpus[1].class, Some(GpuClass::Datacenter));
    }

    #[test]
    fn image_references_are_normalized() {
        for r in [
            "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
            "docker.io/nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
            "index.docker.io/nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
        ] {
            let image = kb().image(r).expect(r);
            assert_eq!(image.cuda.as_deref(), Some("12.8.1"));
            assert!(image
                .require_cuda
                .as_deref()
                .unwrap()
                .starts_with("cuda>=12.8 brand="));
        }
        assert!(kb()
            .image("nvidia/cuda:12.0.0-cudnn8-devel-ubuntu22.04")
            .is_some());
        assert!(kb()
            .image("nvidia/cuda:13.1.0-runtime-ubuntu24.04")
            .is_some());
        assert!(kb().image("nvidia/cuda:99.0-runtime-ubuntu24.04").is_none());
    }

    #[test]
    fn wheels_and_unknown_wheels() {
        assert_eq!(kb().wheel("2.6.0+cu124").unwrap().cuda, "12.4");
        let err = kb().wheel("2.6.0+cu999").unwrap_err();
        let text = crate::error::render(&err);
        assert!(
            text.contains("2.6.0+cu999") && text.contains("2.6.0+cu126"),
            "{text}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
    }
}
