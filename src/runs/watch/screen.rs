//! Writing the view out: a block redrawn in place on a terminal, appended
//! lines elsewhere, or a JSON object per update (`--json`).

use std::io::Write;

use serde_json::{json, Value};

use super::view::{State, View};
use super::{Mode, Options, Outcome};
use crate::error::Result;

/// The output, as `Mode` says. Each `show`/`finish` returns whether
/// stdout is still open.
pub(super) struct Screen {
    mode: Mode,
    width: Option<usize>,
    /// Terminal: the block last drawn (its height is how far to go up).
    drawn: Vec<String>,
    /// Appended lines: what was printed last, not to print it again.
    printed_stage: Option<String>,
    printed_step: Option<(Option<String>, Option<u64>)>,
    printed_eval: Option<String>,
    printed_state: Option<String>,
    header: bool,
    /// JSON: the object printed last, not to print it again.
    printed_json: Option<Value>,
}

impl Screen {
    pub(super) fn new(opts: &Options) -> Screen {
        Screen {
            mode: opts.mode,
            width: opts.width,
            drawn: Vec::new(),
            printed_stage: None,
            printed_step: None,
            printed_eval: None,
            printed_state: None,
            header: false,
            printed_json: None,
        }
    }

    /// Show the view as it is; false when stdout was closed.
    pub(super) fn show(&mut self, view: &View, out: &mut dyn Write) -> bool {
        let text = self.text(view, false);
        if text.is_empty() {
            return true;
        }
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_ok()
    }

    /// Show the final view; a closed stdout is no error here either.
    pub(super) fn finish(
        &mut self,
        view: &View,
        out: &mut dyn Write,
        outcome: Outcome,
    ) -> Result<Outcome> {
        let text = self.text(view, true);
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => Ok(outcome),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Outcome::StdoutClosed),
            Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
        }
    }

    fn text(&mut self, view: &View, last: bool) -> String {
        match self.mode {
            Mode::Terminal => self.redraw(view),
            Mode::Lines => self.append(view, last),
            Mode::Json => self.json_line(view),
        }
    }

    /// The view as one JSON object and a newline, when it changed since
    /// the one printed last (the final one always differs: its status).
    fn json_line(&mut self, view: &View) -> String {
        let object = json_of(view);
        if self.printed_json.as_ref() == Some(&object) {
            return String::new();
        }
        let line = format!("{object}\n");
        self.printed_json = Some(object);
        line
    }

    /// Cursor up over the last block, each line cleared and rewritten,
    /// the rest of the screen cleared (the block may have got shorter).
    pub(super) fn redraw(&mut self, view: &View) -> String {
        let lines = view.lines(self.width);
        if lines == self.drawn {
            return String::new();
        }
        let mut text = String::new();
        if !self.drawn.is_empty() {
            text += &format!("\x1b[{}A", self.drawn.len());
        }
        for line in &lines {
            text += &format!("\r\x1b[2K{line}\n");
        }
        text += "\x1b[J";
        self.drawn = lines;
        text
    }

    /// The lines not printed yet: the run, a new stage, the latest step (at
    /// most one per look, so at most one per `--interval`), a new
    /// evaluation, a changed status (the final one always).
    pub(super) fn append(&mut self, view: &View, last: bool) -> String {
        let mut text = String::new();
        if !self.header {
            self.header = true;
            text += &format!("run     {} ({})\n", view.run_id, view.place);
        }
        if view.stage.is_some() && view.stage != self.printed_stage {
            self.printed_stage = view.stage.clone();
            // A multi-stage run's line says where the whole run is then.
            text += &crate::output::escape_control(&view.stage_line().unwrap_or_default());
            text += "\n";
        }
        let step = Some((view.stage.clone(), view.step));
        if view.step.is_some() && step != self.printed_step {
            self.printed_step = step;
            let mut line = view.step_line();
            for gpu in view.gpu_lines() {
                line += &format!("  [{gpu}]");
            }
            text += &line;
            text += "\n";
        }
        if let Some(line) = view
            .eval_line()
            .filter(|l| Some(l) != self.printed_eval.as_ref())
        {
            text += &line;
            text += "\n";
            self.printed_eval = Some(line);
        }
        // While running, only a status worth knowing: the place does not answer.
        let state = view.state_line();
        let worth = last || matches!(view.state, Some(State::Unknown(_)));
        if worth && Some(&state) != self.printed_state.as_ref() {
            text += &state;
            text += "\n";
            self.printed_state = Some(state);
        }
        text
    }
}

/// `runs watch --json`'s object (docs/cli.md): where the run stands now.
pub(super) fn json_of(view: &View) -> Value {
    let (status, detail) = match &view.state {
        None => ("running", None),
        Some(State::Running(why)) => ("running", why.clone()),
        Some(State::Unknown(why)) => ("unknown", Some(why.clone())),
        Some(State::Ended { status, detail }) => (status.as_str(), Some(detail.clone())),
        Some(State::Lost(why)) => ("lost", Some(why.clone())),
    };
    let eta = view.eta();
    let progress = view.progress.as_ref();
    json!({
        "run_id": view.run_id,
        "status": status,
        "detail": detail,
        "stage": progress.map_or(view.stage.clone(), |p| p.phase.clone()),
        "round": progress.and_then(|p| p.round),
        "step": view.step,
        "total": view.total,
        "run_steps_done": progress.map(|p| p.steps_done()),
        "run_steps_total": progress.map(|p| p.plan.total_steps()),
        "loss": view.loss,
        "throughput": view.throughput.as_ref().map(|t| t.1),
        "throughput_unit": view.throughput.as_ref().map(|t| format!("{}/s", t.0)),
        "eta_s": eta.map(|e| (e.seconds * 10.0).round() / 10.0),
        "eta_at_least": eta.is_some_and(|e| e.at_least),
    })
}
