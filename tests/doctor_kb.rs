//! `envgen doctor` behaviour that needs the compatibility knowledge base
//! (`env/*.toml` + the verdict engine from the compat work): assumed hosts
//! and the `no-gpu` verdict. NVML is skipped and PATH holds no nvidia-smi, so
//! the real host cannot leak in.

mod doctor_common;

use doctor_common::{bin_dir, doctor, json_of};

#[test]
fn assumed_a30_on_535_has_the_contract_shape() {
    let bin = bin_dir(false);
    let output = doctor(
        bin.path(),
        None,
        None,
        &[
            "--assume-gpu",
            "A30",
            "--assume-driver",
            "535.261.03",
            "--json",
        ],
    );
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
    let bin = bin_dir(false);
    let output = doctor(bin.path(), None, None, &["--json"]);
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
