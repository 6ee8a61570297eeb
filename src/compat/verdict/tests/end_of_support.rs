//! Issue #43: where support ends. NVIDIA's toolkit–driver–architecture
//! matrix gives each retired architecture a last driver branch ("Last Driver
//! Support": Kepler 3.5/3.7 R470; Maxwell 5.0/5.2/5.3, Pascal 6.0/6.1 and
//! Volta 7.0 R580), and the deprecation schedule says "The release 580 series
//! will be the last to support GPUs based on the Maxwell, Pascal, and Volta
//! architectures" (both quoted in env/cuda.toml). A newer driver ignores the
//! GPU, and no fix may send a user past that branch. Also here: MIG slices,
//! which are their board for every verdict, and CUDA 13.1.1's real
//! NVIDIA_REQUIRE_CUDA (branches 535/550/570/575/580, env/images.toml).

use crate::compat::{evaluate, CheckRequest, HardwarePrecision, Verdict, VerdictStatus};
use crate::host::{Gpu, Host, HostSource};

use super::{catalog, expect, host, kb, only_verdict};

fn everything(image: &str) -> CheckRequest {
    CheckRequest {
        images: vec![catalog(image)],
        pytorch: Some("2.7.1+cu126".into()),
        precisions: vec![HardwarePrecision::Fp16],
        ..CheckRequest::default()
    }
}

fn image_on(gpu: &str, driver: &str, image: &str) -> Verdict {
    only_verdict(
        &host(gpu, driver),
        CheckRequest::only_images(vec![catalog(image)]),
    )
}

#[test]
fn a_pascal_gpu_on_a_595_driver_is_dropped_for_every_subject() {
    // The issue's GTX 1050 on 595: "will ignore this GPU ... No NVIDIA GPU
    // found". Pascal's last branch is R580 (architecture matrix).
    let host = host("GTX 1050", "595.45.04");
    let verdicts = evaluate(
        kb(),
        &host,
        &everything("nvidia/cuda:12.6.3-runtime-ubuntu24.04"),
    );
    assert_eq!(verdicts.len(), 3);
    for v in &verdicts {
        expect(v, VerdictStatus::Fail, &["driver-dropped-gpu"]);
        let r = &v.reasons[0];
        assert!(r.message.contains("up to R580"), "{r:#?}");
        assert!(r.message.contains("will ignore this GPU"), "{r:#?}");
        assert!(r.message.contains("Pascal"), "{r:#?}");
        assert!(
            r.fix.starts_with("install a driver of the R580 branch")
                && r.fix.contains("CUDA ≤ 13.0"),
            "{r:#?}"
        );
    }
}

