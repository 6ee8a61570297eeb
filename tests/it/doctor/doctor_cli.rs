//! `envgen doctor` end to end with a FAKE `nvidia-smi` (this machine has no
//! NVIDIA GPU; see tests/fixtures/nvidia-smi/README.md) first on PATH and
//! NVML skipped, plus the no-GPU path and bad flag values.

use crate::common::doctor::{bin_dir, doctor, doctor_no_gpu, doctor_with_env, HOSTS};
use crate::common::json_of;

#[test]
fn doctor_reads_every_fixture_host_through_nvidia_smi() {
    let bin = bin_dir(true);
    for host in HOSTS {
        let output = doctor(bin.path(), Some(host.dir), None, &["--json"]);
        assert_eq!(output.status.code(), Some(0), "{}: {:?}", host.dir, output);
        let json = json_of(&output);
        let h = &json["host"];
        assert_eq!(h["source"], "nvidia-smi", "{}", host.dir);
        assert_eq!(h["driver_version"], host.driver, "{}", host.dir);
        assert_eq!(h["cuda_driver_version"], host.cuda, "{}", host.dir);
        let gpus = h["gpus"].as_array().expect("gpus array");
        assert_eq!(gpus.len(), host.count, "{}", host.dir);
        for (position, gpu) in gpus.iter().enumerate() {
            assert_eq!(gpu["index"], position as u64, "{}", host.dir);
            assert_eq!(gpu["name"], host.name, "{}", host.dir);
            assert_eq!(gpu["memory_mib"], host.memory_mib, "{}", host.dir);
            if let Some(cc) = host.compute_capability {
                assert_eq!(gpu["compute_capability"], cc, "{}", host.dir);
            }
            assert_eq!(
                gpu["minor_number"], position as u64,
                "{}: minor from -q -x",
                host.dir
            );
        }
        assert!(json["verdicts"].is_array(), "{}", host.dir);
    }
}

