//! PyTorch wheels: the kernels each build carries (env/pytorch.toml) and
//! its bundled CUDA runtime against the driver.

use super::*;

#[test]
fn torch_2_6_cu124_has_no_blackwell_kernels() {
    // 2.6.0 cu124/cu126: sm_50 … sm_90, no PTX (pytorch#144071).
    let v = wheel_verdict("RTX 5070 Ti", "570.124.06", "2.6.0+cu124");
    expect(&v, VerdictStatus::Fail, &["no-kernel-image"]);
    assert!(v.reasons[0].fix.contains("cu128"), "{v:#?}");
}

#[test]
fn torch_2_7_cu128_runs_on_rtx_5070_ti_with_r570() {
    // 2.7.0+cu128: sm_75 … sm_120 (+PTX) (cog measurement); R570 = CUDA 12.8.
    let v = wheel_verdict("5070 Ti", "570.124.06", "2.7.0+cu128");
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn torch_2_7_cu128_on_rtx_5070_ti_needs_r570() {
    // The wheel has sm_120 kernels, but a 12.6 driver can't drive sm_120.
    let v = wheel_verdict("RTX 5070 Ti", "560.35.03", "2.7.1+cu128");
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
}

#[test]
fn torch_2_6_cu124_runs_on_h100() {
    // sm_90 SASS in the wheel; R570 supports CUDA 12.8 ≥ 12.4.
    let v = wheel_verdict("H100", "570.124.06", "2.6.0+cu124");
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn torch_2_6_cu126_has_no_sm_100() {
    // sm_90 cubins don't run on B200 (10.0); no PTX in the wheel.
    let v = wheel_verdict("B200", "570.124.06", "2.6.0+cu126");
    expect(&v, VerdictStatus::Fail, &["no-kernel-image"]);
}

#[test]
fn rtx_4090_runs_a_wheel_built_up_to_sm_86() {
    // 1.13.1+cu117 stops at sm_86 (cog); 8.6 cubins run on 8.9.
    let v = wheel_verdict("RTX 4090", "550.54.15", "1.13.1+cu117");
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn torch_2_7_cu128_dropped_volta_but_2_8_cu128_has_it() {
    // 2.7.x cu128 has no sm_70 (vs-playground PR #59); 2.8.0 cu128 re-added it
    // (build_cuda.sh@00c7a380, pytorch#157517).
    expect(
        &wheel_verdict("V100-32GB", "570.124.06", "2.7.0+cu128"),
        VerdictStatus::Fail,
        &["no-kernel-image"],
    );
    expect(
        &wheel_verdict("V100-32GB", "570.124.06", "2.8.0+cu128"),
        VerdictStatus::Ok,
        &[],
    );
}

#[test]
fn cuda_13_wheels_have_no_volta() {
    // cu130 wheels start at sm_75; CUDA 13 dropped sm_70.
    let v = wheel_verdict("V100-32GB", "580.95.05", "2.9.0+cu130");
    expect(&v, VerdictStatus::Fail, &["arch-dropped"]);
}

#[test]
fn cu128_wheel_on_r535_runs_by_minor_version_compat() {
    // cu12x wheels need ≥ 525.60.13 (minor-version compat); wheels ship no
    // cuda-compat, so even data-center GPUs get minor-version compat.
    let v = wheel_verdict("A30", "535.261.03", "2.7.0+cu128");
    expect(&v, VerdictStatus::Warn, &["minor-version-compat"]);
}

#[test]
fn cu130_wheel_on_r570_driver_too_old() {
    // cu13x needs ≥ 580; no minor-version compat across majors.
    let v = wheel_verdict("A30", "570.124.06", "2.9.0+cu130");
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
}