#[test]
fn a_v100_node_moved_to_r590_is_dropped_and_r580_still_runs_it() {
    // Volta: last branch R580. The same node on 580.65.06 runs CUDA 12.x images.
    let v = image_on(
        "V100",
        "590.44.01",
        "nvidia/cuda:12.8.1-runtime-ubuntu24.04",
    );
    expect(&v, VerdictStatus::Fail, &["driver-dropped-gpu"]);
    let v = image_on(
        "V100",
        "580.65.06",
        "nvidia/cuda:12.8.1-runtime-ubuntu24.04",
    );
    expect(&v, VerdictStatus::Ok, &[]);
    // A bare branch counts as that branch.
    let v = image_on("V100", "590", "nvidia/cuda:12.8.1-runtime-ubuntu24.04");
    expect(&v, VerdictStatus::Fail, &["driver-dropped-gpu"]);
    // Turing has no last branch ("Ongoing"): R595 is fine for a T4.
    let v = image_on("T4", "595.45.04", "nvidia/cuda:12.8.1-runtime-ubuntu24.04");
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn a_driver_known_only_by_its_cuda_is_compared_with_the_last_branchs_cuda() {
    // NVML reports CUDA 13.1 (a R590 driver) without the version text.
    let mut host = Host {
        source: HostSource::Assumed,
        cuda_driver_version: Some("13.1".into()),
        gpus: vec![Gpu {
            index: 0,
            name: "NVIDIA GeForce GTX 1080".into(),
            ..Gpu::default()
        }],
        ..Host::default()
    };
    kb().enrich(&mut host);
    let v = only_verdict(
        &host,
        CheckRequest::only_images(vec![catalog("nvidia/cuda:12.8.1-runtime-ubuntu24.04")]),
    );
    expect(&v, VerdictStatus::Fail, &["driver-dropped-gpu"]);
    // CUDA 13.0 is R580's: still supported.
    host.cuda_driver_version = Some("13.0".into());
    let v = only_verdict(
        &host,
        CheckRequest::only_images(vec![catalog("nvidia/cuda:12.8.1-runtime-ubuntu24.04")]),
    );
    assert!(!v.codes().contains(&"driver-dropped-gpu"), "{v:#?}");
}

#[test]
fn kepler_ends_at_r470_and_its_fixes_never_leave_it() {
    // Kepler 3.5/3.7: last driver R470, last CUDA 11.x (matrix). The issue's
    // K80 fix said "upgrade to R535", which would make the K80 unusable.
    let v = image_on(
        "K80",
        "535.261.03",
        "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
    );
    expect(&v, VerdictStatus::Fail, &["driver-dropped-gpu"]);
    assert!(v.reasons[0].fix.contains("R470"), "{v:#?}");
    // On R470 a CUDA 12 image is dropped by its toolkit (sm_37 ends at 11.8),
    // and the driver fix names no branch after R470.
    let v = image_on(
        "K80",
        "470.256.02",
        "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
    );
    assert_eq!(v.status, VerdictStatus::Fail, "{v:#?}");
    assert!(v.codes().contains(&"arch-dropped"), "{v:#?}");
    for r in &v.reasons {
        assert!(!r.fix.contains("R525") && !r.fix.contains("R535"), "{r:#?}");
    }
    let driver = v
        .reasons
        .iter()
        .find(|r| r.code == "forward-compat-required" || r.code == "driver-too-old")
        .expect("a driver reason");
    assert!(
        driver
            .fix
            .contains("R470, the last driver branch for Kepler GPUs"),
        "{driver:#?}"
    );
    // A driver older than Kepler's first names the whole range.
    let v = image_on("K40", "320", "nvidia/cuda:12.2.2-runtime-ubuntu22.04");
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
    assert!(
        v.reasons[0].fix.contains("from branch R331 to R470"),
        "{v:#?}"
    );
}

#[test]
fn a_v100_on_its_last_branch_is_told_to_stay_on_cuda_13_0_not_to_upgrade() {
    // docs/doctor.md's V100 example used to advise R590 for CUDA 13.1 images.
    let v = image_on(
        "V100",
        "580.65.06",
        "nvidia/cuda:13.1.0-runtime-ubuntu24.04",
    );
    for r in &v.reasons {
        assert!(
            !r.fix.contains("R590") && !r.fix.contains("590.44"),
            "{r:#?}"
        );
    }
    let driver = v
        .reasons
        .iter()
        .find(|r| r.code == "forward-compat-required")
        .expect("CUDA 13.1 on R580 through forward compat");
    assert!(
        driver
            .fix
            .contains("R580, the last driver branch for Volta GPUs")
            && driver.fix.contains("CUDA ≤ 13.0"),
        "{driver:#?}"
    );
    // A newer GPU on the same driver is still told to upgrade.
    let v = image_on(
        "A100",
        "580.65.06",
        "nvidia/cuda:13.1.0-runtime-ubuntu24.04",
    );
    let fix = &v.reasons[0].fix;
    assert!(fix.contains("590.44.01 (R590)"), "{v:#?}");
}

// --- CUDA 13.1.1's NVIDIA_REQUIRE_CUDA -----------------------------------------

#[test]
fn cuda_13_1_images_start_on_the_r580_lts_branch_but_not_on_r565() {
    // The 13.1.1 string lists 535/550/570/575/580 (no 565) for tesla & co.
    let rule = catalog("nvidia/cuda:13.1.1-runtime-ubuntu24.04")
        .require_cuda
        .unwrap();
    assert!(
        rule.contains("brand=tesla,driver>=580,driver<581"),
        "{rule}"
    );
    assert!(!rule.contains("driver>=565"), "{rule}");
    let v = image_on(
        "A100",
        "580.65.06",
        "nvidia/cuda:13.1.1-runtime-ubuntu24.04",
    );
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    let v = image_on(
        "A100",
        "565.57.01",
        "nvidia/cuda:13.1.1-runtime-ubuntu24.04",
    );
    assert_eq!(v.status, VerdictStatus::Fail, "{v:#?}");
    assert!(
        v.reasons
            .iter()
            .any(|r| r.message.contains("unsatisfied condition: cuda>=13.1")),
        "{v:#?}"
    );
    // 13.1.0 tags borrow 13.1.1's string (same minor).
    let rule_0 = catalog("nvidia/cuda:13.1.0-runtime-ubuntu24.04")
        .require_cuda
        .unwrap();
    assert_eq!(rule_0, rule);
    // NGC 25.12 (CUDA 13.1.0) on an A100 with R580: forward compatibility.
    let v = image_on("A100", "580.65.06", "nvcr.io/nvidia/pytorch:25.12-py3");
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
}

// --- MIG slices ---------------------------------------------------------------

#[test]
fn a_mig_slice_gets_every_verdict_of_its_board() {
    // The issue: on R535 a cross-major NGC image failed on the slice and
    // warned on the whole A100 of the same host.
    let images = CheckRequest {
        images: kb().images().to_vec(),
        pytorch: Some("2.7.1+cu128".into()),
        precisions: vec![
            HardwarePrecision::Bf16,
            HardwarePrecision::Fp8,
            HardwarePrecision::Int8,
        ],
        ..CheckRequest::default()
    };
    for driver in ["535.261.03", "550.127.05", "580.65.06"] {
        let board = host("A100-SXM4-40GB", driver);
        let slice = host("A100-SXM4-40GB MIG 1g.5gb", driver);
        assert_eq!(slice.gpus[0].name, "NVIDIA A100 40GB MIG 1g.5gb");
        assert_eq!(slice.gpus[0].catalog_id.as_deref(), Some("a100-40gb"));
        let on_board = evaluate(kb(), &board, &images);
        let on_slice = evaluate(kb(), &slice, &images);
        assert_eq!(on_board.len(), on_slice.len());
        for (b, s) in on_board.iter().zip(&on_slice) {
            assert_eq!((&b.image, b.status), (&s.image, s.status), "{driver}");
            assert_eq!(b.codes(), s.codes(), "{} with {driver}", b.image);
        }
    }
    let v = image_on(
        "A100-SXM4-40GB MIG 1g.5gb",
        "535.261.03",
        "nvcr.io/nvidia/pytorch:25.08-py3",
    );
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
}

#[test]
fn a_probed_mig_name_resolves_to_its_board_and_keeps_its_own_memory() {
    // NVML's name of a MIG device (HTCondor's manual: "NVIDIA A100-SXM4-40GB
    // MIG 1g.5gb", 4864 MiB).
    let mut host = Host {
        driver_version: Some("535.261.03".into()),
        gpus: vec![Gpu {
            index: 0,
            name: "NVIDIA A100-SXM4-40GB MIG 1g.5gb".into(),
            memory_mib: Some(4864),
            ..Gpu::default()
        }],
        ..Host::default()
    };
    kb().enrich(&mut host);
    let gpu = &host.gpus[0];
    assert_eq!(gpu.catalog_id.as_deref(), Some("a100-40gb"));
    assert_eq!(gpu.compute_capability.as_deref(), Some("8.0"));
    assert_eq!(
        gpu.memory_mib,
        Some(4864),
        "the slice's memory, not the board's"
    );
    let note = host.notes.join("\n");
    assert!(
        note.contains("GPU 0 is MIG slice 1g.5gb of NVIDIA A100 40GB with 5 GB of its memory")
            && note.contains("no NVLink/NVSwitch or peer-to-peer"),
        "{note}"
    );
    let v = only_verdict(
        &host,
        CheckRequest::only_images(vec![catalog("nvcr.io/nvidia/pytorch:25.08-py3")]),
    );
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(!v.codes().contains(&"unknown-gpu"));
    // Without a reported memory the slice does not borrow the board's 40 GB.
    let mut host = Host {
        gpus: vec![Gpu {
            name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb".into(),
            ..Gpu::default()
        }],
        ..Host::default()
    };
    kb().enrich(&mut host);
    assert_eq!(host.gpus[0].memory_mib, None);
    assert_eq!(kb().memory_text(&host.gpus[0]), "20 GB (MIG 3g.20gb)");
}

#[test]
fn an_assumed_mig_name_shows_its_profile_and_a_board_without_mig_is_refused() {
    let host = host("H100 MIG 1g.10gb", "580.65.06");
    assert_eq!(host.gpus[0].name, "H100 MIG 1g.10gb");
    assert_eq!(kb().memory_text(&host.gpus[0]), "10 GB (MIG 1g.10gb)");
    assert_eq!(host.notes.len(), 1, "{:?}", host.notes);
    for query in ["RTX 4090 MIG 1g.5gb", "V100 MIG 1g.5gb", "sm_80 MIG 1g.5gb"] {
        let err = kb()
            .assumed_host(&[query.to_string()], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(query), "{err}");
    }
    let err = kb()
        .assumed_host(&["RTX 4090 MIG 1g.5gb".to_string()], None)
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("cannot be split into MIG slices"), "{text}");
    // An unknown board is the usual unknown-GPU usage error.
    assert!(kb()
        .assumed_host(&["Banana 9000 MIG 1g.5gb".to_string()], None)
        .is_err());
}
