//! What an experiment is, as the CLI sees it: the [`Experiment`] trait (and
//! [`TypedExperiment`], which experiments implement), resolved configs and
//! summary helpers. The lowest floor: experiments build on it, and
//! [`crate::registry`] lists them on top of it.
//!
//! The CLI owns everything around a run (the run directory, the manifest,
//! hardware profiles, where it runs); an experiment owns its science config
//! and its training. The two meet here, through experiment-agnostic values:
//! a science config travels as a canonical TOML value, so `config.toml`,
//! `config_hash` and `--set` work the same for every experiment.

use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};

use crate::backend;
use crate::engine::{self, HardwareHint, RunControl, Summary};
use crate::error::UserError;

/// A science config resolved from a preset or file plus `--set` overrides.
#[derive(Debug, Clone)]
pub struct ResolvedConfig {
    /// The preset it came from (None for `--config FILE`).
    pub preset: Option<String>,
    /// The typed config serialized back, every default filled in: what
    /// `config.toml` holds and `config_hash` hashes.
    pub science: toml::Value,
    /// Global batch in rows per optimizer step (micro-batch × accumulation).
    pub batch_size: usize,
    /// The preset's hardware hint (never part of the science).
    pub hardware: HardwareHint,
    /// Trainable parameters, when the experiment has a model.
    pub parameters: Option<u64>,
}

impl ResolvedConfig {
    /// `sha256:<hex>` of the science, its data files identified by
    /// content, not by path (`data::identity`, issue #39): the same shards
    /// in two places hash alike.
    pub fn config_hash(&self) -> anyhow::Result<String> {
        engine::config_hash(&crate::data::identity::science_for_hash(&self.science)?)
    }
    /// The hash as runs from before issue #39 recorded it: over the science
    /// with its data paths as written. Equal to [`config_hash`](Self::config_hash)
    /// for configs without data files (generated data, most runs).
    pub fn config_hash_by_path(&self) -> anyhow::Result<String> {
        engine::config_hash(&self.science)
    }
    pub fn canonical_toml(&self) -> anyhow::Result<String> {
        engine::config::to_canonical_toml(&self.science)
    }
}

/// One bundled experiment, as the CLI sees it (config as a TOML value).
/// Experiments implement [`TypedExperiment`]; the blanket impl below turns
/// each into an `Experiment`.
pub trait Experiment: Sync {
    /// The name on the command line.
    fn name(&self) -> &'static str;
    /// One line for `envgen experiments list`.
    fn description(&self) -> &'static str;
    /// Bundled presets: (name, TOML text). The first is not necessarily the default.
    fn presets(&self) -> &'static [(&'static str, &'static str)];
    fn default_preset(&self) -> &'static str;
    /// See [`ExperimentInfo::headline_metric`].
    fn headline_metric(&self) -> &'static str;
    /// Parse and validate a config text (from `origin`: a file name or
    /// `preset NAME`) with overrides. Errors are [`UserError`]s (exit 2).
    fn resolve(
        &self,
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> anyhow::Result<ResolvedConfig>;
    /// Run natively in `control.run_dir` (which already holds config.toml
    /// and manifest.json) and return the summary to write.
    fn run(
        &self,
        science: &toml::Value,
        control: &RunControl,
        backend: backend::Resolved,
    ) -> anyhow::Result<Summary>;
    /// The human line printed after a run.
    fn summary_line(&self, summary: &Summary) -> String;
    /// Whether `run` trains data-parallel when `control.world` is set
    /// (one rank per process, engine::distributed).
    fn data_parallel(&self) -> bool;
}

/// What identifies an experiment: its name, its one-line description and
/// its bundled presets (name, TOML text).
pub struct ExperimentInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub presets: &'static [(&'static str, &'static str)],
    pub default_preset: &'static str,
    /// The `summary.json` metric that says how a run went, in one number
    /// (`runs list`'s "final metric" column).
    pub headline_metric: &'static str,
}

