//! `envgen runs compare`: same science config? What differs in hardware
//! profile, image and host? How far apart are the final metrics?

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::store::RunDir;

/// Manifest sections whose differences explain why two runs differ.
const ENVIRONMENT_SECTIONS: &[&str] = &[
    "experiment",
    "preset",
    "profile",
    "where",
    "world_size",
    "distributed",
    "image",
    "data_files",
    "host",
    "envgen_version",
    "git_revision",
];

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

/// One manifest field (dotted path) whose value is not the same in every run.
#[derive(Debug, Serialize)]
pub struct Difference {
    pub field: String,
    pub values: Vec<Value>,
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

    let flat: Vec<BTreeMap<String, Value>> = runs
        .iter()
        .map(|run| {
            // The typed manifest, walked field by field (its JSON form).
            let manifest = serde_json::to_value(&run.manifest).unwrap_or_default();
            let mut fields = BTreeMap::new();
            for section in ENVIRONMENT_SECTIONS {
                flatten(section, &manifest[*section], &mut fields);
            }
            fields
        })
        .collect();
    let differences = differing(&flat)
        .into_iter()
        .map(|(field, values)| Difference { field, values })
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
        flatten("", &summary["metrics"], &mut fields);
        flatten("wall_s", &summary["wall_s"], &mut fields);
    }
    fields
        .into_iter()
        .filter_map(|(k, v)| v.as_f64().map(|x| (k, x)))
        .collect()
}

/// Dotted paths to leaves: `host.gpus.0.name` → "NVIDIA A30".
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| flatten(&join(k), v, out)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(&join(&i.to_string()), v, out)),
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
        out += &format!("[{i}] {}  {}  {}\n", run.run_id, run.status, run.path);
    }
    out += &if cmp.same_config {
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
        out += "environment: identical profile, image and host\n";
    } else {
        out += "\nwhat differs:\n";
        for diff in &cmp.differences {
            let values: Vec<String> = diff.values.iter().map(show).collect();
            out += &format!("  {:<40} {}\n", diff.field, values.join("  |  "));
        }
    }
    if !cmp.metrics.is_empty() {
        out += "\nfinal metrics (delta vs [0]):\n";
        for row in &cmp.metrics {
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
            out += &format!("  {:<28} {}{mark}\n", row.name, cells.join("  |  "));
        }
    }
    out
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(id: &str, hash: &str, gpu: &str, micro_batch: u64, loss: f64) -> RunDir {
        let mut manifest = crate::runs::manifest::example();
        manifest.run_id = id.into();
        manifest.config_hash = hash.into();
        manifest.started_at = id.into();
        manifest.profile.micro_batch = micro_batch as usize;
        manifest.environment.host = crate::host::Host {
            driver_version: Some("535.261.03".into()),
            gpus: vec![crate::host::Gpu {
                name: gpu.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        RunDir {
            path: format!("runs/{id}").into(),
            manifest,
            summary: Some(
                json!({"status": "completed", "wall_s": 10.0, "metrics": {"final_val_loss": loss, "tokens_per_s": 1000.0}}),
            ),
        }
    }

    #[test]
    fn flags_what_differs_between_two_machines() {
        let a = run("a", "sha256:1", "NVIDIA A30", 16, 2.5);
        let b = run("b", "sha256:1", "NVIDIA H100 80GB HBM3", 64, 2.5);
        let cmp = compare(&[a, b]);
        assert!(cmp.same_config);
        let fields: Vec<&str> = cmp.differences.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(
            fields,
            ["host.gpus.0.name", "profile.micro_batch"],
            "started_at and run_id are not differences"
        );
        let loss = cmp
            .metrics
            .iter()
            .find(|m| m.name == "final_val_loss")
            .unwrap();
        assert!(loss.identical);
        let text = render_text(&cmp);
        assert!(
            text.contains("same science config: yes") && text.contains("NVIDIA H100 80GB HBM3"),
            "{text}"
        );
    }

    #[test]
    fn different_science_configs_and_metric_deltas_are_reported() {
        let cmp = compare(&[
            run("a", "sha256:1", "g", 8, 2.0),
            run("b", "sha256:2", "g", 8, 2.5),
        ]);
        assert!(!cmp.same_config);
        let loss = cmp
            .metrics
            .iter()
            .find(|m| m.name == "final_val_loss")
            .unwrap();
        assert!(!loss.identical);
        assert!((loss.delta_pct[1].unwrap() - 25.0).abs() < 1e-9);
        assert!(render_text(&cmp).contains("NO (sha256:1 vs sha256:2)"));
    }
}
