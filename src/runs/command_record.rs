//! What the manifest records about a user command (`envgen run -- CMD`,
//! issue #25): the command line, the directory it ran in, the git
//! repository around it (commit, a hash of the uncommitted diff, untracked
//! files) and its environment (all of it but shell noise, secrets
//! redacted). Captured before the run directory is made, so a dry run
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
    /// The command's environment but shell noise (`command_record::is_ignored`),
    /// secrets redacted by `runs::redact` (a secret-looking name as `<set>`,
    /// the userinfo of a URL as `<redacted>`). Before issue #39 only
    /// `CUDA_*`, `NCCL_*`, `TORCH_*`… were kept.
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

/// Variables never recorded, by exact name: they differ from one shell to
/// the next and say nothing about the run (issue #39). Documented in
/// docs/running.md ("What is recorded").
pub const IGNORED_NAMES: &[&str] = &[
    "_",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "COLUMNS",
    "LINES",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "WINDOWID",
    "COLORTERM",
    "LS_COLORS",
    "LSCOLORS",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PROMPT_COMMAND",
    "HISTFILE",
    "HISTSIZE",
    "HISTFILESIZE",
    "HISTCONTROL",
    "MAIL",
    "LESSOPEN",
    "LESSCLOSE",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "DBUS_SESSION_BUS_ADDRESS",
    "GPG_AGENT_INFO",
    "XDG_RUNTIME_DIR",
    "XDG_SEAT",
    "XDG_VTNR",
];

/// Variables never recorded, by prefix (terminal, SSH connection, desktop
/// session, exported shell functions, editor integrations).
pub const IGNORED_PREFIXES: &[&str] = &[
    "TERM",
    "SSH_",
    "XDG_SESSION",
    "BASH_FUNC_",
    "VSCODE_",
    "ITERM_",
    "KITTY_",
];

/// Whether variable `name` is shell noise, left out of the record.
pub fn is_ignored(name: &str) -> bool {
    IGNORED_NAMES.contains(&name) || IGNORED_PREFIXES.iter().any(|p| name.starts_with(p))
}

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

/// The command's whole environment but the shell noise of
/// [`is_ignored`], secrets masked by `runs::redact` (issue #39: a knob such
/// as `MICRO_BATCH_SIZE` or `WANDB_MODE` is recorded whatever its name).
pub fn recorded_env(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    redact::env(
        vars.into_iter()
            .filter(|(name, _)| !is_ignored(name))
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
    fn the_whole_environment_is_kept_but_shell_noise_and_secrets_are_masked() {
        let vars = [
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("HF_TOKEN", "hf_abc"),
            ("HF_HOME", "/h"),
            ("WANDB_API_KEY", "k"),
            ("OMP_NUM_THREADS", "4"),
            // Issue #39: any knob, whatever its name.
            ("MICRO_BATCH_SIZE", "16"),
            ("NVIDIA_TF32_OVERRIDE", "0"),
            ("WANDB_MODE", "offline"),
            ("HOME", "/root"),
            // Shell noise: left out.
            ("PWD", "/work"),
            ("OLDPWD", "/"),
            ("SHLVL", "2"),
            ("_", "/usr/bin/envgen"),
            ("TERM", "xterm"),
            ("TERM_PROGRAM", "tmux"),
            ("SSH_CONNECTION", "1.2.3.4 5 6.7.8.9 22"),
            ("LS_COLORS", "di=01;34"),
            ("XDG_SESSION_ID", "3"),
            ("BASH_FUNC_module%%", "() { x; }"),
            // Issue #40: secrets by pattern, and credentials inside a URL.
            ("HF_ENDPOINT", "https://user:pw@mirror"),
            ("DB_PASSWORD", "p"),
            ("MY_SESSION_COOKIE", "c"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let env = recorded_env(vars);
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "CUDA_VISIBLE_DEVICES",
                "DB_PASSWORD",
                "HF_ENDPOINT",
                "HF_HOME",
                "HF_TOKEN",
                "HOME",
                "MICRO_BATCH_SIZE",
                "MY_SESSION_COOKIE",
                "NVIDIA_TF32_OVERRIDE",
                "OMP_NUM_THREADS",
                "WANDB_API_KEY",
                "WANDB_MODE",
            ]
        );
        for name in [
            "HF_TOKEN",
            "WANDB_API_KEY",
            "DB_PASSWORD",
            "MY_SESSION_COOKIE",
        ] {
            assert_eq!(env[name], "<set>", "{name}");
        }
        assert_eq!(env["HF_ENDPOINT"], "https://<redacted>@mirror");
        assert_eq!(env["MICRO_BATCH_SIZE"], "16");
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
