//! `envgen experiments list | describe`

use envgen_experiments::registry;
use serde_json::json;

use super::run::find_experiment;
use crate::error::Result;
use crate::launch::plan::resolve_config;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the bundled experiments and their presets.
    List {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show an experiment's resolved science config, its hash and parameter count.
    Describe {
        /// The experiment, e.g. gpt2 (`envgen experiments list`).
        experiment: String,
        /// The preset to describe (default: the experiment's default preset).
        #[arg(long)]
        preset: Option<String>,
        /// Override one config key (as `envgen run --set`); repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::List { json } => list(json),
        Command::Describe {
            experiment,
            preset,
            overrides,
            json,
        } => describe(&experiment, preset.as_deref(), &overrides, json),
    }
}

fn list(as_json: bool) -> Result<i32> {
    let experiments: Vec<serde_json::Value> = registry::all()
        .iter()
        .map(|e| {
            let presets: Vec<&str> = e.presets().iter().map(|(n, _)| *n).collect();
            json!({ "name": e.name(), "available": true, "default_preset": e.default_preset(),
                    "presets": presets, "description": e.description() })
        })
        .collect();
    if as_json {
        crate::output::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({ "experiments": experiments }))?
        );
    } else {
        for e in registry::all() {
            let presets: Vec<&str> = e.presets().iter().map(|(n, _)| *n).collect();
            crate::output::outln!(
                "{:<11} presets: {} (default {}) — {}",
                e.name(),
                presets.join(", "),
                e.default_preset(),
                e.description()
            );
        }
    }
    Ok(0)
}

fn describe(
    experiment: &str,
    preset: Option<&str>,
    overrides: &[String],
    as_json: bool,
) -> Result<i32> {
    let experiment = find_experiment(experiment)?;
    // Describing is not training: a preset too big for this machine is
    // still described (its run is refused where it would train).
    envgen_experiments::engine::budget::trains_elsewhere();
    let loaded = resolve_config(experiment, preset, None, overrides)?;
    let doc = json!({
        "experiment": experiment.name(),
        "preset": loaded.preset,
        "config": loaded.science,
        "config_hash": loaded.config_hash()?,
        "parameters": loaded.parameters,
        "hardware": loaded.hardware,
    });
    if as_json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        crate::output::outln!(
            "# {} preset {}",
            experiment.name(),
            loaded.preset.as_deref().unwrap_or("-")
        );
        crate::output::outln!(
            "# config_hash {}",
            doc["config_hash"].as_str().unwrap_or("")
        );
        if let Some(n) = loaded.parameters {
            crate::output::outln!("# parameters {n}");
        }
        crate::output::out!("{}", loaded.canonical_toml()?);
    }
    Ok(0)
}
