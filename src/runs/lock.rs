//! `.envgen.lock`: the one writer of a run directory. The process that
//! trains a run holds an `flock` on it for as long as it trains (the kernel
//! drops it when the process ends, however it ends), and writes who it is
//! into it. So a second `--resume` is refused naming the first, and a run
//! without a summary whose lock nobody holds is known to be lost: its
//! trainer is gone (kill -9, a crash, a reboot).

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, Result, UserError};

pub const LOCK_FILE: &str = ".envgen.lock";

/// Set by the `--ranks` launcher for its ranks: the process to signal to
/// stop the whole run (it stops every rank; rank 0 holds the lock).
pub const LAUNCHER_PID_ENV: &str = "ENVGEN_LAUNCHER_PID";

/// Who holds a run's lock, as the holder wrote it into the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockHolder {
    pub pid: u32,
    /// The machine's hostname (a container's own, inside a container).
    pub host: String,
    /// The process that stops the run as a whole (the `--ranks` launcher),
    /// when it is not `pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_pid: Option<u32>,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on host {}", self.pid, self.host)
    }
}

impl LockHolder {
    /// This process.
    fn this_process() -> LockHolder {
        LockHolder {
            pid: std::process::id(),
            host: this_host(),
            launcher_pid: std::env::var(LAUNCHER_PID_ENV)
                .ok()
                .and_then(|p| p.parse().ok()),
        }
    }

    /// The process to signal to stop the run.
    pub fn stop_pid(&self) -> u32 {
        self.launcher_pid.unwrap_or(self.pid)
    }
}

/// This machine's hostname.
pub fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The lock a training process holds on its run directory, released when
/// dropped or when the process dies.
pub struct RunLock {
    _file: std::fs::File,
}

fn lock_path(dir: &Path) -> PathBuf {
    dir.join(LOCK_FILE)
}

/// `flock(fd, how | LOCK_NB)`: Ok(true) taken, Ok(false) held by another
/// open file, Err when the filesystem cannot lock (some NFS mounts).
/// By hand: std's File::try_lock is newer than our rust-version.
fn try_flock(file: &std::fs::File, how: i32) -> std::io::Result<bool> {
    // SAFETY: flock on an open descriptor of ours; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

fn read_holder(file: &mut std::fs::File) -> Option<LockHolder> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Take the run directory's lock, or say who has it (exit 2).
pub fn lock_run(dir: &Path) -> Result<RunLock> {
    let path = lock_path(dir);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        // A link planted in the run directory is never followed.
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| {
            UserError::from_io(
                format!("cannot open {}", path.display()),
                &e,
                (
                    ErrorKind::Environment,
                    "make the run directory writable for this user",
                ),
            )
        })?;
    match try_flock(&file, libc::LOCK_EX) {
        Ok(true) => {}
        Ok(false) => return Err(held_elsewhere(dir, read_holder(&mut file).as_ref())),
        // A filesystem without flock: train unlocked, as before.
        Err(e) => tracing::warn!(
            "{}: cannot lock ({e}), training without a lock",
            path.display()
        ),
    }
    // Who holds it, for the message above and for `runs list` and
    // `runs cancel` (the lock itself is the flock).
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = file.write_all(&serde_json::to_vec(&LockHolder::this_process())?);
    Ok(RunLock { _file: file })
}

/// "Being trained by another envgen" (exit 2), naming it.
fn held_elsewhere(dir: &Path, holder: Option<&LockHolder>) -> anyhow::Error {
    let holder = holder.map_or_else(
        || "its lock file names no process".into(),
        |h| h.to_string(),
    );
    UserError::usage(format!(
        "{} is being trained by another envgen ({holder})",
        dir.display(),
    ))
    .with_fix(format!(
        "wait for it to end, or stop it with `envgen runs cancel {}`, then resume",
        dir.display()
    ))
    .into()
}

/// Refuse (exit 2) to launch a run again while a process trains it (the
/// launched envgen would be refused too, after its launcher had changed
/// the run directory).
pub fn ensure_not_training(dir: &Path) -> Result<()> {
    match lock_state(dir) {
        LockState::Held(holder) => Err(held_elsewhere(dir, holder.as_ref())),
        _ => Ok(()),
    }
}

/// Whether anybody trains a run directory, as its lock says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// No lock file: no envgen of this version ever started to train it.
    Never,
    /// A process holds the lock: it trains (the holder, when it wrote itself in).
    Held(Option<LockHolder>),
    /// Nobody holds it: whoever trained is gone (the last holder, if known).
    Free(Option<LockHolder>),
    /// The lock cannot be tested here (why).
    Unknown(String),
}

/// Test the lock without taking it for longer than the test: a shared
/// lock is granted only while no trainer holds its exclusive one.
pub fn lock_state(dir: &Path) -> LockState {
    let path = lock_path(dir);
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockState::Never,
        Err(e) => return LockState::Unknown(format!("cannot open {}: {e}", path.display())),
    };
    let holder = read_holder(&mut file);
    match try_flock(&file, libc::LOCK_SH) {
        // Released when `file` is closed, at the end of this function.
        Ok(true) => LockState::Free(holder),
        Ok(false) => LockState::Held(holder),
        Err(e) => LockState::Unknown(format!("cannot test the lock {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_directory_is_trained_by_one_process_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(lock_state(dir.path()), LockState::Never);
        let held = lock_run(dir.path()).unwrap();
        let err = lock_run(dir.path()).err().expect("second lock refused");
        assert_eq!(crate::error::exit_code_of(&err), 2);
        let text = format!("{err:#}");
        let me = format!("pid {} on host {}", std::process::id(), this_host());
        assert!(text.contains(&me), "{text}");
        let LockState::Held(Some(holder)) = lock_state(dir.path()) else {
            panic!("held: {:?}", lock_state(dir.path()));
        };
        assert_eq!(holder.stop_pid(), std::process::id());
        drop(held);
        // Released: the last holder is still named, for `runs list`.
        assert!(matches!(lock_state(dir.path()), LockState::Free(Some(h)) if h == holder));
        lock_run(dir.path()).unwrap();
    }

    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(LOCK_FILE)).unwrap();
        assert!(lock_run(dir.path()).is_err());
        assert!(matches!(lock_state(dir.path()), LockState::Unknown(_)));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
