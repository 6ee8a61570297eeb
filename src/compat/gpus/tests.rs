//! GPU-name and assumed-host tests (split from gpus.rs to keep it short).
use super::*;
use crate::compat::*;

fn kb() -> &'static KnowledgeBase {
    KnowledgeBase::embedded()
}

#[test]
fn gpu_names_as_printed_and_typed() {
    let id = |q: &str| kb().lookup_gpu(q).map(|g| g.id.clone());
    assert_eq!(id("NVIDIA A100-SXM4-80GB").as_deref(), Some("a100-80gb"));
    assert_eq!(id("a100-80gb").as_deref(), Some("a100-80gb"));
    assert_eq!(id("Tesla V100-SXM2-32GB").as_deref(), Some("v100-32gb"));
    // Typed, a GeForce desktop name is that desktop card (its laptop part is
    // "… Laptop GPU"), so it keeps its own memory and notes (issue #27).
    assert_eq!(
        id("NVIDIA GeForce RTX 5070 Ti").as_deref(),
        Some("rtx-5070-ti")
    );
    assert_eq!(id("5070 Ti").as_deref(), Some("rtx-5070-ti"));
    assert_eq!(id("rtx-5070-ti").as_deref(), Some("rtx-5070-ti"));
    assert_eq!(id("NVIDIA RTX A6000").as_deref(), Some("rtx-a6000"));
    assert_eq!(id("a30").as_deref(), Some("a30"));
    assert_eq!(id("h100").as_deref(), Some("h100"));
    assert_eq!(id("RTX 4090").as_deref(), Some("rtx-4090"));
    assert_eq!(id("RTX 4090 D").as_deref(), Some("rtx-4090-d"));
    for sm in ["sm_120", "12.0", "120"] {
        let spec = kb().lookup_gpu(sm).expect(sm);
        assert!(spec.sm_only && spec.compute_capability == "12.0");
    }
    assert!(kb().lookup_gpu("Radeon 7900").is_none());
}

#[test]
fn every_gpu_the_brief_names_resolves_with_its_class() {
    let cases = [
        ("V100-16GB", "7.0", GpuClass::Datacenter),
        ("T4", "7.5", GpuClass::Datacenter),
        ("NVIDIA A100-PCIE-40GB", "8.0", GpuClass::Datacenter),
        ("NVIDIA A100 80GB PCIe", "8.0", GpuClass::Datacenter),
        ("A10", "8.6", GpuClass::Datacenter),
        ("A40", "8.6", GpuClass::Datacenter),
        ("RTX A4500", "8.6", GpuClass::Workstation),
        ("RTX 3090", "8.6", GpuClass::Consumer),
        (
            "NVIDIA GeForce RTX 4050 Laptop GPU",
            "8.9",
            GpuClass::Consumer,
        ),
        ("L4", "8.9", GpuClass::Datacenter),
        ("L40S", "8.9", GpuClass::Datacenter),
        ("H100 PCIe", "9.0", GpuClass::Datacenter),
        ("NVIDIA H100 80GB HBM3", "9.0", GpuClass::Datacenter),
        ("H100 NVL", "9.0", GpuClass::Datacenter),
        ("H200", "9.0", GpuClass::Datacenter),
        ("GH200", "9.0", GpuClass::Datacenter),
        ("B200", "10.0", GpuClass::Datacenter),
        ("RTX 5090", "12.0", GpuClass::Consumer),
        ("RTX PRO 6000 Blackwell", "12.0", GpuClass::Workstation),
        ("Jetson Orin", "8.7", GpuClass::Embedded),
        ("Jetson AGX Thor", "11.0", GpuClass::Embedded),
        ("GB10", "12.1", GpuClass::Workstation),
        ("B300", "10.3", GpuClass::Datacenter),
    ];
    for (name, cc, class) in cases {
        let spec = kb().lookup_gpu(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            (spec.compute_capability.as_str(), spec.class),
            (cc, class),
            "{name}"
        );
    }
}

