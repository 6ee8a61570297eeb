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

/// One plotted series: one run's values of one field (of one GPU).
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    /// (x, y, point name), sorted by x.
    pub points: Vec<(f64, f64, Option<String>)>,
}

/// Each run's legend label: its preset and the short hash that ends its id
/// (`gpt2-tiny-20261126-053228-e98a06e7` → `tiny e98a06e7`). That hash is
/// the config's, so runs of one config (a native run and its Docker twin)
/// would share a label: those get the time from their id as well
/// (`tiny e98a06e7 053228`), and a number when even that is shared.
pub fn run_labels<'a>(runs: impl IntoIterator<Item = &'a RunDir>) -> Vec<String> {
    let runs: Vec<&RunDir> = runs.into_iter().collect();
    let parts = |run: &RunDir| -> (String, String, String) {
        let id = &run.manifest.run_id;
        let mut tail = id.rsplit('-');
        let short: String = tail.next().unwrap_or(id).chars().take(8).collect();
        let time = tail.next().unwrap_or_default().to_owned();
        let head = run
            .manifest
            .preset
            .clone()
            .unwrap_or_else(|| run.manifest.experiment.clone());
        (head, short, time)
    };
    let mut labels: Vec<String> = runs
        .iter()
        .map(|r| {
            let (head, short, _) = parts(r);
            format!("{head} {short}")
        })
        .collect();
    let shared =
        |labels: &[String], i: usize| labels.iter().filter(|l| **l == labels[i]).count() > 1;
    let with_time: Vec<bool> = (0..labels.len()).map(|i| shared(&labels, i)).collect();
    for (i, run) in runs.iter().enumerate() {
        if with_time[i] {
            labels[i] = format!("{} {}", labels[i], parts(run).2);
        }
    }
    let still: Vec<bool> = (0..labels.len()).map(|i| shared(&labels, i)).collect();
    for (i, label) in labels.iter_mut().enumerate() {
        if still[i] {
            *label = format!("{label} #{}", i + 1);
        }
    }
    labels
}

/// The series of `spec` over `runs` (each run's rows given by `rows_of`);
/// empty series are left out, so an empty result means "nothing to draw".
pub fn series_for(spec: &ChartSpec, runs: &[(RunDir, Vec<Value>)]) -> Vec<Series> {
    let specs = all_specs();
    let labels = run_labels(runs.iter().map(|(run, _)| run));
    let mut out = Vec::new();
    for ((run, metrics), label) in runs.iter().zip(labels) {
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
                let mut points: Vec<(f64, f64, Option<String>)> = rows
                    .iter()
                    .filter(|r| match (&spec.group, group) {
                        (Some(g), Some(want)) => scalar_text(&r[g]) == *want,
                        _ => true,
                    })
                    .filter_map(|r| {
                        let (x, y) = (r[&spec.x].as_f64()?, r[key].as_f64()?);
                        let name = spec.point_label.as_ref().map(|k| scalar_text(&r[k]));
                        (x.is_finite() && y.is_finite()).then_some((x, y, name))
                    })
                    .collect();
                if points.is_empty() {
                    continue;
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut name = label.clone();
                if spec.series.len() > 1 {
                    name = format!("{name} {key}");
                }
                if let (Some(g), Some(value)) = (&spec.group, group) {
                    name = format!("{name} {g} {value}");
                }
                out.push(Series {
                    label: name,
                    points,
                });
            }
        }
    }
    out
}

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
