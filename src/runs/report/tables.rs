//! The report's tables, each rendered as Markdown and as HTML: where each
//! run ran, what differs, the final metrics (top-level ones only) and the
//! per-item arrays of a summary (quantize's schemes, rft's rounds) as small
//! tables of their own instead of hundreds of `schemes.3.…` lines.

use serde_json::Value;

use super::legend::run_labels;
use crate::runs::compare::{Comparison, DifferenceKind};
use crate::runs::manifest::ImageRecord;
use crate::runs::store::RunDir;

/// The longest cell kept on one line in report.html.
const SHORT_CELL: usize = 24;

/// A titled table of text cells.
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn markdown(&self) -> String {
        let row = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|c| escape_markdown(c)).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = format!("**{}**\n\n", escape_markdown(&self.title));
        out += &row(&self.header);
        out += &format!("|{}\n", "---|".repeat(self.header.len()));
        for cells in &self.rows {
            out += &row(cells);
        }
        out
    }

    pub fn html(&self) -> String {
        // Short cells (a status, a shortened hash, a label) stay on one
        // line; long ones (a run id, an argv) wrap anywhere. Column names
        // (`finetune_final_val_loss`) may break after an underscore: a
        // table of many fields (rft's rounds) then still fits the page.
        let cells = |tag: &str, cells: &[String]| {
            cells
                .iter()
                .map(|c| {
                    if tag == "th" {
                        let name = escape_html(c).replace('_', "_<wbr>");
                        return format!("<th>{name}</th>");
                    }
                    let class = if c.chars().count() <= SHORT_CELL {
                        " class=\"s\""
                    } else {
                        ""
                    };
                    format!("<{tag}{class}>{}</{tag}>", escape_html(c))
                })
                .collect::<String>()
        };
        let mut out = format!(
            "<table><caption>{}</caption>\n<thead><tr>{}</tr></thead><tbody>\n",
            escape_html(&self.title),
            cells("th", &self.header)
        );
        for row in &self.rows {
            out += &format!("<tr>{}</tr>\n", cells("td", row));
        }
        out + "</tbody></table>\n"
    }
}

/// A user-derived string (a metric key, a run id, a path) as Markdown
/// text, escaped as [`escape_html`] escapes it for report.html (issue #40):
/// Markdown renders inline HTML, so `<`, `>`, `&` and `"` become entities;
/// `|` cannot end a table cell, and control characters (a newline would
/// end the table row, ESC would reach a terminal that shows the file) are
/// written as escapes.
pub fn escape_markdown(text: &str) -> String {
    escape_html(text).replace('|', "\\|")
}

