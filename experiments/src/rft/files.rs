//! Files of a user's checkpoint directory that a run reads or copies, by
//! fsutil's rule for files of a user directory (issue #40): checked before
//! a run directory exists, copied without following a link out of it.
//! Both checkpoint families (`super::family::gpt2`, `super::family::llama_task`)
//! and the Llama checkpoint check (`super::pretrained`) use it.

use std::path::Path;

/// Copy each of `names` that `base` has into `to`, by fsutil's rule for
/// files of a user directory: a link out of `base` (`chat_template.jinja →
/// /etc/shadow`), a FIFO or a device is refused, never copied into the run
/// directory (issue #40). `exists`, not `is_file`, so such a file is
/// refused rather than skipped as absent.
pub(crate) fn copy_files(base: &Path, names: &[&str], to: &Path) -> anyhow::Result<()> {
    check_files(base, names)?;
    for name in names {
        let from = base.join(name);
        if from.exists() || from.is_symlink() {
            crate::fsutil::copy_user_file(base, &from, &to.join(name))?;
        }
    }
    Ok(())
}

/// Each of `names` that `base` has, by the same rule (a stat each, nothing
/// read): what [`copy_files`] would refuse, refused before a run directory
/// is made (issue #40).
pub(crate) fn check_files(base: &Path, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        let path = base.join(name);
        if path.exists() || path.is_symlink() {
            crate::fsutil::user_file(base, &path, crate::fsutil::limit::WEIGHTS)?;
        }
    }
    Ok(())
}
