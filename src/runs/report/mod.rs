//! `envgen runs report`: a Markdown and an HTML report over one or more
//! runs. Charts come first (a line per run above them), grouped in
//! sections (train, eval, optim, throughput, gpu): each experiment's own
//! charts (env/reports.toml) and one for every other numeric metric the
//! runs logged, smoothed, with a legend naming what differs between the
//! runs. The tables (where each ran, what differs, final metrics) follow.
//! A chart of the experiment's own no run has data for is not drawn: the
//! report names the metric that was missing instead.

mod auto;
mod charts;
mod draw;
mod legend;
mod page;
mod scale;
mod tables;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::compare::compare;
use super::store::RunDir;
use crate::error::Result;
use charts::Chart;

/// The report's charts, and those of the experiments' own it could not
/// draw (title, why).
struct Charts {
    drawn: Vec<Chart>,
    missing: Vec<(String, String)>,
}

/// Write `report.md`, `report.html` and one `NAME.svg` per drawn chart
/// into `out`; the paths written.
pub fn write_report(runs: &[RunDir], out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let with_rows = runs
        .iter()
        .map(|run| Ok((run.clone(), rows_of(run)?)))
        .collect::<Result<Vec<(RunDir, Vec<Value>)>>>()?;
    let charts = charts_of(runs, &with_rows);
    let labels = legend::legend_labels(runs);

    let comparison = compare(runs);
    let environment = tables::environment(runs, &labels);
    let (same_config, comparison_tables) = tables::comparison(&comparison, runs);
    let items = tables::item_tables(runs);
    let mut all_tables = vec![environment];
    all_tables.extend(comparison_tables);
    all_tables.extend(items);
    let summary = page::run_lines(runs, &labels);
    let report = page::Report {
        summary: &summary,
        same_config: &same_config,
        tables: &all_tables,
        charts: &charts.drawn,
        missing: &charts.missing,
        labels: &labels,
    };

    let mut files: Vec<(String, String)> = vec![
        ("report.md".into(), page::markdown(&report)),
        ("report.html".into(), page::html(&report)),
    ];
    for chart in &charts.drawn {
        let svg = draw::view_svg(chart, &chart.views[0], &labels, true);
        files.push((format!("{}.svg", chart.id), svg));
    }
    let mut written = Vec::new();
    for (name, text) in files {
        let path = out.join(name);
        // Atomic (and naming the path): a full disk leaves no half report.
        envgen_experiments::fsutil::write_atomic(&path, text.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// A run's metrics.jsonl rows, then those of its stages (rft's
/// `stages/pretrain/`, `stages/round-N/finetune/`) tagged with the stage,
/// each file's rows with the tokens and training time up to them.
fn rows_of(run: &RunDir) -> Result<Vec<Value>> {
    let mut rows = charts::with_progress(&run.metrics()?);
    let mut stage_files = Vec::new();
    find_metrics(&run.path.join("stages"), &mut stage_files);
    stage_files.sort();
    for file in stage_files {
        let Some(dir) = file.parent() else { continue };
        let stage = dir
            .strip_prefix(run.path.join("stages"))
            .unwrap_or(dir)
            .to_string_lossy()
            .into_owned();
        let text = envgen_experiments::engine::run_files::read_metrics_text(&file)?;
        let stage_rows: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|mut row| {
                if let Some(map) = row.as_object_mut() {
                    map.entry("stage").or_insert(stage.clone().into());
                }
                row
            })
            .collect();
        rows.extend(charts::with_progress(&stage_rows));
    }
    Ok(rows)
}

/// The `metrics.jsonl` files under `dir`, at any depth.
fn find_metrics(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_metrics(&path, found);
        } else if path.file_name().is_some_and(|n| n == "metrics.jsonl") {
            found.push(path);
        }
    }
}

/// The experiments' own charts, then one per other metric; sorted by
/// section (stable: each section keeps the file's and the logs' order).
fn charts_of(runs: &[RunDir], with_rows: &[(RunDir, Vec<Value>)]) -> Charts {
    let specs = charts::specs_for(runs);
    let mut drawn = Vec::new();
    let mut missing = Vec::new();
    for spec in &specs {
        match charts::spec_chart(spec, with_rows) {
            Some(chart) => drawn.push(chart),
            // The defaults are a guess at a command's metrics: not
            // finding them is no news (its metrics get charts of their own).
            None if spec.experiment == "default" => {}
            None => missing.push((
                spec.heading(),
                format!(
                    "no run recorded {} against `{}` in {}",
                    spec.series
                        .iter()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    spec.x,
                    spec.source()
                ),
            )),
        }
    }
    drawn.extend(auto::metric_charts(with_rows, &specs));
    drawn.sort_by_key(|c| section_rank(&c.section));
    Charts { drawn, missing }
}

fn section_rank(section: &str) -> usize {
    charts::SECTIONS
        .iter()
        .position(|s| *s == section)
        .unwrap_or(charts::SECTIONS.len())
}

#[cfg(test)]
mod tests;
