//! Which charts a report draws and their data: the specs of
//! `env/reports.toml` (data, not code: a new experiment's charts are rows
//! there), and each run's series read from what the run recorded.

use serde::Deserialize;
use serde_json::Value;

use crate::runs::store::RunDir;

const REPORTS_TOML: &str = include_str!("../../../env/reports.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChartsFile {
    chart: Vec<ChartSpec>,
}

/// One chart of one experiment (fields documented in env/reports.toml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartSpec {
    pub experiment: String,
    pub name: String,
    pub title: String,
    #[serde(default = "metrics_rows")]
    pub rows: String,
    pub x: String,
    pub x_label: String,
    pub series: Vec<String>,
    pub y_label: String,
    #[serde(default)]
    pub style: Style,
    #[serde(default)]
    pub point_label: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub y_label_from: Option<String>,
}

fn metrics_rows() -> String {
    "metrics".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    #[default]
    Line,
    Points,
}

/// Where a chart's rows come from.
enum Rows<'a> {
    Metrics,
    Gpu,
    Summary(&'a str),
}

impl ChartSpec {
    fn rows(&self) -> Rows<'_> {
        match self.rows.as_str() {
            "gpu" => Rows::Gpu,
            other => match other.strip_prefix("summary:") {
                Some(key) => Rows::Summary(key),
                None => Rows::Metrics,
            },
        }
    }

    /// The SVG's file stem, unique in a report over several experiments:
    /// `gpt2-loss`, `hrm-sudoku-loss`, `gpu-util`.
    pub fn file_stem(&self) -> String {
        match self.experiment.as_str() {
            "*" => self.name.clone(),
            experiment => format!("{experiment}-{}", self.name),
        }
    }

    /// The chart's heading: the experiment and the title.
    pub fn heading(&self) -> String {
        match self.experiment.as_str() {
            "*" | "default" => self.title.clone(),
            experiment => format!("{experiment}: {}", self.title),
        }
    }

    /// Where the report says the data would have come from.
    pub fn source(&self) -> String {
        match self.rows() {
            Rows::Metrics => "metrics.jsonl".into(),
            Rows::Gpu => "metrics.jsonl GPU sampler lines".into(),
            Rows::Summary(key) => format!("summary.json metrics.{key}"),
        }
    }
}

/// Every chart spec, parsed once per report. The file is compiled in and
/// checked by a unit test, so a malformed row fails the tests, not a user.
pub fn all_specs() -> Vec<ChartSpec> {
    toml::from_str::<ChartsFile>(REPORTS_TOML)
        .map(|f| f.chart)
        .unwrap_or_default()
}

/// The charts for the experiments of `runs`, in file order: each
/// experiment's own (or the "default" ones when it has none), then those
/// for every experiment ("*"), each chart name once.
pub fn specs_for(runs: &[RunDir]) -> Vec<ChartSpec> {
    let specs = all_specs();
    let mut chosen: Vec<ChartSpec> = Vec::new();
    let mut push = |spec: &ChartSpec| {
        if !chosen
            .iter()
            .any(|c| c.name == spec.name && c.experiment == spec.experiment)
        {
            chosen.push(spec.clone());
        }
    };
    for run in runs {
        let experiment = applies_as(&specs, &run.manifest.experiment);
        specs
            .iter()
            .filter(|s| s.experiment == experiment)
            .for_each(&mut push);
    }
    specs
        .iter()
        .filter(|s| s.experiment == "*")
        .for_each(&mut push);
    chosen
}

/// The experiment name whose specs apply to runs of `experiment`.
fn applies_as<'a>(specs: &[ChartSpec], experiment: &'a str) -> &'a str {
    if specs.iter().any(|s| s.experiment == experiment) {
        experiment
    } else {
        "default"
    }
}

/// Whether `spec` is drawn for runs of `run`'s experiment.
fn applies_to(spec: &ChartSpec, run: &RunDir, specs: &[ChartSpec]) -> bool {
    spec.experiment == "*" || spec.experiment == applies_as(specs, &run.manifest.experiment)
}

/// One drawn line: one run's values of one field (of one GPU, one stage).
#[derive(Debug, Clone)]
pub struct Line {
    /// The run's index in the report: its colour.
    pub run: usize,
    /// The line's dash pattern: which field, GPU or stage (0: solid).
    pub dash: usize,
    /// (x, y, point name), sorted by x.
    pub points: Vec<(f64, f64, Option<String>)>,
}

