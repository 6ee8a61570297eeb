//! `envgen runs pack`: a run's small files — manifest, config, summary,
//! metrics, logs, TensorBoard events, the diff it ran with — copied into a
//! folder of the user's to commit to git (issue #39), since the runs folder
//! itself is git-ignored (`out_dir`). Checkpoints and weights are what
//! makes a run directory gigabytes, and what a repository must not hold.
//!
//! Only regular files are copied (a link in a run directory is not
//! followed); the packed folder appears whole or not at all (built under a
//! temporary name beside it, then renamed into place, replacing an older
//! pack of the same run).

use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, Result, UserError};

/// Folders of a run directory that hold training state, not results.
const SKIPPED_DIRS: &[&str] = &["checkpoints"];
/// File extensions of model weights and token data.
const WEIGHT_EXTENSIONS: &[&str] = &["safetensors", "bin", "pt", "pth", "ckpt", "envq", "npy"];

/// One skipped file or folder and its size.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub path: PathBuf,
    pub bytes: u64,
    pub why: &'static str,
}

/// What packing one run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub dest: PathBuf,
    pub files: usize,
    pub bytes: u64,
    pub skipped: Vec<Skipped>,
}

/// Copy `run`'s small files into `to/<run id>/`: files up to `max_file_bytes`,
/// never checkpoints, weights or links.
pub fn pack(run: &Path, to: &Path, max_file_bytes: u64) -> Result<Packed> {
    let id = run
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| UserError::usage(format!("{} is not a run directory", run.display())))?;
    if let (Ok(run_abs), Ok(to_abs)) = (run.canonicalize(), absolute_parent(to)) {
        if to_abs.starts_with(&run_abs) {
            return Err(UserError::usage(format!(
                "--to {} is inside the run directory {}",
                to.display(),
                run.display()
            ))
            .with_fix("pack into a folder outside the run, e.g. --to results")
            .into());
        }
    }
    std::fs::create_dir_all(to).map_err(|e| cannot_write(to, &e))?;
    let dest = to.join(&id);
    let building = to.join(format!(".{id}.packing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let mut packed = Packed {
        dest: dest.clone(),
        files: 0,
        bytes: 0,
        skipped: Vec::new(),
    };
    let copied = copy_small(run, Path::new(""), &building, max_file_bytes, &mut packed);
    if let Err(err) = copied {
        let _ = std::fs::remove_dir_all(&building);
        return Err(err);
    }
    // Replace an older pack of the same run only once the new one is whole.
    let old = to.join(format!(".{id}.replaced-{}", std::process::id()));
    let had_old = dest.exists();
    if had_old {
        std::fs::rename(&dest, &old).map_err(|e| cannot_write(&dest, &e))?;
    }
    if let Err(e) = std::fs::rename(&building, &dest) {
        if had_old {
            let _ = std::fs::rename(&old, &dest);
        }
        let _ = std::fs::remove_dir_all(&building);
        return Err(cannot_write(&dest, &e));
    }
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(packed)
}

/// The absolute form of `path`'s nearest existing ancestor joined with the
/// rest (`to` usually does not exist yet).
fn absolute_parent(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name().unwrap_or_default().to_owned());
        existing = existing.parent().unwrap_or(Path::new("/"));
    }
    let mut resolved = existing.canonicalize()?;
    resolved.extend(rest.iter().rev());
    Ok(resolved)
}

/// Copy the small regular files of `root/rel` into `dest/rel`, recursively.
fn copy_small(root: &Path, rel: &Path, dest: &Path, max: u64, packed: &mut Packed) -> Result<()> {
    let here = root.join(rel);
    std::fs::create_dir_all(dest.join(rel)).map_err(|e| cannot_write(&dest.join(rel), &e))?;
    let mut entries: Vec<_> = std::fs::read_dir(&here)
        .map_err(|e| cannot_read(&here, &e))?
        .filter_map(|e| e.ok())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = rel.join(entry.file_name());
        // symlink_metadata: a link is never followed out of the run.
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let skip = |why, bytes| Skipped {
            path: name.clone(),
            bytes,
            why,
        };
        if meta.is_dir() {
            if SKIPPED_DIRS.iter().any(|d| name == Path::new(d)) {
                packed
                    .skipped
                    .push(skip("training state", tree_bytes(&entry.path())));
            } else {
                copy_small(root, &name, dest, max, packed)?;
            }
        } else if !meta.is_file() {
            packed.skipped.push(skip("not a regular file", 0));
        } else if is_weights(&name) {
            packed.skipped.push(skip("weights", meta.len()));
        } else if meta.len() > max {
            packed
                .skipped
                .push(skip("over --max-file-size", meta.len()));
        } else {
            std::fs::copy(entry.path(), dest.join(&name))
                .map_err(|e| cannot_write(&dest.join(&name), &e))?;
            packed.files += 1;
            packed.bytes += meta.len();
        }
    }
    Ok(())
}

