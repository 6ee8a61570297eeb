//! Checkpoint directories shared by every experiment's loop:
//! `checkpoints/step-NNNNNNNN/` holding `model.safetensors` plus whatever
//! state the loop needs, and `checkpoints/latest` naming the newest complete
//! one. Each file is written atomically and the pointer moves only once the
//! whole directory is on disk, so a crash never leaves a half checkpoint
//! behind `latest`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use burn::module::Module;
use burn::prelude::Backend;

use super::{params, safetensors_io};
use crate::error::UserError;
use crate::fsutil::write_atomic;

/// The checkpoint root inside a run directory.
pub const CHECKPOINTS: &str = "checkpoints";

/// Create (if needed) and return the directory of the checkpoint at `step`.
pub fn step_dir(root: &Path, step: u64) -> anyhow::Result<PathBuf> {
    let dir = root.join(format!("step-{step:08}"));
    crate::fsutil::create_dir_all(&dir)?;
    Ok(dir)
}

/// Point `latest` at `dir` (a complete checkpoint) and delete older ones.
pub fn publish(root: &Path, dir: &Path) -> anyhow::Result<()> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_atomic(&root.join("latest"), format!("{name}\n").as_bytes())?;
    let entries = std::fs::read_dir(root).with_context(|| format!("reading {}", root.display()))?;
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if entry_name.starts_with("step-") && entry_name != name {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(())
}

/// The directory `latest` points at; a usage error when there is none, or
/// when `latest` names anything but a `step-N` directory beside it (a run
/// directory may come from someone else: `../../etc` must not be read).
pub fn latest(root: &Path) -> anyhow::Result<PathBuf> {
    let file = root.join("latest");
    let latest = std::fs::read_to_string(&file).map_err(|e| {
        UserError::usage(format!(
            "{}: no checkpoint to resume from ({e})",
            root.display()
        ))
        .with_fix("resume a run directory that has checkpoints/latest")
    })?;
    let name = latest.trim();
    let digits = name.strip_prefix("step-").unwrap_or("");
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(UserError::usage(format!(
            "{}: {name:?} is not a checkpoint name (step-N)",
            file.display()
        ))
        .with_fix("restore the `latest` file envgen wrote, or start a new run")
        .into());
    }
    Ok(root.join(name))
}

/// Write every float parameter of `module` (by path) to a safetensors file.
pub fn save_weights<B: Backend, M: Module<B>>(path: &Path, module: &M) -> anyhow::Result<()> {
    let weights: Vec<_> = params::collect::<B, M>(module, true)
        .into_iter()
        .map(|p| (p.name, p.shape, p.values))
        .collect();
    write_atomic(path, &safetensors_io::to_bytes(&weights)?)
}

/// Replace every float parameter of `module` with the tensor of the same
/// path in `path` (parameter ids are kept).
pub fn load_weights<B: Backend, M: Module<B>>(path: &Path, module: M) -> anyhow::Result<M> {
    let weights = safetensors_io::read(path)?;
    let origin = path.display().to_string();
    params::replace::<B, M>(module, &origin, &|name| weights.get(name).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_names_only_a_step_directory_beside_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = step_dir(root.path(), 12).unwrap();
        publish(root.path(), &dir).unwrap();
        assert_eq!(latest(root.path()).unwrap(), dir);
        for planted in ["../../../../etc", "/etc", "step-1/../../x", "step-", ""] {
            std::fs::write(root.path().join("latest"), planted).unwrap();
            let err = latest(root.path()).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{planted:?}");
        }
    }
}