/// A chart against one x axis (step, tokens or training time).
#[derive(Debug, Clone)]
pub struct View {
    pub x: String,
    pub x_label: String,
    pub lines: Vec<Line>,
}

/// One chart: its views (the first is shown; the page switches), the
/// legend's run labels and the names of its dash patterns.
#[derive(Debug, Clone)]
pub struct Chart {
    pub id: String,
    pub title: String,
    pub section: String,
    pub y_label: String,
    pub style: Style,
    /// What each dash pattern means, when a chart has more than one
    /// (`loss` solid, `val_loss` dashed; GPU 0, GPU 1; stages).
    pub dashes: Vec<String>,
    pub views: Vec<View>,
}

/// The x axes a chart over `step` offers besides it: the tokens and the
/// training time up to each row, summed from each row's `step_ms` and
/// `tokens_per_s` by [`with_progress`].
pub const PROGRESS_AXES: [(&str, &str); 2] =
    [("tokens", "tokens"), ("train_time_s", "training time (s)")];

/// `rows` with the tokens and training time up to each row added (as
/// [`PROGRESS_AXES`] name them) where the rows carry `step_ms` (and
/// `tokens_per_s`) and not those fields themselves.
pub fn with_progress(rows: &[Value]) -> Vec<Value> {
    let (mut seconds, mut tokens) = (0.0, 0.0);
    rows.iter()
        .map(|row| {
            let mut row = row.clone();
            let (Some(ms), Some(map)) = (row["step_ms"].as_f64(), row.as_object_mut()) else {
                return row;
            };
            seconds += ms / 1e3;
            map.entry("train_time_s").or_insert(seconds.into());
            if let Some(rate) = map.get("tokens_per_s").and_then(Value::as_f64) {
                tokens += rate * ms / 1e3;
                map.entry("tokens").or_insert(tokens.round().into());
            }
            row
        })
        .collect()
}

/// The chart of `spec` over `runs` (each run's rows with progress added);
/// `None` when no run has a point of it.
pub fn spec_chart(spec: &ChartSpec, runs: &[(RunDir, Vec<Value>)]) -> Option<Chart> {
    let specs = all_specs();
    let mut xs = vec![(spec.x.clone(), spec.x_label.clone())];
    if spec.x == "step" {
        xs.extend(
            PROGRESS_AXES
                .iter()
                .map(|(x, l)| (x.to_string(), l.to_string())),
        );
    }
    let mut dashes: Vec<String> = Vec::new();
    let mut views = Vec::new();
    for (x, x_label) in xs {
        let mut lines = Vec::new();
        for (index, (run, metrics)) in runs.iter().enumerate() {
            if !applies_to(spec, run, &specs) {
                continue;
            }
            let rows = rows_of(spec, run, metrics);
            let mut groups: Vec<Option<String>> = vec![None];
            if let Some(group) = &spec.group {
                groups = rows.iter().map(|r| Some(scalar_text(&r[group]))).collect();
                groups.sort();
                groups.dedup();
            }
            for key in &spec.series {
                for group in &groups {
                    let points =
                        points_of(&rows, &x, key, spec.point_label.as_deref(), |r| {
                            match (&spec.group, group) {
                                (Some(g), Some(want)) => scalar_text(&r[g]) == *want,
                                _ => true,
                            }
                        });
                    if points.is_empty() {
                        continue;
                    }
                    let name = match (&spec.group, group) {
                        (Some(g), Some(value)) if spec.series.len() > 1 => {
                            format!("{key} {g} {value}")
                        }
                        (Some(g), Some(value)) => format!("{g} {value}"),
                        _ => key.clone(),
                    };
                    let dash = match dashes.iter().position(|d| *d == name) {
                        Some(i) => i,
                        None => {
                            dashes.push(name);
                            dashes.len() - 1
                        }
                    };
                    lines.push(Line {
                        run: index,
                        dash,
                        points,
                    });
                }
            }
        }
        if !lines.is_empty() {
            views.push(View { x, x_label, lines });
        }
    }
    if views.is_empty() {
        return None;
    }
    if dashes.len() < 2 {
        dashes.clear();
    }
    Some(Chart {
        id: spec.file_stem(),
        title: spec.heading(),
        section: section_of(spec.series.first().map_or("", String::as_str)).to_string(),
        y_label: y_label(spec, runs),
        style: spec.style,
        dashes,
        views,
    })
}

