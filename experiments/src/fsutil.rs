//! File-writing helpers shared by the engine, the experiments and the
//! envgen binary.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;

/// Write `bytes` to `path` so a reader never sees a partial file: temp file
/// in the same directory, fsync, rename, fsync the directory. A failure
/// (a full disk, a read-only directory, a directory in the way) names
/// `path` (`crate::error::io_class` gives the exit code and fix), leaves
/// what was at `path` as it was and removes the temp file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if let Err(err) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(err).with_context(|| format!("writing {}", path.display()));
    }
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// `std::fs::create_dir_all` whose error names the directory (a file in
/// the way, a full disk or a read-only parent get their exit code and fix
/// from `crate::error::io_class`).
pub fn create_dir_all(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_names_the_path_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file must go: the rename fails (EISDIR).
        let path = dir.path().join("summary.json");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "kept").unwrap();
        let err = write_atomic(&path, b"new").unwrap_err();
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err:#}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2, "{err:#}");
        assert_eq!(
            std::fs::read_to_string(path.join("inside")).unwrap(),
            "kept"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("summary.json")]);
    }

    #[test]
    fn a_file_where_the_directory_must_be_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("checkpoints"), "a file").unwrap();
        let path = dir.path().join("checkpoints/latest");
        let err = write_atomic(&path, b"step-2").unwrap_err();
        assert!(err.to_string().contains("checkpoints"), "{err:#}");
        assert_eq!(crate::error::exit_code_of(&err), 2, "{err:#}");
    }
}
