//! A number format against one GPU's hardware: whether it has the format at
//! all, and whether it runs it on tensor cores (`env/precision.toml` for the
//! thresholds, `env/gpus.toml` for the chips without tensor cores).

use serde::{Deserialize, Serialize};

use super::super::data::PrecisionFeature;
use super::super::version::{parse_compute_capability, Version};
use super::super::KnowledgeBase;
use super::reasons::{gpu_cc, gpu_label, reason, unknown_gpu, Reason, VerdictStatus};
use crate::host::Gpu;

/// A number format whose hardware support `doctor --precision` checks on
/// each GPU (`env/precision.toml`). Not what a run computes in
/// (`envgen_experiments::engine::Precision`, also `profiles::Precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HardwarePrecision {
    Tf32,
    Bf16,
    Fp16,
    Fp8,
    /// INT8 inference (calibrated or quantization-aware; LLM.int8-style matmuls).
    Int8,
    /// FP4 (NVFP4 / MXFP4) checkpoints and GEMMs.
    Fp4,
}

impl HardwarePrecision {
    /// The feature name in `env/precision.toml`.
    pub fn name(self) -> &'static str {
        match self {
            HardwarePrecision::Tf32 => "tf32",
            HardwarePrecision::Bf16 => "bf16",
            HardwarePrecision::Fp16 => "fp16",
            HardwarePrecision::Fp8 => "fp8",
            HardwarePrecision::Int8 => "int8",
            HardwarePrecision::Fp4 => "fp4",
        }
    }
}

/// How a GPU runs a format.
enum Support {
    /// On tensor cores (or, for a format without a tensor-core column, at all).
    Full,
    /// Without tensor cores: the chip has none, or its SM runs the format on
    /// other units (INT8 by DP4A on 6.1 / 7.0).
    WithoutTensorCores { chip_has_none: bool },
    /// Not at all (below the minimum, or an excluded SM).
    None,
}

fn parse_cc(text: &str) -> Option<Version> {
    parse_compute_capability(text).map(|(v, _)| v)
}

fn support(feature: &PrecisionFeature, cc: &Version, chip_has_no_tensor_cores: bool) -> Support {
    let min = parse_cc(&feature.min_compute_capability);
    let excluded = feature
        .excluded_compute_capabilities
        .iter()
        .filter_map(|c| parse_cc(c))
        .any(|c| &c == cc);
    if excluded || min.is_some_and(|min| cc < &min) {
        return Support::None;
    }
    let below_tensor_cores = feature
        .tensor_cores_from
        .as_deref()
        .and_then(parse_cc)
        .is_some_and(|from| cc < &from);
    // Every format from fp16 on uses tensor cores where it runs fast; TF32
    // and BF16 start at 8.0, above every chip without them.
    if chip_has_no_tensor_cores {
        Support::WithoutTensorCores {
            chip_has_none: true,
        }
    } else if below_tensor_cores {
        Support::WithoutTensorCores {
            chip_has_none: false,
        }
    } else {
        Support::Full
    }
}

/// "(relies on UNCONFIRMED data: …)" for the feature's unconfirmed facts that
/// concern this GPU: an entry naming an SM ("sm_120 …") only on that SM.
fn unconfirmed_for(feature: &PrecisionFeature, cc: &Version) -> String {
    let own_sm = format!("sm_{}{}", cc.major(), cc.minor());
    let hits: Vec<&str> = feature
        .unconfirmed
        .iter()
        .filter(|u| !u.starts_with("sm_") || u.starts_with(&format!("{own_sm} ")))
        .map(String::as_str)
        .collect();
    super::reasons::unconfirmed_text(&hits)
}

/// "; Blackwell (data center) needs CUDA ≥ 12.8 and driver ≥ 570.26 (R570)":
/// the first toolkit and driver of the feature's minimum architecture.
fn first_software(kb: &KnowledgeBase, min: &Version) -> String {
    kb.architecture(min)
        .and_then(|arch| {
            let driver = Version::parse(&arch.min_driver_linux)?;
            Some(format!(
                "; the first {} GPUs need CUDA ≥ {} and driver ≥ {driver} (R{})",
                arch.name,
                arch.first_cuda,
                driver.major()
            ))
        })
        .unwrap_or_default()
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
    let Some(min) = parse_cc(&feature.min_compute_capability) else {
        return reasons;
    };
    let chip_has_no_tensor_cores = gpu
        .catalog_id
        .as_deref()
        .and_then(|id| kb.lookup_gpu(id))
        .is_some_and(|spec| spec.lacks_tensor_cores);
    let label = gpu_label(gpu);
    let note = unconfirmed_for(feature, &cc);
    let found = match support(feature, &cc, chip_has_no_tensor_cores) {
        Support::Full => None,
        Support::None => Some(unsupported(kb, precision, &label, &min, &cc)),
        Support::WithoutTensorCores { chip_has_none } => {
            without_tensor_cores(precision, &label, feature, chip_has_none)
        }
    };
    if let Some((code, status, message, fix)) = found {
        reasons.push(reason(code, status, format!("{message}{note}"), fix));
    }
    reasons
}

