//! TensorBoard event files (issue #24): a real tiny gpt2 run writes its
//! event file into its run directory (issue #44: TensorBoard names the run
//! by that folder),
//! and TensorBoard's own reader (the `tensorboard` package from PyPI, its
//! `EventAccumulator`) finds every metric of metrics.jsonl under its tag,
//! at its step, with its value as float32, and the run's config as text;
//! a resumed run shows each step once, every event at the wall time its
//! metrics line was logged at (issue #42), not when the file was written;
//! `envgen runs export --tensorboard`
//! writes the same events for a run without them, and the HParams
//! dashboard's data (config keys, final metrics) that TensorBoard's own
//! hparams plugin reads back. GPU sample lines come
//! from the stand-in NVML (tests/it/doctor/nvml_standin.rs). Needs
//! `ENVGEN_TEST_PYTHON` (scripts/services/pyref.sh provides it in CI).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::experiment::stopped_after;
use crate::common::run::SHORT;
use crate::common::{envgen, heavy_test, json_of, run, text};
use crate::doctor::nvml_standin::standin_dir;

/// Reads a folder of event files with TensorBoard's EventAccumulator:
/// `{"scalars": {tag: [[step, value]…]}, "wall_times": {tag: [t…]},
/// "text": {tag: [[step, text]…]}}`.
const READER: &str = r#"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
print(json.dumps({
    "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]},
    "wall_times": {t: [e.wall_time for e in acc.Scalars(t)] for t in tags["scalars"]},
    "text": {t: [[e.step, s.decode()] for e in acc.Tensors(t) for s in e.tensor_proto.string_val]
             for t in tags["tensors"]},
}))
"#;

/// What TensorBoard's HParams dashboard shows for a log folder, computed by
/// the hparams plugin's own backend (as its ListSessionGroups request
/// does): the runs as TensorBoard names them, the experiment's hparams
/// (name: type) and metric tags, and each session's hparams and metrics.
const HPARAMS: &str = r#"
import json, sys
from google.protobuf import json_format
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups
logdir = sys.argv[1]
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory(logdir)
mux.Reload()
ctx = base_plugin.TBContext(logdir=logdir, multiplexer=mux,
    data_provider=data_provider.MultiplexerDataProvider(mux, logdir))
hp = backend_context.Context(ctx)
req = context.RequestContext()
experiment = hp.experiment_from_metadata(req, "", True, hp.hparams_metadata(req, ""),
    hp.hparams_from_data_provider(req, "", 1000))
request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=100,
    allowed_statuses=api_pb2.Status.values(),
    col_params=[api_pb2.ColParams(hparam=h.name) for h in experiment.hparam_infos]
        + [api_pb2.ColParams(metric=m.name) for m in experiment.metric_infos])
groups = list_session_groups.Handler(req, hp, "", request).run()
print(json.dumps({
    "runs": sorted(mux.Runs()),
    "hparams": {h.name: api_pb2.DataType.Name(h.type) for h in experiment.hparam_infos},
    "metrics": sorted(m.name.tag for m in experiment.metric_infos),
    "sessions": {g.name: {
        "hparams": {k: json_format.MessageToDict(v) for k, v in g.hparams.items()},
        "metrics": {m.name.tag: m.value for s in g.sessions for m in s.metric_values}}
        for g in groups.session_groups},
}))
"#;

fn python() -> PathBuf {
    match std::env::var_os("ENVGEN_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "ENVGEN_TEST_PYTHON is not set: these tests read event files with the tensorboard \
             package. Run them through scripts/test.sh (scripts/services/pyref.sh builds the \
             venv), or set ENVGEN_TEST_PYTHON to a python with tensorboard"
        ),
    }
}

