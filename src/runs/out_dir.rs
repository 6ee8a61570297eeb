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
//! them; a file of the user's with either name is never replaced.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

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
}
