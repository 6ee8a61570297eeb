//! A PyTorch wheel (its kernels and bundled CUDA runtime) against one GPU.

use super::super::version::Version;
use super::super::{KnowledgeBase, WheelFacts};
use super::driver::{check_driver, Packaging};
use super::driver_facts::DriverFacts;
use super::reasons::{
    gpu_cc, gpu_label, kernel_match, list_archs, reason, unconfirmed_note, unknown_gpu,
    KernelMatch, Reason, VerdictStatus,
};
use crate::host::Gpu;

pub(super) fn check_wheel(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
    spec: &str,
) -> Vec<Reason> {
    let Ok(wheel) = kb.wheel(spec) else {
        return vec![reason(
            "unknown-image",
            VerdictStatus::Warn,
            format!("PyTorch wheel {spec} is not in env/pytorch.toml: nothing was checked"),
            "pass a known build such as 2.7.1+cu128 (see env/pytorch.toml)".into(),
        )];
    };
    check_wheel_facts(kb, driver, gpu, wheel)
}

/// A wheel whose kernels and CUDA are known: one from env/pytorch.toml, or
/// the torch installed in a command's Python (`launch::preflight`).
pub(super) fn check_wheel_facts(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
    wheel: &WheelFacts,
) -> Vec<Reason> {
    let mut reasons: Vec<Reason> = unknown_gpu(gpu).into_iter().collect();
    let note = unconfirmed_note(&wheel.unconfirmed, &["arch", "intermediate"]);
    let cuda = Version::parse(&wheel.cuda);
    let mut needs_jit = false;
    if let Some(cc) = gpu_cc(gpu) {
        let dropped_by_toolkit = kb
            .sm_support(&cc)
            .and_then(|sm| sm.last_cuda.as_deref().and_then(Version::parse))
            .zip(cuda.as_ref())
            .filter(|(last, cuda)| cuda.major_minor() > *last);
        match kernel_match(&cc, &wheel.sass, &wheel.ptx) {
            KernelMatch::Sass => {}
            KernelMatch::Ptx(_) => needs_jit = true,
            KernelMatch::None => {
                let fixed_by = kb
                    .wheels()
                    .iter()
                    .find(|w| {
                        kernel_match(&cc, &w.sass, &w.ptx) == KernelMatch::Sass
                            && w.unconfirmed.is_empty()
                    })
                    .map(|w| {
                        format!(
                            "install a build with sm_{}{} kernels, e.g. torch {}",
                            cc.major(),
                            cc.minor(),
                            w.spec
                        )
                    })
                    .unwrap_or_else(|| {
                        "no PyTorch build in env/pytorch.toml supports this GPU".into()
                    });
                let (code, why) = match dropped_by_toolkit {
                    Some((last, _)) => (
                        "arch-dropped",
                        format!(
                            "; CUDA {} dropped this architecture (last toolkit: CUDA {last})",
                            wheel.cuda
                        ),
                    ),
                    None => ("no-kernel-image", String::new()),
                };
                reasons.push(reason(
                    code,
                    VerdictStatus::Fail,
                    format!("torch {} has kernels for {} (PTX: {}); none runs on {}{why}: \"CUDA error: no kernel image is available for execution on the device\"{note}",
                        wheel.spec, list_archs(&wheel.sass), list_archs(&wheel.ptx), gpu_label(gpu)),
                    fixed_by,
                ));
            }
        }
    }
    if let Some(cuda) = &cuda {
        reasons.extend(check_driver(
            kb,
            driver,
            gpu,
            cuda,
            Packaging::Wheel,
            needs_jit,
        ));
    }
    reasons
}
