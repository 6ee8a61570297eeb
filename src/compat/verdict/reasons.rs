//! The vocabulary every verdict check speaks: a reason's status and code,
//! and the phrases and GPU facts the checks share (a GPU's label and
//! compute capability, how a build's kernels match it, what is unknown or
//! UNCONFIRMED). Its own file so that the checks (`driver`, `image`,
//! `precision`, …) and `verdict.rs`, which runs them, all stand on it
//! without importing each other back.

use serde::{Deserialize, Serialize};

use super::super::version::{parse_compute_capability, Version};
use super::super::ImageFacts;
use crate::host::Gpu;

/// How a verdict, or one of its reasons, comes out: `ok` < `warn` < `fail`
/// (a verdict's is its worst reason's). Not a run's status
/// (`envgen_experiments::engine::Status`: completed, failed, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictStatus {
    Ok,
    Warn,
    Fail,
}

/// One finding, with a stable code from docs/cli.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub code: String,
    pub status: VerdictStatus,
    pub message: String,
    pub fix: String,
}

pub(super) fn reason(code: &str, status: VerdictStatus, message: String, fix: String) -> Reason {
    Reason {
        code: code.into(),
        status,
        message,
        fix,
    }
}

/// Nothing is known about `image`: not in the catalog, no CUDA facts.
pub(super) fn knows_nothing_about(image: &ImageFacts) -> bool {
    image.cuda.as_deref().and_then(Version::parse).is_none()
        && image.require_cuda.is_none()
        && image.sass.is_empty()
        && image.ptx.is_empty()
        && image.min_compute_capability.is_none()
        && image.pytorch.is_none()
        && image.origin != "catalog"
}

/// `unknown-image`: nothing known about it, or its catalog CUDA is UNCONFIRMED.
pub(super) fn unknown_image(image: &ImageFacts) -> Reason {
    let message = if knows_nothing_about(image) {
        format!("envgen knows nothing about {} (not in the catalog; no NVIDIA_REQUIRE_CUDA / CUDA_VERSION): nothing was checked", image.reference)
    } else {
        format!(
            "the CUDA version of {} is UNCONFIRMED in env/images.toml: the driver was not checked",
            image.reference
        )
    };
    reason(
        "unknown-image",
        VerdictStatus::Warn,
        message,
        "use a catalog reference (see `envgen doctor --json` with no --image), an envgen profile, or a local image that sets NVIDIA_REQUIRE_CUDA; add NGC facts to env/images.toml".into(),
    )
}

/// "(relies on UNCONFIRMED data: …)" when any of `keys` is marked unconfirmed.
pub(super) fn unconfirmed_note(unconfirmed: &[String], keys: &[&str]) -> String {
    let hits: Vec<&str> = unconfirmed
        .iter()
        .filter(|u| keys.iter().any(|k| u.starts_with(k)))
        .map(String::as_str)
        .collect();
    unconfirmed_text(&hits)
}

/// " (relies on UNCONFIRMED data: a; b)", or nothing without any.
pub(super) fn unconfirmed_text(hits: &[&str]) -> String {
    if hits.is_empty() {
        String::new()
    } else {
        format!(" (relies on UNCONFIRMED data: {})", hits.join("; "))
    }
}

pub(super) fn gpu_label(gpu: &Gpu) -> String {
    match &gpu.compute_capability {
        Some(cc) => format!(
            "GPU {} ({}, sm_{})",
            gpu.index,
            gpu.name,
            cc.replace('.', "")
        ),
        None => format!("GPU {} ({})", gpu.index, gpu.name),
    }
}

pub(super) fn gpu_cc(gpu: &Gpu) -> Option<Version> {
    gpu.compute_capability
        .as_deref()
        .and_then(parse_compute_capability)
        .map(|(v, _)| v)
}

pub(super) fn unknown_gpu(gpu: &Gpu) -> Option<Reason> {
    if gpu.catalog_id.is_some() {
        return None;
    }
    let message = match &gpu.compute_capability {
        Some(cc) => format!(
            "{} is not in env/gpus.toml: checked by its compute capability {cc} only; its market class is unknown, so forward compatibility is assumed unavailable",
            gpu_label(gpu)
        ),
        None => format!(
            "{} is not in env/gpus.toml and its compute capability is unknown: kernel and precision checks are skipped",
            gpu_label(gpu)
        ),
    };
    Some(reason(
        "unknown-gpu",
        VerdictStatus::Warn,
        message,
        "add the GPU to env/gpus.toml (a data change, see docs/doctor.md), or pass --assume-gpu with a known name or SM".into(),
    ))
}

/// How a GPU can run a build: native SASS, driver JIT of PTX, or not at all.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum KernelMatch {
    Sass,
    Ptx(Version),
    None,
}

/// Binary compatibility (Blackwell compatibility guide): a cubin for X.y runs
/// on X.z with z ≥ y, never across majors (`sm_XYa` only on X.Y itself); PTX
/// compute_X.y JIT-compiles for any GPU ≥ X.y.
pub(super) fn kernel_match(gpu: &Version, sass: &[String], ptx: &[String]) -> KernelMatch {
    let runs_sass =
        sass.iter()
            .filter_map(|s| parse_compute_capability(s))
            .any(|(cubin, suffix)| {
                cubin.major() == gpu.major()
                    && if suffix == Some('a') {
                        cubin.minor() == gpu.minor()
                    } else {
                        cubin.minor() <= gpu.minor()
                    }
            });
    if runs_sass {
        return KernelMatch::Sass;
    }
    ptx.iter()
        .filter_map(|p| parse_compute_capability(p))
        .map(|(v, _)| v)
        .filter(|v| v <= gpu)
        .max()
        .map_or(KernelMatch::None, KernelMatch::Ptx)
}

pub(super) fn list_archs(archs: &[String]) -> String {
    if archs.is_empty() {
        return "none".into();
    }
    archs
        .iter()
        .filter_map(|a| parse_compute_capability(a))
        .map(|(v, s)| {
            format!(
                "sm_{}{}{}",
                v.major(),
                v.minor(),
                s.map(String::from).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// envgen's own CPU profile: nothing in it touches the GPU or driver.
pub(super) fn is_envgen_cpu_image(image: &ImageFacts) -> bool {
    let envgen_made = image.origin == "profile" || image.origin == "envgen-image";
    envgen_made && image.cuda.is_none() && image.require_cuda.is_none()
}