#[test]
fn human_output_summarises_the_host() {
    let bin = bin_dir(true);
    let output = doctor(bin.path(), Some("multi-4xa100-535"), None, &[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("source: nvidia-smi"), "{text}");
    assert!(
        text.contains("driver 535.261.03, CUDA driver API 12.2"),
        "{text}"
    );
    for index in 0..4 {
        assert!(
            text.contains(&format!(
                "GPU {index}  NVIDIA A100-SXM4-80GB  CC 8.0  81920 MiB"
            )),
            "{text}"
        );
    }
}

/// Without a GPU nothing is checked; known images and envgen's CPU profile
/// stay as they were. An image envgen knows nothing about is a usage error
/// (exit 2) with a did-you-mean, not a warning scripts miss (issue #44;
/// issue #21 had made it `unknown-image` rather than "ok").
#[test]
fn on_a_gpu_less_host_an_unknown_image_is_a_usage_error() {
    let verdict_of = |image: &str| {
        let output = doctor_no_gpu(&["--image", image, "--json"]);
        assert_eq!(output.status.code(), Some(0), "{image}: {output:?}");
        let verdict = json_of(&output)["verdicts"][0].clone();
        let codes: Vec<String> = verdict["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["code"].as_str().unwrap().to_string())
            .collect();
        (verdict["status"].as_str().unwrap().to_string(), codes)
    };
    assert_eq!(
        verdict_of("cpu"),
        ("ok".to_string(), vec!["no-gpu".to_string()])
    );
    let (_, codes) = verdict_of("nvcr.io/nvidia/pytorch:25.01-py3");
    assert_eq!(codes, ["no-gpu"]);

    for json in [&[][..], &["--json"][..]] {
        let mut args = vec!["--image", "nvcr.io/nvidia/pytorch:25.06"];
        args.extend(json);
        let typo = doctor_no_gpu(&args);
        assert_eq!(typo.status.code(), Some(2), "{typo:?}");
        assert!(typo.stdout.is_empty(), "{typo:?}");
        let stderr = String::from_utf8_lossy(&typo.stderr);
        assert!(
            stderr.contains("--image nvcr.io/nvidia/pytorch:25.06: envgen knows nothing")
                && stderr.contains("did you mean nvcr.io/nvidia/pytorch:25.06-py3"),
            "{stderr}"
        );
    }
    let unknown = doctor_no_gpu(&["--image", "nope:latest"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
}

#[test]
fn no_nvidia_smi_and_no_driver_is_a_no_gpu_report_with_exit_0() {
    let output = doctor_no_gpu(&["--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    assert_eq!(json["host"]["source"], "none");
    assert_eq!(json["host"]["gpus"].as_array().map(Vec::len), Some(0));

    let output = doctor_no_gpu(&[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("no-gpu"),
        "{output:?}"
    );
}

#[test]
fn nvidia_smi_that_cannot_reach_the_driver_is_a_no_gpu_report() {
    let bin = bin_dir(true);
    let output = doctor(bin.path(), Some("no-gpu-driver-failed"), None, &["--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    assert_eq!(json["host"]["source"], "none");
    let notes = json["host"]["notes"].to_string();
    assert!(
        notes.contains("couldn't communicate with the NVIDIA driver"),
        "{notes}"
    );
}

#[test]
fn proc_driver_version_is_the_last_source() {
    let bin = bin_dir(false);
    let proc_file = bin.path().join("version");
    std::fs::write(
        &proc_file,
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n",
    )
    .unwrap();
    let output = doctor(bin.path(), None, Some(&proc_file), &["--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    assert_eq!(json["host"]["source"], "proc");
    assert_eq!(json["host"]["driver_version"], "580.65.06");
}

#[test]
fn json_is_one_document_on_stdout() {
    let bin = bin_dir(true);
    let output = doctor(
        bin.path(),
        Some("a30-535"),
        None,
        &["--json", "--image", "nvcr.io/nvidia/pytorch:25.01-py3"],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut documents =
        serde_json::Deserializer::from_str(&stdout).into_iter::<serde_json::Value>();
    assert!(documents.next().is_some_and(|d| d.is_ok()), "{stdout}");
    assert!(
        documents.next().is_none(),
        "more than one document: {stdout}"
    );
}

#[test]
fn bad_assume_driver_is_a_usage_error_naming_the_value() {
    for value in ["banana", "12.8", "535.261.03.1"] {
        let output = doctor_no_gpu(&["--assume-gpu", "A30", "--assume-driver", value]);
        assert_eq!(output.status.code(), Some(2), "{value}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(value), "{value}: {stderr}");
    }
}

#[test]
fn a_bare_driver_branch_is_accepted_as_the_docs_say() {
    // docs/doctor.md: "a bare branch counts as its newest release".
    for (branch, cuda) in [("535", "12.2"), ("470", "11.4"), ("580", "13.0")] {
        let output = doctor_no_gpu(&["--assume-gpu", "A30", "--assume-driver", branch, "--json"]);
        assert_eq!(output.status.code(), Some(0), "{branch}: {output:?}");
        let host = &json_of(&output)["host"];
        assert_eq!(host["driver_version"], branch);
        assert_eq!(host["cuda_driver_version"], cuda, "{branch}");
    }
}

#[test]
fn a_pytorch_release_without_its_cuda_variant_is_a_usage_error() {
    // "2.8.0" names three builds (cu126, cu128, cu129) whose kernels differ:
    // exit 2 with the builds to choose from, not a guessed verdict.
    let output = doctor_no_gpu(&["--assume-gpu", "RTX 4090", "--pytorch", "2.8.0"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`2.8.0` names a PyTorch release but not its CUDA variant")
            && stderr.contains("2.8.0+cu128"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "{output:?}");
}

#[test]
fn precision_may_be_given_more_than_once() {
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "T4",
        "--assume-driver",
        "570",
        "--precision",
        "fp16",
        "--precision",
        "bf16",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let json = json_of(&output);
    let got: Vec<(String, String)> = json["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["image"].to_string(), v["status"].to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("\"precision:fp16\"".to_string(), "\"ok\"".to_string()),
            ("\"precision:bf16\"".to_string(), "\"fail\"".to_string())
        ]
    ); // The same precision twice is one question.
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "T4",
        "--precision",
        "bf16",
        "--precision",
        "bf16",
        "--json",
    ]);
    assert_eq!(
        json_of(&output)["verdicts"].as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn bad_precision_is_a_usage_error_naming_the_value() {
    let output = doctor_no_gpu(&["--precision", "fp7"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("fp7"),
        "{output:?}"
    );
}

#[test]
fn toolkit_cudnn_and_nvrtc_come_from_cuda_path() {
    // A toolkit tree laid out like /usr/local/cuda (files are empty stand-ins).
    let cuda = tempfile::tempdir().unwrap();
    let root = cuda.path();
    std::fs::create_dir_all(root.join("include")).unwrap();
    std::fs::create_dir_all(root.join("lib64")).unwrap();
    std::fs::write(
        root.join("version.json"),
        r#"{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}, "cuda_nvrtc": {"name": "CUDA NVRTC", "version": "12.8.93"}}"#,
    )
    .unwrap();
    std::fs::write(
        root.join("include/cudnn_version.h"),
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 8\n#define CUDNN_PATCHLEVEL 0\n",
    )
    .unwrap();
    for name in ["libnvrtc.so.12", "libnvrtc.so.12.8.93"] {
        std::fs::write(root.join("lib64").join(name), b"").unwrap();
    }
    let bin = bin_dir(true);
    let output = doctor_with_env(
        bin.path(),
        Some("rtx-5070-ti-575"),
        None,
        &[("CUDA_PATH", root)],
        &["--json"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let host = &json_of(&output)["host"];
    assert_eq!(host["cuda_toolkit"], "12.8.1", "{host}");
    assert_eq!(host["cudnn"], "9.8.0", "{host}");
    assert_eq!(host["nvrtc"], "12.8.93", "{host}");
}

#[test]
fn docker_daemon_is_reported_through_the_engine_api() {
    // scripts/test.sh starts a private dockerd and exports DOCKER_HOST; without
    // it (and with PATH holding no docker CLI) there is no Docker to report.
    let output = doctor_no_gpu(&["--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    let docker = json["host"]["container_runtimes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|runtime| runtime["name"] == "docker");
    match std::env::var_os("DOCKER_HOST") {
        Some(_) => {
            let docker = docker.expect("DOCKER_HOST is set: docker must be reported");
            assert!(
                docker["version"].is_string(),
                "daemon did not answer: {docker}"
            );
            let notes = docker["notes"].to_string();
            assert!(notes.contains("nvidia runtime"), "{notes}");
        }
        None if !std::path::Path::new("/var/run/docker.sock").exists() => {
            assert!(docker.is_none(), "no daemon configured, yet: {docker:?}");
        }
        None => {}
    }
}

/// Issue #43: a MIG slice as the driver names it ("NVIDIA A100-SXM4-40GB MIG
/// 1g.5gb", the hand-written fixture of tests/fixtures/nvidia-smi) is checked
/// as its board: on R535 a CUDA 13 NGC image runs through forward
/// compatibility on the slice exactly as on the whole A100.
#[test]
fn a_probed_mig_slice_is_checked_as_its_board_with_a_note() {
    let bin = bin_dir(true);
    let args = ["--json", "--image", "nvcr.io/nvidia/pytorch:25.08-py3"];
    let output = doctor(bin.path(), Some("a100-sxm4-40gb-mig-535"), None, &args);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    let gpu = &json["host"]["gpus"][0];
    assert_eq!(gpu["name"], "NVIDIA A100-SXM4-40GB MIG 1g.5gb");
    assert_eq!(gpu["catalog_id"], "a100-40gb");
    assert_eq!(gpu["class"], "datacenter");
    assert_eq!(
        gpu["memory_mib"], 4864,
        "the slice's memory, not the board's"
    );
    let notes = json["host"]["notes"].to_string();
    assert!(
        notes.contains("GPU 0 is MIG slice 1g.5gb of NVIDIA A100 40GB"),
        "{notes}"
    );
    let verdict = &json["verdicts"][0];
    assert_eq!(verdict["status"], "warn", "{verdict}");
    assert_eq!(verdict["reasons"][0]["code"], "forward-compat-required");

    let output = doctor(bin.path(), Some("a100-sxm4-40gb-mig-535"), None, &args[1..]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("GPU 0  NVIDIA A100-SXM4-40GB MIG 1g.5gb  CC 8.0  4864 MiB  datacenter")
            && text.contains("note: GPU 0 is MIG slice 1g.5gb")
            && text.contains("no NVLink/NVSwitch or peer-to-peer access"),
        "{text}"
    );
}

#[test]
fn assumed_mig_names_resolve_and_a_board_without_mig_is_a_usage_error() {
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "A100-SXM4-40GB MIG 1g.5gb",
        "--assume-driver",
        "535",
        "--image",
        "nvcr.io/nvidia/pytorch:25.08-py3",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = json_of(&output);
    assert_eq!(
        json["host"]["gpus"][0]["name"],
        "NVIDIA A100 40GB MIG 1g.5gb"
    );
    assert_eq!(json["verdicts"][0]["status"], "warn");

    let output = doctor_no_gpu(&["--assume-gpu", "RTX 4090 MIG 1g.5gb"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`RTX 4090 MIG 1g.5gb`")
            && stderr.contains("cannot be split into MIG slices")
            && stderr.contains("fix:"),
        "{stderr}"
    );
}

#[test]
fn int8_and_fp4_are_precisions_doctor_answers() {
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "A30",
        "--assume-driver",
        "570",
        "--precision",
        "int8",
        "--precision",
        "fp4",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let json = json_of(&output);
    let verdicts = json["verdicts"].as_array().unwrap();
    assert_eq!(verdicts[0]["image"], "precision:int8");
    assert_eq!(verdicts[0]["status"], "ok");
    assert_eq!(verdicts[1]["image"], "precision:fp4");
    assert_eq!(verdicts[1]["reasons"][0]["code"], "fp4-unsupported");
}

#[test]
fn a_driver_past_the_gpus_last_branch_fails_every_question() {
    // Pascal's last branch is R580 (NVIDIA's architecture matrix).
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "GTX 1050",
        "--assume-driver",
        "595.45.04",
        "--precision",
        "fp16",
        "--pytorch",
        "2.7.1+cu126",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let json = json_of(&output);
    for verdict in json["verdicts"].as_array().unwrap() {
        assert_eq!(verdict["status"], "fail", "{verdict}");
        assert_eq!(
            verdict["reasons"][0]["code"], "driver-dropped-gpu",
            "{verdict}"
        );
    }
}

/// A mistyped `--assume-gpu` gets a few close names, not every GPU envgen
/// knows (issue #44: `A31` printed ~230 ids).
#[test]
fn a_mistyped_assumed_gpu_gets_a_did_you_mean() {
    let output = doctor_no_gpu(&["--assume-gpu", "A31", "--assume-driver", "535"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("did you mean a30"), "{stderr}");
    assert!(stderr.len() < 400, "a short message, not a list: {stderr}");
}
