//! `envgen runs compare`: same science config? Which science keys differ
//! (they change the result), then which variables of a command's
//! environment (knobs the config does not see: they may change either),
//! then which hardware knobs (speed only), then where the runs ran; how far
//! apart the final metrics are.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::store::RunDir;

/// Manifest sections that are hardware knobs: they change speed, not the science.
const HARDWARE_SECTIONS: &[&str] = &["profile", "world_size", "distributed"];

/// Manifest sections that say where and with what the runs ran.
const ENVIRONMENT_SECTIONS: &[&str] = &[
    "experiment",
    "preset",
    "where",
    "image",
    "data_files",
    "host",
    "envgen_version",
    "git_revision",
    // A user command's code: commit, diff_hash (issue #25); its `env` is
    // split off as [`DifferenceKind::CommandEnv`].
    "command",
    // The container's knobs (issue #39), not its name (one per run).
    "docker.options",
];

/// Dotted-path prefix of a command's environment variables in the manifest.
const COMMAND_ENV: &str = "command.env.";

#[derive(Debug, Serialize)]
pub struct Comparison {
    pub runs: Vec<RunLine>,
    /// True when every run has the same `config_hash`.
    pub same_config: bool,
    pub differences: Vec<Difference>,
    pub metrics: Vec<MetricRow>,
}

#[derive(Debug, Serialize)]
pub struct RunLine {
    pub run_id: String,
    pub path: String,
    pub status: String,
    pub config_hash: Option<String>,
}

/// One field (dotted path) whose value is not the same in every run.
#[derive(Debug, Serialize)]
pub struct Difference {
    pub kind: DifferenceKind,
    pub field: String,
    pub values: Vec<Value>,
}

/// What a difference is, in the order `compare` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DifferenceKind {
    /// A key of the science config (`config.toml`): changes the result.
    Science,
    /// A variable of a user command's environment (`command.env.NAME`,
    /// issue #39): outside `config_hash`, yet `MICRO_BATCH_SIZE` or
    /// `NVIDIA_TF32_OVERRIDE` may change the result or the speed.
    #[serde(rename = "command_env")]
    CommandEnv,
    /// A hardware knob (manifest `profile`, world size): changes speed only.
    Hardware,
    /// Where the run ran: place, image, host, versions, data files.
    Environment,
}

/// One final metric across runs; deltas are relative to the first run.
#[derive(Debug, Serialize)]
pub struct MetricRow {
    pub name: String,
    pub values: Vec<Option<f64>>,
    pub delta_pct: Vec<Option<f64>>,
    /// Bit-identical across all runs (e.g. final losses of a reproduced run).
    pub identical: bool,
}

