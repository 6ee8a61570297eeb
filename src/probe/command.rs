//! Run an external tool with a deadline and capture what it prints.
//!
//! Every probe shells out to some tool (nvidia-smi, nvcc, sinfo, podman, …);
//! a wedged driver or an unreachable Slurm controller must not hang `doctor`,
//! so each call gets a timeout. The standard library has no "wait with
//! timeout", hence this small helper: two reader threads drain the pipes (so a
//! chatty stderr cannot block the child) while the caller waits on a channel.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct Captured {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Captured {
    /// stdout when the command succeeded.
    pub fn success_stdout(self) -> Option<String> {
        self.status.success().then_some(self.stdout)
    }

    /// stdout followed by stderr: some tools print `--version` on stderr.
    pub fn all_output(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("could not start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{program}` did not finish within {timeout:?}")]
    TimedOut { program: String, timeout: Duration },
}

/// Run `program args…` with stdin closed; kill it if it outlives `timeout`.
pub fn run_captured<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    timeout: Duration,
) -> Result<Captured, CommandError> {
    let name = program.display().to_string();
    let mut command = Command::new(program);
    // ch-run refuses to start without $USER, even for `--version`; CI and
    // cron environments often lack it. Tools only read it, so any name does.
    if std::env::var_os("USER").is_none() {
        command.env(
            "USER",
            std::env::var_os("LOGNAME").unwrap_or_else(|| "envgen".into()),
        );
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| CommandError::Spawn {
            program: name.clone(),
            source,
        })?;

    let (sender, receiver) = mpsc::channel::<(bool, Vec<u8>)>();
    let pipes: [(bool, Option<Box<dyn Read + Send>>); 2] = [
        (
            true,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            false,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ];
    for (is_stdout, pipe) in pipes {
        let sender = sender.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = sender.send((is_stdout, bytes));
        });
    }
    drop(sender);

    let deadline = Instant::now() + timeout;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok((true, bytes)) => stdout = bytes,
            Ok((false, bytes)) => stderr = bytes,
            Err(_) => return Err(kill(child, name, timeout)),
        }
    }
    // Both pipes are closed, so the child is exiting; reap it within the deadline.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            _ => return Err(kill(child, name, timeout)),
        }
    };
    Ok(Captured {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

fn kill(mut child: Child, program: String, timeout: Duration) -> CommandError {
    let _ = child.kill();
    let _ = child.wait();
    CommandError::TimedOut { program, timeout }
}

/// Find `tool` on PATH and run it; `None` when it is not installed, it failed
/// to start, or it timed out (logged at debug level: absence is normal).
pub fn run_tool(tool: &str, args: &[&str], timeout: Duration) -> Option<Captured> {
    let path = which::which(tool).ok()?;
    match run_captured(&path, args, timeout) {
        Ok(captured) => Some(captured),
        Err(err) => {
            tracing::debug!("{err}");
            None
        }
    }
}

/// The first non-empty line of a tool's output (its headline error), trimmed.
pub fn first_line(text: &str) -> String {
    lines_trimmed(text)
        .next()
        .unwrap_or("no output")
        .to_string()
}

/// The last non-empty line (where tools like sinfo put their `fatal:` reason).
pub fn last_line(text: &str) -> String {
    lines_trimmed(text)
        .last()
        .unwrap_or("no output")
        .to_string()
}

fn lines_trimmed(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(|line| !line.is_empty())
}

/// The first whitespace-separated token of `text` that looks like a version
/// ("1.17.8", "v4.3.1", "22.05.8,"), without a leading `v` or trailing punctuation.
pub fn first_version_token(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .map(|token| {
            token
                .trim_start_matches(['v', 'V'])
                .trim_end_matches([',', ';', ':'])
        })
        .find(|token| {
            token.starts_with(|c: char| c.is_ascii_digit())
                && token.contains('.')
                && token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_' | '~'))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_stdout_stderr_and_status() {
        let out = run_captured(
            Path::new("/bin/sh"),
            &["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(5),
        )
        .expect("sh runs");
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn kills_a_command_that_outlives_its_timeout() {
        let started = Instant::now();
        let err = run_captured(
            Path::new("/bin/sh"),
            &["-c", "sleep 5"],
            Duration::from_millis(200),
        )
        .expect_err("must time out");
        assert!(matches!(err, CommandError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err = run_captured(
            Path::new("/nonexistent/tool"),
            &["--version"],
            Duration::from_secs(1),
        )
        .expect_err("cannot spawn");
        assert!(err.to_string().contains("/nonexistent/tool"));
    }

    #[test]
    fn version_tokens() {
        assert_eq!(
            first_version_token("podman version 4.3.1").as_deref(),
            Some("4.3.1")
        );
        assert_eq!(
            first_version_token("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: abc")
                .as_deref(),
            Some("1.17.8")
        );
        assert_eq!(
            first_version_token("cli-version: 1.17.8").as_deref(),
            Some("1.17.8")
        );
        assert_eq!(
            first_version_token("slurm 22.05.8").as_deref(),
            Some("22.05.8")
        );
        assert_eq!(first_version_token("0.38").as_deref(), Some("0.38"));
        assert_eq!(first_version_token("no version here"), None);
    }
}
