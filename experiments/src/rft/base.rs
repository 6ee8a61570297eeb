//! The base checkpoint a pretrained run starts from (`stages/base.json`):
//! where it came from and its fingerprint, so that a resumed run refuses a
//! directory whose content changed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::pretrained;
use crate::engine::rundir::{read_json, write_json};
use crate::error::UserError;

/// Where the base checkpoint came from (`stages/base.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BaseRecord {
    pub init: String,
    pub dir: PathBuf,
    /// [`pretrained::fingerprint`] of the directory.
    pub sha256: String,
}

/// Fingerprints the checkpoint in `dir` (`model.init = init`) into
/// `stages/base.json`; a resumed run refuses a directory whose content
/// changed since the run started.
pub(crate) fn record_base(init: &str, dir: &Path, stages: &Path) -> anyhow::Result<BaseRecord> {
    let sha256 = pretrained::fingerprint(dir)?;
    let path = stages.join("base.json");
    if let Ok(earlier) = read_json::<BaseRecord>(&path) {
        if earlier.sha256 != sha256 {
            return Err(UserError::usage(format!(
                "model.init: {} changed since this run started (sha256 {} then, {sha256} now)",
                dir.display(),
                earlier.sha256
            ))
            .with_fix("restore the checkpoint the run started from, or start a new run")
            .into());
        }
    }
    let record = BaseRecord {
        init: init.to_string(),
        dir: dir.to_path_buf(),
        sha256,
    };
    write_json(&path, &record)?;
    Ok(record)
}
