//! `envgen doctor` answers the question asked (issue #15): with `--image`,
//! `--pytorch` or `--precision` only those verdicts are printed; with none,
//! a short "what runs here" per GPU; `--all` prints the whole catalog table.
//! Hosts are assumed or FAKE nvidia-smi fixtures (no GPU on this machine).

use crate::common::docker_base::require_docker_host;
use crate::common::doctor::{bin_dir, doctor, doctor_no_gpu};
use crate::common::json_of;

fn text_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const A100_FP8: &[&str] = &[
    "--assume-gpu",
    "A100",
    "--assume-driver",
    "535.104.05",
    "--precision",
    "fp8",
];

#[test]
fn a_precision_question_gets_one_verdict_and_nothing_else() {
    let output = doctor_no_gpu(A100_FP8);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let text = text_of(&output);
    let verdict_lines: Vec<&str> = text.lines().filter(|l| l.contains(": fail")).collect();
    assert_eq!(verdict_lines.len(), 1, "{text}");
    assert!(
        verdict_lines[0].contains("precision:fp8 on GPU 0"),
        "{text}"
    );
    assert!(text.contains("[fail] fp8-unsupported:"), "{text}");
    assert!(text.contains("fix: "), "{text}");
    for unrelated in ["nvcr.io", "nvidia/cuda:", "Problems", "What runs here"] {
        assert!(!text.contains(unrelated), "{unrelated} in:\n{text}");
    }
    assert!(text.lines().count() < 12, "short answer expected:\n{text}");

    // JSON: the answer under `verdicts`, the catalog under its own key.
    let mut args = A100_FP8.to_vec();
    args.push("--json");
    let output = doctor_no_gpu(&args);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let json = json_of(&output);
    let verdicts = json["verdicts"].as_array().expect("verdicts");
    assert_eq!(verdicts.len(), 1, "{json}");
    assert_eq!(verdicts[0]["image"], "precision:fp8");
    assert_eq!(verdicts[0]["reasons"][0]["code"], "fp8-unsupported");
    let catalog = json["catalog"].as_array().expect("catalog key");
    assert!(catalog.len() > 100, "{} catalog verdicts", catalog.len());
    assert!(json.get("summary").is_none(), "{json}");

    // --all adds the catalog table to the answer.
    let mut args = A100_FP8.to_vec();
    args.push("--all");
    let text = text_of(&doctor_no_gpu(&args));
    assert!(
        text.contains("precision:fp8 on GPU 0")
            && text.contains("nvidia/cuda:12.2.2-runtime-ubuntu22.04"),
        "{text}"
    );
}

