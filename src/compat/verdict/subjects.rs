//! A PyTorch wheel (its kernels and bundled CUDA runtime) and a precision
//! (the GPU's tensor cores) against one GPU.

use super::super::version::Version;
use super::super::{KnowledgeBase, WheelFacts};
use super::driver::{check_driver, DriverFacts, Packaging};
use super::{
    gpu_cc, gpu_label, kernel_match, list_archs, reason, unconfirmed_note, unknown_gpu,
    HardwarePrecision, KernelMatch, Reason, VerdictStatus,
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

pub(super) fn check_precision(
    kb: &KnowledgeBase,
    gpu: &Gpu,
    precision: HardwarePrecision,
) -> Vec<Reason> {
    let mut reasons: Vec<Reason> = unknown_gpu(gpu).into_iter().collect();
    let Some(cc) = gpu_cc(gpu) else {
        return reasons;
    };
    let Some(feature) = kb.precision_feature(precision.name()) else {
        return reasons;
    };
    let Some(min) = Version::parse(&feature.min_compute_capability) else {
        return reasons;
    };
    if cc >= min {
        return reasons;
    }
    let label = gpu_label(gpu);
    let (code, status, message, fix) = match precision {
        HardwarePrecision::Bf16 => (
            "bf16-unsupported",
            VerdictStatus::Fail,
            format!("{label} has no BF16 support: BF16 needs compute capability ≥ {min} (Ampere or newer)"),
            "train in fp16 with loss scaling (or fp32) on this GPU, or use an Ampere+ GPU (A100, A30, L4, H100 …)".to_string(),
        ),
        HardwarePrecision::Fp8 => (
            "fp8-unsupported",
            VerdictStatus::Fail,
            format!("{label} has no FP8 tensor cores: FP8 needs compute capability ≥ {min} (Ada L4/L40S/RTX 4090, Hopper H100/H200, Blackwell); Ampere A100/A30 (8.0) have none"),
            "use bf16 on this GPU, or run FP8 on an L4, L40S, H100/H200 or B200".to_string(),
        ),
        // Not contract codes: TF32/FP16 below their threshold still compute
        // (in FP32 / without tensor cores), only slower.
        HardwarePrecision::Tf32 => (
            "tf32-unsupported",
            VerdictStatus::Warn,
            format!("{label} has no TF32 tensor cores (compute capability ≥ {min}): matmuls run in full FP32, slower"),
            "expect FP32 speed, or use fp16 with loss scaling on this GPU".to_string(),
        ),
        HardwarePrecision::Fp16 => (
            "fp16-unsupported",
            VerdictStatus::Warn,
            format!("{label} has no FP16 tensor cores (compute capability ≥ {min}): FP16 runs without tensor-core speed-ups"),
            "use fp32 on this GPU, or a Volta+ GPU".to_string(),
        ),
    };
    reasons.push(reason(
        code,
        status,
        format!("{message}{}", unconfirmed_note(&feature.unconfirmed, &[""])),
        fix,
    ));
    reasons
}
