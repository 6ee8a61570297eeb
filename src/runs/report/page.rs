//! The report as pages: report.md and a self-contained report.html
//! (inline SVG, CSS and script; no network). Charts first, under a line
//! per run; a smoothing slider and an x-axis choice that the inline
//! script applies to the drawn lines; then the tables. Prints with each
//! chart kept on one page.

use super::charts::{Chart, SECTIONS};
use super::draw;
use super::scale::DEFAULT_SMOOTHING;
use super::tables::{escape_html, escape_markdown, Table};
use crate::runs::store::RunDir;

pub struct Report<'a> {
    /// One line per run: its label, status and headline numbers.
    pub summary: &'a [String],
    pub same_config: &'a str,
    pub tables: &'a [Table],
    pub charts: &'a [Chart],
    /// The experiments' own charts not drawn: (title, why).
    pub missing: &'a [(String, String)],
    pub labels: &'a [String],
}

/// A line per run: its legend label, id, status, steps, wall time and
/// up to three final metrics (losses and accuracies first).
pub fn run_lines(runs: &[RunDir], labels: &[String]) -> Vec<String> {
    runs.iter()
        .zip(labels)
        .map(|(run, label)| {
            let mut parts = vec![run.run_id(), run.status().to_owned()];
            if let Some(summary) = &run.summary {
                if let Some(steps) = summary["steps_done"].as_u64() {
                    parts.push(format!("{steps} steps"));
                }
                if let Some(wall) = summary["wall_s"].as_f64() {
                    parts.push(format!("{wall:.0} s"));
                }
                if let Some(metrics) = summary["metrics"].as_object() {
                    let mut numbers: Vec<(&String, f64)> = metrics
                        .iter()
                        .filter_map(|(k, v)| Some((k, v.as_f64()?)))
                        .collect();
                    let headline = |k: &str| !(k.contains("loss") || k.contains("accuracy"));
                    numbers.sort_by_key(|(k, _)| headline(k));
                    parts.extend(
                        numbers
                            .iter()
                            .take(3)
                            .map(|(k, v)| format!("{k} {}", short_number(*v))),
                    );
                }
            }
            format!("{label}: {}", parts.join(" · "))
        })
        .collect()
}