#[test]
fn data_files_agree_with_each_other() {
    let kb = kb();
    // Every GPU's SM has first/last-CUDA facts in cuda.toml.
    for gpu in kb.gpus() {
        let cc = Version::parse(&gpu.compute_capability).unwrap();
        assert!(kb.sm_support(&cc).is_some(), "{} has no [[sm]] row", gpu.id);
    }
    // Every image with a CUDA version has a parseable NVIDIA_REQUIRE_CUDA.
    for image in kb.images().iter().filter(|i| i.cuda.is_some()) {
        let rule = image
            .require_cuda
            .as_deref()
            .unwrap_or_else(|| panic!("{}", image.reference));
        require::RequireRule::parse(rule).unwrap_or_else(|e| panic!("{}: {e}", image.reference));
        let cuda = Version::parse(image.cuda.as_deref().unwrap()).unwrap();
        assert!(
            kb.toolkit_driver_min(&cuda).is_some(),
            "{} has no toolkit driver",
            image.reference
        );
    }
    // Every wheel's CUDA variant is a release cuda.toml knows, or 11.x.
    for wheel in kb.wheels() {
        let cuda = Version::parse(&wheel.cuda).unwrap();
        assert!(
            cuda.major() == 11 || kb.toolkit_driver_min(&cuda).is_some(),
            "{}",
            wheel.spec
        );
    }
}

#[test]
fn ambiguous_and_unknown_gpu_names_are_usage_errors() {
    // "A100" is no longer ambiguous: its memory variants agree on every
    // verdict fact. "RTX 6000" names three architectures.
    let a100 = kb().resolve_gpu("A100").unwrap();
    assert_eq!((a100.id.as_str(), a100.memory_mib), ("a100", None));
    assert_eq!(a100.memory_range_mib, Some((40960, 81920)));
    let err = kb().resolve_gpu("RTX 6000").unwrap_err();
    let text = crate::error::render(&err);
    assert!(
        text.contains("`RTX 6000` is ambiguous")
            && text.contains("quadro-rtx-6000 (Quadro RTX 6000, cc 7.5, workstation)")
            && text.contains("rtx-6000-ada (NVIDIA RTX 6000 Ada Generation, cc 8.9, workstation)")
            && text.contains("rtx-pro-6000-blackwell (")
            && text.contains("cc 12.0, workstation"),
        "{text}"
    );
    assert_eq!(crate::error::exit_code_of(&err), 2);
    let err = kb().resolve_gpu("Radeon 7900").unwrap_err();
    let text = crate::error::render(&err);
    assert!(
        text.contains("`Radeon 7900` is not a GPU envgen knows"),
        "{text}"
    );
    assert_eq!(crate::error::exit_code_of(&err), 2);
}

/// A typo gets a did-you-mean of a few close GPUs (issue #44: `A31`
/// listed all ~230 ids), and a name close to nothing gets no list at all.
#[test]
fn a_mistyped_gpu_gets_a_few_close_names() {
    let text = crate::error::render(&kb().resolve_gpu("A31").unwrap_err());
    let fix = text.split("fix:").nth(1).unwrap_or_default();
    assert!(fix.contains("did you mean a30"), "{text}");
    let offered = fix
        .split('?')
        .next()
        .unwrap_or_default()
        .matches(',')
        .count()
        + 1;
    assert!(offered <= crate::suggest::MAX_SUGGESTIONS, "{text}");
    assert!(
        !text.contains("h100") && !text.contains("rtx-4090"),
        "{text}"
    );
    let text = crate::error::render(&kb().resolve_gpu("Radeon 7900").unwrap_err());
    assert!(!text.contains("did you mean") && text.len() < 400, "{text}");
}

/// What a typed `--assume-gpu` name must resolve to.
enum Want {
    /// One answer: its id, compute capability and class.
    One(&'static str, &'static str, GpuClass),
    /// A usage error listing these ids (with cc and class).
    Ambiguous(&'static [&'static str]),
    Unknown,
}