/// What TensorBoard's HParams dashboard makes of the folder `logdir`.
fn hparams_read(logdir: &Path) -> Value {
    let out = Command::new(python())
        .args(["-c", HPARAMS, logdir.to_str().unwrap()])
        .output()
        .expect("run ENVGEN_TEST_PYTHON");
    assert!(
        out.status.success(),
        "hparams reader failed: {}",
        text(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The run's config.toml keys as the dashboard should show them: dotted
/// names, numbers as numbers, strings as strings, arrays as their TOML.
fn config_hparams(dir: &Path) -> serde_json::Map<String, Value> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut serde_json::Map<String, Value>) {
        for (key, v) in table {
            let name = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            let value = match v {
                toml::Value::Table(t) => {
                    walk(&name, t, out);
                    continue;
                }
                toml::Value::Integer(i) => serde_json::json!(*i as f64),
                toml::Value::Float(f) => serde_json::json!(f),
                toml::Value::Boolean(b) => serde_json::json!(b),
                toml::Value::String(s) => serde_json::json!(s),
                other => serde_json::json!(other.to_string()),
            };
            out.insert(name, value);
        }
    }
    let text = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    let mut out = serde_json::Map::new();
    walk("", &text.parse().unwrap(), &mut out);
    out
}

/// What TensorBoard reads from the event files in `dir`.
fn tensorboard_read(dir: &Path) -> Value {
    let out = Command::new(python())
        .args(["-c", READER, dir.to_str().unwrap()])
        .output()
        .expect("run ENVGEN_TEST_PYTHON");
    assert!(out.status.success(), "reader failed: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The tag docs/cli.md gives each key gpt2 and hrm-sudoku log (a new key
/// fails here until it is given its tag).
fn tag_of(key: &str) -> &'static str {
    match key {
        "loss" => "train/loss",
        "lm_loss" => "train/lm_loss",
        "q_halt_loss" => "train/q_halt_loss",
        "q_continue_loss" => "train/q_continue_loss",
        "train_exact_accuracy" => "train/train_exact_accuracy",
        "train_cell_accuracy" => "train/train_cell_accuracy",
        "halted_rows" => "train/halted_rows",
        // hrm's step-0 line says how many steps the run will take (runs watch).
        "total_steps" => "train/total_steps",
        "val_loss" => "eval/val_loss",
        "exact_accuracy" => "eval/exact_accuracy",
        "cell_accuracy" => "eval/cell_accuracy",
        "mean_act_steps" => "eval/mean_act_steps",
        "lr" => "optim/lr",
        "grad_norm" => "optim/grad_norm",
        "tokens_per_s" => "throughput/tokens_per_s",
        "steps_per_s" => "throughput/steps_per_s",
        "puzzles_per_s" => "throughput/puzzles_per_s",
        "step_ms" => "throughput/step_ms",
        other => panic!("metrics.jsonl key {other:?} has no expected tag in this test"),
    }
}

/// Each tag's (step, value as f32) series, from metrics.jsonl: GPU
/// sample lines at the last training step before them.
fn expected(dir: &Path) -> BTreeMap<String, Vec<(u64, f32)>> {
    let mut series: BTreeMap<String, Vec<(u64, f32)>> = BTreeMap::new();
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let mut last = 0;
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(gpus) = v["gpu"].as_array() {
            for gpu in gpus {
                for (key, value) in gpu.as_object().unwrap() {
                    if key != "index" {
                        let tag = format!("gpu/{}/{key}", gpu["index"]);
                        let x = value.as_f64().unwrap() as f32;
                        series.entry(tag).or_default().push((last, x));
                    }
                }
            }
            continue;
        }
        last = v["step"].as_u64().expect("training lines have a step");
        for (key, value) in v.as_object().unwrap() {
            if let (false, Some(x)) = (key == "step" || key == "time", value.as_f64()) {
                let entry = series.entry(tag_of(key).into()).or_default();
                entry.push((last, x as f32));
            }
        }
    }
    series
}

/// `envgen ARGS…`, with the stand-in NVML (GPU sampler lines in
/// metrics.jsonl, so in the event file) or without any NVML (no sampler: what it
/// holds is the trainer's doing alone).
fn envgen_run(args: &[&str], nvml: bool) -> Output {
    let mut cmd = envgen();
    cmd.env_remove("LD_LIBRARY_PATH");
    if nvml {
        cmd.env_remove("ENVGEN_NO_NVML")
            .env("LD_LIBRARY_PATH", standin_dir());
    } else {
        cmd.env("ENVGEN_NO_NVML", "1");
    }
    cmd.args(args).output().expect("spawn envgen")
}

/// The `time` of each metrics line that has `key` (issue #42).
fn line_times(dir: &Path, key: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get(key).is_some())
        .map(|v| v["time"].as_f64().expect("every line has its time"))
        .collect()
}

