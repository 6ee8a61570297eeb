//! Verdict table: host × image / PyTorch wheel / precision → expected status
//! and reason codes. Each case cites the fact (recorded with its source in env/*.toml) that makes the expectation true.

use crate::compat::{
    evaluate, CheckRequest, HardwarePrecision, ImageFacts, KnowledgeBase, Verdict, VerdictStatus,
};
use crate::host::{Gpu, Host, HostSource};

// Issue #27's cases at the edges, with the helpers below.
mod edges;
// Issue #43: the end of driver support per architecture, and MIG slices.
mod end_of_support;
mod messages;
// Number formats: BF16/TF32/FP16/FP8 and issue #43's INT8, FP4 and chips without tensor cores.
mod precisions;
// Architectures dropped or unknown to an image, and kernels (SASS / PTX) against the GPU.
mod architecture;
// PyTorch wheels: their kernels and bundled CUDA runtime.
mod wheels;
// Parsers and lookups that never panic, and a few regressions around the runtime gate.
mod robustness;

fn kb() -> &'static KnowledgeBase {
    KnowledgeBase::embedded()
}

fn host(gpu: &str, driver: &str) -> Host {
    kb().assumed_host(&[gpu.to_string()], Some(driver))
        .expect("assumed host")
}

fn catalog(reference: &str) -> ImageFacts {
    kb().image(reference)
        .unwrap_or_else(|| panic!("{reference} not in the catalog"))
}

/// A hand-described image (as a profile or a local Docker image would be).
fn built(
    reference: &str,
    cuda: &str,
    sass: &[&str],
    ptx: &[&str],
    compiles_at_runtime: bool,
) -> ImageFacts {
    ImageFacts {
        reference: reference.into(),
        cuda: Some(cuda.into()),
        sass: sass.iter().map(|s| s.to_string()).collect(),
        ptx: ptx.iter().map(|s| s.to_string()).collect(),
        compiles_at_runtime,
        origin: "profile".into(),
        ..ImageFacts::default()
    }
}

/// An image only the local Docker daemon has, known by its env
/// (`CUDA_VERSION`, `NVIDIA_REQUIRE_CUDA`, either may be missing).
fn local_image(reference: &str, cuda: Option<&str>, require_cuda: Option<&str>) -> ImageFacts {
    ImageFacts {
        reference: reference.into(),
        cuda: cuda.map(Into::into),
        require_cuda: require_cuda.map(Into::into),
        origin: "docker".into(),
        ..ImageFacts::default()
    }
}

/// The one verdict `request` gets on `host`.
fn only_verdict(host: &Host, request: CheckRequest) -> Verdict {
    let verdicts = evaluate(kb(), host, &request);
    assert_eq!(verdicts.len(), 1, "{verdicts:#?}");
    verdicts.into_iter().next().unwrap()
}

/// [`only_verdict`], each of whose reasons says what and how to fix it.
fn one(host: &Host, request: CheckRequest) -> Verdict {
    let verdict = only_verdict(host, request);
    for r in &verdict.reasons {
        assert!(!r.message.is_empty() && !r.fix.is_empty(), "{r:?}");
    }
    verdict
}

fn image_verdict(gpu: &str, driver: &str, image: ImageFacts) -> Verdict {
    one(&host(gpu, driver), CheckRequest::only_images(vec![image]))
}

fn wheel_verdict(gpu: &str, driver: &str, wheel: &str) -> Verdict {
    one(
        &host(gpu, driver),
        CheckRequest {
            pytorch: Some(wheel.into()),
            ..CheckRequest::default()
        },
    )
}

fn precision_verdict(gpu: &str, precision: HardwarePrecision) -> Verdict {
    one(
        &host(gpu, "570.124.06"),
        CheckRequest {
            precisions: vec![precision],
            ..CheckRequest::default()
        },
    )
}

#[track_caller]
fn expect(verdict: &Verdict, status: VerdictStatus, codes: &[&str]) {
    assert_eq!(verdict.codes(), codes, "{verdict:#?}");
    assert_eq!(verdict.status, status, "{verdict:#?}");
}

