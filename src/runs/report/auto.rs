//! A chart for every numeric metric the runs logged that no chart of
//! env/reports.toml draws: a user command's `train/loss` (from its
//! TensorBoard dir) whatever its name, rft's per-stage training curves and
//! its generation rate, `grad_norm`, `step_ms`. One chart per metric,
//! placed in its section by [`section_of`], one line per run and stage.

use std::collections::BTreeSet;

use serde_json::Value;

use super::charts::{
    all_specs, points_of, section_of, Chart, ChartSpec, Line, Style, View, PROGRESS_AXES,
};
use crate::runs::store::RunDir;

/// Row fields that place a row (its x, its stage, when it was logged),
/// never charted.
const PLACING: [&str; 8] = [
    "step",
    "time",
    "round",
    "epoch",
    "time_s",
    "train_time_s",
    "tokens",
    "stage",
];

/// The x a row is charted against: the first of these it has.
const X_KEYS: [(&str, &str); 4] = [
    ("step", "step"),
    ("round", "round"),
    ("epoch", "epoch"),
    ("time_s", "seconds"),
];

/// The charts of every metric not in `drawn` (the metric keys the
/// experiment's own charts plot), in the order the runs first logged them.
pub fn metric_charts(runs: &[(RunDir, Vec<Value>)], drawn: &[ChartSpec]) -> Vec<Chart> {
    let specs = all_specs();
    // Per run, the keys its experiment's own charts draw.
    let covered: Vec<BTreeSet<&str>> = runs
        .iter()
        .map(|(run, _)| {
            drawn
                .iter()
                .filter(|s| s.rows == "metrics" && covers(s, run, &specs))
                .flat_map(|s| s.series.iter().map(String::as_str))
                .collect()
        })
        .collect();
    // (x, key) pairs in first-logged order.
    let mut wanted: Vec<(&str, &str, String)> = Vec::new();
    for ((_, rows), covered) in runs.iter().zip(&covered) {
        for row in rows {
            let Some(map) = row.as_object() else { continue };
            let Some((x, x_label)) = X_KEYS.iter().find(|(x, _)| row[*x].is_number()) else {
                continue;
            };
            for (key, value) in map {
                let numeric = value.as_f64().is_some_and(f64::is_finite);
                if numeric && !PLACING.contains(&key.as_str()) && !covered.contains(key.as_str()) {
                    let known = wanted.iter().any(|(wx, _, k)| wx == x && k == key);
                    if !known {
                        wanted.push((x, x_label, key.clone()));
                    }
                }
            }
        }
    }
    let mut ids: Vec<String> = Vec::new();
    wanted
        .into_iter()
        .filter_map(|(x, x_label, key)| {
            let chart = metric_chart(runs, &covered, x, x_label, &key)?;
            let mut id = chart.id.clone();
            while ids.contains(&id) {
                id.push('_');
            }
            ids.push(id.clone());
            Some(Chart { id, ..chart })
        })
        .collect()
}

/// Whether `spec` draws its keys for `run` (the experiment's own charts,
/// or the defaults for an experiment without any).
fn covers(spec: &ChartSpec, run: &RunDir, specs: &[ChartSpec]) -> bool {
    let own = specs
        .iter()
        .any(|s| s.experiment == run.manifest.experiment);
    spec.experiment == run.manifest.experiment || (!own && spec.experiment == "default")
}

/// One metric's chart: a line per run (less those whose own charts have
/// `key`) and stage, against `base_x` (and, for steps, the tokens and
/// training time too).
fn metric_chart(
    runs: &[(RunDir, Vec<Value>)],
    covered: &[BTreeSet<&str>],
    base_x: &str,
    x_label: &str,
    key: &str,
) -> Option<Chart> {
    let mut xs = vec![(base_x.to_string(), x_label.to_string())];
    if base_x == "step" {
        xs.extend(
            PROGRESS_AXES
                .iter()
                .map(|(x, l)| (x.to_string(), l.to_string())),
        );
    }
    let mut stages: Vec<String> = Vec::new();
    let mut views = Vec::new();
    for (x, x_label) in xs {
        let mut lines = Vec::new();
        for (index, (_, rows)) in runs.iter().enumerate() {
            // A run whose own chart has this key is drawn there only.
            if covered[index].contains(key) {
                continue;
            }
            // The row's own x decides which chart it is in: a datagen
            // row (by round) is not in the chart by step.
            let placed = |r: &Value| {
                X_KEYS
                    .iter()
                    .find(|(k, _)| r[*k].is_number())
                    .map(|(k, _)| *k)
                    == Some(base_x)
            };
            let mut run_stages: Vec<String> = rows
                .iter()
                .filter(|r| r[key].is_number())
                .map(|r| r["stage"].as_str().unwrap_or("").to_string())
                .collect();
            run_stages.dedup();
            let run_stages: Vec<String> = run_stages.into_iter().fold(Vec::new(), |mut all, s| {
                if !all.contains(&s) {
                    all.push(s);
                }
                all
            });
            for stage in run_stages {
                let points = points_of(rows, &x, key, None, |r| {
                    placed(r) && r["stage"].as_str().unwrap_or("") == stage
                });
                if points.is_empty() {
                    continue;
                }
                let dash = match stages.iter().position(|s| *s == stage) {
                    Some(i) => i,
                    None => {
                        stages.push(stage);
                        stages.len() - 1
                    }
                };
                lines.push(Line {
                    run: index,
                    dash,
                    points,
                });
            }
        }
        if !lines.is_empty() {
            views.push(View { x, x_label, lines });
        }
    }
    if views.is_empty() {
        return None;
    }
    let named: Vec<&String> = stages.iter().filter(|s| !s.is_empty()).collect();
    let title = match named.as_slice() {
        [one] if stages.len() == 1 => format!("{key} ({one})"),
        _ => key.to_string(),
    };
    let dashes = if stages.len() > 1 {
        stages
            .iter()
            .map(|s| {
                if s.is_empty() {
                    "run".into()
                } else {
                    s.clone()
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let slug: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    Some(Chart {
        id: if base_x == "step" {
            format!("metric-{slug}")
        } else {
            format!("metric-{slug}-by-{base_x}")
        },
        title,
        section: section_of(key).to_string(),
        y_label: key.to_string(),
        style: Style::Line,
        dashes,
        views,
    })
}