/// The finite (x, y) points of `key` against `x` in the rows `keep`
/// accepts, named by `point_label`, sorted by x.
pub fn points_of(
    rows: &[Value],
    x: &str,
    key: &str,
    point_label: Option<&str>,
    keep: impl Fn(&Value) -> bool,
) -> Vec<(f64, f64, Option<String>)> {
    let mut points: Vec<(f64, f64, Option<String>)> = rows
        .iter()
        .filter(|r| keep(r))
        .filter_map(|r| {
            let (x, y) = (r[x].as_f64()?, r[key].as_f64()?);
            let name = point_label.map(|k| scalar_text(&r[k]));
            (x.is_finite() && y.is_finite()).then_some((x, y, name))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// The report section a metric belongs in, from its prefix (`train/`,
/// `eval/`, `optim/`, `throughput/`, `gpu/`) or, unprefixed, its name:
/// `val_loss` and accuracies are eval, `lr` and `grad_norm` optim, rates
/// (`*_per_s`) and timings throughput, the rest (`loss`) train.
pub fn section_of(key: &str) -> &'static str {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (prefix.to_ascii_lowercase(), name.to_ascii_lowercase()),
        None => (String::new(), key.to_ascii_lowercase()),
    };
    match prefix.as_str() {
        "train" | "training" => return "train",
        "eval" | "val" | "valid" | "validation" | "test" => return "eval",
        "optim" | "optimizer" | "lr" => return "optim",
        "throughput" | "perf" | "speed" | "time" => return "throughput",
        "gpu" | "system" | "sys" => return "gpu",
        _ => {}
    }
    let has = |words: &[&str]| words.iter().any(|w| name.contains(w));
    if has(&["util", "memory", "gpu"]) {
        "gpu"
    } else if has(&["per_s", "per_sec", "throughput", "_ms", "seconds"]) {
        "throughput"
    } else if name == "lr"
        || has(&[
            "learning_rate",
            "grad_norm",
            "loss_scale",
            "weight_decay",
            "momentum",
        ])
    {
        "optim"
    } else if name.starts_with("val")
        || name.starts_with("eval")
        || name.starts_with("test")
        || has(&["accuracy", "answer_rate", "perplexity"])
    {
        "eval"
    } else {
        "train"
    }
}

/// The sections in the order the page shows them.
pub const SECTIONS: [&str; 5] = ["train", "eval", "optim", "throughput", "gpu"];

/// The y axis label: `y_label`, or the value(s) of `y_label_from` in the
/// runs' summaries (quantize's metric is perplexity or accuracy by source).
pub fn y_label(spec: &ChartSpec, runs: &[(RunDir, Vec<Value>)]) -> String {
    let Some(field) = &spec.y_label_from else {
        return spec.y_label.clone();
    };
    let mut names: Vec<String> = runs
        .iter()
        .filter_map(|(run, _)| {
            let summary = run.summary.as_ref()?;
            summary["metrics"][field].as_str().map(str::to_owned)
        })
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        spec.y_label.clone()
    } else {
        names.join(" / ")
    }
}

/// The rows a chart reads from one run.
fn rows_of(spec: &ChartSpec, run: &RunDir, metrics: &[Value]) -> Vec<Value> {
    match spec.rows() {
        Rows::Metrics => metrics.to_vec(),
        // One row per GPU and instant: the sample's fields plus its time.
        Rows::Gpu => metrics
            .iter()
            .filter_map(|line| Some((line.get("time_s")?, line.get("gpu")?.as_array()?)))
            .flat_map(|(time, gpus)| {
                gpus.iter().map(move |gpu| {
                    let mut row = gpu.clone();
                    if let Some(map) = row.as_object_mut() {
                        map.insert("time_s".into(), time.clone());
                    }
                    row
                })
            })
            .collect(),
        Rows::Summary(key) => run
            .summary
            .as_ref()
            .and_then(|s| s["metrics"][key].as_array().cloned())
            .unwrap_or_default(),
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
