//! Unit tests of the report: the chart specs, GPU panels from a synthetic
//! metrics file, charts left out (and named) when no run has their data,
//! a colour per run and legends below the plot naming what differs, every
//! metric charted in its section, ticks and smoothing, tables instead of
//! flattened arrays.

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
    manifest.environment.place = crate::runs::place::Place::Native;
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
                   "tokens_per_s": 1000.0 * scale, "val_loss": scale * 5.5 / s as f64,
                   "grad_norm": 1.0 / s as f64, "step_ms": 100.0})
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
fn gpt2_runs_get_their_charts_a_colour_per_run_legends_below_the_plot_and_gpu_panels() {
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
    // Two runs × (loss, val_loss): four smoothed lines over four faint raw
    // ones, one colour per run, val_loss dashed.
    assert_eq!(loss.matches("class=\"smooth\"").count(), 4, "{loss}");
    assert_eq!(loss.matches("class=\"raw\"").count(), 4, "{loss}");
    let colours: Vec<&str> = loss
        .split("class=\"smooth\"")
        .skip(1)
        .filter_map(|s| s.split("stroke=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        colours.iter().filter(|c| **c == colours[0]).count(),
        2,
        "{colours:?}"
    );
    assert_eq!(
        loss.matches("stroke-width=\"2\" stroke-dasharray").count(),
        2,
        "val_loss dashed"
    );
    // The same config and preset: the legend falls back to preset + short id,
    // and names the line styles; all of it in the box below the plot.
    for label in ["tiny aaaaaaaa", "tiny bbbbbbbb", ">loss<", ">val_loss<"] {
        assert!(loss.contains(label), "{label} missing");
    }
    let legend = loss.split("<g class=\"legend\">").nth(1).unwrap();
    assert!(
        legend.contains("tiny aaaaaaaa")
            && !loss
                .split("<g class=\"legend\">")
                .next()
                .unwrap()
                .contains("tiny aaaaaaaa")
    );
    // GPU panel: a line per GPU of the run that sampled, none for the other.
    let util = read(&out.join("gpu-util.svg"));
    assert!(
        util.contains(">index 0<") && util.contains(">index 1<"),
        "{util}"
    );
    assert!(!util.contains("bbbbbbbb"));
    // Metrics no chart of gpt2's draws get charts of their own.
    assert!(
        names.contains(&"metric-grad-norm.svg".to_string()),
        "{names:?}"
    );
    let html = read(&out.join("report.html"));
    assert!(html.contains("overflow-wrap:anywhere"));
    // The x axis can be the tokens or the training time (from step_ms).
    assert!(html.contains("<option value=\"tokens\">") && html.contains("data-x=\"train_time_s\""));
    // Printed, no chart is cut across pages.
    assert!(html.contains("@media print{") && html.contains("figure,table{break-inside:avoid"));
    // Charts come before the tables.
    assert!(html.find("<svg").unwrap() < html.find("<table").unwrap());
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
    assert!(bits.contains(">int4-sym-g32<") && bits.contains("val_perplexity"));
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
    assert!(!html.contains(">schemes."), "{html}");
    assert!(
        html.contains(">parameters</td>"),
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
        legend::run_labels(&runs),
        [
            "tiny e98a06e7 053228",
            "tiny e98a06e7 061500",
            "tiny 12345678"
        ]
    );
}

/// Issue #39: the report, like `runs compare`, does not call two command
/// runs the same when their environment differs; the variable is a row.
#[test]
fn same_config_is_qualified_when_a_command_environment_differs() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<RunDir> = [("a", "4"), ("b", "16")]
        .iter()
        .map(|(id, batch)| {
            let r = run(
                dir.path(),
                id,
                "command",
                json!({"status": "completed", "metrics": {}}),
                &[],
            );
            let mut manifest = r.manifest.clone();
            manifest.environment.command = Some(crate::runs::command_record::CommandRecord {
                argv: vec!["python".into(), "train.py".into()],
                workdir: "/w".into(),
                git: None,
                env: [("MICRO_BATCH_SIZE".to_string(), batch.to_string())].into(),
            });
            crate::runs::manifest::write(&r.path, &manifest).unwrap();
            RunDir::open(&r.path).unwrap()
        })
        .collect();
    let cmp = crate::runs::compare::compare(&runs);
    let (same, tables) = tables::comparison(&cmp, &runs);
    assert_eq!(
        same,
        "Same science config: yes (sha256:1), but 1 variable(s) of the command's environment differ."
    );
    let rows = &tables[0].rows;
    assert_eq!(
        rows[0][0], "command_env · command.env.MICRO_BATCH_SIZE",
        "{rows:?}"
    );
}

