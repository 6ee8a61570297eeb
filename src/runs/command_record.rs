//! What the manifest records about a user command (`envgen run -- CMD`,
//! issue #25): the command line, the directory it ran in, the git
//! repository around it (commit, a hash of the uncommitted diff, untracked
//! files) and the environment variables that change what CUDA, NCCL and
//! PyTorch do. Captured before the run directory is made, so a dry run
//! sees the same record a real run writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::runs::redact;

/// The manifest's `command`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRecord {
    /// The command line as given, never through a shell.
    pub argv: Vec<String>,
    /// The directory the command runs in (absolute).
    pub workdir: PathBuf,
    /// The git repository around `workdir`; null: not in a git repository.
    pub git: Option<GitRecord>,
    /// The variables that matter (`CUDA_*`, `NCCL_*`, `TORCH_*`…), secrets
    /// redacted by `runs::redact` (a secret-looking name as `<set>`, the
    /// userinfo of a URL as `<redacted>`).
    pub env: BTreeMap<String, String>,
}

/// The git state of the code a command ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitRecord {
    /// `git rev-parse --show-toplevel`.
    pub toplevel: PathBuf,
    /// HEAD; null in a repository without commits.
    pub commit: Option<String>,
    /// `sha256:` of `git diff HEAD` (saved as `diff.patch` in the run
    /// directory); null when there is no uncommitted change to tracked files.
    pub diff_hash: Option<String>,
    /// Untracked files (not ignored), by path from the top level: listed,
    /// not saved. Files in envgen's run folders are never listed
    /// (`runs::out_dir`).
    #[serde(default)]
    pub untracked: Vec<String>,
}

/// The file the uncommitted diff is saved as, in the run directory.
pub const DIFF_FILE: &str = "diff.patch";

/// Prefixes of the environment variables recorded.
const ENV_PREFIXES: &[&str] = &["CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "CUBLAS_", "HF_"];
/// Variables recorded by exact name.
const ENV_NAMES: &[&str] = &["OMP_NUM_THREADS"];

/// The record of `argv` run in `workdir`, and the diff to save beside it
/// (None: nothing uncommitted). `vars` is the environment the command gets.
pub fn capture(
    argv: &[String],
    workdir: &Path,
    vars: impl IntoIterator<Item = (String, String)>,
) -> (CommandRecord, Option<Vec<u8>>) {
    let (git, diff) = match git_state(workdir) {
        Some((git, diff)) => (Some(git), diff),
        None => (None, None),
    };
    let record = CommandRecord {
        // The userinfo of a URL on the command line is not recorded either
        // (config.toml keeps the line as given: rerun needs it).
        argv: argv.iter().map(|w| redact::userinfo(w)).collect(),
        workdir: workdir.to_path_buf(),
        git,
        env: recorded_env(vars),
    };
    (record, diff)
}

/// The variables worth recording, secrets masked.
pub fn recorded_env(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    redact::env(
        vars.into_iter()
            .filter(|(name, _)| {
                ENV_NAMES.contains(&name.as_str())
                    || ENV_PREFIXES.iter().any(|p| name.starts_with(p))
            })
            .collect(),
    )
}

/// `sha256:<hex>` of `bytes`.
pub fn diff_hash(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The repository around `dir` (None: not in one, or no git installed).
fn git_state(dir: &Path) -> Option<(GitRecord, Option<Vec<u8>>)> {
    let toplevel = git(dir, &["rev-parse", "--show-toplevel"])?;
    let toplevel = PathBuf::from(String::from_utf8_lossy(&toplevel).trim());
    let commit = git(dir, &["rev-parse", "--verify", "-q", "HEAD"])
        .map(|out| String::from_utf8_lossy(&out).trim().to_string());
    // Binary-safe, so that applying diff.patch to the commit gives the tree back.
    let diff = commit
        .as_ref()
        .and_then(|_| git(&toplevel, &["diff", "HEAD", "--binary"]))
        .filter(|d| !d.is_empty());
    let untracked = git(
        &toplevel,
        &["ls-files", "--others", "--exclude-standard", "-z"],
    )
    .map(|out| {
        out.split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    })
    .unwrap_or_default();
    let untracked = crate::runs::out_dir::without_envgen_files(&toplevel, untracked);
    let record = GitRecord {
        toplevel,
        commit,
        diff_hash: diff.as_deref().map(diff_hash),
        untracked,
    };
    Some((record, diff))
}

/// `git ARGS` in `dir`: its stdout when it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_variables_that_matter_are_kept_and_secrets_are_masked() {
        let vars = [
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("HF_TOKEN", "hf_abc"),
            ("HF_HOME", "/h"),
            ("NCCL_IB_DISABLE", "1"),
            ("WANDB_API_KEY", "k"),
            ("TORCH_HUB_API_KEY", "k2"),
            ("OMP_NUM_THREADS", "4"),
            ("HOME", "/root"),
            // Issue #40: secrets by pattern, and credentials inside a URL.
            ("HF_ENDPOINT", "https://user:pw@mirror"),
            ("HF_CREDENTIAL", "c"),
            ("HF_HUB_AUTH", "a"),
            ("TORCH_PASSWD", "p"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let env = recorded_env(vars);
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "CUDA_VISIBLE_DEVICES",
                "HF_CREDENTIAL",
                "HF_ENDPOINT",
                "HF_HOME",
                "HF_HUB_AUTH",
                "HF_TOKEN",
                "NCCL_IB_DISABLE",
                "OMP_NUM_THREADS",
                "TORCH_HUB_API_KEY",
                "TORCH_PASSWD"
            ]
        );
        for name in ["HF_TOKEN", "HF_CREDENTIAL", "HF_HUB_AUTH", "TORCH_PASSWD"] {
            assert_eq!(env[name], "<set>", "{name}");
        }
        assert_eq!(env["HF_ENDPOINT"], "https://<redacted>@mirror");
        assert_eq!(env["TORCH_HUB_API_KEY"], "<set>");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1");
    }

    #[test]
    fn outside_a_repository_git_is_null() {
        let dir = tempfile::tempdir().unwrap();
        let (record, diff) = capture(&["true".into()], dir.path(), []);
        assert_eq!(record.git, None);
        assert!(diff.is_none());
    }
}
