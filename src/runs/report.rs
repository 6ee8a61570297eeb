//! `envgen runs report`: a Markdown and an HTML report over one or more runs,
//! with loss curves and throughput plots (SVG, via plotters) and the
//! environment table that says where each run ran.

use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;
use serde_json::Value;

use super::compare::{compare, render_text};
use super::manifest::ImageRecord;
use super::store::RunDir;
use crate::error::Result;

/// One plotted series: a run's (step, value) points.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Write `report.md`, `report.html`, `loss.svg` and `throughput.svg` into `out`.
pub fn write_report(runs: &[RunDir], out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut loss = Vec::new();
    let mut throughput = Vec::new();
    for run in runs {
        let rows = run.metrics()?;
        loss.push(series(run, &rows, &["loss"]));
        throughput.push(series(run, &rows, &["tokens_per_s", "samples_per_s"]));
    }
    let loss_svg = line_chart("training loss", "loss", &loss)?;
    let throughput_svg = line_chart("throughput", "tokens or samples per second", &throughput)?;

    let comparison = compare(runs);
    let environment = environment_table(runs);
    let markdown = format!(
        "# envgen run report\n\n{}\n\n## Comparison\n\n```\n{}```\n\n## Loss\n\n![loss](loss.svg)\n\n## Throughput\n\n![throughput](throughput.svg)\n",
        environment,
        render_text(&comparison)
    );
    let html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>envgen run report</title>\
         <style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}pre{{background:#f6f6f6;padding:1em}}</style></head>\n\
         <body><h1>envgen run report</h1>\n{}\n<h2>Comparison</h2><pre>{}</pre>\n<h2>Loss</h2>{}\n<h2>Throughput</h2>{}\n</body></html>\n",
        markdown_table_to_html(&environment),
        escape_html(&render_text(&comparison)),
        loss_svg,
        throughput_svg
    );
    let files = [
        ("report.md", markdown),
        ("report.html", html),
        ("loss.svg", loss_svg),
        ("throughput.svg", throughput_svg),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = out.join(name);
        // Atomic (and naming the path): a full disk leaves no half report.
        envgen_experiments::fsutil::write_atomic(&path, text.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

fn series(run: &RunDir, rows: &[Value], keys: &[&str]) -> Series {
    let points = rows
        .iter()
        .filter_map(|row| {
            let step = row["step"].as_f64()?;
            let value = keys.iter().find_map(|k| row[*k].as_f64())?;
            value.is_finite().then_some((step, value))
        })
        .collect();
    Series {
        label: run.run_id(),
        points,
    }
}

fn line_chart(title: &str, y_label: &str, all: &[Series]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let points = || all.iter().flat_map(|s| s.points.iter());
        let (x_max, y_min, y_max) = points()
            .fold((1.0f64, f64::MAX, f64::MIN), |(x, lo, hi), &(px, py)| {
                (x.max(px), lo.min(py), hi.max(py))
            });
        let (y_min, y_max) = if y_min > y_max {
            (0.0, 1.0)
        } else {
            (y_min, y_max)
        };
        let pad = ((y_max - y_min) * 0.05).max(1e-9);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, (y_min - pad)..(y_max + pad))
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc(y_label)
            .draw()
            .map_err(plot_error)?;
        for (i, s) in all.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(plot_error)?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        if !all.is_empty() {
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .draw()
                .map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn plot_error<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the report plot: {err:?}")
}

/// Where each run ran: one row per run.
fn environment_table(runs: &[RunDir]) -> String {
    let mut table = String::from(
        "| run | status | config hash | profile | where | image | GPU | driver | envgen | git |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for run in runs {
        let m = &run.manifest;
        let env = &m.environment;
        let gpus: Vec<String> = env.host.gpus.iter().map(|g| g.name.clone()).collect();
        let image = match &env.image {
            None => "-".to_string(),
            Some(ImageRecord::Docker(i)) => format!("{}@{}", i.reference, i.digest),
            Some(ImageRecord::Cluster(i)) => match &i.digest {
                Some(digest) => format!("{}@{digest}", i.reference),
                None => i.reference.clone(),
            },
        };
        let profile = match &m.profile.name {
            Some(name) => name.clone(),
            None => serde_json::to_string(&m.profile).unwrap_or_default(),
        };
        let cells = [
            run.run_id(),
            run.status().to_owned(),
            run.config_hash().unwrap_or("-").to_owned(),
            profile,
            env.place.clone(),
            image,
            if gpus.is_empty() {
                "none".into()
            } else {
                gpus.join(", ")
            },
            env.host
                .driver_version
                .clone()
                .unwrap_or_else(|| "-".into()),
            env.envgen_version.clone(),
            env.git_revision.clone().unwrap_or_else(|| "-".into()),
        ];
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        table += &format!("| {} |\n", cells.join(" | "));
    }
    table
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn markdown_table_to_html(table: &str) -> String {
    let mut html = String::from("<table>\n");
    for (i, line) in table.lines().enumerate() {
        if i == 1 {
            continue; // the |---| separator
        }
        let tag = if i == 0 { "th" } else { "td" };
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split(" | ")
            .map(|c| format!("<{tag}>{}</{tag}>", escape_html(c.trim())))
            .collect();
        html += &format!("<tr>{}</tr>\n", cells.concat());
    }
    html + "</table>"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_markdown_html_and_plots_with_every_runs_curve() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Vec::new();
        for (id, scale) in [("run-a", 1.0), ("run-b", 1.1)] {
            let path = dir.path().join(id);
            std::fs::create_dir_all(&path).unwrap();
            let mut manifest = crate::runs::manifest::example();
            manifest.run_id = id.into();
            manifest.config_hash = "sha256:1".into();
            manifest.environment.place = "native".into();
            manifest.environment.image = None;
            crate::runs::manifest::write(&path, &manifest).unwrap();
            std::fs::write(
                path.join("summary.json"),
                json!({"status": "completed", "metrics": {"final_val_loss": scale}}).to_string(),
            )
            .unwrap();
            let metrics: String = (0..20)
                .map(|s| json!({"step": s, "loss": scale * 5.0 / (1.0 + s as f64), "tokens_per_s": 1000.0 * scale}).to_string() + "\n")
                .collect();
            std::fs::write(path.join("metrics.jsonl"), metrics).unwrap();
            runs.push(RunDir::open(&path).unwrap());
        }
        let out = dir.path().join("report");
        let files = write_report(&runs, &out).unwrap();
        assert_eq!(files.len(), 4);
        let loss = std::fs::read_to_string(out.join("loss.svg")).unwrap();
        assert!(loss.starts_with("<svg") && loss.contains("run-a") && loss.contains("run-b"));
        assert!(loss.matches("<polyline").count() >= 2, "one line per run");
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(
            md.contains("| run-b | completed | sha256:1 | cpu | native |"),
            "{md}"
        );
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(html.contains("<td>run-a</td>") && html.contains("<svg"));
    }
}
