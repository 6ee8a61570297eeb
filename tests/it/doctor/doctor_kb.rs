//! `envgen doctor` behaviour that needs the compatibility knowledge base
//! (`env/*.toml` + the verdict engine from the compat work): assumed hosts
//! and the `no-gpu` verdict. NVML is skipped and PATH holds no nvidia-smi, so
//! the real host cannot leak in.

use crate::common::doctor::doctor_no_gpu;
use crate::common::json_of;

#[test]
fn assumed_a30_on_535_has_the_contract_shape() {
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "A30",
        "--assume-driver",
        "535.261.03",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    let host = &json["host"];
    assert_eq!(host["source"], "assumed");
    assert_eq!(host["driver_version"], "535.261.03");
    let gpus = host["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 1, "{host}");
    assert!(
        gpus[0]["name"].as_str().is_some_and(|n| n.contains("A30")),
        "{host}"
    );
    assert_eq!(gpus[0]["compute_capability"], "8.0");
    assert_eq!(gpus[0]["class"], "datacenter");
    let verdicts = json["verdicts"].as_array().expect("verdicts");
    assert!(!verdicts.is_empty(), "the whole catalog is checked");
    for verdict in verdicts {
        assert!(
            ["ok", "warn", "fail"].contains(&verdict["status"].as_str().unwrap_or("")),
            "{verdict}"
        );
        assert!(
            verdict["image"].is_string() && verdict["reasons"].is_array(),
            "{verdict}"
        );
    }
}

#[test]
fn no_gpu_host_gets_a_no_gpu_verdict_and_exit_0() {
    let output = doctor_no_gpu(&["--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    let codes: Vec<&str> = json["verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v["reasons"].as_array().into_iter().flatten())
        .filter_map(|r| r["code"].as_str())
        .collect();
    assert!(codes.contains(&"no-gpu"), "{json}");
}

/// Every reason code of every verdict, with its verdict's status.
fn codes_with_status(json: &serde_json::Value) -> Vec<(String, String)> {
    json["verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| {
            let status = v["status"].as_str().unwrap_or("").to_string();
            v["reasons"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(move |r| r["code"].as_str().map(|c| (c.to_string(), status.clone())))
        })
        .collect()
}

#[test]
fn a100_family_answers_the_fp8_question_instead_of_asking_which_a100() {
    let args = [
        "--assume-gpu",
        "A100",
        "--assume-driver",
        "535.104.05",
        "--precision",
        "fp8",
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let output = doctor_no_gpu(&json_args);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let json = json_of(&output);
    let gpu = &json["host"]["gpus"][0];
    assert_eq!(gpu["compute_capability"], "8.0", "{gpu}");
    assert_eq!(gpu["class"], "datacenter", "{gpu}");
    assert_eq!(gpu["catalog_id"], "a100", "{gpu}");
    assert!(
        codes_with_status(&json).contains(&("fp8-unsupported".into(), "fail".into())),
        "{json}"
    );
    // The human report shows the family's memory as a range.
    let output = doctor_no_gpu(&args);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("CC 8.0  40–80 GiB  datacenter"), "{stdout}");
}

#[test]
fn geforce_names_people_type_resolve() {
    for name in [
        "RTX 3080",
        "3080",
        "NVIDIA GeForce RTX 3080",
        "4090",
        "5070 Ti",
    ] {
        let output = doctor_no_gpu(&[
            "--assume-gpu",
            name,
            "--assume-driver",
            "570.124.06",
            "--json",
        ]);
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "{name}: {output:?}"
        );
        let gpu = &json_of(&output)["host"]["gpus"][0];
        assert_eq!(gpu["class"], "consumer", "{name}: {gpu}");
    }
}

#[test]
fn a_genuinely_ambiguous_name_lists_the_choices_and_exits_2() {
    let output = doctor_no_gpu(&["--assume-gpu", "RTX 6000"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for choice in [
        "quadro-rtx-6000 (Quadro RTX 6000, cc 7.5, workstation)",
        "rtx-6000-ada (NVIDIA RTX 6000 Ada Generation, cc 8.9, workstation)",
        "cc 12.0, workstation",
    ] {
        assert!(stderr.contains(choice), "{choice}: {stderr}");
    }
}

#[test]
fn pascal_maxwell_and_jetson_names_are_known() {
    // Issue #27: "Tesla P100" was "not a GPU envgen knows", while PyTorch
    // cu126 wheels still ship sm_60 kernels.
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "Tesla P100",
        "--assume-driver",
        "570.124.06",
        "--pytorch",
        "2.6.0+cu126",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    assert_eq!(json["host"]["gpus"][0]["compute_capability"], "6.0");
    assert_eq!(json["verdicts"][0]["status"], "ok", "{json}");
    for name in [
        "Tesla M40",
        "GTX 1080 Ti",
        "TITAN Xp",
        "Quadro GP100",
        "Orin (nvgpu)",
    ] {
        let output = doctor_no_gpu(&["--assume-gpu", name, "--json"]);
        assert_eq!(output.status.code(), Some(0), "{name}: {output:?}");
        let gpu = &json_of(&output)["host"]["gpus"][0];
        assert!(gpu["class"].is_string(), "{name}: {gpu}");
    }
}

/// envgen's `cpu` profile has no CUDA at all: it runs on any host, whatever
/// the GPU or driver (containers/profiles/cpu.toml: debian:bookworm-slim +
/// envgen). Here, not in compat's unit tests: it reads an image profile,
/// a layer above compat.
#[test]
fn envgen_cpu_profile_is_ok_on_any_gpu_host() {
    use envgen::compat::{evaluate, CheckRequest, KnowledgeBase, VerdictStatus};
    let kb = KnowledgeBase::embedded();
    let facts = envgen::image::profile_facts("cpu").expect("containers/profiles/cpu.toml");
    let host = kb
        .assumed_host(&["RTX 5070 Ti".to_string()], Some("535.261.03"))
        .unwrap();
    let verdicts = evaluate(kb, &host, &CheckRequest::only_images(vec![facts]));
    assert_eq!(verdicts.len(), 1, "{verdicts:#?}");
    assert_eq!(verdicts[0].codes(), ["cpu-only"], "{verdicts:#?}");
    assert_eq!(verdicts[0].status, VerdictStatus::Ok);
}
