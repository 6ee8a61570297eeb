//! The folder run directories are made in (`envgen run --out`, `runs/` by
//! default), which usually sits inside the user's own git repository
//! (issue #39): envgen marks it so that git and backup tools leave it
//! alone, and never counts its files as the user's untracked work.
//!
//! - `.gitignore` with `*`: `git status` and `git add -A` skip every run
//!   (checkpoints are gigabytes), as cargo's `target/` and uv's `.venv/` do;
//!   `envgen runs pack` copies a run's small files out for committing.
//! - `CACHEDIR.TAG` (<https://bford.info/cachedir/>): tar
//!   `--exclude-caches`, borg and restic `--exclude-caches` skip the folder.
//!
//! Both are written once, when envgen makes the folder or finds it without
//! them; a file of the user's with either name is never replaced. Run
//! directories are made here too ([`create_run_dir`], [`create_sweep_dirs`]).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, Result, UserError};

/// The tag's first line, fixed by the specification.
const CACHEDIR_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
pub const CACHEDIR_TAG: &str = "CACHEDIR.TAG";
pub const GITIGNORE: &str = ".gitignore";

fn cachedir_tag() -> String {
    format!(
        "{CACHEDIR_SIGNATURE}\n\
         # This folder holds envgen run directories (envgen run --out).\n\
         # Backup tools that honour cache tags skip it: keep results with\n\
         # `envgen runs pack RUN --to DIR`, or delete this file.\n\
         # For information about cache directory tags see https://bford.info/cachedir/\n"
    )
}

const GITIGNORE_TEXT: &str =
    "# envgen run directories: not for git (envgen runs pack copies a run's\n\
                              # small files out to commit). Delete this file to track them.\n\
                              *\n";

/// Make `out` (and its parents) and mark it; marking is best effort (a
/// folder the user made read-only still holds runs).
pub fn create(out: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    mark(out);
    Ok(())
}

/// Create `out/<run_id>` (suffixing `-2`, `-3`… if taken): the one place a
/// run directory is made. Returns the id it got and the directory.
pub fn create_run_dir(out: &Path, run_id: &str) -> Result<(String, PathBuf)> {
    create_marked(out)?;
    for n in 1.. {
        let id = if n == 1 {
            run_id.to_string()
        } else {
            format!("{run_id}-{n}")
        };
        let dir = out.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(cannot_create(&dir, &e)),
        }
    }
    unreachable!("the loop returns")
}

/// The run directories of a sweep: `<base>-s0`, `<base>-s1`… so that sbatch
/// can name each task's output with `%a`. Picks a `base` none of them exist
/// for and creates them all.
pub fn create_sweep_dirs(out: &Path, base: &str, n: usize) -> Result<(String, Vec<PathBuf>)> {
    create_marked(out)?;
    for attempt in 1..1000 {
        let candidate = if attempt == 1 {
            base.to_string()
        } else {
            format!("{base}-{attempt}")
        };
        let dirs: Vec<PathBuf> = (0..n)
            .map(|i| out.join(format!("{candidate}-s{i}")))
            .collect();
        if dirs.iter().any(|d| d.exists()) {
            continue;
        }
        for dir in &dirs {
            std::fs::create_dir(dir).map_err(|e| cannot_create(dir, &e))?;
        }
        return Ok((candidate, dirs));
    }
    Err(UserError::environment(format!("no free sweep name under {}", out.display())).into())
}

fn create_marked(out: &Path) -> Result<()> {
    create(out).map_err(|e| cannot_create(out, &e))
}

/// A run directory (or `--out`) that cannot be made: a full disk or a
/// read-only parent is the environment (exit 3), a file in the way is the
/// user's `--out` (exit 2); see `io_class`.
fn cannot_create(dir: &Path, e: &std::io::Error) -> anyhow::Error {
    UserError::from_io(
        format!("cannot create {}", dir.display()),
        e,
        (
            ErrorKind::Environment,
            "pass a writable directory with --out",
        ),
    )
    .into()
}

