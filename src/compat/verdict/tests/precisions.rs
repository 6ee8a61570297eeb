//! Number formats against each GPU's hardware: the thresholds of
//! env/precision.toml (Transformer Engine, TensorRT and TensorRT-RTX support
//! matrices, quoted there) and the chips without tensor cores of
//! env/gpus.toml (issue #43).

use crate::compat::{HardwarePrecision, VerdictStatus};

use super::{expect, kb, precision_verdict};

#[test]
fn bf16_needs_ampere() {
    // BF16 needs CC ≥ 8.0 (Transformer Engine support matrix).
    expect(
        &precision_verdict("V100-32GB", HardwarePrecision::Bf16),
        VerdictStatus::Fail,
        &["bf16-unsupported"],
    );
    expect(
        &precision_verdict("T4", HardwarePrecision::Bf16),
        VerdictStatus::Fail,
        &["bf16-unsupported"],
    );
    expect(
        &precision_verdict("A30", HardwarePrecision::Bf16),
        VerdictStatus::Ok,
        &[],
    );
}

#[test]
fn fp8_needs_ada_or_hopper() {
    // FP8 = No on 8.0 (TE); Yes on 8.9 (per-tensor) and 9.0.
    let v = precision_verdict("A100-80GB", HardwarePrecision::Fp8);
    expect(&v, VerdictStatus::Fail, &["fp8-unsupported"]);
    assert!(v.reasons[0].message.contains("8.9"), "{v:#?}");
    expect(
        &precision_verdict("L4", HardwarePrecision::Fp8),
        VerdictStatus::Ok,
        &[],
    );
    expect(
        &precision_verdict("H100", HardwarePrecision::Fp8),
        VerdictStatus::Ok,
        &[],
    );
}

#[test]
fn verdicts_on_unconfirmed_gpu_facts_say_so() {
    // RTX A4500 = 8.6 is not on NVIDIA's list (compat.md §2): the BF16 verdict
    // is ok, the FP8 failure names the unconfirmed fact.
    expect(
        &precision_verdict("RTX A4500", HardwarePrecision::Bf16),
        VerdictStatus::Ok,
        &[],
    );
    let v = precision_verdict("RTX A4500", HardwarePrecision::Fp8);
    expect(&v, VerdictStatus::Fail, &["fp8-unsupported"]);
    assert!(
        v.reasons[0]
            .message
            .contains("UNCONFIRMED: compute_capability"),
        "{v:#?}"
    );
}

#[test]
fn tf32_and_fp16() {
    // TF32 ≥ 8.0 (TRT8 matrix): V100 computes in FP32 instead (warn only).
    expect(
        &precision_verdict("V100-16GB", HardwarePrecision::Tf32),
        VerdictStatus::Warn,
        &["tf32-unsupported"],
    );
    expect(
        &precision_verdict("A100-40GB", HardwarePrecision::Tf32),
        VerdictStatus::Ok,
        &[],
    );
    expect(
        &precision_verdict("V100-16GB", HardwarePrecision::Fp16),
        VerdictStatus::Ok,
        &[],
    );
}

// --- issue #43: INT8, FP4, chips without tensor cores --------------------------

#[test]
fn int8_follows_tensorrts_hardware_precision_matrix() {
    // TRT8: "7.5 | NVIDIA T4 | … INT8 Yes | … INT8 Tensor Cores Yes"; A30 is 8.0
    // (the INT8 calibration on A30s); "7.2 | Jetson AGX Xavier" Yes/Yes.
    for gpu in ["T4", "A30", "Jetson AGX Xavier", "H100", "RTX 4090"] {
        expect(
            &precision_verdict(gpu, HardwarePrecision::Int8),
            VerdictStatus::Ok,
            &[],
        );
    }
    // "7.0 | NVIDIA V100 | … INT8 Yes | … INT8 Tensor Cores No" and
    // "6.1 | NVIDIA P4 | … INT8 Yes | … INT8 Tensor Cores No": DP4A only.
    for gpu in ["V100", "Tesla P4", "GTX 1080"] {
        let v = precision_verdict(gpu, HardwarePrecision::Int8);
        expect(&v, VerdictStatus::Warn, &["int8-no-tensor-cores"]);
        assert!(v.reasons[0].message.contains("DP4A"), "{v:#?}");
        assert!(v.reasons[0].message.contains("≥ 7.2"), "{v:#?}");
    }
    // "High-throughput INT8 math Requires sm_61+" (NVIDIA, GTC 2017): P100 (6.0)
    // and Maxwell have none; "TX2 doesn't support INT8 operation" (6.2).
    for gpu in ["P100", "M40", "Jetson TX2"] {
        let v = precision_verdict(gpu, HardwarePrecision::Int8);
        expect(&v, VerdictStatus::Fail, &["int8-unsupported"]);
        assert!(!v.reasons[0].fix.is_empty());
    }
    let v = precision_verdict("Jetson TX2", HardwarePrecision::Int8);
    assert!(v.reasons[0].message.contains("sm_62 lacks"), "{v:#?}");
}