#[test]
fn step_axes_get_integer_ticks_and_a_single_value_a_padded_round_range() {
    // Steps 1..16: whole ticks only, from 0.
    let steps = scale::axis(1.0, 16.0, true);
    assert!(steps.ticks.iter().all(|t| *t == t.trunc()), "{steps:?}");
    assert_eq!(steps.lo, 0.0);
    assert!(steps.hi >= 16.0);
    // The x axis ends with the data when three ticks fit inside.
    let tight = scale::x_axis(1.0, 16.0, true);
    assert_eq!((tight.lo, tight.hi), (1.0, 16.0));
    assert_eq!(tight.ticks, [5.0, 10.0, 15.0]);
    // Two rounds (1, 2): ticks 0 1 2 …, not 1.2 1.4.
    let rounds = scale::axis(1.0, 2.0, true);
    assert_eq!(rounds.step, 1.0, "{rounds:?}");
    // One step: a range around it, whole ticks.
    let one = scale::axis(16.0, 16.0, true);
    assert_eq!((one.lo, one.hi), (15.0, 17.0));
    // Step 0 alone: no axis below 0, still three ticks.
    assert_eq!(scale::axis(0.0, 0.0, true).ticks, [0.0, 1.0, 2.0]);
    // One point (1.0) or a constant (4.0): padded by 10%, round labels.
    let point = scale::axis(1.0, 1.0, false);
    let labels: Vec<String> = point
        .ticks
        .iter()
        .map(|t| scale::tick_label(*t, point.step))
        .collect();
    assert_eq!(labels, ["0.90", "0.95", "1.00", "1.05", "1.10"]);
    let constant = scale::axis(4.0, 4.0, false);
    assert!(constant.lo <= 3.6 && constant.hi >= 4.4, "{constant:?}");
    let labels: Vec<String> = constant
        .ticks
        .iter()
        .map(|t| scale::tick_label(*t, constant.step))
        .collect();
    assert!(labels.iter().all(|l| l.len() <= 3), "{labels:?}");
    // A zero constant still gets a range.
    let zero = scale::axis(0.0, 0.0, false);
    assert_eq!((zero.lo, zero.hi), (0.0, 1.0));
}

#[test]
fn data_that_is_not_negative_never_gets_an_axis_below_zero() {
    // A learning rate warming up from 0, a throughput, a loss near 0.
    for (lo, hi) in [(0.0, 3e-3), (10.0, 12000.0), (0.001, 2.5), (1e-5, 1e-5)] {
        let axis = scale::axis(lo, hi, false);
        assert!(axis.lo >= 0.0, "{lo}..{hi}: {axis:?}");
        assert!(axis.ticks.iter().all(|t| *t >= 0.0), "{axis:?}");
        assert!(axis.hi >= hi && axis.lo <= lo);
    }
    // Negative data keeps its negative range.
    let axis = scale::axis(-2.0, 3.0, false);
    assert!(axis.lo <= -2.0, "{axis:?}");
    // Labels: thousands as k, tiny steps in scientific notation.
    assert_eq!(scale::tick_label(12000.0, 2000.0), "12k");
    assert_eq!(scale::tick_label(0.0005, 0.0001), "0.0005");
    assert_eq!(scale::tick_label(2e-5, 1e-5), "2e-5");
}

#[test]
fn smoothing_is_tensorboards_debiased_ema() {
    let values = [1.0, 3.0, 2.0, 5.0];
    // Weight 0: the values themselves.
    assert_eq!(scale::ema(&values, 0.0), values);
    // Debiased: the first point is not pulled toward 0.
    let smoothed = scale::ema(&values, 0.6);
    assert!((smoothed[0] - 1.0).abs() < 1e-12);
    // TensorBoard: last = last*w + (1-w)*v; smoothed = last / (1 - w^n).
    let (mut last, w) = (0.0, 0.6f64);
    for (n, v) in values.iter().enumerate() {
        last = last * w + (1.0 - w) * v;
        let expected = last / (1.0 - w.powi(n as i32 + 1));
        assert!((smoothed[n] - expected).abs() < 1e-12, "{smoothed:?}");
    }
    // A constant stays constant.
    assert!(scale::ema(&[4.0; 5], 0.9)
        .iter()
        .all(|v| (v - 4.0).abs() < 1e-9));
}

/// A gpt2 run with this learning rate and precision (config.toml and the
/// manifest's profile, as `envgen run` writes them).
fn gpt2_with(root: &Path, id: &str, lr: f64, precision: &str) -> RunDir {
    let dir = run(
        root,
        id,
        "gpt2",
        json!({"status": "completed", "metrics": {}}),
        &gpt2_lines(1.0, false),
    );
    let config = format!("[model]\nn_layer = 2\n\n[optim]\nlr = {lr}\n");
    std::fs::write(dir.path.join("config.toml"), config).unwrap();
    let mut manifest = dir.manifest.clone();
    manifest.profile.precision = precision.into();
    crate::runs::manifest::write(&dir.path, &manifest).unwrap();
    RunDir::open(&dir.path).unwrap()
}

