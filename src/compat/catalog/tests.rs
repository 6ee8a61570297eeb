//! Catalog tests: NGC rows are sourced, catalog images get their
//! NVIDIA_REQUIRE_CUDA, references are normalized.
use super::*;
use crate::compat::{require, IMAGES_TOML};

fn kb() -> &'static KnowledgeBase {
    KnowledgeBase::embedded()
}

/// Every NGC PyTorch release 24.01–25.12 has a row. A row's CUDA is
/// first-hand (that month's NVIDIA release notes, cited by URL, with the
/// published driver facts), second-hand (marked `cuda (…)` in
/// `unconfirmed`: quotations and runtime reports), or absent (`cuda`
/// unconfirmed). The lists below are what docs/doctor.md states.
#[test]
fn ngc_rows_are_complete_and_sourced() {
    let file: data::ImagesFile = toml::from_str(IMAGES_TOML).expect("images.toml");
    let tags: Vec<&str> = file.ngc_pytorch.iter().map(|r| r.tag.as_str()).collect();
    for year in [24, 25] {
        for month in 1..=12 {
            let tag = format!("{year}.{month:02}");
            assert!(tags.contains(&tag.as_str()), "no row for NGC {tag}");
        }
    }
    let (mut second_hand, mut without_cuda) = (Vec::new(), Vec::new());
    for row in &file.ngc_pytorch {
        // "cuda patch (published as …)": the notes give only major.minor.
        let cuda_caveat = row
            .unconfirmed
            .iter()
            .find(|u| u.starts_with("cuda") && !u.starts_with("cuda patch (published"));
        match (&row.cuda, cuda_caveat) {
            (None, caveat) => {
                assert_eq!(caveat.map(String::as_str), Some("cuda"), "{}", row.tag);
                without_cuda.push(row.tag.as_str());
            }
            (Some(_), Some(caveat)) => {
                assert!(
                    caveat.len() > "cuda".len(),
                    "{}: say where it comes from",
                    row.tag
                );
                second_hand.push(row.tag.as_str());
            }
            (Some(_), None) => {
                assert!(
                    row.source.contains("release-notes/rel-"),
                    "{}: first-hand CUDA without a release-notes page",
                    row.tag
                );
                // The published driver facts come with it (25.12's notes
                // give none: they refer to the CUDA Compatibility guide).
                if row.tag != "25.12" {
                    assert!(row.driver_min_linux.is_some(), "{}", row.tag);
                    assert!(!row.forward_compat_branches.is_empty(), "{}", row.tag);
                    assert!(row.min_compute_capability.is_some() || row.tag == "24.12");
                }
            }
        }
        for field in ["driver_min_linux", "forward_compat_branches"] {
            let set = match field {
                "driver_min_linux" => row.driver_min_linux.is_some(),
                _ => !row.forward_compat_branches.is_empty(),
            };
            assert!(
                !(set && row.unconfirmed.iter().any(|u| u == field)),
                "{}: {field} is set and marked unconfirmed",
                row.tag
            );
        }
    }
    assert_eq!(
        second_hand,
        ["24.09", "24.11", "25.05", "25.07", "25.09", "25.11"],
        "update docs/doctor.md (UNCONFIRMED facts) when this list changes"
    );
    assert!(
        without_cuda.is_empty(),
        "{without_cuda:?}: every release needs a CUDA (issue #15)"
    );
}

#[test]
fn a_patch_release_without_its_own_rule_borrows_its_minors() {
    // 12.9.0 has no verbatim NVIDIA_REQUIRE_CUDA; 12.9.1 has. Both are
    // `cuda>=12.9` with NVIDIA's per-minor alternatives.
    let kb = KnowledgeBase::parse_embedded().unwrap();
    let rule_of = |tag: &str| kb.image(tag).and_then(|i| i.require_cuda.clone());
    let borrowed = kb.image("nvidia/cuda:12.9.0-runtime-ubuntu24.04").unwrap();
    assert_eq!(
        borrowed.require_cuda,
        rule_of("nvidia/cuda:12.9.1-runtime-ubuntu24.04")
    );
    assert!(
        borrowed
            .unconfirmed
            .iter()
            .any(|u| u.contains("the 12.9.1 tags' rule, same minor")),
        "{:?}",
        borrowed.unconfirmed
    );
    // A minor with no verbatim rule keeps the generated one.
    let generated = kb.image("nvidia/cuda:12.3.2-runtime-ubuntu22.04").unwrap();
    assert!(!generated
        .unconfirmed
        .iter()
        .any(|u| u.contains("same minor")));
}

