//! Architectures: an image or its toolkit that dropped the GPU, the CUDA
//! that first targets it, and binary compatibility of SASS and PTX (the
//! Blackwell compatibility guide; facts in env/cuda.toml and env/images.toml).

use super::*;

#[test]
fn cuda_13_dropped_volta() {
    // CUDA 13.0 supports Turing through Blackwell only (sm_50–sm_72 removed).
    let v = image_verdict("Tesla V100-SXM2-32GB", "580.95.05", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Fail, &["arch-dropped"]);
}

#[test]
fn ngc_25_01_needs_turing() {
    // NGC images from 25.01 on require compute capability ≥ 7.5 (Triton 25.01 notes).
    let v = image_verdict(
        "V100-32GB",
        "570.124.06",
        catalog("nvcr.io/nvidia/pytorch:25.01-py3"),
    );
    expect(&v, VerdictStatus::Fail, &["arch-dropped"]);
}

#[test]
fn ngc_25_01_runs_on_turing_at_its_minimum() {
    // 7.5 is the minimum itself: a T4 (sm_75) is not "dropped" (a `<=`
    // in the architecture gate would drop it; a mutation test found no test
    // at the boundary).
    let v = image_verdict(
        "Tesla T4",
        "570.124.06",
        catalog("nvcr.io/nvidia/pytorch:25.01-py3"),
    );
    assert!(!v.codes().contains(&"arch-dropped"), "{v:#?}");
}

#[test]
fn ngc_24_10_still_runs_on_volta() {
    // 24.10: CUDA 12.6.2, min CC 6.0 (Triton 24.10 notes); R570 ≥ CUDA 12.6.
    let v = image_verdict(
        "V100-32GB",
        "570.124.06",
        catalog("nvcr.io/nvidia/pytorch:24.10-py3"),
    );
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn ngc_24_10_predates_blackwell_consumer() {
    // sm_120 needs CUDA ≥ 12.8; 24.10 is built with CUDA 12.6.
    let v = image_verdict(
        "RTX 5090",
        "570.124.06",
        catalog("nvcr.io/nvidia/pytorch:24.10-py3"),
    );
    expect(&v, VerdictStatus::Fail, &["no-kernel-image"]);
}

#[test]
fn ngc_25_08_on_a30_r535_uses_forward_compat() {
    // 25.08 = CUDA 13.0.0 (Triton 25.08); A30 data-center on R535 LTSB.
    let v = image_verdict(
        "A30",
        "535.261.03",
        catalog("nvcr.io/nvidia/pytorch:25.08-py3"),
    );
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(v.reasons[0].message.contains("UNCONFIRMED"), "{v:#?}");
}

#[test]
fn same_major_cubin_runs_on_a_newer_minor() {
    // Blackwell compatibility guide: cubin X.y runs on X.z, z ≥ y — so sm_86
    // kernels run on the RTX 4090 (8.9).
    let v = image_verdict(
        "RTX 4090",
        "550.54.15",
        built("lab/sm86:1", "12.4.1", &["sm_86"], &[], false),
    );
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn cubins_never_cross_majors() {
    // sm_90 cubins do not run on sm_100 (B200); no PTX to JIT.
    let v = image_verdict(
        "B200",
        "570.124.06",
        built("lab/sm90:1", "12.4.1", &["sm_90"], &[], false),
    );
    expect(&v, VerdictStatus::Fail, &["no-kernel-image"]);
}

#[test]
fn arch_specific_cubin_runs_only_on_that_arch() {
    // sm_90a = exactly 9.0 (compat.md §2).
    let v = image_verdict(
        "H100",
        "570.124.06",
        built("lab/sm90a:1", "12.4.1", &["sm_90a"], &[], false),
    );
    expect(&v, VerdictStatus::Ok, &[]);
    let v = image_verdict(
        "RTX 4090",
        "570.124.06",
        built("lab/sm80a:1", "12.4.1", &["sm_80a"], &[], false),
    );
    expect(&v, VerdictStatus::Fail, &["no-kernel-image"]);
}

#[test]
fn ptx_jits_forward_when_the_driver_is_new_enough() {
    // compute_80 PTX JIT-compiles on 8.9; R550 = CUDA 12.4 ≥ the image's 12.4.
    let v = image_verdict(
        "RTX 4090",
        "550.54.15",
        built("lab/ptx80:1", "12.4.1", &[], &["compute_80"], false),
    );
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn ptx_newer_than_the_driver_cannot_jit() {
    // Minor-version compat can't JIT newer PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
    let v = image_verdict(
        "RTX 4090",
        "535.261.03",
        built("lab/ptx80:1", "12.4.1", &[], &["compute_80"], false),
    );
    expect(
        &v,
        VerdictStatus::Fail,
        &["minor-version-compat", "ptx-jit-too-new"],
    );
}

#[test]
fn nvrtc_of_cuda_12_6_does_not_know_sm_120() {
    // Burn compiles kernels at run time with the image's NVRTC; sm_120 first in 12.8.
    let v = image_verdict(
        "RTX 5070 Ti",
        "570.124.06",
        built("envgen/burn:cu126", "12.6.3", &[], &[], true),
    );
    expect(&v, VerdictStatus::Fail, &["no-kernel-image"]);
    assert!(v.reasons[0].message.contains("NVRTC"), "{v:#?}");
}

#[test]
fn runtime_compilation_under_minor_version_compat_fails() {
    // NVRTC of CUDA 12.8 emits 12.8 PTX; R560 (12.6) can't JIT it.
    let v = image_verdict(
        "RTX 4090",
        "560.35.03",
        built("envgen/burn:cu128", "12.8.1", &[], &[], true),
    );
    expect(
        &v,
        VerdictStatus::Fail,
        &["minor-version-compat", "ptx-jit-too-new"],
    );
}