#[test]
fn legends_name_the_keys_that_differ_else_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [
        gpt2_with(dir.path(), "gpt2-tiny-1-aaaaaaaa", 0.003, "fp32"),
        gpt2_with(dir.path(), "gpt2-tiny-2-bbbbbbbb", 0.001, "fp32"),
        gpt2_with(dir.path(), "gpt2-tiny-3-cccccccc", 0.001, "bf16"),
    ];
    assert_eq!(
        legend::legend_labels(&runs),
        [
            "optim.lr=0.003 precision=fp32",
            "optim.lr=0.001 precision=fp32",
            "optim.lr=0.001 precision=bf16"
        ]
    );
    // Nothing differs: the run's preset and short id.
    let same = [
        gpt2_with(dir.path(), "gpt2-tiny-4-dddddddd", 0.001, "fp32"),
        gpt2_with(dir.path(), "gpt2-tiny-5-eeeeeeee", 0.001, "fp32"),
    ];
    assert_eq!(
        legend::legend_labels(&same),
        ["tiny dddddddd", "tiny eeeeeeee"]
    );
    // The report's charts carry those labels, one colour per run.
    let out = dir.path().join("report");
    write_report(&runs, &out).unwrap();
    let throughput = read(&out.join("gpt2-throughput.svg"));
    assert!(
        throughput.contains(">optim.lr=0.003 precision=fp32<"),
        "{throughput}"
    );
    let html = read(&out.join("report.html"));
    assert!(
        html.contains("<li>optim.lr=0.001 precision=bf16: gpt2-tiny-3-cccccccc"),
        "{html}"
    );
}

#[test]
fn every_numeric_metric_is_charted_in_its_section_rft_stages_too() {
    let dir = tempfile::tempdir().unwrap();
    // A user command that logged TensorBoard-style names.
    let command = run(
        dir.path(),
        "command-1-ffffffff",
        "command",
        json!({"status": "completed", "metrics": {}}),
        &(1..=5)
            .map(|s| {
                json!({"step": s, "train/loss": 3.0 / s as f64, "eval/acc": 0.1 * s as f64,
                          "loss": 1.0 / s as f64})
            })
            .collect::<Vec<Value>>(),
    );
    // An rft run: generation per round at the top, training in its stages.
    let rft = run(
        dir.path(),
        "rft-tiny-1-12121212",
        "rft",
        json!({"status": "completed", "metrics": {}}),
        &[
            json!({"stage": "eval-before", "round": 0, "accuracy": 0.1, "answer_rate": 0.5}),
            json!({"stage": "datagen", "round": 1, "generated": 10, "kept": 2, "tokens_per_s": 900.0}),
            json!({"stage": "datagen", "round": 2, "generated": 10, "kept": 4, "tokens_per_s": 950.0}),
        ],
    );
    for stage in ["pretrain", "round-1/finetune"] {
        let stage_dir = rft.path.join("stages").join(stage);
        std::fs::create_dir_all(&stage_dir).unwrap();
        let lines: String = (1..=4)
            .map(|s| format!("{}\n", json!({"step": s, "loss": 2.0 / s as f64, "step_ms": 10.0, "tokens_per_s": 100.0})))
            .collect();
        std::fs::write(stage_dir.join("metrics.jsonl"), lines).unwrap();
    }
    let out = dir.path().join("report");
    write_report(&[command, rft], &out).unwrap();
    let html = read(&out.join("report.html"));
    // The command's metrics, by any name, in their sections.
    let train = html.find("<h3>train</h3>").unwrap();
    let eval = html.find("<h3>eval</h3>").unwrap();
    let throughput = html.find("<h3>throughput</h3>").unwrap();
    let at = |id: &str| {
        html.find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {id}: {html}"))
    };
    assert!(train < at("metric-train-loss") && at("metric-train-loss") < eval);
    assert!(eval < at("metric-eval-acc"));
    // rft: a loss curve per stage (a dash pattern each, named), and the
    // generation rate per round.
    let loss = read(&out.join("metric-loss.svg"));
    assert!(
        loss.contains(">pretrain<") && loss.contains(">round-1/finetune<"),
        "{loss}"
    );
    assert_eq!(loss.matches("class=\"smooth\"").count(), 2);
    // The command's own `loss` is in its (default) loss chart, not here.
    assert!(!loss.contains("ffffffff"), "{loss}");
    assert!(read(&out.join("default-loss.svg")).contains("ffffffff"));
    assert!(at("metric-tokens-per-s-by-round") > throughput);
    let rate = read(&out.join("metric-tokens-per-s-by-round.svg"));
    assert!(rate.contains("tokens_per_s (datagen)"), "{rate}");
    // A command's default charts (`loss`) are not reported missing (the
    // GPU panels of these CPU runs are).
    let missing = html.split("Not drawn:").nth(1).unwrap_or_default();
    assert!(!missing.contains("training loss"), "{missing}");
    assert!(missing.contains("GPU utilization"), "{missing}");
}
