//! `envgen experiments list | describe`

use envgen_experiments::engine;
use envgen_experiments::gpt2;
use serde_json::json;

use super::run::{check_experiment, resolve_config};
use crate::error::Result;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the bundled experiments and their presets.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show an experiment's resolved science config, its hash and parameter count.
    Describe {
        experiment: String,
        #[arg(long)]
        preset: Option<String>,
        /// Override one config key (as `envgen run --set`); repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
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
    let presets: Vec<&str> = gpt2::PRESETS.iter().map(|(n, _)| *n).collect();
    let doc = json!({ "experiments": [
        { "name": "gpt2", "available": true, "default_preset": gpt2::DEFAULT_PRESET, "presets": presets,
          "description": "GPT-2 (nanoGPT-style) language model: tiny CPU run up to the 124M reproduction" },
        { "name": "hrm-sudoku", "available": false, "presets": [], "description": "HRM on Sudoku-Extreme (not in this build yet)" },
        { "name": "rft", "available": false, "presets": [], "description": "reinforcement fine-tuning (not in this build yet)" },
        { "name": "quantize", "available": false, "presets": [], "description": "post-training quantization (not in this build yet)" },
    ]});
    if as_json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for exp in doc["experiments"].as_array().into_iter().flatten() {
            let presets: Vec<String> = exp["presets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(String::from))
                .collect();
            println!(
                "{:<11} {} {}",
                exp["name"].as_str().unwrap_or(""),
                if presets.is_empty() {
                    "(not yet)".to_string()
                } else {
                    format!("presets: {}", presets.join(", "))
                },
                exp["description"].as_str().unwrap_or("")
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
    check_experiment(experiment)?;
    let (preset, loaded) = resolve_config(preset, None, overrides)?;
    let doc = json!({
        "experiment": experiment,
        "preset": preset,
        "config": loaded.science,
        "config_hash": engine::config_hash(&loaded.science)?,
        "parameters": loaded.science.model.num_params(),
        "hardware": loaded.hardware,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("# {experiment} preset {}", preset.as_deref().unwrap_or("-"));
        println!(
            "# config_hash {}",
            doc["config_hash"].as_str().unwrap_or("")
        );
        println!("# parameters {}", loaded.science.model.num_params());
        print!("{}", engine::config::to_canonical_toml(&loaded.science)?);
    }
    Ok(0)
}