/// A user-derived string as HTML text: entities for the markup
/// characters, and control characters written as escapes (a terminal
/// showing the file must not run them).
pub fn escape_html(text: &str) -> String {
    crate::output::escape_control(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The runs and where each ran: one row per run, first its label in the
/// charts' legends (`legends`).
pub fn environment(runs: &[RunDir], legends: &[String]) -> Table {
    let mut table = Table::new(
        "Runs and where they ran",
        &[
            "legend",
            "run",
            "status",
            "config hash",
            "profile",
            "where",
            "image",
            "GPU",
            "driver",
            "envgen",
            "git",
        ],
    );
    for (run, label) in runs.iter().zip(legends.iter().cloned()) {
        let m = &run.manifest;
        let env = &m.environment;
        let gpus: Vec<String> = env.host.gpus.iter().map(|g| g.name.clone()).collect();
        let image = match &env.image {
            None => "-".to_string(),
            Some(ImageRecord::Docker(i)) => format!("{}@{}", i.reference, short_hash(&i.digest)),
            Some(ImageRecord::Cluster(i)) => match &i.digest {
                Some(digest) => format!("{}@{}", i.reference, short_hash(digest)),
                None => i.reference.clone(),
            },
        };
        let profile = match &m.profile.name {
            Some(name) => name.clone(),
            None => key_values(&serde_json::to_value(&m.profile).unwrap_or_default()),
        };
        table.rows.push(vec![
            label,
            run.run_id(),
            run.status().to_owned(),
            run.config_hash().map_or("-".into(), short_hash),
            profile,
            env.place.name().to_string(),
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
            env.git_revision
                .as_deref()
                .map_or("-".into(), |rev| rev.chars().take(12).collect()),
        ]);
    }
    table
}

/// A hash as its algorithm and first 12 digits (`sha256:0123456789ab…`):
/// the full one is in manifest.json, and 64 digits wrap a table cell.
pub fn short_hash(hash: &str) -> String {
    let (algorithm, digits) = match hash.split_once(':') {
        Some((algorithm, digits)) => (format!("{algorithm}:"), digits),
        None => (String::new(), hash),
    };
    if digits.len() > 16 && digits.chars().all(|c| c.is_ascii_hexdigit()) {
        format!("{algorithm}{}…", &digits[..12])
    } else {
        hash.to_string()
    }
}

/// An object's set fields as `key=value` (the hardware profile's knobs),
/// nested ones dotted, unset (null) ones left out.
fn key_values(value: &Value) -> String {
    let Some(map) = value.as_object() else {
        return value_text(value);
    };
    let mut parts = Vec::new();
    for (key, v) in map {
        match v {
            Value::Null => {}
            Value::Object(_) => {
                let inner = key_values(v);
                parts.extend(
                    inner
                        .split(' ')
                        .filter(|p| !p.is_empty())
                        .map(|p| format!("{key}.{p}")),
                );
            }
            other => parts.push(format!("{key}={}", value_text(other))),
        }
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// The comparison as tables: what differs between the runs, and their
/// top-level final metrics (delta vs the first run). Metrics inside an
/// array (`schemes.int8.bytes`, `rounds.1.kept`) are left to [`item_tables`].
pub fn comparison(cmp: &Comparison, runs: &[RunDir]) -> (String, Vec<Table>) {
    let env_knobs = cmp
        .differences
        .iter()
        .filter(|d| d.kind == DifferenceKind::CommandEnv)
        .count();
    let same = if cmp.same_config {
        format!(
            "Same science config: yes ({}){}.",
            cmp.runs
                .first()
                .and_then(|r| r.config_hash.as_deref())
                .map_or("?".into(), short_hash),
            // The hash does not cover a command's environment (issue #39).
            match env_knobs {
                0 => String::new(),
                n => format!(", but {n} variable(s) of the command's environment differ"),
            }
        )
    } else {
        "Same science config: no (the config hashes differ).".to_string()
    };
    let labels = run_labels(runs);
    let header: Vec<&str> = std::iter::once("field")
        .chain(labels.iter().map(String::as_str))
        .collect();
    let mut tables = Vec::new();
    if !cmp.differences.is_empty() {
        let mut diff = Table::new("What differs", &header);
        for d in &cmp.differences {
            // Science keys first, then hardware knobs, then the environment
            // (the order `compare` gives them in), each named as such.
            let kind = serde_json::to_value(d.kind).unwrap_or_default();
            let mut row = vec![format!("{} · {}", kind.as_str().unwrap_or("?"), d.field)];
            row.extend(d.values.iter().map(value_text));
            diff.rows.push(row);
        }
        tables.push(diff);
    }
    let mut header = header;
    header[0] = "metric";
    let mut finals = Table::new("Final metrics (delta vs the first run)", &header);
    let arrays = array_metrics(runs);
    for metric in cmp
        .metrics
        .iter()
        .filter(|m| !inside_array(&m.name, &arrays))
    {
        let mut row = vec![metric.name.clone()];
        for (i, (value, delta)) in metric.values.iter().zip(&metric.delta_pct).enumerate() {
            row.push(match (value, delta) {
                (Some(v), Some(d)) if i > 0 => format!("{} ({d:+.2}%)", number(*v)),
                (Some(v), _) => number(*v),
                (None, _) => "-".into(),
            });
        }
        finals.rows.push(row);
    }
    if !finals.rows.is_empty() {
        tables.push(finals);
    }
    (same, tables)
}

/// The summary metrics that are arrays in some run (`schemes`, `rounds`).
fn array_metrics(runs: &[RunDir]) -> Vec<String> {
    runs.iter()
        .filter_map(|run| run.summary.as_ref()?["metrics"].as_object().cloned())
        .flat_map(|metrics| {
            metrics
                .into_iter()
                .filter(|(_, v)| v.is_array())
                .map(|(k, _)| k)
        })
        .collect()
}

/// A dotted metric path inside one of those arrays (`schemes.int8.bytes`:
/// `compare` names array items by their own name when they have one).
fn inside_array(name: &str, arrays: &[String]) -> bool {
    let top = name.split('.').next().unwrap_or(name);
    name.contains('.') && arrays.iter().any(|a| a == top)
}

/// Each run's arrays of objects in `summary.json` metrics (quantize's
/// `schemes`, rft's `rounds`) as one table each: a row per item, a column
/// per scalar field.
pub fn item_tables(runs: &[RunDir]) -> Vec<Table> {
    let mut tables = Vec::new();
    for (run, label) in runs.iter().zip(run_labels(runs)) {
        let Some(metrics) = run.summary.as_ref().and_then(|s| s["metrics"].as_object()) else {
            continue;
        };
        for (key, value) in metrics {
            let Some(items) = value.as_array() else {
                continue;
            };
            let objects: Vec<&serde_json::Map<String, Value>> =
                items.iter().filter_map(Value::as_object).collect();
            if objects.is_empty() {
                continue;
            }
            let mut columns: Vec<&String> = Vec::new();
            for object in &objects {
                for (field, v) in object.iter() {
                    if !v.is_object() && !v.is_array() && !columns.contains(&field) {
                        columns.push(field);
                    }
                }
            }
            // The item's name first: `scheme` of `schemes`, `round` of `rounds`.
            let singular = key.strip_suffix('s').unwrap_or(key);
            columns.sort_by_key(|c| c.as_str() != singular);
            let header: Vec<&str> = columns.iter().map(|c| c.as_str()).collect();
            let mut table = Table::new(format!("{label}: {key}"), &header);
            for object in objects {
                table.rows.push(
                    columns
                        .iter()
                        .map(|c| object.get(*c).map_or("-".into(), value_text))
                        .collect(),
                );
            }
            tables.push(table);
        }
    }
    tables
}

/// A value as a short cell: numbers with 6 decimals at most.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Number(n) if n.is_f64() => n.as_f64().map_or_else(|| n.to_string(), number),
        other => other.to_string(),
    }
}

fn number(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 1e-3 && v.abs() < 1e6 {
        let text = format!("{v:.6}");
        let text = text.trim_end_matches('0');
        text.trim_end_matches('.').to_string()
    } else {
        format!("{v:.4e}")
    }
}
