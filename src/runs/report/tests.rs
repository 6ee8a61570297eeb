//! Unit tests of the report: the chart specs, GPU panels from a synthetic
//! metrics file, charts left out (and named) when no run has their data,
//! legends beside the plot, tables instead of flattened arrays.

use std::path::Path;

use serde_json::{json, Value};

use super::*;

/// A run directory in `root` with this manifest identity, summary and
/// metrics lines.
fn run(root: &Path, id: &str, experiment: &str, summary: Value, lines: &[Value]) -> RunDir {
    let path = root.join(id);
    std::fs::create_dir_all(&path).unwrap();
    let mut manifest = crate::runs::manifest::example();
    manifest.run_id = id.into();
    manifest.experiment = experiment.into();
    manifest.preset = Some("tiny".into());
    manifest.config_hash = "sha256:1".into();
    manifest.environment.place = "native".into();
    manifest.environment.image = None;
    crate::runs::manifest::write(&path, &manifest).unwrap();
    std::fs::write(path.join("summary.json"), summary.to_string()).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path.join("metrics.jsonl"), text).unwrap();
    RunDir::open(&path).unwrap()
}

fn gpt2_lines(scale: f64, gpu: bool) -> Vec<Value> {
    let mut lines: Vec<Value> = (1..=20)
        .map(|s| {
            json!({"step": s, "loss": scale * 5.0 / s as f64, "lr": 1e-3,
                   "tokens_per_s": 1000.0 * scale, "val_loss": scale * 5.5 / s as f64})
        })
        .collect();
    if gpu {
        // The GPU sampler's line shape (runs::gpu_sampler::record), two GPUs.
        for t in 1..=5 {
            let samples: Vec<gpu_sampler::GpuSample> = (0..2)
                .map(|index| gpu_sampler::GpuSample {
                    index,
                    util_percent: 50 + 10 * t,
                    memory_used_bytes: u64::from(t) * 1_000_000_000,
                    memory_total_bytes: 80_000_000_000,
                })
                .collect();
            lines.push(gpu_sampler::record(
                std::time::Duration::from_secs(u64::from(t)),
                &samples,
            ));
        }
    }
    lines
}

use crate::runs::gpu_sampler;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn every_chart_spec_parses_and_names_what_it_plots() {
    let text = include_str!("../../../env/reports.toml");
    // all_specs() falls back to none on a parse error: parse strictly here.
    let file: Result<charts_file::File, _> = toml::from_str(text);
    assert!(file.is_ok(), "env/reports.toml: {:?}", file.err());
    let specs = charts::all_specs();
    for experiment in ["gpt2", "hrm-sudoku", "rft", "quantize", "default", "*"] {
        assert!(
            specs.iter().any(|s| s.experiment == experiment),
            "no chart for {experiment}"
        );
    }
    for spec in &specs {
        assert!(!spec.series.is_empty(), "{}: no series", spec.name);
        assert!(
            ["metrics", "gpu"].contains(&spec.rows.as_str()) || spec.rows.starts_with("summary:"),
            "{}: rows = {}",
            spec.name,
            spec.rows
        );
    }
}

/// Strict parse of the charts file (unknown fields refused).
mod charts_file {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct File {
        #[allow(dead_code)]
        chart: Vec<super::charts::ChartSpec>,
    }
}

