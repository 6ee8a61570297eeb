//! The data files a run's science config names, checked before anything
//! is made (by a run, `--dry-run` and `envgen tune`).

use std::path::Path;

use envgen_experiments::data::{DataConfig, DataSource};

use crate::error::{Result, UserError};

/// The files a config names must be there (a real run opens them before its
/// first step): `[data]` with a source other than `generated` needs `path`,
/// every `path`, `val_path` and `init_from` given must exist, and the data
/// files must pass the run's checks short of their tokens
/// (`data::check::check_files`: shards matched, headers and sizes). Called
/// by `plan::plan_run`, so a run refused here leaves no
/// run directory, and by `--dry-run`.
pub fn check_data_files(science: &toml::Value) -> Result<()> {
    if let Some(table) = science.get("data") {
        if let Ok(data) = table.clone().try_into::<DataConfig>() {
            if data.source != DataSource::Generated && data.path.is_none() {
                let source = table.get("source").and_then(|s| s.as_str()).unwrap_or("?");
                return Err(UserError::usage(format!(
                    "[data].path is missing; source = \"{source}\" needs it"
                ))
                .with_fix("--set data.path=FILE_OR_DIR, or --set data.source=generated to train on envgen's generated corpus")
                .into());
            }
            for (key, path) in [("data.path", &data.path), ("data.val_path", &data.val_path)] {
                if let Some(path) = path {
                    must_exist(key, path)?;
                }
            }
            // The run's own matching and header checks (shards of the
            // configured format, sizes that agree), short of the tokens.
            envgen_experiments::data::check::check_files(&data)?;
        }
    }
    if let Some(path) = science.get("init_from").and_then(|p| p.as_str()) {
        must_exist("init_from", Path::new(path))?;
    }
    Ok(())
}

fn must_exist(key: &str, path: &Path) -> Result<()> {
    // llm.c shard sources may be globs: their directory must exist.
    let text = path.to_string_lossy();
    let checked = if text.contains(['*', '?', '[']) {
        path.parent().unwrap_or(Path::new("."))
    } else {
        path
    };
    if checked.as_os_str().is_empty() || checked.exists() {
        return Ok(());
    }
    Err(
        UserError::usage(format!("{key} = {} does not exist", path.display()))
            .with_fix(format!("--set {key}=<an existing file or directory>"))
            .into(),
    )
}