/// The wall times TensorBoard read for `tag`: the metrics lines' own
/// times, never decreasing (a resumed run's rebuilt file keeps them).
fn assert_wall_times(read: &Value, tag: &str, want: &[f64]) {
    let got: Vec<f64> = read["wall_times"][tag]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert_eq!(
        got, want,
        "{tag}: TensorBoard's wall times are the lines' times"
    );
    assert!(got.windows(2).all(|w| w[0] <= w[1]), "{tag}: {got:?}");
}

/// TensorBoard's scalars as the same map.
fn scalars(read: &Value) -> BTreeMap<String, Vec<(u64, f32)>> {
    read["scalars"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(tag, points)| {
            let points = points
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap() as f32));
            (tag.clone(), points.collect())
        })
        .collect()
}

heavy_test!(
    tensorboard_reads_a_gpt2_runs_metrics_and_config_and_a_resume_repeats_no_step,
    |tmp| {
        let started = std::time::Instant::now();
        // Six steps, eval every 2, stopped after 3, then resumed to the end.
        let mut args = vec!["run", "gpt2"];
        args.extend(SHORT);
        args.extend(["--out", tmp.path().to_str().unwrap(), "--stop-after", "3"]);
        let first = envgen_run(&args, false);
        let dir = stopped_after(&first, 3);
        // A line past the checkpoint (as a hard kill leaves one), in the events too:
        // the resume must drop it from both.
        let metrics = dir.join("metrics.jsonl");
        let mut lines = std::fs::read_to_string(&metrics).unwrap();
        lines.push_str("{\"step\":4,\"loss\":99.0}\n");
        std::fs::write(&metrics, &lines).unwrap();
        envgen_experiments::engine::tensorboard::export(&dir, &dir).unwrap();
        let stale = tensorboard_read(&dir);
        assert_eq!(
            stale["scalars"]["train/loss"][3],
            serde_json::json!([4, 99.0])
        );

        // Without NVML: no sampler rewrites the events at the end, so what the
        // resumed trainer made of them is what TensorBoard reads.
        let resume = ["run", "gpt2", "--backend", "cpu", "--json", "--resume"];
        let mut resume = resume.to_vec();
        resume.push(dir.to_str().unwrap());
        let resumed = envgen_run(&resume, false);
        assert!(resumed.status.success(), "{}", text(&resumed));
        assert_eq!(json_of(&resumed)["summary"]["status"], "completed");
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().contains("tfevents"))
            .collect();
        assert_eq!(files.len(), 1, "one event file: {files:?}");

        let read = tensorboard_read(&dir);
        let want = expected(&dir);
        assert_eq!(scalars(&read), want, "TensorBoard read: {read}");
        let steps: Vec<u64> = want["train/loss"].iter().map(|p| p.0).collect();
        assert_eq!(steps, [1, 2, 3, 4, 5, 6], "each step once");
        assert_eq!(want["eval/val_loss"].len(), 4, "steps 0, 2, 4 and 6");
        // Steps 1-3 ran before the stop, 4-6 after the resume: the rebuilt
        // file keeps the first attempt's times, and the resume's are later.
        let loss_times = line_times(&dir, "loss");
        assert_wall_times(&read, "train/loss", &loss_times);
        assert_wall_times(&read, "eval/val_loss", &line_times(&dir, "val_loss"));
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
        let shown = &read["text"]["config"][0];
        assert_eq!(shown[0], 0, "{read}");
        assert_eq!(shown[1], format!("```toml\n{config}\n```"));

        // `--logdir` above the run: TensorBoard names it by its id (not
        // `RUN_ID/tb`), and the HParams dashboard shows its config keys with
        // the last value of each scalar as a metric (issue #44).
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap())
                .unwrap();
        let run_id = manifest["run_id"].as_str().unwrap().to_string();
        let dashboard = hparams_read(tmp.path());
        assert_eq!(
            dashboard["runs"],
            serde_json::json!([run_id]),
            "{dashboard}"
        );
        let session = &dashboard["sessions"][&run_id];
        assert_eq!(
            session["hparams"],
            Value::Object(config_hparams(&dir)),
            "{dashboard}"
        );
        let last = |tag: &str| f64::from(want[tag].last().unwrap().1);
        assert_eq!(session["metrics"]["train/loss"], last("train/loss"));
        assert_eq!(session["metrics"]["eval/val_loss"], last("eval/val_loss"));

        // An older run (no event file): export gives TensorBoard the same scalars.
        for file in &files {
            std::fs::remove_file(dir.join(file)).unwrap();
        }
        let out = tmp.path().join("exported");
        let export = run(&[
            "runs",
            "export",
            "--tensorboard",
            out.to_str().unwrap(),
            dir.to_str().unwrap(),
        ]);
        assert!(export.status.success(), "{}", text(&export));
        let exported = tensorboard_read(&out.join(&run_id));
        assert_eq!(scalars(&exported), want);
        assert_wall_times(&exported, "train/loss", &loss_times);
        assert_eq!(exported["text"], read["text"]);
        assert!(String::from_utf8_lossy(&export.stdout).contains(&run_id));
        // The export's own experiment: the config keys, and as metrics the
        // tags of the numbers summary.json ends with.
        let dashboard = hparams_read(&out);
        assert_eq!(
            dashboard["runs"],
            serde_json::json!([".", run_id]),
            "{dashboard}"
        );
        // gpt2's summary.json ends with final_val_loss, final_train_loss and
        // tokens_per_s (and more, which are no scalar: no metric).
        let finals = ["eval/val_loss", "throughput/tokens_per_s", "train/loss"];
        assert_eq!(
            dashboard["metrics"],
            serde_json::json!(finals),
            "{dashboard}"
        );
        let types = dashboard["hparams"].as_object().unwrap();
        assert_eq!(types["train.steps"], "DATA_TYPE_FLOAT64", "{dashboard}");
        let keys: Vec<&String> = types.keys().collect();
        assert_eq!(keys, config_hparams(&dir).keys().collect::<Vec<_>>());
        let session = &dashboard["sessions"][&run_id];
        assert_eq!(session["hparams"], Value::Object(config_hparams(&dir)));
        assert_eq!(session["metrics"]["eval/val_loss"], last("eval/val_loss"));
        eprintln!(
            "tensorboard_cli: run, resume, three reads, two HParams reads and an export in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
);