fn is_weights(name: &Path) -> bool {
    name.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| WEIGHT_EXTENSIONS.contains(&e))
}

/// Bytes of the regular files under `dir` (links not followed).
fn tree_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| match e.path().symlink_metadata() {
            Ok(m) if m.is_dir() => tree_bytes(&e.path()),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

fn cannot_write(path: &Path, e: &std::io::Error) -> anyhow::Error {
    UserError::from_io(
        format!("cannot write {}", path.display()),
        e,
        (
            ErrorKind::Environment,
            "pack into a writable folder with --to",
        ),
    )
    .into()
}

fn cannot_read(path: &Path, e: &std::io::Error) -> anyhow::Error {
    UserError::from_io(
        format!("cannot read {}", path.display()),
        e,
        (ErrorKind::Usage, "give a run directory you can read"),
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run directory as training leaves it: results, a checkpoint, final
    /// weights, a big log, and a link out of the run.
    fn run_dir(root: &Path) -> PathBuf {
        let run = root.join("runs/gpt2-tiny-abc");
        for dir in ["checkpoints/step-00000010", "tb"] {
            std::fs::create_dir_all(run.join(dir)).unwrap();
        }
        for (name, bytes) in [
            ("manifest.json", 300),
            ("config.toml", 200),
            ("summary.json", 100),
            ("metrics.jsonl", 5_000),
            ("tb/events.out.tfevents.1", 2_000),
            ("checkpoints/step-00000010/model.safetensors", 40_000),
            ("model.safetensors", 40_000),
            ("train.log", 20_000),
        ] {
            std::fs::write(run.join(name), vec![b'x'; bytes]).unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", run.join("notes.txt")).unwrap();
        run
    }

    #[test]
    fn only_small_regular_files_are_packed_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let run = run_dir(tmp.path());
        let to = tmp.path().join("results");
        let packed = pack(&run, &to, 10_000).unwrap();
        let dest = to.join("gpt2-tiny-abc");
        assert_eq!(packed.dest, dest);
        let mut files: Vec<String> = walk(&dest);
        files.sort();
        assert_eq!(
            files,
            [
                "config.toml",
                "manifest.json",
                "metrics.jsonl",
                "summary.json",
                "tb/events.out.tfevents.1"
            ]
        );
        assert_eq!((packed.files, packed.bytes), (5, 7_600));
        let skipped: Vec<(String, u64, &str)> = packed
            .skipped
            .iter()
            .map(|s| (s.path.display().to_string(), s.bytes, s.why))
            .collect();
        assert_eq!(
            skipped,
            [
                ("checkpoints".into(), 40_000, "training state"),
                ("model.safetensors".into(), 40_000, "weights"),
                ("notes.txt".into(), 0, "not a regular file"),
                ("train.log".into(), 20_000, "over --max-file-size"),
            ]
        );

        // Packing again replaces the old pack, leaving no temporary folder.
        std::fs::write(run.join("summary.json"), "{}").unwrap();
        pack(&run, &to, 10_000).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("summary.json")).unwrap(),
            "{}"
        );
        let names: Vec<_> = std::fs::read_dir(&to)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["gpt2-tiny-abc"]);

        // Into the run itself: refused.
        let err = pack(&run, &run.join("packed"), 10_000).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2, "{err:#}");
    }

    fn walk(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                let sub = p.file_name().unwrap().to_string_lossy().into_owned();
                out.extend(walk(&p).into_iter().map(|f| format!("{sub}/{f}")));
            } else {
                out.push(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        out
    }
}