#[test]
fn an_image_question_shows_that_image_only() {
    let image = "nvidia/cuda:13.0.0-runtime-ubuntu24.04";
    let output = doctor_no_gpu(&[
        "--assume-gpu",
        "RTX 4090",
        "--assume-driver",
        "535.261.03",
        "--image",
        image,
    ]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let text = text_of(&output);
    assert!(text.contains(&format!("{image} on GPU 0")), "{text}");
    assert!(text.contains("forward-compat-unsupported"), "{text}");
    assert!(!text.contains("nvcr.io"), "{text}");
    assert_eq!(
        text.matches("nvidia/cuda:13.0.0-runtime").count(),
        1,
        "{text}"
    );
}

#[test]
fn no_question_gets_what_runs_here_per_gpu() {
    let args = ["--assume-gpu", "A30", "--assume-driver", "535.261.03"];
    let output = doctor_no_gpu(&args);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = text_of(&output);
    assert!(text.contains("What runs here"), "{text}");
    assert!(
        text.contains("GPU 0 (NVIDIA A30, CC 8.0) on driver 535.261.03"),
        "{text}"
    );
    // R535 = CUDA 12.2: the newest clean nvidia/cuda tag is 12.2.2; newer
    // ones run on an A30 only through forward compatibility.
    assert!(
        text.contains("runs cleanly:     nvidia/cuda:12.2.2-runtime-ubuntu22.04"),
        "{text}"
    );
    assert!(text.contains("forward-compat-required"), "{text}");
    assert!(!text.contains("IMAGE "), "no table without --all:\n{text}");
    assert!(text.lines().count() < 40, "short summary expected:\n{text}");

    // --all: every verdict, ok rows included.
    let mut all = args.to_vec();
    all.push("--all");
    let text = text_of(&doctor_no_gpu(&all));
    assert!(text.contains("IMAGE "), "{text}");
    assert!(
        text.lines().filter(|l| l.contains("  ok  ")).count() > 10,
        "{text}"
    );

    // JSON keeps the whole catalog in `verdicts` and adds the summary.
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let json = json_of(&doctor_no_gpu(&json_args));
    assert!(json["verdicts"].as_array().is_some_and(|v| v.len() > 100));
    let summary = json["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), 1, "{json}");
    assert_eq!(summary[0]["gpu_indices"], serde_json::json!([0]));
    let families: Vec<&str> = summary[0]["families"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["family"].as_str())
        .collect();
    assert_eq!(families, ["ngc-pytorch", "nvidia-cuda"]);
}

#[test]
fn where_the_catalog_stops_working_is_named_with_the_fix() {
    // A V100 on R580: Volta is gone from NGC ≥ 25.01 and from CUDA 13.
    let output = doctor_no_gpu(&["--assume-gpu", "V100-32GB", "--assume-driver", "580.65.06"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = text_of(&output);
    assert!(
        text.contains("runs cleanly:     nvcr.io/nvidia/pytorch:24.12-py3"),
        "{text}"
    );
    assert!(
        text.contains("fails from nvcr.io/nvidia/pytorch:25.01-py3 on"),
        "{text}"
    );
    assert!(
        text.contains("fails from nvidia/cuda:13.0.0-* on") && text.contains("arch-dropped"),
        "{text}"
    );
}

#[test]
fn identical_gpus_share_one_summary() {
    let bin = bin_dir(true);
    let output = doctor(bin.path(), Some("multi-4xa100-535"), None, &[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = text_of(&output);
    assert_eq!(text.matches("on driver 535.261.03:").count(), 1, "{text}");
    assert!(
        text.contains("GPUs 0–3 (NVIDIA A100-SXM4-80GB, CC 8.0)"),
        "{text}"
    );
}

/// `--image` with an image only the local Docker daemon has: its
/// `NVIDIA_REQUIRE_CUDA` / `CUDA_VERSION` env is read through the Engine API
/// and judged before anything runs. The image is a FAKE stand-in for a CUDA
/// 12.8 image (config only, built `FROM scratch`: nothing can be pulled here).
#[test]
fn a_local_docker_image_is_judged_by_its_env() {
    require_docker_host();
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM scratch\nENV NVIDIA_REQUIRE_CUDA=\"cuda>=12.8\" CUDA_VERSION=12.8.1\nLABEL io.envgen.test=\"FAKE CUDA 12.8 image: env only\"\n",
    )
    .unwrap();
    let tag = "envgen-test/fake-cuda:12.8";
    let build = std::process::Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(context.path())
        .output()
        .expect("docker build");
    assert!(build.status.success(), "{build:?}");

    // The env inherits DOCKER_HOST: doctor reaches the same daemon.
    let ask = |driver: &str| {
        doctor_no_gpu(&[
            "--image",
            tag,
            "--assume-gpu",
            "RTX 4090",
            "--assume-driver",
            driver,
        ])
    };
    let old = ask("535.261.03");
    assert_eq!(old.status.code(), Some(1), "{old:?}");
    let text = text_of(&old);
    assert!(text.contains(&format!("{tag} on GPU 0")), "{text}");
    assert!(
        text.contains("unsatisfied condition: cuda>=12.8"),
        "the image's own NVIDIA_REQUIRE_CUDA is evaluated:\n{text}"
    );
    let new = ask("570.172.08");
    assert_eq!(new.status.code(), Some(0), "{new:?}");
    assert!(
        text_of(&new).contains(&format!("{tag} on GPU 0")),
        "{new:?}"
    );
    assert!(!text_of(&new).contains("unknown-image"), "{new:?}");
}

/// Split a documented command line like a shell would for our examples:
/// whitespace separates words, double quotes group them.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quotes in `{line}`");
    if started {
        words.push(word);
    }
    words
}

/// Every example in docs/doctor.md (a fenced block starting with
/// `$ envgen doctor …`) is run and must print exactly what the docs show:
/// stdout, then stderr, then `[exit N]` when the exit code is not 0. The
/// docs are regenerated from the binary, so they cannot drift (issue #27).
#[test]
fn every_documented_example_prints_what_the_docs_show() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/doctor.md");
    let docs = std::fs::read_to_string(&path).expect("docs/doctor.md");
    let mut examples = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in docs.lines() {
        match (&mut block, line.trim_start().starts_with("```")) {
            (None, true) => block = Some(Vec::new()),
            (Some(lines), true) => {
                if lines
                    .first()
                    .is_some_and(|first| first.starts_with("$ envgen doctor"))
                {
                    examples.push(lines.clone());
                }
                block = None;
            }
            (Some(lines), false) => lines.push(line),
            (None, false) => {}
        }
    }
    assert!(
        examples.len() >= 4,
        "docs/doctor.md has {} examples",
        examples.len()
    );
    let mut drifted = Vec::new();
    for lines in &examples {
        let command = lines[0].trim_start_matches("$ envgen doctor");
        let args = shell_words(command);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = doctor_no_gpu(&args);
        let mut printed = text_of(&output);
        printed.push_str(&String::from_utf8_lossy(&output.stderr));
        match output.status.code() {
            Some(0) => {}
            Some(code) => printed.push_str(&format!("[exit {code}]\n")),
            None => printed.push_str("[killed]\n"),
        }
        let documented: String = lines[1..].iter().map(|l| format!("{l}\n")).collect();
        if printed != documented {
            drifted.push(format!(
                "{}\n--- docs/doctor.md shows:\n{documented}--- the binary prints:\n{printed}",
                lines[0]
            ));
        }
    }
    assert!(
        drifted.is_empty(),
        "docs/doctor.md examples drifted (regenerate them with the binary):\n{}",
        drifted.join("\n")
    );
}