#[test]
fn exact_require_cuda_is_used_for_a_tag_that_has_one() {
    let file: data::ImagesFile = toml::from_str(IMAGES_TOML).expect("images.toml");
    let exact = file
        .require_cuda_exact
        .iter()
        .find(|row| row.cuda == "12.9.1")
        .expect("12.9.1 exact row");
    for flavour in ["runtime", "cudnn-devel"] {
        let image = kb()
            .image(&format!("nvidia/cuda:12.9.1-{flavour}-ubuntu24.04"))
            .expect("12.9.1 tag");
        assert_eq!(image.require_cuda.as_deref(), Some(exact.rule.as_str()));
        // The exact 12.9.1 string admits no GeForce forward compat.
        assert!(!exact.rule.contains("geforce"));
        assert!(image
            .unconfirmed
            .iter()
            .any(|u| u.starts_with("require_cuda (read from")));
    }
    // A minor without an exact string keeps the generated rule (which,
    // unlike the verbatim 12.9.1 one, lists GeForce brands).
    let generated = kb()
        .image("nvidia/cuda:12.3.2-runtime-ubuntu22.04")
        .and_then(|i| i.require_cuda.clone())
        .expect("12.3.2 rule");
    assert!(generated.starts_with("cuda>=12.3 brand=") && generated.contains("geforce"));
    // NVIDIA's own 12.4.1 Dockerfile lists GeForce on R470/R525/R535 too.
    let nvidia_12_4 = kb()
        .image("nvidia/cuda:12.4.1-runtime-ubuntu22.04")
        .expect("12.4.1 tag");
    assert!(nvidia_12_4
        .require_cuda
        .as_deref()
        .is_some_and(|r| r.contains("brand=geforce,driver>=535,driver<536")));
    assert!(nvidia_12_4
        .unconfirmed
        .iter()
        .any(|u| u.starts_with("require_cuda (NVIDIA's rhel9 Dockerfile")));
    // The verbatim 13.0.2 string is what the generated 13.x shape gives,
    // which checks that shape against a real image.
    let verbatim_13 = file
        .require_cuda_exact
        .iter()
        .find(|row| row.cuda == "13.0.2")
        .expect("13.0.2 exact row");
    let (generated_13, _) =
        require_cuda_rule(&file.require_cuda, &Version::parse("13.0.2").unwrap()).unwrap();
    assert_eq!(generated_13, verbatim_13.rule);
    // Every exact string parses.
    for row in &file.require_cuda_exact {
        require::RequireRule::parse(&row.rule).unwrap_or_else(|e| panic!("{}: {e}", row.cuda));
    }
}

#[test]
fn image_references_are_normalized() {
    for r in [
        "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
        "docker.io/nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
        "index.docker.io/nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
    ] {
        let image = kb().image(r).expect(r);
        assert_eq!(image.cuda.as_deref(), Some("12.8.1"));
        assert!(image
            .require_cuda
            .as_deref()
            .unwrap()
            .starts_with("cuda>=12.8 brand="));
    }
    assert!(kb()
        .image("nvidia/cuda:12.0.0-cudnn8-devel-ubuntu22.04")
        .is_some());
    assert!(kb()
        .image("nvidia/cuda:13.1.0-runtime-ubuntu24.04")
        .is_some());
    assert!(kb().image("nvidia/cuda:99.0-runtime-ubuntu24.04").is_none());
}