fn short_number(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e9 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

/// The sections in page order, each with its charts.
fn sections(charts: &[Chart]) -> Vec<(&str, Vec<&Chart>)> {
    let mut names: Vec<&str> = SECTIONS.to_vec();
    for chart in charts {
        if !names.contains(&chart.section.as_str()) {
            names.push(&chart.section);
        }
    }
    names
        .into_iter()
        .map(|name| (name, charts.iter().filter(|c| c.section == name).collect()))
        .filter(|(_, charts): &(&str, Vec<&Chart>)| !charts.is_empty())
        .collect()
}

pub fn markdown(report: &Report) -> String {
    let mut md = String::from("# envgen run report\n\n");
    for line in report.summary {
        md += &format!("- {}\n", escape_markdown(line));
    }
    md += "\n## Charts\n\n";
    for (section, charts) in sections(report.charts) {
        md += &format!("### {section}\n\n");
        for chart in charts {
            let title = escape_markdown(&chart.title);
            md += &format!("![{title}]({}.svg)\n\n", chart.id);
        }
    }
    for (title, why) in report.missing {
        md += &format!(
            "- not drawn: {}: {}\n",
            escape_markdown(title),
            escape_markdown(why)
        );
    }
    md += &format!(
        "\n## Runs and comparison\n\n{}\n\n",
        escape_markdown(report.same_config)
    );
    for table in report.tables {
        md += &table.markdown();
        md += "\n";
    }
    md
}

/// Charts in two columns that fit 1400 px; tables that fit too, hashes
/// shortened (tables.rs) and in monospace; on paper no chart is split.
const STYLE: &str = "body{font-family:sans-serif;max-width:1360px;margin:0.5em auto;padding:0 8px}\
h1{font-size:20px;margin:0.3em 0}h2{font-size:17px;margin:0.8em 0 0.3em}\
h3{font-size:14px;margin:0.5em 0 0.2em;text-transform:uppercase;color:#555}\
.runs{margin:0;padding-left:1.2em;font-size:13px}\
.controls{font-size:13px;margin:0.4em 0;display:flex;gap:2em;align-items:center}\
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:6px}\
figure{margin:0}svg{max-width:100%;height:auto}\
table{border-collapse:collapse;table-layout:auto;width:100%;margin:0 0 1.5em;font-size:13px}\
caption{text-align:left;font-weight:bold;padding:4px 0}\
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere}\
th{background:#f3f3f3}td{font-family:ui-monospace,monospace;font-size:12px}.s{white-space:nowrap}\
.missing{color:#a33}\
@media print{.controls{display:none}.grid{display:block}\
figure,table{break-inside:avoid;page-break-inside:avoid}h2,h3{break-after:avoid}}";

/// Re-smooths every line when the slider moves (the same debiased EMA
/// as scale::ema, on the drawn points: the EMA commutes with the axis'
/// linear map), and shows each chart's view of the chosen x axis.
const SCRIPT: &str = r#"<script>
const ema = (ys, w) => { let last = 0, n = 0;
  return ys.map(y => { n++; last = last * w + (1 - w) * y; return last / (1 - Math.pow(w, n)); }); };
function smooth(w) {
  for (const g of document.querySelectorAll('g.series')) {
    const raw = g.querySelector('.raw'), line = g.querySelector('.smooth');
    const pts = raw.getAttribute('points').trim().split(/\s+/).map(p => p.split(',').map(Number));
    const ys = ema(pts.map(p => p[1]), w);
    line.setAttribute('points', pts.map((p, i) => p[0] + ',' + ys[i].toFixed(1)).join(' '));
  }
  document.getElementById('smoothing-value').textContent = w.toFixed(2);
}
function showX(x) {
  for (const figure of document.querySelectorAll('figure.chart')) {
    const views = [...figure.querySelectorAll('svg.view')];
    const want = views.find(v => v.dataset.x === x) || views[0];
    for (const v of views) v.style.display = v === want ? '' : 'none';
  }
}
document.getElementById('smoothing').addEventListener('input', e => smooth(Number(e.target.value)));
const xChoice = document.getElementById('x-axis');
if (xChoice) xChoice.addEventListener('change', e => showX(e.target.value));
</script>"#;

pub fn html(report: &Report) -> String {
    let mut body = String::from("<h1>envgen run report</h1>\n<ul class=\"runs\">");
    for line in report.summary {
        body += &format!("<li>{}</li>", escape_html(line));
    }
    body += "</ul>\n";
    body += &controls(report.charts);
    for (section, charts) in sections(report.charts) {
        body += &format!("<h3>{}</h3>\n<div class=\"grid\">\n", escape_html(section));
        for chart in charts {
            body += &format!("<figure class=\"chart\" id=\"{}\">", escape_html(&chart.id));
            for (i, view) in chart.views.iter().enumerate() {
                body += &draw::view_svg(chart, view, report.labels, i == 0);
            }
            body += "</figure>\n";
        }
        body += "</div>\n";
    }
    if !report.missing.is_empty() {
        let items: String = report
            .missing
            .iter()
            .map(|(title, why)| format!("<li>{}: {}</li>", escape_html(title), escape_html(why)))
            .collect();
        body += &format!("<p class=\"missing\">Not drawn:</p><ul class=\"missing\">{items}</ul>\n");
    }
    body += &format!(
        "<h2>Runs and comparison</h2>\n<p>{}</p>\n",
        escape_html(report.same_config)
    );
    for table in report.tables {
        body += &table.html();
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>envgen run report</title>\
         <style>{STYLE}</style></head>\n<body>{body}{SCRIPT}</body></html>\n"
    )
}

/// The smoothing slider, and the x-axis choice when some chart has more
/// than one view (its runs logged step times).
fn controls(charts: &[Chart]) -> String {
    let mut xs: Vec<(&str, &str)> = Vec::new();
    for view in charts.iter().flat_map(|c| &c.views) {
        if !xs.iter().any(|(x, _)| *x == view.x) {
            xs.push((&view.x, &view.x_label));
        }
    }
    let mut out = format!(
        "<div class=\"controls\"><label>smoothing <input id=\"smoothing\" type=\"range\" \
         min=\"0\" max=\"0.99\" step=\"0.01\" value=\"{DEFAULT_SMOOTHING}\"> \
         <span id=\"smoothing-value\">{DEFAULT_SMOOTHING:.2}</span></label>"
    );
    let by_step = ["step", "tokens", "train_time_s"];
    let progress: Vec<&(&str, &str)> = xs.iter().filter(|(x, _)| by_step.contains(x)).collect();
    if progress.len() > 1 {
        out += "<label>x axis <select id=\"x-axis\">";
        for (x, label) in progress {
            out += &format!(
                "<option value=\"{}\">{}</option>",
                escape_html(x),
                escape_html(label)
            );
        }
        out += "</select></label>";
    }
    out + "</div>\n"
}