#[test]
fn typed_gpu_names_resolve_to_one_answer_or_a_listed_choice() {
    use GpuClass::{Consumer as C, Datacenter as D, Embedded as E, Workstation as W};
    use Want::*;
    let table: &[(&str, Want)] = &[
        ("A100", One("a100", "8.0", D)),
        ("a100", One("a100", "8.0", D)),
        ("NVIDIA A100-SXM4-80GB", One("a100-80gb", "8.0", D)),
        ("NVIDIA A100-PCIE-40GB", One("a100-40gb", "8.0", D)),
        ("A100 80GB", One("a100-80gb", "8.0", D)),
        ("A10", One("a10", "8.6", D)),
        ("NVIDIA A10", One("a10", "8.6", D)),
        ("A10G", One("a10g", "8.6", D)),
        ("A800", One("a800", "8.0", D)),
        ("V100", One("v100", "7.0", D)),
        ("Tesla V100-SXM2-16GB", One("v100-16gb", "7.0", D)),
        ("Tesla V100S-PCIE-32GB", One("v100s", "7.0", D)),
        ("Titan V", One("titan-v", "7.0", C)),
        ("T4", One("t4", "7.5", D)),
        ("H100", One("h100", "9.0", D)),
        ("NVIDIA H100 80GB HBM3", One("h100-sxm", "9.0", D)),
        ("NVIDIA H100 PCIe", One("h100-pcie", "9.0", D)),
        ("NVIDIA H100 NVL", One("h100-nvl", "9.0", D)),
        ("H200", One("h200", "9.0", D)),
        ("GH200", One("gh200", "9.0", D)),
        ("B200", One("b200", "10.0", D)),
        ("GB300", One("gb300", "10.3", D)),
        ("RTX 3080", One("rtx-3080", "8.6", C)),
        ("3080", One("rtx-3080", "8.6", C)),
        ("NVIDIA GeForce RTX 3080", One("rtx-3080", "8.6", C)),
        (
            "NVIDIA GeForce RTX 3080 Laptop GPU",
            One("rtx-3080-laptop", "8.6", C),
        ),
        ("3080 Ti", One("rtx-3080-ti", "8.6", C)),
        ("4090", One("rtx-4090", "8.9", C)),
        ("RTX 4090 Laptop", One("rtx-4090-laptop", "8.9", C)),
        ("4090 D", One("rtx-4090-d", "8.9", C)),
        ("5070 Ti", One("rtx-5070-ti", "12.0", C)),
        ("RTX 5070 Ti Laptop", One("rtx-5070-ti-laptop", "12.0", C)),
        (
            "NVIDIA GeForce RTX 5070 Ti Laptop GPU",
            One("rtx-5070-ti-laptop", "12.0", C),
        ),
        ("RTX 5090", One("rtx-5090", "12.0", C)),
        ("GTX 1660 Ti", One("gtx-1660-ti", "7.5", C)),
        ("2080 Ti", One("rtx-2080-ti", "7.5", C)),
        ("Quadro RTX 8000", One("quadro-rtx-8000", "7.5", W)),
        ("RTX A6000", One("rtx-a6000", "8.6", W)),
        ("RTX 6000 Ada", One("rtx-6000-ada", "8.9", W)),
        (
            "NVIDIA RTX 6000 Ada Generation",
            One("rtx-6000-ada", "8.9", W),
        ),
        ("RTX 4000 Ada", One("rtx-4000-ada-family", "8.9", W)),
        (
            "RTX PRO 6000 Blackwell",
            One("rtx-pro-6000-blackwell", "12.0", W),
        ),
        ("L40S", One("l40s", "8.9", D)),
        ("Jetson Orin", One("jetson-orin", "8.7", E)),
        ("Orin Nano", One("jetson-orin-nano", "8.7", E)),
        ("Jetson Thor", One("jetson-thor", "11.0", E)),
        ("DGX Spark", One("gb10", "12.1", W)),
        ("sm_120", One("sm_120", "12.0", C)),
        ("12.0", One("sm_120", "12.0", C)),
        ("120", One("sm_120", "12.0", C)),
        ("sm_110", One("sm_110", "11.0", C)),
        (
            "RTX 6000",
            Ambiguous(&["quadro-rtx-6000", "rtx-6000-ada", "rtx-pro-6000-blackwell"]),
        ),
        (
            "RTX 4000",
            Ambiguous(&["quadro-rtx-4000", "rtx-4000-ada", "rtx-pro-4000-blackwell"]),
        ),
        (
            "RTX 2000",
            Ambiguous(&["rtx-2000-ada", "rtx-pro-2000-blackwell"]),
        ),
        // Maxwell and Pascal (issue #27), by nvidia-smi's and people's names.
        ("Tesla P100", One("p100", "6.0", D)),
        ("Tesla P100-PCIE-16GB", One("p100-16gb", "6.0", D)),
        ("Tesla P100-PCIE-12GB", One("p100-12gb", "6.0", D)),
        ("Tesla P40", One("p40", "6.1", D)),
        ("Tesla P4", One("p4", "6.1", D)),
        ("Tesla M40", One("m40", "5.2", D)),
        ("Tesla M60", One("m60", "5.2", D)),
        ("Tesla M4", One("m4", "5.2", D)),
        ("Quadro GP100", One("quadro-gp100", "6.0", W)),
        ("Quadro P6000", One("quadro-p6000", "6.1", W)),
        ("NVIDIA GeForce GTX 1080 Ti", One("gtx-1080-ti", "6.1", C)),
        ("GTX 1060", One("gtx-1060", "6.1", C)),
        ("GTX 980", One("gtx-980", "5.2", C)),
        ("GTX 750 Ti", One("gtx-750-ti", "5.0", C)),
        ("NVIDIA TITAN Xp", One("titan-xp", "6.1", C)),
        ("TITAN X", Ambiguous(&["titan-x-pascal", "gtx-titan-x"])),
        ("Orin (nvgpu)", One("orin-nvgpu", "8.7", E)),
        ("Jetson Xavier NX", One("jetson-xavier-nx", "7.2", E)),
        ("Jetson TX2", One("jetson-tx2", "6.2", E)),
        ("Jetson Nano", One("jetson-nano", "5.3", E)),
        // RTX PRO Server Editions are data-center boards, not workstations.
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            One("rtx-pro-6000-blackwell-server", "12.0", D),
        ),
        (
            "RTX PRO 4500 Blackwell Server Edition",
            One("rtx-pro-4500-blackwell-server", "12.0", D),
        ),
        ("RTX 5080", One("rtx-5080", "12.0", C)),
        // Laptop parts, by nvidia-smi's names.
        ("NVIDIA GeForce MX450", One("mx450", "7.5", C)),
        (
            "NVIDIA RTX A2000 Laptop GPU",
            One("rtx-a2000-laptop", "8.6", W),
        ),
        (
            "NVIDIA RTX 2000 Ada Generation Laptop GPU",
            One("rtx-2000-ada-laptop", "8.9", W),
        ),
        ("Quadro T1000", One("quadro-t1000-laptop", "7.5", W)),
        ("RTX 5080 Laptop", One("rtx-5080-laptop", "12.0", C)),
        ("Radeon 7900", Unknown),
        ("Z100", Unknown),
        ("H10", Unknown),
        ("", Unknown),
    ];
    assert!(table.len() >= 40);
    for (query, want) in table {
        let got = kb().resolve_gpu(query);
        match (want, got) {
            (One(id, cc, class), Ok(spec)) => assert_eq!(
                (
                    spec.id.as_str(),
                    spec.compute_capability.as_str(),
                    spec.class
                ),
                (*id, *cc, *class),
                "{query}"
            ),
            (Ambiguous(ids), Err(err)) => {
                let text = crate::error::render(&err);
                assert!(text.contains("is ambiguous"), "{query}: {text}");
                for id in *ids {
                    let spec = kb().lookup_gpu(id).unwrap();
                    let choice = format!(
                        "{id} ({}, cc {}, {})",
                        spec.name,
                        spec.compute_capability,
                        class_name(spec.class)
                    );
                    assert!(text.contains(&choice), "{query}: {choice} in {text}");
                }
                assert_eq!(crate::error::exit_code_of(&err), 2, "{query}");
            }
            (Unknown, Err(err)) => {
                let text = crate::error::render(&err);
                assert!(
                    text.contains("is not a GPU envgen knows"),
                    "{query}: {text}"
                );
                assert_eq!(crate::error::exit_code_of(&err), 2, "{query}");
            }
            (_, Ok(spec)) => panic!("{query}: resolved to {}", spec.id),
            (_, Err(err)) => panic!("{query}: {}", crate::error::render(&err)),
        }
    }
}