/// Write the `.gitignore` and `CACHEDIR.TAG` that are missing.
fn mark(out: &Path) {
    for (name, text) in [
        (GITIGNORE, GITIGNORE_TEXT.to_string()),
        (CACHEDIR_TAG, cachedir_tag()),
    ] {
        // create_new: a file of the user's with that name stays as it is,
        // and two runs starting at once cannot both write it.
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out.join(name))
        {
            let _ = file.write_all(text.as_bytes());
        }
    }
}

/// Is `dir` a folder of envgen's: a run directory (it holds a manifest) or
/// an `--out` folder envgen tagged?
fn is_envgen_dir(dir: &Path) -> bool {
    dir.join(crate::runs::manifest::MANIFEST_FILE).is_file()
        || std::fs::read_to_string(dir.join(CACHEDIR_TAG))
            .is_ok_and(|text| text.starts_with(CACHEDIR_SIGNATURE) && text.contains("envgen"))
}

/// Drop from `paths` (relative to `top`, as `git ls-files` lists them)
/// every file inside a folder of envgen's, so that earlier runs never show
/// up as a command's untracked files (a `runs/` made before it was marked,
/// or whose `.gitignore` was deleted). Each folder is looked at once.
pub fn without_envgen_files(top: &Path, paths: Vec<String>) -> Vec<String> {
    let mut known: HashMap<PathBuf, bool> = HashMap::new();
    paths
        .into_iter()
        .filter(|path| {
            let mut dir = Path::new(path).parent();
            while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
                let ours = *known
                    .entry(d.to_path_buf())
                    .or_insert_with(|| is_envgen_dir(&top.join(d)));
                if ours {
                    return false;
                }
                dir = d.parent();
            }
            true
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_out_folder_is_marked_and_a_users_files_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("a/runs");
        create(&out).unwrap();
        let tag = std::fs::read_to_string(out.join(CACHEDIR_TAG)).unwrap();
        assert!(tag.starts_with("Signature: 8a477f597d28d172789f06886806bc55\n"));
        let ignore = std::fs::read_to_string(out.join(GITIGNORE)).unwrap();
        assert!(ignore.lines().any(|l| l == "*"), "{ignore}");

        let mine = tmp.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::fs::write(mine.join(GITIGNORE), "*.ckpt\n").unwrap();
        create(&mine).unwrap();
        assert_eq!(
            std::fs::read_to_string(mine.join(GITIGNORE)).unwrap(),
            "*.ckpt\n"
        );
        assert!(mine.join(CACHEDIR_TAG).is_file());
    }

    #[test]
    fn files_of_run_directories_and_tagged_folders_are_not_untracked_work() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path();
        // An old runs/ folder, never marked, holding one run.
        std::fs::create_dir_all(top.join("old/r1/tb")).unwrap();
        std::fs::write(top.join("old/r1/manifest.json"), "{}").unwrap();
        // A tagged folder.
        create(&top.join("runs")).unwrap();
        // The user's own folder with a file named like envgen's.
        std::fs::create_dir_all(top.join("src")).unwrap();
        std::fs::write(top.join("src/CACHEDIR.TAG"), "not a tag").unwrap();
        let listed = [
            "train.py",
            "old/r1/manifest.json",
            "old/r1/tb/events.out",
            "runs/r2/metrics.jsonl",
            "src/model.py",
            "src/CACHEDIR.TAG",
        ];
        let kept = without_envgen_files(top, listed.iter().map(|s| s.to_string()).collect());
        assert_eq!(kept, ["train.py", "src/model.py", "src/CACHEDIR.TAG"]);
    }

    #[test]
    fn run_directories_get_a_free_name() {
        let out = tempfile::tempdir().unwrap();
        let (a, _) = create_run_dir(out.path(), "r").unwrap();
        let (b, dir) = create_run_dir(out.path(), "r").unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("r", "r-2"));
        assert!(dir.is_dir());
        let (base, dirs) = create_sweep_dirs(out.path(), "r", 2).unwrap();
        assert_eq!(base, "r");
        assert!(dirs[1].ends_with("r-s1") && dirs[1].is_dir());
        let (again, _) = create_sweep_dirs(out.path(), "r", 2).unwrap();
        assert_eq!(again, "r-2");
    }
}
