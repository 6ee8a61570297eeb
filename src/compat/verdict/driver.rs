//! The driver side of a verdict, once the driver can drive the GPU at all
//! (driver_range.rs): the driver's CUDA against the software's (minor-version and
//! forward compatibility, the NGC entrypoint's modes), then an image's
//! NVIDIA_REQUIRE_CUDA as the container runtime checks it.

use super::super::require::{brands_for_class, Outcome, RequireRule, RuntimeFacts};
use super::super::version::Version;
use super::super::KnowledgeBase;
use super::driver_facts::DriverFacts;
use super::driver_range::upgrade_fix;
use super::reasons::{gpu_cc, gpu_label, reason, Reason, VerdictStatus};
use crate::host::{Gpu, GpuClass};

/// How the software gets a newer CUDA than the driver's.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Packaging {
    /// nvidia/cuda and other images: ship the cuda-compat libraries; the
    /// container runtime checks their NVIDIA_REQUIRE_CUDA.
    ImageWithCompatLibs,
    /// An NGC framework image: ships the cuda-compat libraries, and its
    /// entrypoint picks the compatibility mode at start. `fc_branch_ok`: does
    /// the driver's branch support its forward-compatibility libraries
    /// (modelled by the branch list of the `nvidia/cuda` rule of the same
    /// CUDA); `None` when unknown.
    NgcImage { fc_branch_ok: Option<bool> },
    /// A pip wheel: bundles the CUDA runtime only.
    Wheel,
}

impl Packaging {
    fn ships_compat_libs(self) -> bool {
        !matches!(self, Packaging::Wheel)
    }
}

/// `"… the NGC entrypoint prints "…""` for an NGC image, else nothing.
fn entrypoint_says(
    kb: &KnowledgeBase,
    packaging: Packaging,
    pick: fn(&super::super::data::NgcRuntime) -> &String,
) -> String {
    match (packaging, kb.ngc_runtime()) {
        (Packaging::NgcImage { .. }, Some(runtime)) => format!(
            "; the image's entrypoint starts it and prints \"{}\"",
            pick(runtime)
        ),
        _ => String::new(),
    }
}

