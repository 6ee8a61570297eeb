//! Issue #27: verdicts at the edges. A GPU newer than its driver, what NGC
//! images really require (`cuda>=9.0` and an entrypoint that picks a
//! compatibility mode), old drivers (R470 = CUDA 11.4), and the property that
//! no verdict is "ok" where the driver cannot run the GPU or the image.
//! Facts: env/cuda.toml (`[[architecture]]`, Table 3) and env/images.toml
//! (`[ngc_runtime]`), each row with its source.

use crate::compat::version::Version;
use crate::compat::{
    evaluate, CheckRequest, HardwarePrecision, ImageFacts, Verdict, VerdictStatus,
};
use crate::host::{Gpu, GpuClass, Host, HostSource};

use super::{catalog, expect, host, kb, local_image, only_verdict};

/// The verdict on the catalog image `reference`.
fn image_verdict(gpu: &str, driver: &str, reference: &str) -> Verdict {
    only_verdict(
        &host(gpu, driver),
        CheckRequest::only_images(vec![catalog(reference)]),
    )
}

const NGC_12_8: &str = "nvcr.io/nvidia/pytorch:25.01-py3";
const NGC_13_0: &str = "nvcr.io/nvidia/pytorch:25.08-py3";

// --- NGC images: their real NVIDIA_REQUIRE_CUDA and entrypoint ---------------

#[test]
fn ngc_images_require_only_cuda_9_and_start_through_their_entrypoint() {
    let ngc: Vec<&ImageFacts> = kb()
        .images()
        .iter()
        .filter(|i| i.reference.starts_with("nvcr.io/nvidia/pytorch:"))
        .collect();
    assert_eq!(ngc.len(), 24);
    for image in ngc {
        assert_eq!(
            image.require_cuda.as_deref(),
            Some("cuda>=9.0"),
            "{}",
            image.reference
        );
        assert!(image.ngc_entrypoint, "{}", image.reference);
    }
    // nvidia/cuda tags keep their strict per-version rule.
    assert!(catalog("nvidia/cuda:12.8.1-runtime-ubuntu24.04")
        .require_cuda
        .unwrap()
        .starts_with("cuda>=12.8 "));
}

#[test]
fn ngc_on_a_consumer_gpu_of_the_same_major_warns_with_minor_version_compat() {
    // CUDA 12.8 image, R560 (CUDA 12.6) driver, GeForce: the runtime starts it
    // (cuda>=9.0), the entrypoint enables minor-version compatibility.
    let v = image_verdict("RTX 4090", "560.35.03", NGC_12_8);
    expect(&v, VerdictStatus::Warn, &["minor-version-compat"]);
    let message = &v.reasons[0].message;
    assert!(
        message.contains("WARNING: CUDA Minor Version Compatibility mode ENABLED"),
        "{message}"
    );
    assert!(!message.contains("refuses to start"), "{message}");
    // The nvidia/cuda image of the same CUDA is refused by the runtime.
    let v = image_verdict(
        "RTX 4090",
        "560.35.03",
        "nvidia/cuda:12.8.1-runtime-ubuntu24.04",
    );
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    assert!(v.reasons[0].message.contains("refuses to start"), "{v:#?}");
}

#[test]
fn ngc_across_majors_without_forward_compat_starts_but_cannot_run() {
    // CUDA 13.0 image on R570 (CUDA 12.8) with a GeForce: no minor-version
    // compatibility across majors, no forward compatibility on GeForce.
    let v = image_verdict("RTX 4090", "570.124.06", NGC_13_0);
    expect(&v, VerdictStatus::Fail, &["forward-compat-unsupported"]);
    let message = &v.reasons[0].message;
    assert!(
        message.contains("compatibility mode is UNAVAILABLE")
            && message.contains("Driver Release 580.65 or later")
            && message.contains("version 570.124.06 was detected"),
        "{message}"
    );
    assert!(!message.contains("refuses to start"), "{message}");
}

