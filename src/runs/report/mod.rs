//! `envgen runs report`: a Markdown and an HTML report over one or more
//! runs: the runs and where they ran, the comparison as tables, and each
//! experiment's own charts (SVG, via plotters; chosen in env/reports.toml),
//! GPU panels when the runs sampled GPUs. A chart no run has data for is
//! not drawn: the report names the metric that was missing instead.

mod charts;
mod draw;
mod tables;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::compare::compare;
use super::store::RunDir;
use crate::error::Result;
use tables::{escape_html, Table};

/// One drawn chart, or why it was not.
enum Drawn {
    Chart {
        name: String,
        title: String,
        svg: String,
    },
    Missing {
        title: String,
        why: String,
    },
}

/// Write `report.md`, `report.html` and one `NAME.svg` per drawn chart
/// into `out`; the paths written.
pub fn write_report(runs: &[RunDir], out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let with_rows = runs
        .iter()
        .map(|run| Ok((run.clone(), run.metrics()?)))
        .collect::<Result<Vec<(RunDir, Vec<Value>)>>>()?;
    let mut drawn = Vec::new();
    for spec in charts::specs_for(runs) {
        let series = charts::series_for(&spec, &with_rows);
        if series.is_empty() {
            drawn.push(Drawn::Missing {
                title: spec.heading(),
                why: format!(
                    "no run recorded {} against `{}` in {}",
                    spec.series
                        .iter()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    spec.x,
                    spec.source()
                ),
            });
            continue;
        }
        let y_label = charts::y_label(&spec, &with_rows);
        let heading = spec.heading();
        let axes = draw::Axes {
            title: &heading,
            x_label: &spec.x_label,
            y_label: &y_label,
            style: spec.style,
        };
        drawn.push(Drawn::Chart {
            name: spec.file_stem(),
            title: heading.clone(),
            svg: draw::chart(&axes, &series)?,
        });
    }

    let comparison = compare(runs);
    let environment = tables::environment(runs);
    let (same_config, comparison_tables) = tables::comparison(&comparison, runs);
    let items = tables::item_tables(runs);

    let mut files: Vec<(String, String)> = vec![
        (
            "report.md".into(),
            markdown(
                &environment,
                &same_config,
                &comparison_tables,
                &items,
                &drawn,
            ),
        ),
        (
            "report.html".into(),
            html(
                &environment,
                &same_config,
                &comparison_tables,
                &items,
                &drawn,
            ),
        ),
    ];
    for d in &drawn {
        if let Drawn::Chart { name, svg, .. } = d {
            files.push((format!("{name}.svg"), svg.clone()));
        }
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

fn markdown(
    environment: &Table,
    same_config: &str,
    comparison: &[Table],
    items: &[Table],
    drawn: &[Drawn],
) -> String {
    let mut md = format!(
        "# envgen run report

{}
## Comparison

{same_config}

",
        environment.markdown()
    );
    for table in comparison.iter().chain(items) {
        md += &table.markdown();
        md += "
";
    }
    md += "## Charts

";
    for d in drawn {
        match d {
            Drawn::Chart { name, title, .. } => {
                let title = tables::escape_markdown(title);
                md += &format!(
                    "### {title}

![{title}]({name}.svg)

"
                )
            }
            Drawn::Missing { title, why } => {
                let (title, why) = (tables::escape_markdown(title), tables::escape_markdown(why));
                md += &format!(
                    "- not drawn: {title}: {why}
"
                )
            }
        }
    }
    md
}

/// The page fits 1400 px: fixed table layouts that wrap long cells
/// (hashes, image references) anywhere, and charts that scale down.
const STYLE: &str = "body{font-family:sans-serif;max-width:1360px;margin:1em auto;padding:0 8px}\
table{border-collapse:collapse;table-layout:fixed;width:100%;margin:0 0 1.5em;font-size:13px}\
caption{text-align:left;font-weight:bold;padding:4px 0}\
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere}\
th{background:#f3f3f3}figure{margin:0 0 1.5em}svg{max-width:100%;height:auto}\
.missing{color:#a33}";

fn html(
    environment: &Table,
    same_config: &str,
    comparison: &[Table],
    items: &[Table],
    drawn: &[Drawn],
) -> String {
    let mut body = format!(
        "<h1>envgen run report</h1>\n{}<h2>Comparison</h2>\n<p>{}</p>\n",
        environment.html(),
        escape_html(same_config)
    );
    for table in comparison.iter().chain(items) {
        body += &table.html();
    }
    body += "<h2>Charts</h2>\n";
    let mut missing = String::new();
    for d in drawn {
        match d {
            Drawn::Chart { name, svg, .. } => {
                body += &format!(
                    "<figure class=\"chart\" id=\"{}\">{svg}</figure>\n",
                    escape_html(name)
                )
            }
            Drawn::Missing { title, why } => {
                missing += &format!("<li>{}: {}</li>", escape_html(title), escape_html(why))
            }
        }
    }
    if !missing.is_empty() {
        body +=
            &format!("<p class=\"missing\">Not drawn:</p><ul class=\"missing\">{missing}</ul>\n");
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>envgen run report</title>\
         <style>{STYLE}</style></head>\n<body>{body}</body></html>\n"
    )
}

#[cfg(test)]
mod tests;
