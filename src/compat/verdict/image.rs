//! An image against one GPU: the architectures it (or its toolkit) supports
//! and the kernels it carries, then the driver (minor-version or forward
//! compatibility, the NGC entrypoint's modes) and the container runtime's
//! NVIDIA_REQUIRE_CUDA gate.

use std::collections::HashMap;

use super::super::require::RequireRule;
use super::super::version::Version;
use super::super::{ImageFacts, KnowledgeBase};
use super::driver::{check_driver, check_require_cuda, Packaging};
use super::driver_facts::DriverFacts;
use super::reasons::{
    gpu_cc, gpu_label, is_envgen_cpu_image, kernel_match, knows_nothing_about, list_archs, reason,
    unconfirmed_note, unknown_gpu, unknown_image, KernelMatch, Reason, VerdictStatus,
};
use crate::host::Gpu;

pub(super) fn check_image(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
    image: &ImageFacts,
    rules: &HashMap<&str, Result<RequireRule, String>>,
) -> Vec<Reason> {
    let mut reasons: Vec<Reason> = unknown_gpu(gpu).into_iter().collect();
    if is_envgen_cpu_image(image) {
        // envgen's own CPU profile: nothing in it touches the GPU or driver.
        reasons.push(reason(
            "cpu-only",
            VerdictStatus::Ok,
            format!("{} is an envgen CPU-backend image: it runs on any x86_64 host and does not use this GPU", image.reference),
            "for GPU training use the cuda12.8 profile".to_string(),
        ));
        return reasons;
    }
    let cuda = image.cuda.as_deref().and_then(Version::parse);
    let knows_nothing = knows_nothing_about(image);
    if knows_nothing || cuda.is_none() {
        reasons.push(unknown_image(image));
        if knows_nothing {
            return reasons;
        }
    }
    let cc = gpu_cc(gpu);
    let sm = cc.as_ref().and_then(|cc| kb.sm_support(cc));
    let mut needs_jit = image.compiles_at_runtime;

    // Architecture: dropped by the image or its toolkit, or unknown to it.
    if let Some(cc) = &cc {
        let min_cc = image
            .min_compute_capability
            .as_deref()
            .and_then(Version::parse);
        let last_cuda = sm
            .and_then(|s| s.last_cuda.as_deref())
            .and_then(Version::parse);
        let first_cuda = sm
            .and_then(|s| s.first_cuda.as_deref())
            .and_then(Version::parse);
        if let Some(min) = min_cc.filter(|min| cc < min) {
            reasons.push(reason(
                "arch-dropped",
                VerdictStatus::Fail,
                format!("{} supports compute capability ≥ {min}; {} is older{}", image.reference, gpu_label(gpu),
                    unconfirmed_note(&image.unconfirmed, &["min_compute_capability"])),
                "use an older release of this image (NGC PyTorch ≤ 24.12 still supports Volta), or a newer GPU".into(),
            ));
        } else if let (Some(last), Some(cuda)) = (&last_cuda, &cuda) {
            if cuda.major_minor() > *last {
                let tag = kb
                    .newest_base_at_most(last)
                    .unwrap_or_else(|| last.to_string());
                reasons.push(reason(
                    "arch-dropped",
                    VerdictStatus::Fail,
                    format!(
                        "CUDA {} dropped {}: the last toolkit that supports it is CUDA {last}",
                        cuda.major_minor(),
                        gpu_label(gpu)
                    ),
                    format!("use a CUDA ≤ {last} image (e.g. nvidia/cuda:{tag}-*), or a newer GPU"),
                ));
            }
        }
        if !image.sass.is_empty() || !image.ptx.is_empty() {
            match kernel_match(cc, &image.sass, &image.ptx) {
                KernelMatch::Sass => {}
                KernelMatch::Ptx(_) => needs_jit = true,
                KernelMatch::None => reasons.push(reason(
                    "no-kernel-image",
                    VerdictStatus::Fail,
                    format!("{} has kernels for {} (PTX: {}), none of which runs on {}: \"no kernel image is available for execution on the device\"",
                        image.reference, list_archs(&image.sass), list_archs(&image.ptx), gpu_label(gpu)),
                    format!("rebuild for sm_{}{} (or embed PTX ≤ compute_{}{})", cc.major(), cc.minor(), cc.major(), cc.minor()),
                )),
            }
        } else if let (Some(first), Some(cuda)) = (&first_cuda, &cuda) {
            let builds_kernels = image.pytorch.is_some() || image.compiles_at_runtime;
            if builds_kernels && cuda.major_minor() < *first {
                let how = if image.compiles_at_runtime {
                    format!(
                        "its runtime compiler (NVRTC of CUDA {}) cannot target sm_{}{}",
                        cuda.major_minor(),
                        cc.major(),
                        cc.minor()
                    )
                } else {
                    format!(
                        "its kernels are built with CUDA {}, which cannot target sm_{}{}{}",
                        cuda.major_minor(),
                        cc.major(),
                        cc.minor(),
                        unconfirmed_note(&["arch list of NGC builds".to_string()], &["arch"])
                    )
                };
                let tag = kb
                    .oldest_base_at_least(first)
                    .unwrap_or_else(|| first.to_string());
                reasons.push(reason(
                    "no-kernel-image",
                    VerdictStatus::Fail,
                    format!("{} needs CUDA ≥ {first} (first toolkit with sm_{}{}); {} is CUDA {}: {how}",
                        gpu_label(gpu), cc.major(), cc.minor(), image.reference, cuda.major_minor()),
                    format!("use an image built with CUDA ≥ {first} (e.g. nvidia/cuda:{tag}-* or NGC PyTorch ≥ 25.01)"),
                ));
            }
        }
    }

    // Driver: the image's CUDA vs the driver's, then the runtime's gate.
    if let Some(cuda) = &cuda {
        let packaging = if image.ngc_entrypoint {
            let fc_rule = image
                .forward_compat_rule
                .as_deref()
                .and_then(|r| rules.get(r));
            Packaging::NgcImage {
                fc_branch_ok: fc_rule
                    .and_then(|rule| check_require_cuda(driver, gpu, rule).ok())
                    .map(|refusal| refusal.is_none()),
            }
        } else {
            Packaging::ImageWithCompatLibs
        };
        let mut driver_reasons = check_driver(kb, driver, gpu, cuda, packaging, needs_jit);
        let note = unconfirmed_note(&image.unconfirmed, &["cuda"]);
        for r in &mut driver_reasons {
            r.message.push_str(&note);
        }
        reasons.extend(driver_reasons);
    }
    if let Some(rule) = image.require_cuda.as_deref().and_then(|r| rules.get(r)) {
        match check_require_cuda(driver, gpu, rule) {
            Err(problem) => reasons.push(reason(
                "unknown-image",
                VerdictStatus::Warn,
                format!("the NVIDIA_REQUIRE_CUDA of {} could not be read ({problem}); the runtime gate was not checked", image.reference),
                "fix the image's NVIDIA_REQUIRE_CUDA (space-separated alternatives of comma-separated conditions)".into(),
            )),
            Ok(None) => {}
            Ok(Some(refusal)) => {
                let note = unconfirmed_note(&image.unconfirmed, &["require_cuda"]);
                if let Some(existing) = reasons.iter_mut().find(|r| r.code == "forward-compat-unsupported" || r.code == "driver-too-old") {
                    existing.message.push_str(&format!("; besides, {refusal}{note}"));
                } else {
                    let fix = reasons
                        .iter()
                        .find(|r| r.code == "forward-compat-required" || r.code == "minor-version-compat")
                        .map(|r| r.fix.clone())
                        .unwrap_or_else(|| "upgrade the driver, or use an image with an older CUDA".into());
                    reasons.retain(|r| r.code != "forward-compat-required" && r.code != "minor-version-compat" && r.code != "ptx-jit-too-new");
                    reasons.push(reason(
                        "driver-too-old",
                        VerdictStatus::Fail,
                        format!("{} on {}: {refusal}{note}", image.reference, gpu_label(gpu)),
                        fix,
                    ));
                }
            }
        }
    }
    reasons
}