#[test]
fn ngc_forward_compat_on_a_data_center_gpu_depends_on_the_branch() {
    // A30 on R535 (LTSB, listed for CUDA 13 forward compat): warn, naming the mode.
    let v = image_verdict("A30", "535.261.03", NGC_13_0);
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(
        v.reasons[0]
            .message
            .contains("NOTE: CUDA Forward Compatibility mode ENABLED"),
        "{v:#?}"
    );
    // R560 is not among the branches CUDA 13's compat libraries support.
    let v = image_verdict("A30", "560.35.03", NGC_13_0);
    expect(&v, VerdictStatus::Fail, &["forward-compat-unsupported"]);
    assert!(v.reasons[0].message.contains("R560"), "{v:#?}");
}

// --- old drivers and the toolkit driver of a patch release -------------------

#[test]
fn r470_runs_a_cu118_wheel_by_minor_version_compat() {
    // 470.256.02 (the RTX A6000 guide's minimum) is a CUDA 11.4 driver: a cu118
    // wheel runs by minor-version compatibility (≥ 450.80.02, Table 2).
    let host = host("RTX A6000", "470.256.02");
    assert_eq!(host.cuda_driver_version.as_deref(), Some("11.4"));
    let v = only_verdict(
        &host,
        CheckRequest {
            pytorch: Some("2.6.0+cu118".into()),
            ..CheckRequest::default()
        },
    );
    expect(&v, VerdictStatus::Warn, &["minor-version-compat"]);
    let fix = &v.reasons[0].fix;
    assert!(
        fix.contains("520.61.05") && fix.contains("CUDA ≤ 11.4"),
        "{fix}"
    );
}

#[test]
fn fix_hints_name_the_toolkit_driver_of_the_exact_release() {
    // Table 3: 12.6 GA 560.28.03, Update 1 and 2 560.35.03, Update 3 560.35.05.
    let v = image_verdict("RTX 4090", "555.42.06", "nvcr.io/nvidia/pytorch:24.10-py3");
    expect(&v, VerdictStatus::Warn, &["minor-version-compat"]);
    assert!(v.reasons[0].fix.contains("≥ 560.35.03 (R560)"), "{v:#?}");
    let v = image_verdict(
        "A30",
        "535.261.03",
        "nvidia/cuda:12.6.3-runtime-ubuntu24.04",
    );
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(v.reasons[0].fix.contains("≥ 560.35.05 (R560)"), "{v:#?}");
}

#[test]
fn a_probed_jetson_orin_is_known_and_not_failed() {
    // JetPack 6: nvidia-smi names the GPU "Orin (nvgpu)" and reports CUDA 12.2.
    let mut host = Host {
        driver_version: Some("540.4.0".into()),
        cuda_driver_version: Some("12.2".into()),
        gpus: vec![Gpu {
            name: "Orin (nvgpu)".into(),
            ..Gpu::default()
        }],
        source: HostSource::NvidiaSmi,
        ..Host::default()
    };
    kb().enrich(&mut host);
    assert_eq!(host.gpus[0].class, Some(GpuClass::Embedded));
    let v = only_verdict(&host, CheckRequest::only_images(vec![catalog(NGC_12_8)]));
    assert!(!v.codes().contains(&"unknown-gpu"), "{v:#?}");
    assert_ne!(v.status, VerdictStatus::Fail, "{v:#?}");
}

#[test]
fn repeated_precisions_get_one_verdict_each() {
    let verdicts = evaluate(
        kb(),
        &host("V100", "570.124.06"),
        &CheckRequest {
            precisions: vec![HardwarePrecision::Bf16, HardwarePrecision::Fp16],
            ..CheckRequest::default()
        },
    );
    let got: Vec<(&str, VerdictStatus)> = verdicts
        .iter()
        .map(|v| (v.image.as_str(), v.status))
        .collect();
    assert_eq!(
        got,
        [
            ("precision:bf16", VerdictStatus::Fail),
            ("precision:fp16", VerdictStatus::Ok)
        ]
    );
}