const CUDA_12_8: &str = "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04";
const CUDA_13_0: &str = "nvidia/cuda:13.0.0-runtime-ubuntu24.04";

// --- driver × image: minor-version and forward compatibility -------------

#[test]
fn a30_on_r535_runs_cuda_12_8_through_forward_compat() {
    // 535.261.03 supports CUDA 12.2 (Table 3); A30 is data-center, where the
    // cuda-compat package is supported (forward-compatibility doc), and the
    // 12.x NVIDIA_REQUIRE_CUDA admits brand=tesla on R535.
    let v = image_verdict("A30", "535.261.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
}

#[test]
fn rtx_5070_ti_on_r535_predates_blackwell() {
    // sm_120 first appears in CUDA 12.8, whose driver is 570.26 (Table 3):
    // R535 cannot drive the GPU at all, whatever the image.
    let v = image_verdict("RTX 5070 Ti", "535.261.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
    assert!(v.reasons[0].fix.contains("R570"), "{v:#?}");
    assert!(v.reasons[0].fix.contains("570.26"), "{v:#?}");
    assert!(v.reasons[0].message.contains("535.261.03"), "{v:#?}");
}

#[test]
fn a_gpu_newer_than_its_driver_fails_every_subject() {
    // Issue #27: an RTX 50-series card on R550 or R560 with a CUDA 12.4 / 12.6
    // image was "ok": the image's CUDA is within the driver's, but the driver
    // predates Blackwell. The gate comes first for images, wheels and precisions.
    for driver in ["550.54.15", "560.35.03", "550"] {
        for image in [
            "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
            "nvidia/cuda:12.6.3-runtime-ubuntu24.04",
            "nvcr.io/nvidia/pytorch:24.10-py3",
        ] {
            let v = image_verdict("RTX 5090", driver, catalog(image));
            expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
        }
        let v = wheel_verdict("RTX 5080", driver, "2.7.1+cu128");
        expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
        let v = one(
            &host("RTX 5070 Ti", driver),
            CheckRequest {
                precisions: vec![HardwarePrecision::Bf16],
                ..CheckRequest::default()
            },
        );
        expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
    }
    // Hopper and Ada need R520: R515 (CUDA 11.7) predates them; R520 does not.
    let v = image_verdict("H100", "515.65.01", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
    let v = image_verdict("L4", "520.61.05", catalog(CUDA_12_8));
    assert!(!v.codes().contains(&"driver-predates-gpu"), "{v:#?}");
}

#[test]
fn consumer_gpu_on_r535_runs_cuda_12_4_by_minor_version_compat() {
    // CUDA 12.x runs on any driver ≥ 525.60.13 (Table 2) with a limited
    // feature set; 12.4.1 images admit brand=geforce on R535.
    let v = image_verdict(
        "RTX 4090",
        "535.261.03",
        catalog("nvidia/cuda:12.4.1-runtime-ubuntu22.04"),
    );
    expect(&v, VerdictStatus::Warn, &["minor-version-compat"]);
}

#[test]
fn consumer_gpu_on_r560_is_refused_by_the_cuda_12_8_gate() {
    // R560 = CUDA 12.6 < 12.8, and R560 is not among the branches the image's
    // NVIDIA_REQUIRE_CUDA lists: the runtime refuses "cuda>=12.8".
    let v = image_verdict("RTX 4090", "560.35.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    // The fix is the minor-version reason's (the driver it needs).
    assert!(v.reasons[0].fix.contains("≥ 570.124.06 (R570)"), "{v:#?}");
    assert!(
        v.reasons[0]
            .message
            .contains("unsatisfied condition: cuda>=12.8"),
        "{v:#?}"
    );
}

#[test]
fn a30_on_r550_runs_cuda_13_through_forward_compat() {
    // The 13.0 base env admits tesla on R550 (compat.md §1c).
    let v = image_verdict("A30", "550.54.15", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
}

#[test]
fn a30_on_r560_is_refused_by_the_cuda_13_gate() {
    // R560 is not in the CUDA 13 image's forward-compat branch list.
    let v = image_verdict("A30", "560.35.03", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    // The fix is the forward-compatibility reason's (the driver it needs),
    // not the generic one.
    assert!(v.reasons[0].fix.contains("≥ 580.65.06 (R580)"), "{v:#?}");
}

#[test]
fn geforce_on_r570_cannot_run_cuda_13() {
    // CUDA 13 needs ≥ 580 (no minor-version compat across majors); GeForce
    // has no forward compat, and the 13.0 rule lists no geforce brand.
    let v = image_verdict("RTX 4090", "570.124.06", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Fail, &["forward-compat-unsupported"]);
    // Unavailable because of its class, not because of the image's libraries.
    assert!(
        v.reasons[0]
            .message
            .contains("it is unavailable on a consumer (GeForce) GPU"),
        "{v:#?}"
    );
    assert!(
        v.reasons[0].message.contains("unsatisfied condition"),
        "{v:#?}"
    );
}

#[test]
fn forward_compat_does_not_teach_an_old_driver_a_new_gpu() {
    // B200 (sm_100) first appears with CUDA 12.8 / R570; cuda-compat only
    // replaces user-mode libraries, so R535 can't drive it at all.
    let v = image_verdict("B200", "535.261.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
    // Known only by its CUDA (no driver version), the driver is judged by the
    // architecture's first CUDA: 12.2 < 12.8.
    let mut host = host("B200", "535.261.03");
    host.driver_version = None;
    let v = one(&host, CheckRequest::only_images(vec![catalog(CUDA_12_8)]));
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
}

#[test]
fn workstation_gpu_has_no_forward_compat() {
    // Forward compat: data-center and Jetson only; RTX A6000 is workstation.
    let v = image_verdict("RTX A6000", "535.261.03", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Fail, &["forward-compat-unsupported"]);
}

#[test]
fn jetson_orin_may_use_forward_compat() {
    // Jetson boards are in the forward-compat list.
    let v = image_verdict("Jetson Orin", "535.261.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
}

#[test]
fn gpu_described_by_sm_only_gets_no_forward_compat() {
    // Class unknown → forward compat assumed unavailable (the safe answer).
    let v = image_verdict("sm_89", "535.261.03", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Fail, &["forward-compat-unsupported"]);
}

#[test]
fn r470_is_a_cuda_11_4_driver_and_tesla_can_still_forward() {
    // R470 is ≥ CUDA 11.4's 470.42.01 and < 11.5's 495.29.05 (Table 3): a
    // CUDA 11.4 driver; the 12.x image lists brand=tesla on R470.
    let v = image_verdict("A30", "470.256.02", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(v.reasons[0].message.contains("(CUDA 11.4)"), "{v:#?}");
}

#[test]
fn driver_older_than_cuda_11_runs_nothing() {
    // CUDA 11.x needs ≥ 450.80.02 even with minor-version compat (Table 2).
    let v = image_verdict(
        "V100-32GB",
        "418.226.00",
        built("lab/x:1", "12.4.1", &["sm_70"], &[], false),
    );
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    // The same driver predates Ampere (R455 for sm_86): that is said first.
    let v = image_verdict(
        "RTX 3090",
        "418.226.00",
        built("lab/x:1", "12.4.1", &["sm_86"], &[], false),
    );
    expect(&v, VerdictStatus::Fail, &["driver-predates-gpu"]);
}

#[test]
fn new_enough_driver_is_ok() {
    // 570.124.06 is exactly CUDA 12.8 U1's toolkit driver (Table 3).
    let v = image_verdict("RTX 5070 Ti", "570.124.06", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Ok, &[]);
}

// --- unknowns, no GPU, multi-GPU, the whole catalog -----------------------------

#[test]
fn unknown_image_is_a_warning() {
    let image = local_image("ghcr.io/someone/thing:1", None, None);
    let v = image_verdict("A30", "570.124.06", image);
    expect(&v, VerdictStatus::Warn, &["unknown-image"]);
}

#[test]
fn catalog_row_with_unconfirmed_cuda_says_so() {
    // NGC 25.07's CUDA is not published in any stored source; it is bounded
    // by 25.06 (12.9.1) and 25.08 (13.0.0), so the driver is checked as 12.9
    // and the verdict says what it rests on. A30 on R535 (= CUDA 12.2): a
    // data-center GPU runs CUDA 12.9 through forward compat.
    let image = catalog("nvcr.io/nvidia/pytorch:25.07-py3");
    assert_eq!(image.cuda.as_deref(), Some("12.9"));
    let v = image_verdict("A30", "535.261.03", image.clone());
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(
        v.reasons[0]
            .message
            .contains("UNCONFIRMED data: cuda (bounded"),
        "{v:#?}"
    );
    let v = image_verdict("A30", "575.57.08", image);
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn second_hand_ngc_cuda_is_checked_and_says_so() {
    // 24.09's CUDA 12.6.1 is second-hand (a transcription of its notes,
    // runtimes report 12.6): the driver is checked, and the reason says the
    // CUDA it rests on is UNCONFIRMED. R535 = CUDA 12.2; A30 is data-center.
    let v = image_verdict(
        "A30",
        "535.261.03",
        catalog("nvcr.io/nvidia/pytorch:24.09-py3"),
    );
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    assert!(
        v.reasons[0]
            .message
            .contains("UNCONFIRMED data: cuda (second-hand"),
        "{v:#?}"
    );
}

#[test]
fn ngc_24_02_driver_is_now_checked() {
    // Triton 24.02 notes: "based on CUDA 12.3.2". R535 is CUDA 12.2 (Table 3),
    // so an A30 (data-center) runs it through forward compat; on R570 it is fine.
    let image = catalog("nvcr.io/nvidia/pytorch:24.02-py3");
    assert_eq!(image.cuda.as_deref(), Some("12.3.2"));
    let v = image_verdict("A30", "535.261.03", image.clone());
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    let v = image_verdict("A30", "570.124.06", image);
    expect(&v, VerdictStatus::Ok, &[]);
}

#[test]
fn ngc_25_02_needs_turing_as_published() {
    // Triton 25.02: "supports CUDA compute capability 7.5 and later" — the
    // floor was marked UNCONFIRMED before; now the message carries no caveat.
    let v = image_verdict(
        "V100-32GB",
        "570.124.06",
        catalog("nvcr.io/nvidia/pytorch:25.02-py3"),
    );
    expect(&v, VerdictStatus::Fail, &["arch-dropped"]);
    assert!(!v.reasons[0].message.contains("UNCONFIRMED"), "{v:#?}");
}

#[test]
fn no_sourced_ngc_release_is_an_unknown_image_on_h100_r580() {
    // Every NGC PyTorch release whose CUDA is published (Triton / PyTorch
    // release notes of that month) or known second-hand gets a real verdict;
    // 25.07, which no stored source covers, is bounded by its neighbours
    // (docs/doctor.md, UNCONFIRMED facts): no release is unknown-image.
    let host = host("H100", "580.65.06");
    let ngc: Vec<ImageFacts> = kb()
        .images()
        .iter()
        .filter(|i| i.reference.starts_with("nvcr.io/nvidia/pytorch:"))
        .cloned()
        .collect();
    assert_eq!(ngc.len(), 24);
    let verdicts = evaluate(kb(), &host, &CheckRequest::only_images(ngc));
    let unknown: Vec<&str> = verdicts
        .iter()
        .filter(|v| v.codes().contains(&"unknown-image"))
        .map(|v| v.image.as_str())
        .collect();
    assert!(unknown.is_empty(), "{unknown:?}");
    // R580 = CUDA 13.0 covers every release up to 25.11; 25.12 (CUDA 13.1)
    // runs by minor-version compatibility (NGC images set cuda>=9.0, so no
    // runtime refusal): none fails.
    for v in &verdicts {
        assert_ne!(v.status, VerdictStatus::Fail, "{v:#?}");
    }
}

#[test]
fn exact_cuda_12_9_1_rule_refuses_geforce_on_r545() {
    // The verbatim NVIDIA_REQUIRE_CUDA of 12.9.1 images lists no geforce brand
    // (env/images.toml [[require_cuda_exact]]): an RTX 4090 on R545 (CUDA 12.3)
    // is refused by the runtime. 12.9.0 has no exact string of its own and
    // borrows its minor's (the rule only says cuda>=12.9): refused alike. 12.4.1
    // (no exact string in its minor) keeps the generated rule, which lists
    // brand=geforce for R535: minor-version compat there.
    let v = image_verdict(
        "RTX 4090",
        "545.29.06",
        catalog("nvidia/cuda:12.9.1-runtime-ubuntu24.04"),
    );
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    assert!(v.reasons[0].message.contains("cuda>=12.9"), "{v:#?}");
    let v = image_verdict(
        "RTX 4090",
        "545.29.06",
        catalog("nvidia/cuda:12.9.0-runtime-ubuntu24.04"),
    );
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    assert!(
        v.reasons[0]
            .message
            .contains("the 12.9.1 tags' rule, same minor"),
        "{v:#?}"
    );
}

#[test]
fn exact_cuda_12_8_1_rule_admits_tesla_but_not_geforce_on_r535() {
    // Verbatim 12.8.1 NVIDIA_REQUIRE_CUDA: brand=tesla,driver>=535,driver<536 is
    // an alternative, brand=geforce is not. R535 = CUDA 12.2 (Table 3).
    let v = image_verdict("A30", "535.261.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Warn, &["forward-compat-required"]);
    let v = image_verdict("RTX 4090", "535.261.03", catalog(CUDA_12_8));
    expect(&v, VerdictStatus::Fail, &["driver-too-old"]);
    assert!(
        v.reasons[0]
            .message
            .contains("unsatisfied condition: cuda>=12.8"),
        "{v:#?}"
    );
}

#[test]
fn unreadable_require_cuda_is_reported_not_a_panic() {
    let image = local_image("local/broken:1", Some("12.4.1"), Some("cuda>>12 brand="));
    let v = image_verdict("A30", "570.124.06", image);
    expect(&v, VerdictStatus::Warn, &["unknown-image"]);
}

#[test]
fn unknown_probed_gpu_is_kept_with_a_warning() {
    let mut host = Host {
        driver_version: Some("570.124.06".into()),
        gpus: vec![Gpu {
            index: 0,
            name: "NVIDIA Imaginary X9".into(),
            ..Gpu::default()
        }],
        source: HostSource::NvidiaSmi,
        ..Host::default()
    };
    kb().enrich(&mut host);
    assert_eq!(host.cuda_driver_version.as_deref(), Some("12.8"));
    let v = one(&host, CheckRequest::only_images(vec![catalog(CUDA_12_8)]));
    expect(&v, VerdictStatus::Warn, &["unknown-gpu"]);
}

#[test]
fn probed_gpu_names_are_enriched() {
    let mut host = Host {
        driver_version: Some("535.261.03".into()),
        gpus: vec![Gpu {
            index: 0,
            name: "NVIDIA A30".into(),
            ..Gpu::default()
        }],
        source: HostSource::NvidiaSmi,
        ..Host::default()
    };
    kb().enrich(&mut host);
    let gpu = &host.gpus[0];
    assert_eq!(gpu.compute_capability.as_deref(), Some("8.0"));
    assert_eq!(gpu.catalog_id.as_deref(), Some("a30"));
    assert_eq!(host.cuda_driver_version.as_deref(), Some("12.2"));
}

#[test]
fn no_gpu_host_warns_once_per_subject() {
    let host = Host::default();
    let request = CheckRequest {
        images: vec![catalog(CUDA_12_8)],
        pytorch: Some("2.6.0+cu124".into()),
        precisions: vec![HardwarePrecision::Bf16],
        ..CheckRequest::default()
    };
    let verdicts = evaluate(kb(), &host, &request);
    assert_eq!(verdicts.len(), 3);
    for v in &verdicts {
        expect(v, VerdictStatus::Warn, &["no-gpu"]);
        assert_eq!(v.gpu_index, None);
    }
    // Without a GPU an image envgen knows nothing about says so too; its
    // own CPU image does not.
    let unknown = only_verdict(
        &host,
        CheckRequest::only_images(vec![local_image("mine:1", None, None)]),
    );
    expect(&unknown, VerdictStatus::Warn, &["no-gpu", "unknown-image"]);
    let cpu = ImageFacts {
        reference: "envgen-cpu:1".into(),
        origin: "profile".into(),
        ..ImageFacts::default()
    };
    let cpu = only_verdict(&host, CheckRequest::only_images(vec![cpu]));
    expect(&cpu, VerdictStatus::Ok, &["no-gpu"]);
    // Either CUDA fact alone (a CUDA_VERSION, or only a requirement rule)
    // is an image that needs a GPU.
    for image in [
        local_image("only-version:1", Some("12.4.1"), None),
        local_image("only-rule:1", None, Some("cuda>=12.4")),
    ] {
        let verdict = only_verdict(&host, CheckRequest::only_images(vec![image]));
        let no_gpu = verdict.reasons.iter().find(|r| r.code == "no-gpu").unwrap();
        assert_eq!(no_gpu.status, VerdictStatus::Warn, "{verdict:#?}");
    }
}

#[test]
fn mixed_gpu_host_gets_one_verdict_per_gpu() {
    // Status is the worst reason per GPU: A30 warns, RTX 5070 Ti fails.
    let host = kb()
        .assumed_host(&["A30".into(), "RTX 5070 Ti".into()], Some("535.261.03"))
        .unwrap();
    let verdicts = evaluate(
        kb(),
        &host,
        &CheckRequest::only_images(vec![catalog(CUDA_12_8)]),
    );
    let statuses: Vec<(Option<u32>, VerdictStatus)> =
        verdicts.iter().map(|v| (v.gpu_index, v.status)).collect();
    assert_eq!(
        statuses,
        vec![
            (Some(0), VerdictStatus::Warn),
            (Some(1), VerdictStatus::Fail)
        ]
    );
}

#[test]
fn whole_catalog_for_one_gpu_is_fast_and_well_formed() {
    let start = std::time::Instant::now();
    let parsed = KnowledgeBase::parse_embedded().expect("env parses");
    eprintln!("parse env/*.toml: {:?}", start.elapsed());
    assert_eq!(parsed.images().len(), kb().images().len());
    let host = host("RTX 5070 Ti", "570.124.06");
    let start = std::time::Instant::now();
    let verdicts = evaluate(kb(), &host, &CheckRequest::default());
    let elapsed = start.elapsed();
    eprintln!(
        "full catalog ({} images), one GPU: {elapsed:?}",
        kb().images().len()
    );
    assert_eq!(verdicts.len(), kb().images().len());
    // Generous bound for a shared debug-build CI box; the benchmark has the real number.
    assert!(elapsed.as_millis() < 2000, "{elapsed:?}");
    let contract = [
        "no-gpu",
        "driver-too-old",
        "minor-version-compat",
        "forward-compat-required",
        "forward-compat-unsupported",
        "no-kernel-image",
        "ptx-jit-too-new",
        "arch-dropped",
        "bf16-unsupported",
        "fp8-unsupported",
        "unknown-gpu",
        "unknown-image",
    ];
    for v in &verdicts {
        for r in &v.reasons {
            assert!(contract.contains(&r.code.as_str()), "{r:?}");
            assert!(!r.fix.is_empty());
        }
    }
    // 5070 Ti: every pre-12.8 NGC PyTorch lacks sm_120; 12.8+ bases are fine.
    let ok = verdicts
        .iter()
        .filter(|v| v.image.starts_with("nvidia/cuda:12.8") && v.status == VerdictStatus::Ok)
        .count();
    assert!(ok > 0);
}
