//! File helpers shared by the engine, the experiments and the envgen
//! binary: atomic writes, and the one rule for reading files from a user
//! directory (a checkpoint, a containers directory; issue #40).

use std::fs::File;
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::error::UserError;

/// Size bounds of the files read whole from a user directory, checked
/// before a byte is read, so a 100 GB "config.json" is refused rather than
/// read into memory. Each is far above what real checkpoints ship.
pub mod limit {
    /// config.json, generation_config.json, tokenizer_config.json, the
    /// shard index, special_tokens_map.json (SmolLM2's are a few KB, a
    /// Llama 3 index 25 KB).
    pub const JSON: u64 = 64 << 20;
    /// tokenizer.json (Llama 3's is 9 MB, Gemma's 34 MB).
    pub const TOKENIZER: u64 = 512 << 20;
    /// A chat template or a requirements file.
    pub const TEXT: u64 = 8 << 20;
    /// Weights: memory-mapped or copied, never read whole; the memory
    /// check bounds what the shapes allocate.
    pub const WEIGHTS: u64 = u64::MAX;
}

/// The one rule for a file envgen reads from a directory the user names
/// (issue #40, docs/models.md "Which files are read"): `path` must resolve
/// to a regular file inside `dir`, or inside the Hugging Face cache's
/// `blobs/` when `dir` is a cache snapshot (whose files are symlinks
/// there); FIFOs, devices, sockets and directories are refused without
/// being opened; a file over `max_bytes` is refused before it is read.
/// Returns the resolved path. Refusals are usage errors (exit 2) naming the
/// file and never quoting its content.
pub fn user_file(dir: &Path, path: &Path, max_bytes: u64) -> anyhow::Result<PathBuf> {
    let real = path.canonicalize().map_err(|e| {
        UserError::usage(format!("cannot read {}: {e}", path.display())).with_fix(format!(
            "put the file in {} (or fix its name)",
            dir.display()
        ))
    })?;
    if !roots_of(dir).iter().any(|root| real.starts_with(root)) {
        return Err(UserError::usage(format!(
            "{} is a link to {}, outside {}",
            path.display(),
            real.display(),
            dir.display()
        ))
        .with_fix("copy the file itself into the directory: envgen reads only files inside it (or inside the Hugging Face cache it is a snapshot of)")
        .into());
    }
    // stat, not open: opening a FIFO would block until a writer comes.
    let meta = std::fs::metadata(&real)
        .map_err(|e| UserError::usage(format!("cannot read {}: {e}", path.display())))?;
    check_kind(path, &meta, max_bytes)?;
    Ok(real)
}

fn check_kind(path: &Path, meta: &std::fs::Metadata, max_bytes: u64) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("a device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    };
    if let Some(what) = what {
        return Err(
            UserError::usage(format!("{} is {what}, not a regular file", path.display()))
                .with_fix("give a regular file")
                .into(),
        );
    }
    if meta.len() > max_bytes {
        return Err(UserError::usage(format!(
            "{} is {} bytes, more than the {max_bytes} such a file may have",
            path.display(),
            meta.len()
        ))
        .with_fix("give the file the checkpoint was published with")
        .into());
    }
    Ok(())
}

/// The directories a file named inside `dir` may resolve into: `dir`, and
/// for a Hugging Face cache snapshot (`…/models--ORG--NAME/snapshots/REV`)
/// that repository's `blobs/`.
fn roots_of(dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    let mut roots = vec![dir.clone()];
    if let Some(snapshots) = dir.parent().filter(|p| p.ends_with("snapshots")) {
        if let Some(repo) = snapshots.parent() {
            roots.push(repo.join("blobs"));
        }
    }
    roots
}

/// [`user_file`], opened. The open itself does not follow a link or block
/// (a file swapped for a FIFO between the check and the open is refused).
pub fn open_user_file(dir: &Path, path: &Path, max_bytes: u64) -> anyhow::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let real = user_file(dir, path, max_bytes)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&real)
        .map_err(|e| UserError::usage(format!("cannot read {}: {e}", path.display())))?;
    check_kind(path, &file.metadata()?, max_bytes)?;
    Ok(file)
}

/// The bytes of a file in a user directory, by [`user_file`]'s rule.
pub fn read_user_file(dir: &Path, path: &Path, max_bytes: u64) -> anyhow::Result<Vec<u8>> {
    let file = open_user_file(dir, path, max_bytes)?;
    let mut bytes = Vec::new();
    // take: a file that grew after the check is still read no further.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| UserError::usage(format!("cannot read {}: {e}", path.display())))?;
    if bytes.len() as u64 > max_bytes {
        return Err(UserError::usage(format!(
            "{} grew past {max_bytes} bytes while it was read",
            path.display()
        ))
        .into());
    }
    Ok(bytes)
}