pub fn compare(runs: &[RunDir]) -> Comparison {
    let hashes: BTreeSet<Option<&str>> = runs.iter().map(RunDir::config_hash).collect();
    let same_config = hashes.len() == 1 && !hashes.contains(&None);

    let science: Vec<BTreeMap<String, Value>> = runs
        .iter()
        .map(|run| {
            let mut fields = BTreeMap::new();
            flatten(
                "",
                &run.science_config().unwrap_or(Value::Null),
                &mut fields,
            );
            fields
        })
        .collect();
    let manifest_fields = |sections: &[&str]| -> Vec<BTreeMap<String, Value>> {
        runs.iter()
            .map(|run| {
                // The typed manifest, walked field by field (its JSON form).
                let manifest = serde_json::to_value(&run.manifest).unwrap_or_default();
                let mut fields = BTreeMap::new();
                for section in sections {
                    // A dotted section (`docker.options`) is a path into the manifest.
                    let value = section.split('.').fold(&manifest, |v, key| &v[key]);
                    flatten(section, value, &mut fields);
                }
                fields
            })
            .collect()
    };
    let (environment, command_env): (Vec<_>, Vec<_>) = manifest_fields(ENVIRONMENT_SECTIONS)
        .into_iter()
        .map(|fields| {
            let (env, rest): (BTreeMap<_, _>, BTreeMap<_, _>) = fields
                .into_iter()
                .partition(|(field, _)| field.starts_with(COMMAND_ENV));
            (rest, env)
        })
        .unzip();
    let differences = [
        (DifferenceKind::Science, science),
        (DifferenceKind::CommandEnv, command_env),
        (DifferenceKind::Hardware, manifest_fields(HARDWARE_SECTIONS)),
        (DifferenceKind::Environment, environment),
    ]
    .into_iter()
    .flat_map(|(kind, flat)| {
        differing(&flat)
            .into_iter()
            .map(move |(field, values)| Difference {
                kind,
                field,
                values,
            })
    })
    .collect();

    let finals: Vec<BTreeMap<String, f64>> = runs.iter().map(final_numbers).collect();
    let names: BTreeSet<&String> = finals.iter().flat_map(|m| m.keys()).collect();
    let metrics = names
        .into_iter()
        .map(|name| {
            let values: Vec<Option<f64>> = finals.iter().map(|m| m.get(name).copied()).collect();
            let base = values.first().copied().flatten();
            let delta_pct = values
                .iter()
                .map(|v| match (base, v) {
                    (Some(b), Some(v)) if b != 0.0 => Some((v - b) / b.abs() * 100.0),
                    _ => None,
                })
                .collect();
            let identical = values
                .iter()
                .all(|v| v.map(f64::to_bits) == base.map(f64::to_bits))
                && base.is_some();
            MetricRow {
                name: name.clone(),
                values,
                delta_pct,
                identical,
            }
        })
        .collect();

    Comparison {
        runs: runs
            .iter()
            .map(|r| RunLine {
                run_id: r.run_id(),
                path: r.path.display().to_string(),
                status: r.status().to_owned(),
                config_hash: r.config_hash().map(str::to_owned),
            })
            .collect(),
        same_config,
        differences,
        metrics,
    }
}

/// `summary.json`'s numbers: every numeric leaf of `metrics`, plus `wall_s`.
fn final_numbers(run: &RunDir) -> BTreeMap<String, f64> {
    let mut fields = BTreeMap::new();
    if let Some(summary) = &run.summary {
        flatten_lists("", &summary["metrics"], &mut fields, ListKeys::Name);
        flatten("wall_s", &summary["wall_s"], &mut fields);
    }
    fields
        .into_iter()
        .filter_map(|(k, v)| v.as_f64().map(|x| (k, x)))
        .collect()
}

/// Dotted paths to leaves: `host.gpus.0.name` → "NVIDIA A30".
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    flatten_lists(prefix, value, out, ListKeys::Position)
}

/// How list items are named in a dotted path.
#[derive(Clone, Copy, PartialEq)]
enum ListKeys {
    Position,
    /// By a record's own name when it has one (final metrics only: a GPU
    /// list stays positional, `host.gpus.0.name`).
    Name,
}

fn flatten_lists(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>, keys: ListKeys) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        Value::Object(map) => map
            .iter()
            .for_each(|(k, v)| flatten_lists(&join(k), v, out, keys)),
        // A list of named records (quantize's `schemes`, rft's `rounds`) is
        // keyed by name, so `schemes.int8.metric_value` lines up across runs
        // that ran other schemes; anything else by position.
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| {
            let name = ["scheme", "name", "round", "stage"]
                .iter()
                .filter(|_| keys == ListKeys::Name)
                .find_map(|k| match &v[*k] {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .unwrap_or_else(|| i.to_string());
            flatten_lists(&join(&name), v, out, keys)
        }),
        Value::Null => {}
        leaf => {
            out.insert(prefix.to_owned(), leaf.clone());
        }
    }
}

fn differing(flat: &[BTreeMap<String, Value>]) -> Vec<(String, Vec<Value>)> {
    let keys: BTreeSet<&String> = flat.iter().flat_map(|m| m.keys()).collect();
    keys.into_iter()
        .filter_map(|key| {
            let values: Vec<Value> = flat
                .iter()
                .map(|m| m.get(key).cloned().unwrap_or(Value::Null))
                .collect();
            values
                .windows(2)
                .any(|w| w[0] != w[1])
                .then(|| (key.clone(), values))
        })
        .collect()
}