heavy_test!(tensorboard_reads_an_hrm_sudoku_runs_metrics, |tmp| {
    let started = std::time::Instant::now();
    // hrm_cli's short run (16 steps of 64 puzzles, eval every 8), with
    // the stand-in NVML: GPU samples, the last one after the trainer's log
    // closed (the sampler brings the event file up to date).
    let mut args = crate::train::hrm_cli::SHORT.to_vec();
    args.extend(["--out", tmp.path().to_str().unwrap()]);
    let out = envgen_run(&args, true);
    assert!(out.status.success(), "{}", text(&out));
    let dir = PathBuf::from(json_of(&out)["run_dir"].as_str().unwrap());
    let read = tensorboard_read(&dir);
    let want = expected(&dir);
    assert_eq!(scalars(&read), want, "TensorBoard read: {read}");
    assert!(want["eval/cell_accuracy"].len() >= 2, "{want:?}");
    let last = want["train/loss"].last().unwrap().0;
    let gpu = &want["gpu/0/util_percent"];
    assert_eq!(
        gpu.last().unwrap().0,
        last,
        "the final sample, at the last step"
    );
    assert!(want.contains_key("train/train_cell_accuracy"), "{want:?}");
    assert!(read["text"]["config"][0][1]
        .as_str()
        .unwrap()
        .contains("[train]"));
    eprintln!(
        "tensorboard_cli: hrm-sudoku run and read in {:.1} s",
        started.elapsed().as_secs_f64()
    );
});

/// A run directory with a version-1 manifest of `run_id` and `metrics`.
fn fake_run(dir: &Path, run_id: &str, metrics: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let manifest = serde_json::json!({"run_id": run_id, "experiment": "gpt2", "preset": "tiny",
        "config_hash": "sha256:9", "profile": {"micro_batch": 8, "grad_accum": 1,
        "precision": "fp32", "backend": "cpu", "device": "flex:cpu"},
        "started_at": "t0", "finished_at": "t1", "envgen_version": "0.1.0",
        "git_revision": null, "image": null, "where": "native",
        "where_reason": "--where native", "world_size": 1});
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    std::fs::write(dir.join("metrics.jsonl"), metrics).unwrap();
}

