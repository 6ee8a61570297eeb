//! Robustness: the NVIDIA_REQUIRE_CUDA parser and the name lookups never
//! panic (proptest), and regressions around the runtime gate and wheels at
//! an architecture's last CUDA.

use proptest::prelude::*;

use super::*;

proptest! {
    #[test]
    fn require_cuda_parser_never_panics(text in ".{0,200}") {
        let _ = crate::compat::require::RequireRule::parse(&text);
    }

    #[test]
    fn require_cuda_like_strings_never_panic(text in "[a-z]{0,7}(<=|>=|!=|=|<|>)?[0-9.a-z]{0,8}([ ,][a-z]{0,7}(<=|>=|=|<)?[0-9.]{0,6}){0,6}") {
        if let Ok(rule) = crate::compat::require::RequireRule::parse(&text) {
            let facts = crate::compat::require::RuntimeFacts { cuda: None, driver: None, arch: None, brands: &["tesla"] };
            let _ = rule.evaluate(&facts);
        }
    }

    #[test]
    fn gpu_lookup_never_panics(text in ".{0,64}") {
        let _ = kb().lookup_gpu(&text);
        let _ = kb().resolve_gpu(&text);
        let _ = kb().image(&text);
        let _ = kb().wheel(&text);
        let _ = kb().assumed_host(std::slice::from_ref(&text), Some(&text));
    }
}

/// A refusal by the runtime replaces only the driver-compatibility reasons
/// it makes moot; the GPU's own problem (Volta dropped by CUDA 13) stays.
#[test]
fn the_runtime_refusal_keeps_the_architecture_reason() {
    let v = image_verdict("v100-16gb", "450.51.06", catalog(CUDA_13_0));
    expect(&v, VerdictStatus::Fail, &["arch-dropped", "driver-too-old"]);
}

/// A driver known only by its CUDA (no version: a `/proc` probe, a
/// described host) is still checked against the image's rule.
#[test]
fn a_driver_known_by_its_cuda_alone_meets_the_runtime_gate() {
    let mut host = kb().assumed_host(&["A30".into()], None).unwrap();
    host.cuda_driver_version = Some("12.2".into());
    let v = only_verdict(&host, CheckRequest::only_images(vec![catalog(CUDA_13_0)]));
    assert!(
        v.reasons
            .iter()
            .any(|r| r.message.contains("unsatisfied condition: cuda>=13.0")),
        "{v:#?}"
    );
    // Across CUDA majors there is no minor-version compatibility: a CUDA 13
    // wheel (no rule of its own) on that driver is refused outright.
    let wheel = installed_wheel("2.9.0+cu130", "13.0", &["8.0"]);
    let request = CheckRequest {
        installed_pytorch: Some(wheel),
        ..CheckRequest::default()
    };
    expect(
        &only_verdict(&host, request),
        VerdictStatus::Fail,
        &["driver-too-old"],
    );
}

/// A build for the architecture's last CUDA without its kernels lacks
/// kernels; the toolkit has not dropped the architecture yet (Volta: CUDA
/// 12.9 is its last).
#[test]
fn a_wheel_at_the_architectures_last_cuda_without_its_kernels_has_none() {
    let wheel = installed_wheel("2.8.0+cu129", "12.9", &["8.0", "9.0"]);
    let request = CheckRequest {
        installed_pytorch: Some(wheel),
        ..CheckRequest::default()
    };
    let v = only_verdict(&host("v100-16gb", "575.51.03"), request);
    assert!(v.codes().contains(&"no-kernel-image"), "{v:#?}");
    assert!(!v.codes().contains(&"arch-dropped"), "{v:#?}");
}

/// The facts of an installed torch build (as `probe::torch` reads them).
fn installed_wheel(spec: &str, cuda: &str, sass: &[&str]) -> crate::compat::WheelFacts {
    crate::compat::WheelFacts {
        spec: spec.into(),
        cuda: cuda.into(),
        sass: sass.iter().map(|s| s.to_string()).collect(),
        ptx: vec![],
        unconfirmed: vec![],
        source: "test".into(),
    }
}
