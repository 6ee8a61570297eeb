//! Legend labels: what differs between the runs (`optim.lr=0.003
//! precision=bf16`), read from `runs compare`'s science and hardware
//! differences among runs of one experiment, else the run's preset and
//! short id.

use serde_json::Value;

use crate::runs::compare::{compare, DifferenceKind};
use crate::runs::store::RunDir;

/// The most differing keys a label names (the rest are in the tables).
const MOST_KEYS: usize = 3;

/// Each run's legend label: the science and hardware keys whose values
/// differ between runs of its experiment, as `key=value` (hardware knobs
/// without their `profile.` prefix); the experiment first when the report
/// has several; the run's preset and short id ([`run_labels`]) when
/// nothing differs or two labels would be the same.
pub fn legend_labels(runs: &[RunDir]) -> Vec<String> {
    let ids = run_labels(runs);
    let mut experiments: Vec<&str> = runs
        .iter()
        .map(|r| r.manifest.experiment.as_str())
        .collect();
    experiments.sort();
    experiments.dedup();
    let mut labels: Vec<String> = vec![String::new(); runs.len()];
    for experiment in &experiments {
        let members: Vec<usize> = (0..runs.len())
            .filter(|&i| runs[i].manifest.experiment == *experiment)
            .collect();
        let group: Vec<RunDir> = members.iter().map(|&i| runs[i].clone()).collect();
        let mut keys = Vec::new();
        if group.len() > 1 {
            keys = compare(&group)
                .differences
                .into_iter()
                .filter(|d| d.kind != DifferenceKind::Environment)
                .take(MOST_KEYS)
                .collect();
        }
        for (at, &i) in members.iter().enumerate() {
            let mut parts: Vec<String> = Vec::new();
            if experiments.len() > 1 {
                parts.push(experiment.to_string());
            }
            for d in &keys {
                let field = d.field.strip_prefix("profile.").unwrap_or(&d.field);
                parts.push(format!("{field}={}", value_text(&d.values[at])));
            }
            labels[i] = if keys.is_empty() {
                // A run without a preset is already named by its experiment.
                match experiments.len() {
                    1 => ids[i].clone(),
                    _ if ids[i].starts_with(&format!("{experiment} ")) => ids[i].clone(),
                    _ => format!("{experiment} {}", ids[i]),
                }
            } else {
                parts.join(" ")
            };
        }
    }
    let shared =
        |labels: &[String], i: usize| labels.iter().filter(|l| **l == labels[i]).count() > 1;
    let clash: Vec<bool> = (0..labels.len()).map(|i| shared(&labels, i)).collect();
    for (i, label) in labels.iter_mut().enumerate() {
        if clash[i] {
            *label = format!("{label} {}", ids[i]);
        }
    }
    labels
}

/// A config value, short: strings unquoted, at most 16 characters.
fn value_text(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    match text.char_indices().nth(16) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
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