/// Driver vs. the CUDA version the software was built with (`target`).
/// `needs_jit`: the software needs the driver to compile PTX of `target`.
pub(super) fn check_driver(
    kb: &KnowledgeBase,
    driver: &DriverFacts,
    gpu: &Gpu,
    target: &Version,
    packaging: Packaging,
    needs_jit: bool,
) -> Vec<Reason> {
    // The full release ("12.6.3") names its own toolkit driver (560.35.05,
    // not the 12.6 GA's 560.28.03); comparisons use major.minor.
    let release = target.clone();
    let target = target.major_minor();
    let Some(max_cuda) = &driver.max_cuda else {
        // A driver older than CUDA 11's minor-compat minimum runs none of it.
        return match &driver.text {
            Some(text) => vec![reason(
                "driver-too-old",
                VerdictStatus::Fail,
                format!("driver {text} is older than every CUDA release envgen knows (CUDA 11.x needs ≥ 450.80.02); CUDA {target} cannot run"),
                upgrade_fix(kb, driver, gpu, kb.toolkit_driver_min(&release).as_ref(), &release, ""),
            )],
            None => Vec::new(),
        };
    };
    if *max_cuda >= target {
        return Vec::new();
    }
    let have = driver.describe();
    let cc = gpu_cc(gpu);
    // A GPU newer than the driver's CUDA can't be driven by it (the
    // architecture gate usually says so first; this covers a driver known
    // only by its CUDA).
    let gpu_needs_newer = cc
        .as_ref()
        .and_then(|cc| kb.sm_support(cc))
        .and_then(|sm| sm.first_cuda.as_deref().and_then(Version::parse))
        .filter(|first| first > max_cuda);
    // The driver to recommend must serve both the software and the GPU.
    let driver_target = match &gpu_needs_newer {
        Some(first) if *first > target => first.clone(),
        _ => release.clone(),
    };
    let older = kb
        .newest_base_at_most(max_cuda)
        .map(|tag| format!(" or use CUDA ≤ {max_cuda} software (e.g. nvidia/cuda:{tag}-* images)"))
        .unwrap_or_else(|| format!(" or use software built for CUDA ≤ {max_cuda}"));
    // Never past the GPU's last driver branch (issue #43).
    let upgrade = upgrade_fix(
        kb,
        driver,
        gpu,
        kb.toolkit_driver_min(&driver_target).as_ref(),
        &driver_target,
        &older,
    );
    let minor_compat_ok = driver
        .version
        .as_ref()
        .map_or(max_cuda.major() == target.major(), |v| {
            kb.driver_cuda_major(v) == Some(target.major())
                && kb
                    .minor_compat_min(target.major())
                    .is_some_and(|min| v >= &min)
        });
    let fc = kb.forward_compat();
    let fc_gpu = gpu
        .class
        .is_some_and(|class| fc.is_some_and(|fc| fc.classes.contains(&class)));
    let fc_branch_ok = match packaging {
        Packaging::NgcImage { fc_branch_ok } => fc_branch_ok != Some(false),
        _ => true,
    };
    // Only images carry the cuda-compat libraries; a wheel can't use them.
    let fc_class = packaging.ships_compat_libs() && fc_gpu && fc_branch_ok;
    let fc_note = fc
        .filter(|fc| !fc.unconfirmed.is_empty())
        .map(|fc| {
            format!(
                "; which branch supports which cuda-compat package is UNCONFIRMED ({})",
                fc.source
            )
        })
        .unwrap_or_default();
    let mut reasons = Vec::new();

    if packaging == Packaging::Wheel && (gpu_needs_newer.is_some() || !minor_compat_ok) {
        let why = match &gpu_needs_newer {
            Some(first) => format!("{} needs a driver for CUDA ≥ {first}", gpu_label(gpu)),
            None => format!(
                "a CUDA {target} runtime needs a CUDA {}.x driver ≥ {}",
                target.major(),
                kb.minor_compat_min(target.major())
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into())
            ),
        };
        reasons.push(reason(
            "driver-too-old",
            VerdictStatus::Fail,
            format!("{have} is too old: {why} (PyTorch reports \"The NVIDIA driver on your system is too old\"); wheels do not ship forward-compat libraries"),
            upgrade.clone(),
        ));
        return reasons;
    }
    if gpu_needs_newer.is_none() && minor_compat_ok && !fc_class {
        reasons.push(reason(
            "minor-version-compat",
            VerdictStatus::Warn,
            format!(
                "CUDA {target} runs on {have} through minor-version compatibility: a limited feature set, and the driver cannot JIT-compile PTX newer than CUDA {max_cuda}{}",
                entrypoint_says(kb, packaging, |r| &r.minor_compat_notice)
            ),
            upgrade.clone(),
        ));
        if needs_jit {
            reasons.push(ptx_jit_too_new(&have, &target, max_cuda, &upgrade));
        }
        return reasons;
    }
    if let (true, Some(first)) = (fc_class, &gpu_needs_newer) {
        // The cuda-compat package replaces user-mode libraries only; the
        // kernel-mode driver still has to know the GPU (envgen's reading of
        // "subject to platform and GPU support": listed as UNCONFIRMED).
        reasons.push(reason(
            "driver-too-old",
            VerdictStatus::Fail,
            format!(
                "{} needs a driver of CUDA ≥ {first}; {have} predates it, and the forward-compatibility libraries upgrade only the user-mode driver (UNCONFIRMED reading of the forward-compatibility guide)",
                gpu_label(gpu)
            ),
            upgrade,
        ));
        return reasons;
    }
    if fc_class {
        reasons.push(reason(
            "forward-compat-required",
            VerdictStatus::Warn,
            format!(
                "CUDA {target} needs the forward-compatibility libraries (cuda-compat-{}-{}) on {have}; the image ships them and {} supports them{}{}",
                target.major(), target.minor(), gpu_label(gpu), fc_note,
                entrypoint_says(kb, packaging, |r| &r.forward_compat_notice)
            ),
            format!("keep the image's /usr/local/cuda/compat libraries on the library path (NGC images enable them automatically), or {upgrade}"),
        ));
        return reasons;
    }
    let why = match &gpu_needs_newer {
        Some(first) => format!(
            "{} needs CUDA ≥ {first}, which {have} lacks",
            gpu_label(gpu)
        ),
        None => format!("CUDA {target} is a newer major than {have}"),
    };
    let class = match gpu.class {
        Some(GpuClass::Consumer) => "a consumer (GeForce) GPU".to_string(),
        Some(GpuClass::Workstation) => "a workstation GPU".to_string(),
        Some(other) => format!("a {other:?} GPU"),
        None => "a GPU of unknown market class".to_string(),
    };
    let unavailable = if fc_gpu && packaging.ships_compat_libs() {
        format!(
            "the image's forward-compatibility libraries do not support driver branch R{} (modelled by the brand and branch alternatives of the nvidia/cuda:{target} rule)",
            driver.version.as_ref().map_or(0, Version::major)
        )
    } else {
        format!("it is unavailable on {class}")
    };
    let (code, name, text) = fc
        .map(|fc| (fc.error_code, fc.error_name.clone(), fc.error_text.clone()))
        .unwrap_or((
            804,
            "cudaErrorCompatNotSupportedOnDevice".into(),
            String::new(),
        ));
    let entrypoint = match (packaging, kb.ngc_runtime()) {
        (Packaging::NgcImage { .. }, Some(runtime)) => format!(
            "; the container still starts, but its entrypoint prints \"{}\" and CUDA cannot initialize",
            runtime
                .unavailable_error
                .replace(
                    "{built_for}",
                    &kb.toolkit_driver_min(&release)
                        .map(|v| format!("{}.{}", v.major(), v.minor()))
                        .unwrap_or_else(|| "?".into())
                )
                .replace("{driver}", driver.text.as_deref().unwrap_or("?"))
        ),
        _ => String::new(),
    };
    reasons.push(reason(
        "forward-compat-unsupported",
        VerdictStatus::Fail,
        format!(
            "{why}; only forward compatibility could bridge that, and {unavailable} (error {code} {name}: \"{text}\"; the \"select NGC Server Ready RTX SKUs\" exception is not modelled){entrypoint}"
        ),
        upgrade,
    ));
    reasons
}