type Finding = (&'static str, VerdictStatus, String, String);

/// The format is missing: BF16, FP8, FP4 and INT8 fail (the kernels refuse
/// or do not exist); TF32 and FP16 still compute, in FP32 or without tensor
/// cores, so they only warn.
fn unsupported(
    kb: &KnowledgeBase,
    precision: HardwarePrecision,
    label: &str,
    min: &Version,
    cc: &Version,
) -> Finding {
    match precision {
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
        HardwarePrecision::Fp4 => (
            "fp4-unsupported",
            VerdictStatus::Fail,
            format!(
                "{label} has no FP4 tensor cores: FP4 (NVFP4/MXFP4) needs compute capability ≥ {min} (Blackwell: B200/B300, RTX 50 series, RTX PRO Blackwell){}; Hopper and older have none",
                first_software(kb, min)
            ),
            "dequantize the FP4 checkpoint to fp8 (Ada/Hopper) or bf16 on this GPU, or run it on a Blackwell GPU".to_string(),
        ),
        HardwarePrecision::Int8 => {
            let why = if cc >= min {
                format!("sm_{}{} lacks the INT8 dot-product instruction (DP4A) that INT8 kernels need", cc.major(), cc.minor())
            } else {
                format!("INT8 needs compute capability ≥ {min} (the DP4A instruction of Pascal sm_61; tensor cores from Turing)")
            };
            (
                "int8-unsupported",
                VerdictStatus::Fail,
                format!("{label} has no INT8 math: {why}"),
                "run this model in fp16/fp32 on this GPU, or use a GPU of compute capability 6.1 (P4/P40, GTX 10 series) or newer; Turing+ for INT8 tensor cores".to_string(),
            )
        }
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
    }
}

/// The format computes, but not on tensor cores: a warning (slower, not wrong).
fn without_tensor_cores(
    precision: HardwarePrecision,
    label: &str,
    feature: &PrecisionFeature,
    chip_has_none: bool,
) -> Option<Finding> {
    let why = if chip_has_none {
        "it is a Turing chip without tensor cores, like the rest of the GTX 16 series and the TU117 MX parts"
            .to_string()
    } else {
        format!(
            "{} tensor cores need compute capability ≥ {}",
            precision.name().to_uppercase(),
            feature.tensor_cores_from.as_deref().unwrap_or("?")
        )
    };
    match precision {
        HardwarePrecision::Fp16 => Some((
            "fp16-unsupported",
            VerdictStatus::Warn,
            format!("{label} has no FP16 tensor cores ({why}): FP16 runs without tensor-core speed-ups"),
            "use fp32 on this GPU, or a GPU with tensor cores (RTX 20 series or newer, V100, T4 …)".to_string(),
        )),
        HardwarePrecision::Int8 => Some((
            "int8-no-tensor-cores",
            VerdictStatus::Warn,
            format!("{label} runs INT8 without tensor cores ({why}): on the DP4A instruction only, far below INT8 tensor-core throughput"),
            "expect DP4A speed (TensorRT may pick fp16/fp32 kernels instead), or use a Turing+ GPU with tensor cores (T4, RTX 20 series or newer, A-/L-/H-series)".to_string(),
        )),
        // TF32, BF16, FP8 and FP4 start above every chip without tensor cores.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feature(min: &str, from: Option<&str>, excluded: &[&str]) -> PrecisionFeature {
        PrecisionFeature {
            name: "int8".into(),
            min_compute_capability: min.into(),
            tensor_cores_from: from.map(Into::into),
            excluded_compute_capabilities: excluded.iter().map(|s| s.to_string()).collect(),
            note: None,
            unconfirmed: vec!["sm_120 details".into(), "general".into()],
            source: String::new(),
        }
    }

    #[test]
    fn support_levels_follow_the_thresholds_and_the_chip() {
        let int8 = feature("6.1", Some("7.2"), &["6.2"]);
        let cc = |s: &str| Version::parse(s).unwrap();
        assert!(matches!(support(&int8, &cc("6.0"), false), Support::None));
        assert!(matches!(support(&int8, &cc("6.2"), false), Support::None));
        assert!(matches!(
            support(&int8, &cc("6.1"), false),
            Support::WithoutTensorCores {
                chip_has_none: false
            }
        ));
        assert!(matches!(support(&int8, &cc("7.5"), false), Support::Full));
        assert!(matches!(
            support(&int8, &cc("7.5"), true),
            Support::WithoutTensorCores {
                chip_has_none: true
            }
        ));
        // An SM-specific unconfirmed fact is named only on that SM.
        assert_eq!(
            unconfirmed_for(&int8, &cc("8.0")),
            " (relies on UNCONFIRMED data: general)"
        );
        assert!(unconfirmed_for(&int8, &cc("12.0")).contains("sm_120 details"));
    }
}