fn export(out: &Path, runs: &[&Path]) -> Output {
    let mut args = vec!["runs", "export", "--tensorboard", out.to_str().unwrap()];
    args.extend(runs.iter().map(|r| r.to_str().unwrap()));
    run(&args)
}

#[test]
fn gpu_samples_plot_at_the_last_step_and_export_refuses_bad_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // GPU sampler lines carry no step: they plot at the last training step
    // before them (0 before any); sections come from the key.
    let metrics = concat!(
        r#"{"time_s":0.5,"gpu":[{"index":0,"util_percent":10,"memory_used_gb":1.5}]}"#,
        "\n",
        r#"{"step":0,"val_loss":5.5}"#,
        "\n",
        r#"{"step":1,"loss":5.25,"lr":0.001,"tokens_per_s":1000.5,"skipped":true}"#,
        "\n",
        r#"{"time_s":1.5,"gpu":[{"index":0,"util_percent":97,"memory_used_gb":2.5},"#,
        r#"{"index":1,"util_percent":50,"memory_used_gb":0.5}]}"#,
        "\n",
    );
    let a = tmp.path().join("a");
    fake_run(&a, "gpt2-tiny-1", metrics);
    let unix = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.unwrap().as_secs_f64()
    };
    let before = unix();
    let exported = export(&out, &[&a]);
    let after = unix();
    assert!(exported.status.success(), "{}", text(&exported));
    let read = tensorboard_read(&out.join("gpt2-tiny-1"));
    // Lines from before the `time` field (issue #42) are plotted at the
    // moment of the export.
    let times = read["wall_times"]["train/loss"][0].as_f64().unwrap();
    assert!(
        (before..=after).contains(&times),
        "{before} {times} {after}"
    );
    let json = serde_json::json!({
        "gpu/0/util_percent": [[0, 10.0], [1, 97.0]],
        "gpu/0/memory_used_gb": [[0, 1.5], [1, 2.5]],
        "gpu/1/util_percent": [[1, 50.0]],
        "gpu/1/memory_used_gb": [[1, 0.5]],
        "eval/val_loss": [[0, 5.5]],
        "train/loss": [[1, 5.25]],
        "optim/lr": [[1, 0.0010000000474974513]],
        "optim/skipped": [[1, 1.0]],
        "throughput/tokens_per_s": [[1, 1000.5]],
    });
    assert_eq!(read["scalars"], json, "{read}");
    assert_eq!(
        read["text"],
        serde_json::json!({}),
        "no config.toml, no config text"
    );

    // Refused (exit 2, nothing written): not a run, one run id twice, a
    // run id that is no folder name.
    let b = tmp.path().join("b");
    fake_run(&b, "gpt2-tiny-1", "");
    let c = tmp.path().join("c");
    fake_run(&c, "../escape", "");
    let fresh = tmp.path().join("fresh");
    for (runs, why) in [
        (vec![tmp.path()], "is not a run directory"),
        (
            vec![a.as_path(), b.as_path()],
            "two runs given have the run id gpt2-tiny-1",
        ),
        (vec![c.as_path()], "is not a plain folder name"),
    ] {
        let refused = export(&fresh, &runs);
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
        assert!(text(&refused).contains(why), "{}", text(&refused));
    }
    assert!(!fresh.exists());
    // DIR/<run_id> would be the run itself: refused, not written into.
    let d = tmp.path().join("gpt2-tiny-2");
    fake_run(&d, "gpt2-tiny-2", metrics);
    let into_itself = export(tmp.path(), &[&d]);
    assert_eq!(into_itself.status.code(), Some(2), "{}", text(&into_itself));
    assert!(text(&into_itself).contains("is the run directory itself"));
    assert_eq!(
        std::fs::read_dir(&d).unwrap().count(),
        2,
        "manifest and metrics only"
    );
    assert!(!tmp.path().join("escape").exists());
}
