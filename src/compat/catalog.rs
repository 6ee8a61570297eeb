//! The image catalog (`env/images.toml`): NGC PyTorch releases one-to-one,
//! `nvidia/cuda` rows expanded to every version × Ubuntu × flavour tag, each
//! with the `NVIDIA_REQUIRE_CUDA` its runtime checks; lookups by reference.

use super::data;
use super::version::Version;
use super::KnowledgeBase;

use serde::{Deserialize, Serialize};

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

impl KnowledgeBase {
    /// Fill the catalog part of the knowledge base from `env/images.toml`.
    pub(super) fn index_images(&mut self, file: &data::ImagesFile) {
        self.images = expand_images(file);
        self.ngc_runtime = Some(file.ngc_runtime.clone());
        for (index, image) in self.images.iter().enumerate() {
            self.image_refs
                .insert(normalize_reference(&image.reference), index);
        }
        self.base_cudas = self
            .images
            .iter()
            .filter(|image| image.reference.starts_with("nvidia/cuda:"))
            .filter_map(|image| image.cuda.as_deref().and_then(Version::parse))
            .collect();
        self.base_cudas.sort();
        self.base_cudas.dedup();
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
