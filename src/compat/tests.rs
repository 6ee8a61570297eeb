//! Knowledge-base tests: the embedded data parses and is complete (the
//! catalog: catalog/tests.rs; GPU names: gpus/tests.rs; wheels: wheels.rs).
use super::*;

#[test]
fn embedded_data_parses_and_is_complete() {
    let kb = KnowledgeBase::parse_embedded().expect("env/*.toml parse");
    assert!(kb.gpus.len() >= 25, "gpus: {}", kb.gpus.len());
    assert!(kb
        .images
        .iter()
        .any(|i| i.reference == "nvcr.io/nvidia/pytorch:25.12-py3"));
    assert!(kb.images.len() > 100, "images: {}", kb.images.len());
    assert!(kb
        .wheels
        .iter()
        .any(|w| w.spec == "2.7.1+cu128" && w.cuda == "12.8"));
    assert_eq!(kb.cudnn_rows().len(), 8);
    assert!(kb.gpus.iter().all(|g| !g.source.is_empty()));
}

/// Precision features are looked up by name, each with its threshold.
#[test]
fn precision_features_are_found_by_name() {
    let kb = KnowledgeBase::embedded();
    let bf16 = kb.precision_feature("bf16").expect("bf16");
    assert_eq!(bf16.name, "bf16");
    assert_eq!(bf16.min_compute_capability, "8.0");
    assert_eq!(
        kb.precision_feature("fp8").unwrap().min_compute_capability,
        "8.9"
    );
    assert!(kb.precision_feature("fp64x").is_none());
}