#[test]
fn a_family_merges_only_rows_that_agree_and_shows_a_memory_range() {
    let kb = kb();
    // A10 and A100 are different GPUs, whichever is typed first.
    assert_eq!(kb.lookup_gpu("A10").unwrap().compute_capability, "8.6");
    assert_eq!(kb.lookup_gpu("A100").unwrap().compute_capability, "8.0");
    let h100 = kb.lookup_gpu("H100").unwrap();
    assert_eq!(h100.variants, ["h100-pcie", "h100-sxm", "h100-nvl"]);
    assert_eq!(h100.memory_range_mib, Some((81559, 95830)));
    // Every merged family's variants agree on what verdicts read.
    for spec in &kb.family_specs {
        for id in &spec.variants {
            let row = kb.gpus.iter().find(|g| &g.id == id).unwrap();
            assert_eq!(
                (&row.compute_capability, row.class),
                (&spec.compute_capability, spec.class),
                "{} in {}",
                id,
                spec.id
            );
        }
        // A merged spec is found again by its id (verdicts look up catalog_id).
        assert_eq!(kb.lookup_gpu(&spec.id).map(|s| &s.id), Some(&spec.id));
    }
    // Memory text: a range for A100 and GTX 1060 (3 or 6 GB); the desktop
    // RTX 3080 its own; unknown for a laptop part.
    let names = ["A100", "RTX 3080", "A30", "GTX 1060", "RTX 2050"];
    let host = kb.assumed_host(&names.map(String::from), None).unwrap();
    let text: Vec<String> = host.gpus.iter().map(|g| kb.memory_text(g)).collect();
    assert_eq!(
        text,
        [
            "40–80 GiB",
            "10240 MiB",
            "24576 MiB",
            "3–6 GiB",
            "memory unknown"
        ]
    );
    // Variants that agree on memory give a plain figure.
    let ada = kb.lookup_gpu("RTX 4000 Ada").unwrap();
    assert_eq!((ada.memory_mib, ada.memory_range_mib), (Some(20480), None));
    // A probed name that is a row's own keeps that row.
    let mut sff = Host::default();
    sff.gpus.push(Gpu {
        name: "NVIDIA RTX 4000 SFF Ada Generation".into(),
        ..Gpu::default()
    });
    kb.enrich(&mut sff);
    assert_eq!(sff.gpus[0].catalog_id.as_deref(), Some("rtx-4000-sff-ada"));
    // A probed GPU keeps its exact row, not its family.
    let mut probed = Host::default();
    probed.gpus.push(Gpu {
        name: "NVIDIA GeForce RTX 3080".into(),
        ..Gpu::default()
    });
    kb.enrich(&mut probed);
    assert_eq!(probed.gpus[0].catalog_id.as_deref(), Some("rtx-3080"));
    assert_eq!(probed.gpus[0].memory_mib, Some(10240));
}