#[test]
fn gpt2_runs_get_their_charts_with_legends_beside_the_plot_and_gpu_panels() {
    let dir = tempfile::tempdir().unwrap();
    let runs = vec![
        run(
            dir.path(),
            "gpt2-tiny-1-aaaaaaaa11",
            "gpt2",
            json!({"status": "completed", "metrics": {"final_val_loss": 1.0}}),
            &gpt2_lines(1.0, true),
        ),
        run(
            dir.path(),
            "gpt2-tiny-2-bbbbbbbb22",
            "gpt2",
            json!({"status": "completed", "metrics": {"final_val_loss": 1.1}}),
            &gpt2_lines(1.1, false),
        ),
    ];
    let out = dir.path().join("report");
    let files = write_report(&runs, &out).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for name in [
        "gpt2-loss.svg",
        "gpt2-throughput.svg",
        "gpt2-lr.svg",
        "gpu-util.svg",
        "gpu-memory.svg",
    ] {
        assert!(names.contains(&name.to_string()), "{name} not in {names:?}");
    }
    let loss = read(&out.join("gpt2-loss.svg"));
    // Two runs × (loss, val_loss): four data lines, labelled preset + short id.
    assert_eq!(loss.matches("stroke-width=\"2\"").count(), 4, "{loss}");
    for label in ["tiny aaaaaaaa loss", "tiny bbbbbbbb val_loss"] {
        assert!(loss.contains(label), "{label} missing");
    }
    // The legend is drawn right of the plot area (x past its 770 px).
    let legend_x: Vec<f64> = loss
        .split("<text")
        .filter(|t| t.contains("tiny aaaaaaaa"))
        .filter_map(|t| t.split("x=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect();
    assert!(
        !legend_x.is_empty() && legend_x.iter().all(|&x| x > 770.0),
        "{legend_x:?}"
    );
    // GPU panel: one line per GPU of the run that sampled, none for the other.
    let util = read(&out.join("gpu-util.svg"));
    assert!(util.contains("tiny aaaaaaaa index 0") && util.contains("tiny aaaaaaaa index 1"));
    assert!(!util.contains("bbbbbbbb"));
    let html = read(&out.join("report.html"));
    assert!(html.contains("table-layout:fixed") && html.contains("overflow-wrap:anywhere"));
    assert!(!html.contains("Not drawn"), "every gpt2 chart has data");
}

#[test]
fn a_chart_without_data_is_named_not_drawn_and_arrays_become_tables() {
    let dir = tempfile::tempdir().unwrap();
    let schemes: Vec<Value> = [
        ("f32", 32.0, 100.0),
        ("int8", 8.2, 100.1),
        ("int4-sym-g32", 4.5, 103.0),
    ]
    .iter()
    .map(|(name, bits, ppl)| {
        json!({"scheme": name, "bits_per_weight": bits, "metric": "val_perplexity",
                   "metric_value": ppl, "metric_delta_pct": (ppl - 100.0), "bytes": 1000})
    })
    .collect();
    let quantize = run(
        dir.path(),
        "quantize-tiny-1-cccccccc",
        "quantize",
        json!({"status": "completed", "metrics": {"metric": "val_perplexity", "parameters": 10, "schemes": schemes}}),
        &[],
    );
    // An rft run from before eval lines carried their round: no accuracy chart.
    let rft = run(
        dir.path(),
        "rft-tiny-1-dddddddd",
        "rft",
        json!({"status": "completed", "metrics": {"kept": 3}}),
        &[
            json!({"stage": "eval-before", "accuracy": 0.1}),
            json!({"stage": "datagen", "round": 1, "generated": 10, "kept": 2}),
            json!({"stage": "datagen", "round": 2, "generated": 10, "kept": 4}),
        ],
    );
    let out = dir.path().join("report");
    write_report(&[quantize, rft], &out).unwrap();
    let bits = read(&out.join("quantize-quality-vs-bits.svg"));
    assert!(
        bits.matches("<circle").count() >= 3,
        "one marker per scheme"
    );
    assert!(bits.contains("\nint4-sym-g32\n") && bits.contains("val_perplexity"));
    assert!(out.join("rft-kept.svg").exists());
    assert!(
        !out.join("rft-accuracy.svg").exists(),
        "no round on eval lines: nothing to draw"
    );
    let html = read(&out.join("report.html"));
    assert!(html.contains("rft: held-out accuracy per round (0: before fine-tuning): no run recorded `accuracy` or `answer_rate` against `round` in metrics.jsonl"), "{html}");
    // Schemes as their own table, not as `schemes.int8.bytes` metric lines
    // (compare names array items by their scheme).
    assert!(html.contains("<caption>tiny cccccccc: schemes</caption>"));
    assert!(!html.contains("<td>schemes."), "{html}");
    assert!(
        html.contains("<td>parameters</td>"),
        "top-level metrics stay: {html}"
    );
    let md = read(&out.join("report.md"));
    assert!(
        md.contains("| int4-sym-g32 | 4.5 | 1000 | val_perplexity | 3 | 103 |"),
        "{md}"
    );
}

/// Runs of one config share the hash that ends their ids: their labels
/// must still tell them apart (a native run and its Docker twin).
#[test]
fn runs_of_one_config_get_labels_that_differ() {
    let dir = tempfile::tempdir().unwrap();
    let summary = || json!({"status": "completed", "metrics": {}});
    let runs = [
        run(
            dir.path(),
            "gpt2-tiny-20261126-053228-e98a06e7",
            "gpt2",
            summary(),
            &[],
        ),
        run(
            dir.path(),
            "gpt2-tiny-20261126-061500-e98a06e7",
            "gpt2",
            summary(),
            &[],
        ),
        run(
            dir.path(),
            "gpt2-tiny-20261126-061500-12345678",
            "gpt2",
            summary(),
            &[],
        ),
    ];
    assert_eq!(
        charts::run_labels(&runs),
        [
            "tiny e98a06e7 053228",
            "tiny e98a06e7 061500",
            "tiny 12345678"
        ]
    );
}
