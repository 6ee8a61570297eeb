//! `envgen runs watch [RUN]`: a live view of a run (see `runs::watch`);
//! here the flags, which run when none is named, and the question "does
//! anything still train it?" asked of its place (`launch::liveness`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Result, UserError};
use crate::launch;
use crate::launch::liveness::{self, Checker, Liveness};
use crate::runs::manifest;
use crate::runs::store::{self, RunDir};
use crate::runs::watch::{self, Mode, Options, Probe};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run id, a unique prefix of one, or a run directory (default: the
    /// newest running run under --runs-dir).
    pub run: Option<PathBuf>,
    #[command(flatten)]
    pub runs_dir: super::RunsDir,
    /// Seconds between looks at the run's files.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    pub interval: f64,
    /// One JSON object per line and update (run id, status, stage, step,
    /// total, loss, throughput, eta_s) instead of the text view.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(args: Args) -> Result<i32> {
    if !(args.interval.is_finite() && (0.05..=3600.0).contains(&args.interval)) {
        return Err(UserError::usage(format!(
            "--interval {}: not between 0.05 and 3600 seconds",
            args.interval
        ))
        .with_fix("give seconds between looks, e.g. --interval 0.5")
        .into());
    }
    let dir = match &args.run {
        Some(run) => store::resolve(run, &args.runs_dir.dir)?,
        None => newest_running(&args.runs_dir.dir)?,
    };
    let run = RunDir::open(&dir)?;
    let stdout = std::io::stdout();
    let mode = match (args.json, stdout.is_terminal()) {
        (true, _) => Mode::Json,
        (false, true) => Mode::Terminal,
        (false, false) => Mode::Lines,
    };
    let opts = Options {
        interval: Duration::from_secs_f64(args.interval),
        probe_every: Duration::from_secs_f64(args.interval.max(5.0)),
        mode,
        width: (mode == Mode::Terminal).then(terminal_width).flatten(),
    };
    let mut checker = Checker::default();
    let mut probe = || match launch::liveness_of(&mut checker, &run.path, &run.manifest) {
        Liveness::Running(why) => Probe::Running(why),
        Liveness::Lost(why) => Probe::Lost(why),
        Liveness::Unknown(why) => Probe::Unknown(why),
    };
    let outcome = watch::watch(&run, &opts, &mut stdout.lock(), &mut probe)?;
    Ok(outcome.exit_code())
}

/// The running run under `runs_dir` that started last.
fn newest_running(runs_dir: &Path) -> Result<PathBuf> {
    let mut checker = Checker::default();
    let mut newest: Option<(String, PathBuf)> = None;
    for dir in store::run_dirs(runs_dir) {
        if liveness::final_summary(&dir).is_some() {
            continue;
        }
        let Ok(manifest) = manifest::read(&dir) else {
            continue;
        };
        if !matches!(
            launch::liveness_of(&mut checker, &dir, &manifest),
            Liveness::Running(_)
        ) {
            continue;
        }
        if newest
            .as_ref()
            .is_none_or(|(at, _)| manifest.started_at > *at)
        {
            newest = Some((manifest.started_at.clone(), dir));
        }
    }
    newest.map(|(_, dir)| dir).ok_or_else(|| {
        UserError::usage(format!("no running run under {}", runs_dir.display()))
            .with_fix(
                "name the run: `envgen runs watch RUN` (see `envgen runs list`), or point \
                 --runs-dir (ENVGEN_RUNS_DIR) at the directory the run was started with --out",
            )
            .into()
    })
}

/// Columns of the terminal on stdout, when it says.
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills the winsize it is given and nothing else.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
