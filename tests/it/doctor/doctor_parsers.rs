//! Each nvidia-smi parser on each recorded-format FAKE fixture, and the
//! /proc parser; plus property tests: arbitrary input never panics.

use envgen::probe::nvidia_smi::{parse_query_csv, parse_table, parse_xml};
use envgen::probe::proc::parse_driver_version;
use proptest::prelude::*;

use crate::common::doctor::{read_fixture, HOSTS};

#[test]
fn csv_form_of_every_fixture() {
    for host in HOSTS {
        let with_cc = host.compute_capability.is_some();
        let file = if with_cc {
            "query.csv"
        } else {
            "query-nocc.csv"
        };
        let report = parse_query_csv(&read_fixture(host.dir, file), with_cc)
            .unwrap_or_else(|err| panic!("{}: {err}", host.dir));
        assert_eq!(
            report.driver_version.as_deref(),
            Some(host.driver),
            "{}",
            host.dir
        );
        assert_eq!(
            report.cuda_driver_version, None,
            "the CSV has no CUDA version"
        );
        assert_eq!(report.gpus.len(), host.count, "{}", host.dir);
        for (position, gpu) in report.gpus.iter().enumerate() {
            assert_eq!(gpu.index as usize, position);
            assert_eq!(gpu.name, host.name, "{}", host.dir);
            assert_eq!(gpu.memory_mib, Some(host.memory_mib), "{}", host.dir);
            assert_eq!(
                gpu.compute_capability.as_deref(),
                host.compute_capability,
                "{}",
                host.dir
            );
            assert!(gpu.uuid.as_deref().is_some_and(|u| u.starts_with("GPU-")));
        }
    }
}

#[test]
fn xml_form_of_every_fixture() {
    for host in HOSTS {
        let report = parse_xml(&read_fixture(host.dir, "q.xml"))
            .unwrap_or_else(|err| panic!("{}: {err}", host.dir));
        assert_eq!(
            report.driver_version.as_deref(),
            Some(host.driver),
            "{}",
            host.dir
        );
        assert_eq!(
            report.cuda_driver_version.as_deref(),
            Some(host.cuda),
            "{}",
            host.dir
        );
        assert_eq!(report.gpus.len(), host.count, "{}", host.dir);
        for (position, gpu) in report.gpus.iter().enumerate() {
            assert_eq!(gpu.name, host.name, "{}", host.dir);
            // fb_memory_usage/total, not bar1_memory_usage/total (256 MiB).
            assert_eq!(gpu.memory_mib, Some(host.memory_mib), "{}", host.dir);
            assert_eq!(gpu.minor_number, Some(position as u32), "{}", host.dir);
        }
    }
}

#[test]
fn table_form_of_every_fixture() {
    for host in HOSTS {
        let report = parse_table(&read_fixture(host.dir, "table.txt"))
            .unwrap_or_else(|err| panic!("{}: {err}", host.dir));
        assert_eq!(
            report.driver_version.as_deref(),
            Some(host.driver),
            "{}",
            host.dir
        );
        assert_eq!(
            report.cuda_driver_version.as_deref(),
            Some(host.cuda),
            "{}",
            host.dir
        );
        assert_eq!(report.gpus.len(), host.count, "{}", host.dir);
        for (position, gpu) in report.gpus.iter().enumerate() {
            assert_eq!(gpu.index as usize, position, "{}", host.dir);
            assert_eq!(gpu.name, host.name, "{}", host.dir);
            assert_eq!(gpu.memory_mib, Some(host.memory_mib), "{}", host.dir);
        }
    }
}

#[test]
fn driver_failure_message_is_an_error_in_every_form() {
    let text = read_fixture("no-gpu-driver-failed", "failed.txt");
    let errors = [
        parse_query_csv(&text, true).unwrap_err().to_string(),
        parse_xml(&text).unwrap_err().to_string(),
        parse_table(&text).unwrap_err().to_string(),
    ];
    for error in errors {
        assert!(
            error.contains("couldn't communicate with the NVIDIA driver"),
            "{error}"
        );
    }
}

#[test]
fn csv_with_missing_values_keeps_the_gpu() {
    let report = parse_query_csv(
        "0, NVIDIA A30, [N/A], [Not Supported], 535.261.03, [N/A]\n",
        true,
    )
    .expect("values reported as N/A are absent, not errors");
    assert_eq!(report.gpus[0].compute_capability, None);
    assert_eq!(report.gpus[0].memory_mib, None);
    assert_eq!(report.gpus[0].uuid, None);
}

#[test]
fn proc_version_of_both_module_flavours() {
    assert_eq!(
        parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul  9 20:50:42 UTC 2025\n").as_deref(),
        Ok("535.261.03")
    );
    assert_eq!(
        parse_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n").as_deref(),
        Ok("580.65.06")
    );
    assert!(parse_driver_version("GCC version: 12\n").is_err());
}

/// A recorded fixture with a slice replaced by arbitrary text: realistic
/// inputs that are almost, but not quite, well formed.
fn mutated(file: &'static str) -> impl Strategy<Value = String> {
    (
        0..HOSTS.len(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        ".{0,40}",
    )
        .prop_map(move |(host, start, len, junk)| {
            let text = read_fixture(
                HOSTS[host].dir,
                if file == "query.csv" && HOSTS[host].compute_capability.is_none() {
                    "query-nocc.csv"
                } else {
                    file
                },
            );
            let chars: Vec<char> = text.chars().collect();
            let start = start.index(chars.len() + 1);
            let end = (start + len.index(64)).min(chars.len());
            let mut out: String = chars[..start].iter().collect();
            out.push_str(&junk);
            out.extend(&chars[end..]);
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parsers_never_panic_on_arbitrary_text(text in "\\PC{0,400}", with_cc in any::<bool>()) {
        let _ = parse_query_csv(&text, with_cc);
        let _ = parse_xml(&text);
        let _ = parse_table(&text);
        let _ = parse_driver_version(&text);
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_query_csv(&text, true);
        let _ = parse_xml(&text);
        let _ = parse_table(&text);
        let _ = parse_driver_version(&text);
    }

    #[test]
    fn csv_parser_never_panics_on_mutated_fixtures(text in mutated("query.csv"), with_cc in any::<bool>()) {
        let _ = parse_query_csv(&text, with_cc);
    }

    #[test]
    fn xml_parser_never_panics_on_mutated_fixtures(text in mutated("q.xml")) {
        let _ = parse_xml(&text);
    }

    #[test]
    fn table_parser_never_panics_on_mutated_fixtures(text in mutated("table.txt")) {
        let _ = parse_table(&text);
    }

    #[test]
    fn proc_parser_never_panics_on_mutated_lines(prefix in ".{0,20}", junk in "\\PC{0,80}") {
        let _ = parse_driver_version(&format!("{prefix}NVRM version: {junk}\n"));
    }
}