/// An experiment with a typed science config. Everything that only moves
/// the config between TOML values and its type lives in the blanket
/// [`Experiment`] impl, once.
pub trait TypedExperiment: Sync {
    type Config: Serialize + DeserializeOwned;
    const INFO: ExperimentInfo;
    /// Checks beyond the schema (usage errors naming the key, exit 2);
    /// `origin` names the file or preset in messages.
    fn validate(&self, config: &Self::Config, origin: &str) -> anyhow::Result<()>;
    /// Rows per optimizer step: micro-batch × accumulation must equal it.
    fn batch_size(&self, config: &Self::Config) -> usize;
    /// Trainable parameters, when the experiment has a model.
    fn parameters(&self, config: &Self::Config) -> Option<u64>;
    fn run_typed(
        &self,
        config: &Self::Config,
        control: &RunControl,
        backend: backend::Resolved,
    ) -> anyhow::Result<Summary>;
    fn line(&self, summary: &Summary) -> String;
    /// See [`Experiment::data_parallel`]: experiments whose training is
    /// [`engine::train`] alone say yes.
    fn data_parallel(&self) -> bool {
        false
    }
}

impl<T: TypedExperiment> Experiment for T {
    fn name(&self) -> &'static str {
        T::INFO.name
    }
    fn description(&self) -> &'static str {
        T::INFO.description
    }
    fn presets(&self) -> &'static [(&'static str, &'static str)] {
        T::INFO.presets
    }
    fn default_preset(&self) -> &'static str {
        T::INFO.default_preset
    }
    fn headline_metric(&self) -> &'static str {
        T::INFO.headline_metric
    }
    fn resolve(
        &self,
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> anyhow::Result<ResolvedConfig> {
        let loaded = engine::load::<T::Config>(text, origin, overrides)?;
        self.validate(&loaded.science, origin)?;
        Ok(ResolvedConfig {
            preset: None,
            science: canonical(&loaded.science)?,
            batch_size: self.batch_size(&loaded.science),
            hardware: loaded.hardware,
            parameters: self.parameters(&loaded.science),
        })
    }
    fn run(
        &self,
        science: &toml::Value,
        control: &RunControl,
        backend: backend::Resolved,
    ) -> anyhow::Result<Summary> {
        let config: T::Config = typed(science, "config.toml")?;
        self.run_typed(&config, control, backend)
    }
    fn summary_line(&self, summary: &Summary) -> String {
        self.line(summary)
    }
    fn data_parallel(&self) -> bool {
        TypedExperiment::data_parallel(self)
    }
}

impl dyn Experiment + '_ {
    /// The text of preset `name`, or a usage error listing the presets.
    pub fn preset_text(&self, name: &str) -> anyhow::Result<&'static str> {
        self.presets()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| *text)
            .ok_or_else(|| {
                let names: Vec<&str> = self.presets().iter().map(|(n, _)| *n).collect();
                UserError::usage(format!("{} has no preset `{name}`", self.name()))
                    .with_fix(format!("pick one of: {}", names.join(", ")))
                    .into()
            })
    }

    /// Resolve a preset (default when None) with overrides.
    pub fn resolve_preset(
        &self,
        preset: Option<&str>,
        overrides: &[String],
    ) -> anyhow::Result<ResolvedConfig> {
        let name = preset.unwrap_or(self.default_preset());
        let text = self.preset_text(name)?;
        let mut resolved = self.resolve(text, &format!("preset {name}"), overrides)?;
        resolved.preset = Some(name.to_string());
        Ok(resolved)
    }
}

/// The typed config behind a canonical TOML value (as written to config.toml).
pub fn typed<T: DeserializeOwned>(science: &toml::Value, origin: &str) -> anyhow::Result<T> {
    science.clone().try_into().map_err(|e| {
        UserError::usage(format!("{origin}: {e}"))
            .with_fix("restore the config.toml that `envgen run` wrote")
            .into()
    })
}

/// Helper for experiments whose config deserializes through [`engine::load`]:
/// the canonical value of a typed config.
pub fn canonical<T: Serialize>(science: &T) -> anyhow::Result<toml::Value> {
    Ok(toml::Value::try_from(science)?)
}

/// A summary for a run that failed before producing one.
pub fn failed_summary(err: &anyhow::Error) -> Summary {
    Summary {
        status: engine::Status::Failed,
        wall_s: 0.0,
        steps_done: 0,
        metrics: Map::from_iter([("error".to_string(), Value::String(err.to_string()))]),
    }
}

/// A number from a summary's metrics for a human line ("-" when absent).
pub fn fmt_metric(v: Option<&Value>) -> String {
    v.and_then(Value::as_f64)
        .map_or("-".into(), |x| format!("{x:.4}"))
}