fn ptx_jit_too_new(have: &str, target: &Version, max_cuda: &Version, upgrade: &str) -> Reason {
    reason(
        "ptx-jit-too-new",
        VerdictStatus::Fail,
        format!("the kernels are compiled from CUDA {target} PTX at run time, but {have} can only JIT PTX up to CUDA {max_cuda} (CUDA_ERROR_UNSUPPORTED_PTX_VERSION: \"the provided PTX was compiled with an unsupported toolchain\")"),
        upgrade.to_string(),
    )
}

/// The image's NVIDIA_REQUIRE_CUDA, checked as the container runtime would.
/// `Ok(None)`: satisfied or not checkable; `Ok(Some(text))`: the refusal.
pub(super) fn check_require_cuda(
    driver: &DriverFacts,
    gpu: &Gpu,
    rule: &Result<RequireRule, String>,
) -> Result<Option<String>, String> {
    let rule = rule.as_ref().map_err(Clone::clone)?;
    if driver.version.is_none() && driver.max_cuda.is_none() {
        return Ok(None);
    }
    let brands = brands_for_class(gpu.class);
    let facts = RuntimeFacts {
        cuda: driver.max_cuda.clone(),
        driver: driver.version.clone(),
        arch: gpu_cc(gpu),
        brands,
    };
    Ok(match rule.evaluate(&facts) {
        Outcome::Satisfied => None,
        Outcome::Unsatisfied { first_failed, alternatives } => Some(format!(
            "the NVIDIA runtime refuses to start it: \"unsatisfied condition: {first_failed}\" (none of the {alternatives} NVIDIA_REQUIRE_CUDA alternatives holds for {} with brand {})",
            driver.describe(),
            brands.join("/")
        )),
    })
}
