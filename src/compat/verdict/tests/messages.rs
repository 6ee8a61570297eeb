//! What the reasons say: the GPU, the kernels and the boundary releases
//! named in messages and fixes (the codes alone are checked elsewhere).

use crate::compat::{CheckRequest, VerdictStatus};

use super::{built, catalog, expect, host, image_verdict, local_image, one, wheel_verdict};

#[track_caller]
fn message_of<'a>(verdict: &'a crate::compat::Verdict, code: &str) -> &'a crate::compat::Reason {
    verdict
        .reasons
        .iter()
        .find(|r| r.code == code)
        .unwrap_or_else(|| panic!("no {code}: {verdict:#?}"))
}

/// CUDA 12.9 is the last toolkit for Volta: an image or wheel built with it
/// still runs on a V100, one built with 13.0 does not, and the message
/// names the GPU.
#[test]
fn volta_runs_up_to_cuda_12_9_inclusive() {
    let v = image_verdict(
        "V100",
        "575.51.03",
        built("mine:12.9", "12.9.1", &[], &[], false),
    );
    assert!(!v.codes().contains(&"arch-dropped"), "{v:#?}");
    let v = image_verdict(
        "V100",
        "580.65.06",
        built("mine:13.0", "13.0.0", &[], &[], false),
    );
    let dropped = message_of(&v, "arch-dropped");
    assert!(
        dropped.message.contains("CUDA 13.0 dropped GPU 0 ("),
        "{}",
        dropped.message
    );
    assert!(
        dropped.message.contains(", sm_70): the last toolkit"),
        "{}",
        dropped.message
    );
    let v = wheel_verdict("V100", "575.51.03", "2.8.0+cu129");
    assert!(!v.codes().contains(&"arch-dropped"), "{v:#?}");
}

/// "no kernel image": the kernels the image has, and the GPU it lacks.
#[test]
fn missing_kernels_are_listed() {
    let v = image_verdict(
        "V100",
        "575.51.03",
        built("mine:hopper", "12.8.1", &["8.0", "9.0"], &[], false),
    );
    let reason = message_of(&v, "no-kernel-image");
    assert!(
        reason.message.starts_with(
            "mine:hopper has kernels for sm_80, sm_90 (PTX: none), none of which runs on GPU 0 ("
        ),
        "{}",
        reason.message
    );
}

/// A local image with no CUDA facts at all is "knows nothing", not
/// "unconfirmed catalog data".
#[test]
fn an_image_without_facts_is_said_to_be_unknown() {
    let v = image_verdict("A30", "535.261.03", local_image("mine:1", None, None));
    expect(&v, VerdictStatus::Warn, &["unknown-image"]);
    let reason = message_of(&v, "unknown-image");
    assert!(
        reason
            .message
            .starts_with("envgen knows nothing about mine:1"),
        "{}",
        reason.message
    );
}

/// A GeForce card on a driver of an older CUDA major: one driver reason,
/// which also carries the runtime's refusal.
#[test]
fn the_runtime_refusal_joins_the_driver_reason() {
    let v = one(
        &host("RTX 4090", "535.261.03"),
        CheckRequest::only_images(vec![catalog(super::CUDA_13_0)]),
    );
    let driver: Vec<_> = v
        .reasons
        .iter()
        .filter(|r| r.code == "driver-too-old" || r.code == "forward-compat-unsupported")
        .collect();
    assert_eq!(driver.len(), 1, "{v:#?}");
    assert!(
        driver[0]
            .message
            .contains("; besides, the NVIDIA runtime refuses"),
        "{v:#?}"
    );
}

/// An image known only by its NVIDIA_REQUIRE_CUDA (no CUDA version) is
/// checked against the runtime gate and still flagged: its driver needs
/// were not checked.
#[test]
fn an_image_without_a_cuda_version_is_flagged() {
    let v = image_verdict(
        "A30",
        "570.124.06",
        local_image("mine:2", None, Some("cuda>=12.0")),
    );
    assert!(v.codes().contains(&"unknown-image"), "{v:#?}");
    assert_ne!(v.status, VerdictStatus::Ok, "{v:#?}");
}

/// A driver known only by its CUDA (no version) drives a GPU whose first
/// CUDA is that same release.
#[test]
fn a_driver_for_the_gpus_first_cuda_drives_it() {
    let mut blackwell = host("RTX 5070 Ti", "570.124.06");
    blackwell.driver_version = None;
    blackwell.cuda_driver_version = Some("12.8".into());
    let v = one(
        &blackwell,
        CheckRequest::only_images(vec![built("mine:12.8", "12.8.1", &["12.0"], &[], false)]),
    );
    assert!(!v.codes().contains(&"driver-predates-gpu"), "{v:#?}");
    blackwell.cuda_driver_version = Some("12.6".into());
    let v = one(
        &blackwell,
        CheckRequest::only_images(vec![built("mine:12.8", "12.8.1", &["12.0"], &[], false)]),
    );
    assert!(v.codes().contains(&"driver-predates-gpu"), "{v:#?}");
}
