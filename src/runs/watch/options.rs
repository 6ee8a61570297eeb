//! What `runs watch` is asked for (how often to look, how to write) and how
//! it ended: the words the watcher (`mod.rs`) and its screen share, kept
//! below both.

use std::time::Duration;

/// How `watch` ended. Exit codes (docs/cli.md): completed 0, failed or
/// lost 1, interrupted 130 (as `envgen run` exits for it); stdout closed
/// (`runs watch … | head -1`) 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Failed,
    Interrupted,
    Lost,
    StdoutClosed,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Completed | Outcome::StdoutClosed => 0,
            Outcome::Failed | Outcome::Lost => 1,
            Outcome::Interrupted => 130,
        }
    }
}

pub struct Options {
    /// How often the files are looked at.
    pub interval: Duration,
    /// How often the place is asked whether the run still trains (a Slurm
    /// or Docker question costs more than a file read).
    pub probe_every: Duration,
    /// How the view is written out.
    pub mode: Mode,
    /// Columns of the terminal, when known: longer lines are cut so that
    /// none wraps (a wrapped line would break the redraw).
    pub width: Option<usize>,
}

/// How `watch` writes what it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A block of lines redrawn in place (stdout is a terminal).
    Terminal,
    /// A line per new step, stage or status (a pipe, a log file).
    Lines,
    /// One JSON object per line and update (`--json`; docs/cli.md).
    Json,
}
