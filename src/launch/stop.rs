//! Stopping a run that trains on this machine the way Ctrl-C would, and
//! the summary it ended with: what the places' `RunLife::stop` share
//! (`runs cancel`).

use std::path::Path;
use std::time::{Duration, Instant};

use envgen_experiments::engine::{Status, Summary};

use super::launcher::mark_ended;
use super::liveness::final_summary;
use crate::error::{Result, UserError};
use crate::runs::lock::{self, LockState};

/// How long a stopped run may take to checkpoint and end.
const STOP_WAIT: Duration = Duration::from_secs(120);

/// Whether this machine's process holds the lock (a Docker run's holder
/// is the container's envgen, stopped through the daemon instead).
pub fn lock_held_here(dir: &Path) -> bool {
    matches!(lock::lock_state(dir), LockState::Held(Some(h)) if h.host == lock::this_host())
}

/// SIGINT to the process that trains here (as Ctrl-C would: it
/// checkpoints, writes `interrupted` and ends), then wait until it ended.
pub fn stop_process(dir: &Path) -> Result<Summary> {
    let holder = match lock::lock_state(dir) {
        LockState::Held(Some(holder)) => holder,
        LockState::Held(None) => {
            return Err(UserError::usage(format!(
                "{}: an envgen holds {} but it names no process",
                dir.display(),
                lock::LOCK_FILE
            ))
            .with_fix("stop that envgen with Ctrl-C where it runs")
            .into())
        }
        // It ended meanwhile.
        _ => return ended_summary(dir, "its envgen ended without a summary"),
    };
    let here = lock::this_host();
    if holder.host != here {
        return Err(UserError::usage(format!(
            "{} is trained by {holder}, not on this host ({here})",
            dir.display()
        ))
        .with_fix(format!(
            "run `envgen runs cancel {}` on {}",
            dir.display(),
            holder.host
        ))
        .into());
    }
    let pid = holder.stop_pid();
    if !is_envgen(pid) {
        return Err(UserError::usage(format!(
            "{}: the lock names pid {pid}, which is not an envgen process",
            dir.display()
        ))
        .with_fix("stop the envgen that trains it with Ctrl-C")
        .into());
    }
    eprintln!("envgen: sending SIGINT to envgen pid {pid} (it checkpoints and stops)");
    // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(
            UserError::environment(format!("cannot signal pid {pid}: {err}"))
                .with_fix("cancel it as the user who started it")
                .into(),
        );
    }
    let start = Instant::now();
    while matches!(lock::lock_state(dir), LockState::Held(_)) {
        if start.elapsed() > STOP_WAIT {
            return Err(UserError::environment(format!(
                "pid {pid} did not end within {} s of SIGINT",
                STOP_WAIT.as_secs()
            ))
            .with_fix(format!(
                "wait for it, or `kill {pid}`; then `envgen runs show {}`",
                dir.display()
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    ended_summary(dir, "its envgen ended after SIGINT without a summary")
}

/// The summary the stopped run wrote, or one written here when it wrote none.
pub fn ended_summary(dir: &Path, why: &str) -> Result<Summary> {
    match final_summary(dir) {
        Some(summary) => Ok(summary),
        None => mark_ended(dir, Status::Interrupted, why),
    }
}

/// Whether `pid` runs an envgen binary (a lock file names the pid its
/// writer chose: never signal anything else).
fn is_envgen(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| comm.trim().starts_with("envgen"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_envgen_processes_are_signalled() {
        // Cargo names this test binary `envgen-HASH`.
        assert!(is_envgen(std::process::id()));
        assert!(!is_envgen(u32::MAX));
    }
}