#[test]
fn assumed_host_derives_the_driver_cuda() {
    let cuda = |d: &str| kb().assumed_host(&[], Some(d)).unwrap().cuda_driver_version;
    assert_eq!(cuda("535.261.03").as_deref(), Some("12.2"));
    // R470 (the RTX A6000 guide's minimum) is a CUDA 11.4 driver (Table 3).
    assert_eq!(cuda("470.256.02").as_deref(), Some("11.4"));
    for (branch, expected) in [
        ("450", "11.0"),
        ("455", "11.1"),
        ("470", "11.4"),
        ("510", "11.6"),
        ("515", "11.7"),
        ("520", "11.8"),
        ("525", "12.0"),
        ("535", "12.2"),
        ("550", "12.4"),
        ("570", "12.8"),
        ("575", "12.9"),
        ("580", "13.0"),
        ("590", "13.1"),
        ("595", "13.2"),
    ] {
        assert_eq!(cuda(branch).as_deref(), Some(expected), "driver {branch}");
    }
    for bad in ["12.8", "535.261.03.1", "1000", "banana", ""] {
        let err = kb().assumed_host(&[], Some(bad)).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2, "{bad}");
    }
    let host = kb()
        .assumed_host(&["sm_120".into(), "A30".into()], None)
        .unwrap();
    assert_eq!(host.gpus[0].class, None);
    assert_eq!(host.gpus[1].class, Some(GpuClass::Datacenter));
    assert_eq!(host.gpus[1].name, "NVIDIA A30");
    assert_eq!(host.source, HostSource::Assumed);
    assert_eq!(host.gpus[1].catalog_id.as_deref(), Some("a30"));
}

/// An unknown name suggests the known GPUs whose names are close, once each.
#[test]
fn an_unknown_gpu_name_suggests_the_close_ones() {
    let choices_of = |query: &str| {
        let text = crate::error::render(&kb().resolve_gpu(query).unwrap_err());
        let list = text
            .split("did you mean ")
            .nth(1)
            .unwrap_or_else(|| panic!("no suggestion: {text}"));
        let list = list.split('?').next().unwrap().to_string();
        (
            list.split(", ").map(str::to_string).collect::<Vec<_>>(),
            text,
        )
    };
    let (choices, text) = choices_of("H10");
    assert!(choices.contains(&"h100".to_string()), "{text}");
    assert!(!choices.contains(&"a30".to_string()), "{text}");
    let mut unique = choices.clone();
    unique.dedup();
    assert_eq!(unique, choices, "{text}");
    // A typed name that contains a known one suggests it.
    let (choices, text) = choices_of("A30X");
    assert_eq!(choices.first().map(String::as_str), Some("a30"), "{text}");
}