/// The nvidia/cuda bases the catalog holds: the nearest at or below and at
/// or above a CUDA version, by major.minor (what a doctor fix proposes).
#[test]
fn nearest_bases_are_found_by_major_minor_from_both_sides() {
    let kb = kb();
    let v = |s: &str| Version::parse(s).unwrap();
    let bases: Vec<&Version> = kb.base_cudas.iter().collect();
    assert!(bases.len() >= 3, "{bases:?}");
    let (lowest, highest) = (bases[0], bases[bases.len() - 1]);
    // Exactly a base's major.minor: that base (the newest patch of it).
    let newest_of_lowest = bases
        .iter()
        .rfind(|b| b.major_minor() == lowest.major_minor())
        .unwrap();
    assert_eq!(
        kb.newest_base_at_most(&lowest.major_minor()),
        Some(newest_of_lowest.to_string())
    );
    assert_eq!(
        kb.oldest_base_at_least(&highest.major_minor())
            .map(|s| v(&s).major_minor()),
        Some(highest.major_minor())
    );
    // Outside the catalog's range: nothing on that side.
    assert_eq!(kb.newest_base_at_most(&v("9.0")), None);
    assert_eq!(kb.oldest_base_at_least(&v("99.0")), None);
    // A version between two bases gets the one below, or the one above.
    let (below, above) = bases
        .windows(2)
        .map(|w| (w[0], w[1]))
        .find(|(a, b)| b.major_minor() > a.major_minor())
        .unwrap();
    let between = above.major_minor();
    let just_below = v(&format!(
        "{}.{}",
        between.major(),
        between.minor().saturating_sub(1)
    ));
    if just_below.major_minor() > below.major_minor() {
        assert_eq!(
            kb.newest_base_at_most(&just_below)
                .map(|s| v(&s).major_minor()),
            Some(below.major_minor())
        );
        assert_eq!(
            kb.oldest_base_at_least(&just_below)
                .map(|s| v(&s).major_minor()),
            Some(above.major_minor())
        );
    }
    assert!(kb
        .images()
        .iter()
        .any(|i| i.reference.starts_with("nvidia/cuda:")));
}

/// A rule shape's UNCONFIRMED notes make the generated rule shaky; a shape
/// without any does not.
#[test]
fn a_generated_rule_is_shaky_only_when_its_shape_is_unconfirmed() {
    let shape = |unconfirmed: Vec<String>| data::RequireCudaShape {
        cuda_major: 12,
        brands: vec!["tesla".into()],
        driver_branches: vec![535],
        unconfirmed,
        source: "test".into(),
    };
    let cuda = Version::parse("12.4.1").unwrap();
    let (rule, shaky) = require_cuda_rule(&[shape(vec![])], &cuda).unwrap();
    assert_eq!(rule, "cuda>=12.4 brand=tesla,driver>=535,driver<536");
    assert!(!shaky);
    let (_, shaky) = require_cuda_rule(&[shape(vec!["brand list".into()])], &cuda).unwrap();
    assert!(shaky);
    assert!(require_cuda_rule(&[shape(vec![])], &Version::parse("13.0").unwrap()).is_none());
}

/// Each generated `nvidia/cuda` flavour keeps its own facts: cuDNN only in
/// the cudnn flavours, and the "tag existence" doubt on every flavour but
/// the `-cudnn-devel` tags the source lists.
#[test]
fn cuda_base_flavours_carry_their_own_facts() {
    let doubts_tag = |facts: &ImageFacts| {
        facts
            .unconfirmed
            .iter()
            .any(|u| u.starts_with("tag existence"))
    };
    let flavour = |name: &str| {
        kb().image(&format!("nvidia/cuda:12.8.1-{name}-ubuntu24.04"))
            .unwrap_or_else(|| panic!("{name} flavour missing"))
    };
    let listed = flavour("cudnn-devel");
    assert_eq!(listed.ubuntu.as_deref(), Some("24.04"));
    assert_eq!(listed.cudnn.as_deref(), Some("9"));
    assert_eq!(listed.origin, "catalog");
    assert!(!doubts_tag(&listed), "{:?}", listed.unconfirmed);
    assert!(listed
        .unconfirmed
        .iter()
        .any(|u| u == "cudnn minor version"));
    for name in ["runtime", "devel", "cudnn-runtime"] {
        let facts = flavour(name);
        assert!(doubts_tag(&facts), "{name}: {:?}", facts.unconfirmed);
        assert_eq!(facts.cudnn.is_some(), name.starts_with("cudnn"), "{name}");
        assert_eq!(facts.origin, "catalog");
    }
}

/// An NGC row's facts reach its image: PyTorch, cuDNN, Ubuntu.
#[test]
fn ngc_images_keep_their_rows_facts() {
    let image = kb()
        .image("nvcr.io/nvidia/pytorch:24.05-py3")
        .expect("24.05");
    assert_eq!(image.cudnn.as_deref(), Some("9.1.0.70"));
    assert_eq!(image.ubuntu.as_deref(), Some("22.04"));
    assert!(image.pytorch.is_some() && image.ngc_entrypoint);
    assert_eq!(image.origin, "catalog");
}