#[test]
fn fp4_needs_blackwell_and_names_its_first_cuda_and_driver() {
    // TE: NVFP4 "No" on 8.x and 9.0, "Yes" on 10.0/10.3; TRT-RTX: FP4 GEMM
    // "Yes" on 12.0, "No" on 8.9.
    for gpu in ["A100", "L40S", "H100", "RTX 4090"] {
        let v = precision_verdict(gpu, HardwarePrecision::Fp4);
        expect(&v, VerdictStatus::Fail, &["fp4-unsupported"]);
        let message = &v.reasons[0].message;
        assert!(
            message.contains("≥ 10.0")
                && message.contains("CUDA ≥ 12.8")
                && message.contains("(R570)"),
            "{message}"
        );
        // The sm_120 caveat is not this GPU's.
        assert!(!message.contains("sm_120"), "{message}");
    }
    for gpu in ["B200", "RTX 5090"] {
        expect(
            &precision_verdict(gpu, HardwarePrecision::Fp4),
            VerdictStatus::Ok,
            &[],
        );
    }
}

#[test]
fn chips_without_tensor_cores_get_no_tensor_core_verdicts() {
    // TU116/TU117 are Turing (7.5) without tensor cores (env/gpus.toml quotes
    // the reviews); an RTX 2060 (TU106) has them.
    for gpu in ["GTX 1660 Ti", "GTX 1650", "MX450", "GTX 1660 Super"] {
        let v = precision_verdict(gpu, HardwarePrecision::Fp16);
        expect(&v, VerdictStatus::Warn, &["fp16-unsupported"]);
        assert!(
            v.reasons[0]
                .message
                .contains("a Turing chip without tensor cores"),
            "{v:#?}"
        );
        let v = precision_verdict(gpu, HardwarePrecision::Int8);
        expect(&v, VerdictStatus::Warn, &["int8-no-tensor-cores"]);
    }
    for precision in [HardwarePrecision::Fp16, HardwarePrecision::Int8] {
        expect(
            &precision_verdict("RTX 2060", precision),
            VerdictStatus::Ok,
            &[],
        );
    }
}

/// Every row's tensor-core fact agrees with its family's, and only Turing
/// consumer parts of the GTX 16 series and the TU117 MX parts lack them.
#[test]
fn every_gpu_rows_features_agree_with_its_family() {
    let rows: crate::compat::data::GpusFile =
        toml::from_str(crate::compat::GPUS_TOML).expect("gpus.toml");
    let mut families: std::collections::HashMap<&str, Vec<&crate::compat::data::GpuRow>> =
        std::collections::HashMap::new();
    for row in &rows.gpu {
        for family in &row.family {
            families.entry(family.as_str()).or_default().push(row);
        }
        let spec = kb().lookup_gpu(&row.id).unwrap();
        let no_tensor_cores = row.tensor_cores == Some(false);
        assert_eq!(spec.lacks_tensor_cores, no_tensor_cores, "{}", row.id);
        let gtx_16 = row.name.contains("GTX 16");
        let tu117_mx = ["mx450", "mx550"].contains(&row.id.as_str());
        assert_eq!(no_tensor_cores, gtx_16 || tu117_mx, "{}", row.id);
        if no_tensor_cores {
            assert_eq!(row.compute_capability, "7.5", "{}", row.id);
            assert!(row.source.contains("no tensor cores:"), "{}", row.id);
        }
    }
    for (family, members) in families {
        let same_chip = members
            .iter()
            .all(|r| r.compute_capability == members[0].compute_capability);
        if same_chip {
            assert!(
                members
                    .iter()
                    .all(|r| r.tensor_cores == members[0].tensor_cores),
                "{family}: its rows disagree on tensor cores"
            );
        }
    }
    // A family answer carries its rows' fact.
    assert!(kb().lookup_gpu("GTX 1660").unwrap().lacks_tensor_cores);
}