#[test]
fn a_desktop_card_does_not_inherit_its_laptop_siblings_notes() {
    // Issue #27: `--assume-gpu "RTX 5080"` was the desktop+laptop family, so
    // it showed "memory unknown" and the laptop row's UNCONFIRMED note.
    let host = kb().assumed_host(&["RTX 5080".into()], None).unwrap();
    let spec = kb()
        .lookup_gpu(host.gpus[0].catalog_id.as_deref().unwrap())
        .unwrap();
    assert_eq!(spec.id, "rtx-5080");
    assert!(spec.unconfirmed.is_empty(), "{:?}", spec.unconfirmed);
    assert_eq!(kb().memory_text(&host.gpus[0]), "16384 MiB");
}

#[test]
fn probed_jetson_and_server_edition_names_get_their_class() {
    // JetPack 6's nvidia-smi names an Orin "Orin (nvgpu)"; it must not be an
    // unknown GPU (whose class would turn forward compatibility off).
    let mut host = Host::default();
    for name in [
        "Orin (nvgpu)",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "Tesla P100-PCIE-16GB",
    ] {
        host.gpus.push(Gpu {
            name: name.into(),
            ..Gpu::default()
        });
    }
    kb().enrich(&mut host);
    let got: Vec<(Option<&str>, Option<GpuClass>)> = host
        .gpus
        .iter()
        .map(|g| (g.compute_capability.as_deref(), g.class))
        .collect();
    assert_eq!(
        got,
        [
            (Some("8.7"), Some(GpuClass::Embedded)),
            (Some("12.0"), Some(GpuClass::Datacenter)),
            (Some("6.0"), Some(GpuClass::Datacenter)),
        ]
    );
}

#[test]
fn every_gpu_row_has_an_architecture_with_a_minimum_driver() {
    for gpu in kb().gpus() {
        let cc = Version::parse(&gpu.compute_capability).unwrap();
        let arch = kb()
            .architecture(&cc)
            .unwrap_or_else(|| panic!("{}: no [[architecture]] for {cc}", gpu.id));
        assert!(
            Version::parse(&arch.min_driver_linux).is_some(),
            "{}",
            arch.name
        );
    }
    // The minimum is the toolkit driver of the architecture's first CUDA,
    // where env/cuda.toml has that release (CUDA 11.0 and later).
    let file = kb().cuda_file().unwrap();
    for arch in &file.architecture {
        let first = Version::parse(&arch.first_cuda).unwrap();
        if let Some(toolkit) = kb().toolkit_driver_min(&first) {
            assert_eq!(
                toolkit,
                Version::parse(&arch.min_driver_linux).unwrap(),
                "{}",
                arch.name
            );
        }
    }
    // The branches the issue names: Blackwell RTX R570, Hopper and Ada R520.
    let branch = |cc: &str| {
        let arch = kb().architecture(&Version::parse(cc).unwrap()).unwrap();
        Version::parse(&arch.min_driver_linux).unwrap().major()
    };
    assert_eq!(
        (branch("12.0"), branch("9.0"), branch("8.9")),
        (570, 520, 520)
    );
}

/// A merged family shows a memory range only when every variant's memory
/// is known, and names each source once.
#[test]
fn a_family_with_an_unknown_memory_has_no_range_and_its_sources_once() {
    let mut kb = KnowledgeBase::parse_embedded().unwrap();
    let members: Vec<usize> = ["h100-pcie", "h100-sxm", "h100-nvl"]
        .iter()
        .map(|id| kb.gpus.iter().position(|g| g.id == *id).unwrap())
        .collect();
    let merged = kb.merge_family("H100", &members).unwrap();
    assert_eq!(merged.memory_range_mib, Some((81559, 95830)));
    let mut sources: Vec<&str> = Vec::new();
    for i in &members {
        if !sources.contains(&kb.gpus[*i].source.as_str()) {
            sources.push(&kb.gpus[*i].source);
        }
    }
    assert!(!sources.is_empty());
    assert_eq!(merged.source, sources.join(" ; "));
    kb.gpus[members[1]].memory_mib = None;
    let merged = kb.merge_family("H100", &members).unwrap();
    assert_eq!((merged.memory_mib, merged.memory_range_mib), (None, None));
}