// --- the property -----------------------------------------------------------

/// The GPU rows to check: one per (compute capability, class), which are the
/// only GPU facts a verdict's status reads (names and memory go into messages
/// only); together they cover every row of env/gpus.toml.
fn gpu_row_per_verdict_fact() -> Vec<String> {
    let mut seen: Vec<(String, GpuClass)> = Vec::new();
    let mut ids = Vec::new();
    for gpu in kb().gpus() {
        let key = (gpu.compute_capability.clone(), gpu.class);
        if !seen.contains(&key) {
            seen.push(key);
            ids.push(gpu.id.clone());
        }
    }
    assert!(ids.len() >= 30, "{ids:?}");
    ids
}

/// The driver branches a fix names: "R580", "≥ 570.26 (R570)", "≥ 590.44.01".
fn branches_named(fix: &str) -> Vec<u32> {
    let chars: Vec<char> = fix.chars().collect();
    let number_at = |start: usize| -> (u32, usize) {
        let digits: String = chars[start..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        (digits.parse().unwrap_or(0), digits.len())
    };
    let mut branches = Vec::new();
    for i in 0..chars.len() {
        let after_word_break = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
        if chars[i] == 'R' && after_word_break {
            let (n, len) = number_at(i + 1);
            if len == 3 {
                branches.push(n);
            }
        }
        if chars[i] == '≥' && chars.get(i + 1) == Some(&' ') {
            let (n, len) = number_at(i + 2);
            if len == 3 && chars.get(i + 2 + len) == Some(&'.') {
                branches.push(n);
            }
        }
    }
    branches
}

#[test]
fn fixes_name_their_driver_branches() {
    assert_eq!(
        branches_named("upgrade the driver to ≥ 570.26 (R570) or use CUDA ≤ 12.2 software (e.g. nvidia/cuda:12.2.2-* images)"),
        [570, 570]
    );
    assert_eq!(
        branches_named("install a driver from branch R331 to R470 (≥ 331.62; …)"),
        [331, 470, 331]
    );
    assert!(branches_named("use CUDA ≥ 12.8 (NGC PyTorch ≥ 25.01), RTX 5090").is_empty());
}

/// Every GPU row (by its verdict facts) × driver branch × catalog image: a
/// driver branch older than the GPU's architecture fails; one newer than its
/// architecture's last branch fails with `driver-dropped-gpu` alone (issue
/// #43); an image whose CUDA major is newer than the driver's fails without
/// forward compatibility and is never "ok" with it; and no fix names a
/// driver branch outside the GPU's range.
#[test]
fn no_verdict_is_ok_where_the_driver_cannot_run_the_gpu_or_the_image() {
    let branches = [
        "450", "455", "460", "470", "515", "520", "525", "535", "545", "550", "560", "565", "570",
        "575", "580", "590", "595",
    ];
    let images = CheckRequest::only_images(kb().images().to_vec());
    let forward_compat = kb().forward_compat().expect("forward_compat");
    let mut checked = 0usize;
    for branch in branches {
        let driver = Version::parse(branch).unwrap();
        let driver_cuda = kb().max_cuda_for_driver(&driver).expect(branch);
        let gpus = gpu_row_per_verdict_fact();
        let host = kb().assumed_host(&gpus, Some(branch)).unwrap();
        let verdicts = evaluate(kb(), &host, &images);
        assert_eq!(verdicts.len(), gpus.len() * kb().images().len());
        for v in &verdicts {
            let gpu = &host.gpus[v.gpu_index.unwrap() as usize];
            let cc = Version::parse(gpu.compute_capability.as_deref().unwrap()).unwrap();
            let arch = kb()
                .architecture(&cc)
                .expect("every row has an architecture");
            let min_branch = Version::parse(&arch.min_driver_linux).unwrap().major();
            let last_branch = arch.last_driver_branch.unwrap_or(u32::MAX);
            let image = kb().image(&v.image).unwrap();
            let context = format!("{} on {} with driver {branch}", v.image, gpu.name);
            if driver.major() < min_branch {
                assert_eq!(v.status, VerdictStatus::Fail, "{context}: {v:#?}");
                assert!(v.codes().contains(&"driver-predates-gpu"), "{context}");
            }
            if driver.major() > last_branch {
                assert_eq!(v.status, VerdictStatus::Fail, "{context}: {v:#?}");
                assert_eq!(v.codes(), ["driver-dropped-gpu"], "{context}");
            }
            for r in &v.reasons {
                for named in branches_named(&r.fix) {
                    assert!(
                        (min_branch..=last_branch).contains(&named),
                        "{context}: fix names R{named}, outside R{min_branch}..R{last_branch}: {r:#?}"
                    );
                }
            }
            let newer_major = image
                .cuda
                .as_deref()
                .and_then(Version::parse)
                .is_some_and(|cuda| cuda.major() > driver_cuda.major());
            if newer_major {
                assert_ne!(v.status, VerdictStatus::Ok, "{context}: {v:#?}");
                let has_fc = gpu
                    .class
                    .is_some_and(|class| forward_compat.classes.contains(&class));
                if !has_fc {
                    assert_eq!(v.status, VerdictStatus::Fail, "{context}: {v:#?}");
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 80_000, "{checked}");
}

#[test]
fn no_wheel_or_precision_is_ok_on_a_gpu_the_driver_predates_or_dropped() {
    let gpus: Vec<String> = kb().gpus().iter().map(|g| g.id.clone()).collect();
    for branch in [
        "450", "470", "515", "535", "560", "570", "580", "590", "595",
    ] {
        let host = kb().assumed_host(&gpus, Some(branch)).unwrap();
        let request = CheckRequest {
            pytorch: Some("2.8.0+cu128".into()),
            precisions: vec![HardwarePrecision::Fp16, HardwarePrecision::Int8],
            ..CheckRequest::default()
        };
        for v in evaluate(kb(), &host, &request) {
            let gpu = &host.gpus[v.gpu_index.unwrap() as usize];
            let cc = Version::parse(gpu.compute_capability.as_deref().unwrap()).unwrap();
            let arch = kb().architecture(&cc).unwrap();
            let min_branch = Version::parse(&arch.min_driver_linux).unwrap().major();
            let major = Version::parse(branch).unwrap().major();
            let context = format!("{} on {} with {branch}", v.image, gpu.name);
            if major < min_branch {
                assert_eq!(v.codes(), ["driver-predates-gpu"], "{context}");
            }
            if arch.last_driver_branch.is_some_and(|last| major > last) {
                assert_eq!(v.codes(), ["driver-dropped-gpu"], "{context}");
            }
            let last_branch = arch.last_driver_branch.unwrap_or(u32::MAX);
            for r in &v.reasons {
                for named in branches_named(&r.fix) {
                    assert!(
                        (min_branch..=last_branch).contains(&named),
                        "{context}: fix names R{named}: {r:#?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_local_image_that_sets_its_own_rule_is_still_gated_by_the_runtime() {
    // What tests/it/doctor/doctor_answer.rs's Docker test builds: env only, CUDA 12.8.1 and
    // NVIDIA_REQUIRE_CUDA=cuda>=12.8. Not an NGC image: the runtime refuses it
    // on R535 (CUDA 12.2), and R570 runs it.
    let image = local_image(
        "envgen-test/fake-cuda:12.8",
        Some("12.8.1"),
        Some("cuda>=12.8"),
    );
    let v = only_verdict(
        &host("RTX 4090", "535.261.03"),
        CheckRequest::only_images(vec![image.clone()]),
    );
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    assert!(
        v.reasons[0]
            .message
            .contains("unsatisfied condition: cuda>=12.8"),
        "{v:#?}"
    );
    let v = only_verdict(
        &host("RTX 4090", "570.172.08"),
        CheckRequest::only_images(vec![image]),
    );
    expect(&v, VerdictStatus::Ok, &[]);
}
