//! The driver branches that can drive a GPU at all: from its architecture's
//! first driver to, once NVIDIA has ended its support, its last branch
//! (`[[architecture]]` in env/cuda.toml). Both ends are checked first, for
//! every subject (issues #27 and #43), and every fix that names a driver
//! stays inside the range.

use super::super::data::Architecture;
use super::super::version::Version;
use super::super::KnowledgeBase;
use super::driver_facts::DriverFacts;
use super::reasons::{gpu_cc, gpu_label, reason, unconfirmed_note, Reason, VerdictStatus};
use crate::host::Gpu;

/// The end of a GPU's driver support: its architecture's last branch.
pub(super) struct LastBranch<'a> {
    pub(super) arch: &'a Architecture,
    pub(super) branch: u32,
    /// The newest CUDA that branch runs (R470 → 11.4, R580 → 13.0).
    pub(super) max_cuda: Option<Version>,
}

/// The last driver branch for `gpu`, when NVIDIA has ended its support.
pub(super) fn last_branch<'a>(kb: &'a KnowledgeBase, gpu: &Gpu) -> Option<LastBranch<'a>> {
    let arch = kb.architecture(&gpu_cc(gpu)?)?;
    let branch = arch.last_driver_branch?;
    let max_cuda = Version::parse(&branch.to_string()).and_then(|b| kb.max_cuda_for_driver(&b));
    Some(LastBranch {
        arch,
        branch,
        max_cuda,
    })
}

/// The first check of every verdict, before any CUDA-version reasoning: a
/// driver branch older than the GPU's architecture cannot drive the GPU at
/// all (nvidia-smi does not list it), whatever the software: no image,
/// wheel, precision or forward-compatibility package changes that, since
/// cuda-compat replaces only user-mode libraries. Without a driver version,
/// the driver's CUDA is compared with the architecture's first CUDA.
pub(super) fn driver_predates_gpu(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
) -> Option<Reason> {
    let cc = gpu_cc(gpu)?;
    let arch = kb.architecture(&cc)?;
    let min = Version::parse(&arch.min_driver_linux)?;
    let first_cuda = Version::parse(&arch.first_cuda)?;
    let predates = match (&driver.version, &driver.max_cuda) {
        (Some(version), _) => version.major() < min.major(),
        (None, Some(max_cuda)) if !driver.floor_only => max_cuda < &first_cuda,
        _ => false,
    };
    if !predates {
        return None;
    }
    let fix = match arch.last_driver_branch {
        Some(last) => format!(
            "install a driver from branch R{} to R{last} (≥ {min}; R{last} is the last for {} GPUs); no choice of image or wheel avoids this",
            min.major(),
            arch.name
        ),
        None => format!(
            "upgrade the driver to R{} or newer (≥ {min}); no choice of image or wheel avoids this",
            min.major()
        ),
    };
    Some(reason(
        "driver-predates-gpu",
        VerdictStatus::Fail,
        format!(
            "{} predates {}: {} GPUs need driver branch R{} or newer (≥ {min}, the driver of CUDA {first_cuda}, the first CUDA for sm_{}{}); this driver does not know the chip, so nothing runs on it, and no image, wheel or forward-compatibility package can change that{}",
            driver.describe(),
            gpu_label(gpu),
            arch.name,
            min.major(),
            cc.major(),
            cc.minor(),
            unconfirmed_note(&arch.unconfirmed, &["min_driver_linux"])
        ),
        fix,
    ))
}

/// The other end (issue #43): a driver branch newer than the GPU's last one
/// ignores the GPU, so nothing runs on it however new the software. Without
/// a driver version, the driver's CUDA is compared with the newest CUDA of
/// the last branch.
pub(super) fn driver_dropped_gpu(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
) -> Option<Reason> {
    let last = last_branch(kb, gpu)?;
    let dropped = match (&driver.version, &driver.max_cuda, &last.max_cuda) {
        (Some(version), _, _) => version.major() > last.branch,
        (None, Some(max_cuda), Some(last_cuda)) if !driver.floor_only => max_cuda > last_cuda,
        _ => false,
    };
    if !dropped {
        return None;
    }
    let legacy = kb.legacy_gpu();
    let logged = legacy
        .map(|legacy| {
            format!(
                "; the driver logs \"{}\"",
                legacy
                    .message
                    .replace("{gpu}", gpu.name.trim_start_matches("NVIDIA "))
                    .replace("{branch}", &last.branch.to_string())
                    .replace("{driver}", driver.text.as_deref().unwrap_or("installed"))
            )
        })
        .unwrap_or_default();
    let unconfirmed = legacy
        .map(|legacy| unconfirmed_note(&legacy.unconfirmed, &["message"]))
        .unwrap_or_default();
    let cuda = last
        .max_cuda
        .as_ref()
        .map(|cuda| format!(", which runs CUDA ≤ {cuda}"))
        .unwrap_or_default();
    Some(reason(
        "driver-dropped-gpu",
        VerdictStatus::Fail,
        format!(
            "{} is newer than the last driver branch for {}: NVIDIA supports {} GPUs up to R{} (\"Last Driver Support\" of its architecture matrix){logged}, so nothing runs on it, and no image, wheel or forward-compatibility package can change that{unconfirmed}",
            driver.describe(),
            gpu_label(gpu),
            last.arch.name,
            last.branch,
        ),
        format!(
            "install a driver of the R{} branch (the last for {} GPUs{cuda}), or move the work to a newer GPU",
            last.branch, last.arch.name
        ),
    ))
}

/// The fix for software that needs the toolkit driver `wanted` (of CUDA
/// `cuda`): upgrade to it when the GPU's last branch allows; otherwise the
/// newest the GPU can have, and the software that needs no more.
/// `otherwise` is the alternative already open on this driver
/// (" or use CUDA ≤ 12.2 software (e.g. …)").
pub(super) fn upgrade_fix(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
    wanted: Option<&Version>,
    cuda: &Version,
    otherwise: &str,
) -> String {
    let within = |branch: u32| last_branch(kb, gpu).is_none_or(|last| branch <= last.branch);
    match wanted {
        Some(wanted) if within(wanted.major()) => {
            format!(
                "upgrade the driver to ≥ {wanted} (R{}){otherwise}",
                wanted.major()
            )
        }
        None if last_branch(kb, gpu).is_none() => {
            format!("upgrade the driver to ≥ the one bundled with CUDA {cuda}{otherwise}")
        }
        _ => {
            // Past the GPU's last branch: no driver runs this CUDA natively.
            let Some(last) = last_branch(kb, gpu) else {
                return format!("use software built for an older CUDA{otherwise}");
            };
            let last_cuda = last
                .max_cuda
                .as_ref()
                .map_or_else(|| "an older CUDA".to_string(), |c| format!("CUDA ≤ {c}"));
            let tag = last
                .max_cuda
                .as_ref()
                .and_then(|c| kb.newest_base_at_most(c))
                .map(|tag| format!(" (e.g. nvidia/cuda:{tag}-* images)"))
                .unwrap_or_default();
            let on_last = driver.version.as_ref().map(Version::major) == Some(last.branch);
            let cuda = cuda.major_minor();
            if on_last {
                format!(
                    "use {last_cuda} software{tag} or a newer GPU: R{}, the last driver branch for {} GPUs, runs no CUDA {cuda} natively",
                    last.branch, last.arch.name
                )
            } else {
                format!(
                    "upgrade the driver to R{} at most (R{}, the last driver branch for {} GPUs, runs no CUDA {cuda} natively) and use {last_cuda} software{tag}{otherwise}",
                    last.branch, last.branch, last.arch.name
                )
            }
        }
    }
}