/// The human-readable comparison.
pub fn render_text(cmp: &Comparison) -> String {
    let mut out = String::new();
    for (i, run) in cmp.runs.iter().enumerate() {
        out += &format!(
            "[{i}] {}  {}  {}\n",
            esc(&run.run_id),
            esc(&run.status),
            esc(&run.path)
        );
    }
    let env_knobs: Vec<&str> = cmp
        .differences
        .iter()
        .filter(|d| d.kind == DifferenceKind::CommandEnv)
        .map(|d| d.field.strip_prefix(COMMAND_ENV).unwrap_or(&d.field))
        .collect();
    out += &if cmp.same_config && !env_knobs.is_empty() {
        // The config hash covers the command line, not its environment: a
        // plain "yes" would hide a 4x batch change (issue #39).
        format!(
            "\nsame science config: yes ({}), but the command's environment differs: {}\n",
            cmp.runs[0].config_hash.as_deref().unwrap_or("?"),
            esc(&env_knobs.join(", "))
        )
    } else if cmp.same_config {
        format!(
            "\nsame science config: yes ({})\n",
            cmp.runs[0].config_hash.as_deref().unwrap_or("?")
        )
    } else {
        let hashes: Vec<&str> = cmp
            .runs
            .iter()
            .map(|r| r.config_hash.as_deref().unwrap_or("none"))
            .collect();
        format!("\nsame science config: NO ({})\n", hashes.join(" vs "))
    };
    if cmp.differences.is_empty() {
        out += "no differences in science config, hardware knobs, image or host\n";
    }
    for (kind, title) in [
        (
            DifferenceKind::Science,
            "science config (config.toml) differs:",
        ),
        (
            DifferenceKind::CommandEnv,
            "command environment differs (may change the result or the speed):",
        ),
        (
            DifferenceKind::Hardware,
            "hardware knobs differ (speed, not science):",
        ),
        (DifferenceKind::Environment, "environment differs:"),
    ] {
        let rows: Vec<&Difference> = cmp.differences.iter().filter(|d| d.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        out += &format!("\n{title}\n");
        let width = rows.iter().map(|d| d.field.len()).max().unwrap_or(0);
        for diff in rows {
            out += &format!(
                "  {:<width$}  {}\n",
                esc(&diff.field),
                side_by_side(&diff.values)
            );
        }
    }
    if !cmp.metrics.is_empty() {
        out += "\nfinal metrics (delta vs [0]):\n";
        // Many metrics (quantize's per-scheme table): the ones that differ,
        // then the identical ones by name only.
        let collapse = cmp.metrics.len() > 20 && cmp.runs.len() > 1;
        let width = cmp.metrics.iter().map(|m| m.name.len()).max().unwrap_or(0);
        let mut identical = Vec::new();
        for row in &cmp.metrics {
            if collapse && row.identical {
                identical.push(esc(&row.name));
                continue;
            }
            let cells: Vec<String> = row
                .values
                .iter()
                .zip(&row.delta_pct)
                .enumerate()
                .map(|(i, (v, d))| match (v, d) {
                    (Some(v), _) if i == 0 => format!("{v:.6}"),
                    (Some(v), Some(d)) => format!("{v:.6} ({d:+.2}%)"),
                    (Some(v), None) => format!("{v:.6}"),
                    (None, _) => "-".into(),
                })
                .collect();
            let mark = if row.identical && cmp.runs.len() > 1 {
                "  [bit-identical]"
            } else {
                ""
            };
            out += &format!(
                "  {:<width$}  {}{mark}\n",
                esc(&row.name),
                cells.join("  |  ")
            );
        }
        if !identical.is_empty() {
            out += &format!(
                "  bit-identical in every run ({}): {}\n",
                identical.len(),
                identical.join(", ")
            );
        }
    }
    out
}

/// `300 → 24` for two runs; `a  |  b  |  c` for more.
fn side_by_side(values: &[Value]) -> String {
    let shown: Vec<String> = values.iter().map(show).collect();
    if shown.len() == 2 {
        format!("{} → {}", shown[0], shown[1])
    } else {
        shown.join("  |  ")
    }
}

/// Metric keys, config values, paths: user-derived, so control characters
/// are escaped before they reach a terminal (issue #40).
fn esc(text: &str) -> String {
    crate::output::escape_control(text).into_owned()
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => esc(s),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