/// The text of a file in a user directory; not UTF-8 is refused naming the
/// file, without quoting it.
pub fn read_user_text(dir: &Path, path: &Path, max_bytes: u64) -> anyhow::Result<String> {
    String::from_utf8(read_user_file(dir, path, max_bytes)?).map_err(|e| {
        UserError::usage(format!(
            "{}: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
        .with_fix("give the UTF-8 file the checkpoint was published with")
        .into()
    })
}

/// Copy a file of a user directory to `to` (in a directory of ours): only
/// a regular file inside `dir`, by [`user_file`]'s rule, so a link to
/// /etc/shadow is refused rather than copied into a run directory.
pub fn copy_user_file(dir: &Path, from: &Path, to: &Path) -> anyhow::Result<()> {
    let mut source = open_user_file(dir, from, limit::WEIGHTS)?;
    let copied = (|| {
        let mut dest = File::create(to)?;
        std::io::copy(&mut source, &mut dest)?;
        dest.sync_all()
    })();
    copied.with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

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

    /// Every way out of a directory or into a blocking read, generated:
    /// each is refused with exit 2, naming the file, without its content.
    #[test]
    fn files_of_a_user_directory_are_regular_files_inside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ckpt");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let secret = tmp.path().join("shadow");
        std::fs::write(&secret, "root:SECRETHASH:19000").unwrap();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        std::fs::write(dir.join("sub/inner.json"), "{\"a\":1}").unwrap();
        std::os::unix::fs::symlink("sub/inner.json", dir.join("inside.json")).unwrap();
        std::os::unix::fs::symlink(&secret, dir.join("abs.json")).unwrap();
        std::os::unix::fs::symlink("../shadow", dir.join("rel.json")).unwrap();
        std::os::unix::fs::symlink("sub/../../shadow", dir.join("dots.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.json")).unwrap();
        std::os::unix::fs::symlink("loop.json", dir.join("loop.json")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), dir.join("up")).unwrap();
        let fifo = std::ffi::CString::new(dir.join("fifo.json").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::write(dir.join("big.json"), vec![b' '; 100]).unwrap();

        // Allowed: regular files, and links that stay inside.
        for name in ["config.json", "inside.json", "sub/inner.json"] {
            read_user_text(&dir, &dir.join(name), 64).unwrap();
        }
        let refused = [
            ("abs.json", "outside"),
            ("rel.json", "outside"),
            ("dots.json", "outside"),
            ("up/shadow", "outside"),
            ("zero.json", "outside"),
            ("loop.json", "cannot read"),
            ("fifo.json", "a FIFO"),
            ("sub", "a directory"),
            ("big.json", "100 bytes"),
            ("missing.json", "cannot read"),
        ];
        for (name, why) in refused {
            let path = dir.join(name);
            let mut errors = vec![read_user_text(&dir, &path, 64).unwrap_err()];
            // Copies are of weights too: bounded by nothing but the rule.
            if name != "big.json" {
                errors.push(copy_user_file(&dir, &path, &tmp.path().join("copy")).unwrap_err());
            }
            for err in errors {
                let text = format!("{err:#}");
                assert_eq!(crate::error::exit_code_of(&err), 2, "{name}: {text}");
                assert!(text.contains(why) && text.contains(name), "{name}: {text}");
                assert!(!text.contains("SECRETHASH"), "{name}: {text}");
            }
            assert!(!tmp.path().join("copy").exists(), "{name} was copied");
        }
        // Not UTF-8 is named, not quoted.
        std::fs::write(dir.join("bin.json"), b"ab\xffSECRETHASH").unwrap();
        let err = read_user_text(&dir, &dir.join("bin.json"), 64).unwrap_err();
        assert!(!format!("{err:#}").contains("SECRETHASH"), "{err:#}");
    }

    /// huggingface_hub's cache: a snapshot's files are links into the
    /// repository's blobs/, which is allowed; anything else is not.
    #[test]
    fn a_hub_cache_snapshot_may_link_into_its_blobs() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("models--org--m");
        let snap = repo.join("snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::write(repo.join("blobs/f00d"), "{}").unwrap();
        std::fs::write(repo.join("refs"), "secret").unwrap();
        std::os::unix::fs::symlink("../../blobs/f00d", snap.join("config.json")).unwrap();
        std::os::unix::fs::symlink("../../refs", snap.join("other.json")).unwrap();
        assert_eq!(
            read_user_text(&snap, &snap.join("config.json"), 64).unwrap(),
            "{}"
        );
        let err = read_user_text(&snap, &snap.join("other.json"), 64).unwrap_err();
        assert!(format!("{err:#}").contains("outside"), "{err:#}");
    }

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
