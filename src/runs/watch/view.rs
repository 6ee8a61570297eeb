//! What `runs watch` knows about a run from its metrics rows, and the lines
//! it shows: step/total, loss, throughput, ETA, the last evaluation, the
//! GPUs (from the sampler's rows) and the stage of a multi-stage run; on a
//! terminal, sparklines of the loss and the throughput.

use std::collections::VecDeque;

use serde_json::Value;

use super::layout::{fit, sparkline, Part};
use super::progress::{Eta, RunProgress};

/// Keys of a metrics row that are an evaluation's result (gpt2, hrm-sudoku,
/// rft), shown on the `eval` line in this order.
const EVAL_KEYS: &[&str] = &[
    "val_loss",
    "hellaswag_acc",
    "hellaswag_acc_norm",
    "exact_accuracy",
    "cell_accuracy",
    "accuracy",
    "answer_rate",
];

/// Steps whose `step_ms` the ETA averages over: recent enough to follow a
/// change of speed, enough to smooth one slow step out.
const ETA_WINDOW: usize = 20;

/// Points of loss and throughput kept for the sparklines: more than any
/// terminal is wide.
const HISTORY: usize = 512;

/// Width of a sparkline when the terminal's is not known.
const SPARK_WIDTH: usize = 40;

/// One GPU as the sampler saw it last.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub index: u64,
    pub util_percent: f64,
    pub used_gb: f64,
    pub total_gb: f64,
}

/// How the watched run stands; the last line of the view.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Still training (or not yet asked): what trains it.
    Running(Option<String>),
    /// The place does not answer; watching goes on.
    Unknown(String),
    /// It ended: the `summary.json` status and what it says about the end.
    Ended { status: String, detail: String },
    /// No summary and nothing trains it any more: why.
    Lost(String),
}

/// Everything shown, built from the rows read so far.
#[derive(Debug, Default)]
pub struct View {
    pub run_id: String,
    pub place: String,
    pub stage: Option<String>,
    pub step: Option<u64>,
    pub total: Option<u64>,
    pub loss: Option<f64>,
    /// `(unit, per second)` from the row's `<unit>_per_s`.
    pub throughput: Option<(String, f64)>,
    step_ms: VecDeque<f64>,
    /// The stage's losses and throughputs, oldest first (sparklines).
    loss_history: VecDeque<f64>,
    rate_history: VecDeque<f64>,
    /// A multi-stage run's progress as a whole (rft); none for one stage.
    pub progress: Option<RunProgress>,
    /// The last evaluation: `(key, value)` in `EVAL_KEYS` order, and its step.
    pub eval: Vec<(String, f64)>,
    pub eval_step: Option<u64>,
    pub gpus: Vec<Gpu>,
    pub state: Option<State>,
}

impl View {
    pub fn new(run_id: &str, place: &str) -> View {
        View {
            run_id: run_id.to_string(),
            place: place.to_string(),
            ..View::default()
        }
    }

    /// Rows of `stage` (of `total` steps when config.toml says) follow; a
    /// new stage's steps start afresh. Within a stage a total a row gave
    /// (`total_steps`: hrm-sudoku's comes from its dataset) is kept.
    pub fn enter_stage(&mut self, stage: Option<String>, total: Option<u64>) {
        if stage != self.stage {
            self.stage = stage;
            self.step = None;
            self.loss = None;
            self.throughput = None;
            self.step_ms.clear();
            self.loss_history.clear();
            self.rate_history.clear();
            self.total = total;
        } else if total.is_some() {
            self.total = total;
        }
    }

    /// The source of the rows was replaced (a resume rewrote it): forget
    /// its steps; they are read again.
    pub fn restart(&mut self) {
        self.step = None;
        self.loss = None;
        self.step_ms.clear();
        self.loss_history.clear();
        self.rate_history.clear();
        self.eval.clear();
        self.eval_step = None;
    }

    /// Take one metrics row in.
    pub fn take(&mut self, row: &Value) {
        if let Some(gpus) = row.get("gpu").and_then(Value::as_array) {
            self.gpus = gpus.iter().filter_map(gpu_of).collect();
            return;
        }
        if let Some(total) = row.get("total_steps").and_then(Value::as_u64) {
            self.total = Some(total);
        }
        let step = row.get("step").and_then(Value::as_u64);
        if let Some(step) = step {
            self.step = Some(step);
        }
        if let Some(loss) = row.get("loss").and_then(Value::as_f64) {
            self.loss = Some(loss);
            push(&mut self.loss_history, loss);
        }
        if let Some(ms) = row.get("step_ms").and_then(Value::as_f64) {
            self.step_ms.push_back(ms);
            if self.step_ms.len() > ETA_WINDOW {
                self.step_ms.pop_front();
            }
        }
        if let Some(obj) = row.as_object() {
            if let Some((key, v)) = obj
                .iter()
                .find_map(|(k, v)| Some((k.strip_suffix("_per_s")?, v.as_f64()?)))
            {
                self.throughput = Some((key.to_string(), v));
                // A training step's rate, not a sampling's (other units).
                if step.is_some() {
                    push(&mut self.rate_history, v);
                }
            }
        }
        let eval: Vec<(String, f64)> = EVAL_KEYS
            .iter()
            .filter_map(|k| Some((k.to_string(), row.get(*k)?.as_f64()?)))
            .collect();
        if !eval.is_empty() {
            self.eval = eval;
            self.eval_step = step;
        }
    }

    fn mean_step_ms(&self) -> Option<f64> {
        (!self.step_ms.is_empty())
            .then(|| self.step_ms.iter().sum::<f64>() / self.step_ms.len() as f64)
    }

    /// Time left at the recent speed: of the whole run for a multi-stage
    /// one, else of its steps when their total is known; none once ended.
    pub fn eta(&self) -> Option<Eta> {
        if matches!(self.state, Some(State::Ended { .. } | State::Lost(_))) {
            return None;
        }
        if let Some(progress) = &self.progress {
            return progress.eta(self.mean_step_ms());
        }
        let (step, total) = (self.step?, self.total?);
        Some(Eta {
            seconds: total.saturating_sub(step) as f64 * self.mean_step_ms()? / 1e3,
            at_least: false,
        })
    }

    /// The step line's parts, the ETA last (see `layout::fit`).
    fn step_parts(&self) -> Vec<Part> {
        let Some(step) = self.step else {
            return vec![Part::new(
                0,
                "step    waiting for the first step in metrics.jsonl",
            )];
        };
        let mut parts = vec![Part::new(
            0,
            match self.total {
                Some(total) if total > 0 => format!(
                    "step    {step}/{total} ({:.0}%)",
                    (step as f64 / total as f64 * 100.0).min(100.0)
                ),
                _ => format!("step    {step}"),
            },
        )];
        if let Some(loss) = self.loss {
            parts.push(Part::new(1, format!("loss {loss:.4}")));
        }
        if let Some((unit, rate)) = &self.throughput {
            parts.push(Part::new(2, format!("{} {unit}/s", human(*rate))));
        }
        if let Some(eta) = self.eta() {
            let at_least = if eta.at_least { "≥" } else { "" };
            parts.push(Part::new(
                0,
                format!("ETA {at_least}{}", duration(eta.seconds)),
            ));
        }
        parts
    }

    /// `step 120/300 (40%)  loss 2.1034  15234 tokens/s  ETA 12s`
    pub fn step_line(&self) -> String {
        fit(self.step_parts(), None)
    }

    /// `loss    ▇▆▅▄▃▂▂▁` and `speed   ▁▂▃▅▆▇ tokens/s`: the stage's
    /// recent points, as many as `width` columns hold (two points at least).
    pub fn trend_lines(&self, width: Option<usize>) -> Vec<String> {
        let room = |taken: usize| width.map_or(SPARK_WIDTH, |w| w.saturating_sub(taken));
        let mut lines = Vec::new();
        if self.loss_history.len() >= 2 {
            let spark = sparkline(self.loss_history.iter().copied(), room(8));
            lines.push(format!("loss    {spark}"));
        }
        if let (true, Some((unit, _))) = (self.rate_history.len() >= 2, &self.throughput) {
            let suffix = format!(" {unit}/s");
            let spark = sparkline(
                self.rate_history.iter().copied(),
                room(8 + suffix.chars().count()),
            );
            lines.push(format!("speed   {spark}{suffix}"));
        }
        lines
    }

    /// `stage   round-1/finetune`; a multi-stage run's says where the whole
    /// run is (`finetune · round 1/3 · run 900/2400 steps (38%)`).
    pub fn stage_line(&self) -> Option<String> {
        match (&self.progress, &self.stage) {
            (Some(progress), _) => Some(format!("stage   {}", progress.label())),
            (None, Some(stage)) => Some(format!("stage   {stage}")),
            (None, None) => None,
        }
    }

    /// `eval    val_loss 1.9081  hellaswag_acc 0.2500  (step 300)`
    pub fn eval_line(&self) -> Option<String> {
        if self.eval.is_empty() {
            return None;
        }
        let values: Vec<String> = self
            .eval
            .iter()
            .map(|(k, v)| format!("{k} {v:.4}"))
            .collect();
        Some(match self.eval_step {
            Some(step) => format!("eval    {}  (step {step})", values.join("  ")),
            None => format!("eval    {}", values.join("  ")),
        })
    }

    /// `gpu 0   97% util  30.0/80.0 GB`, one per GPU.
    pub fn gpu_lines(&self) -> Vec<String> {
        self.gpus
            .iter()
            .map(|g| {
                format!(
                    "gpu {:<3} {:.0}% util  {:.1}/{:.1} GB",
                    g.index, g.util_percent, g.used_gb, g.total_gb
                )
            })
            .collect()
    }

    pub fn state_line(&self) -> String {
        match &self.state {
            None | Some(State::Running(None)) => "status  running".into(),
            Some(State::Running(Some(why))) => format!("status  running ({why})"),
            Some(State::Unknown(why)) => format!("status  unknown ({why}); still watching"),
            Some(State::Ended { status, detail }) => format!("status  {status}: {detail}"),
            Some(State::Lost(why)) => format!("status  lost ({why})"),
        }
    }

    /// The whole block a terminal `width` columns wide shows (a line
    /// there holds `width - 1` characters: none wraps, which would break
    /// the redraw). The step line drops its least important parts first,
    /// never its ETA; the others are cut at their end.
    pub fn lines(&self, width: Option<usize>) -> Vec<String> {
        // A command's metric keys, stage names and reasons are its own:
        // control characters are escaped (one screen line each, no escape
        // sequence reaches the terminal; issue #40), before measuring.
        let escape = |line: &str| crate::output::escape_control(line).into_owned();
        let room = width.filter(|&w| w > 1).map(|w| w - 1);
        let cut = |line: String| match room {
            Some(room) => escape(&line).chars().take(room).collect(),
            None => escape(&line),
        };
        let mut lines = vec![cut(format!("run     {} ({})", self.run_id, self.place))];
        lines.extend(self.stage_line().map(cut));
        let step = self
            .step_parts()
            .into_iter()
            .map(|p| Part::new(p.rank, escape(&p.text)))
            .collect();
        lines.push(fit(step, room));
        lines.extend(self.trend_lines(room).into_iter().map(cut));
        lines.extend(self.eval_line().map(cut));
        lines.extend(self.gpu_lines().into_iter().map(cut));
        lines.push(cut(self.state_line()));
        lines
    }
}

/// Append to a bounded history.
fn push(history: &mut VecDeque<f64>, v: f64) {
    history.push_back(v);
    if history.len() > HISTORY {
        history.pop_front();
    }
}

fn gpu_of(v: &Value) -> Option<Gpu> {
    Some(Gpu {
        index: v.get("index")?.as_u64()?,
        util_percent: v.get("util_percent")?.as_f64()?,
        used_gb: v.get("memory_used_gb")?.as_f64()?,
        total_gb: v.get("memory_total_gb")?.as_f64()?,
    })
}

/// A rate people read at a glance: `15234`, `87.3`, `0.52`.
fn human(rate: f64) -> String {
    if rate >= 100.0 {
        format!("{rate:.0}")
    } else if rate >= 1.0 {
        format!("{rate:.1}")
    } else {
        format!("{rate:.2}")
    }
}

/// `45s`, `12m05s`, `3h07m`: the same clock as the training log's
/// progress lines.
pub fn duration(seconds: f64) -> String {
    envgen_experiments::engine::progress::clock(seconds)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A command's own metric keys and stage names reach the terminal with
    /// their control characters escaped (issue #40).
    #[test]
    fn escape_sequences_in_metrics_are_escaped_on_screen() {
        let mut view = View::new("run", "native");
        view.enter_stage(Some("stage\u{1b}[2J".into()), None);
        view.take(&serde_json::json!({"step": 1, "\u{1b}]0;x\u{7}_per_s": 2.0}));
        let lines = view.lines(None);
        assert!(
            lines.iter().all(|l| !l.chars().any(char::is_control)),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("stage\\u{1b}[2J")),
            "{lines:?}"
        );
    }

    #[test]
    fn a_gpt2_step_row_gives_step_total_loss_throughput_and_eta() {
        let mut view = View::new("r", "native");
        view.enter_stage(None, Some(300));
        view.take(&json!({"step": 0, "val_loss": 5.5}));
        for step in 1..=100 {
            view.take(&json!({"step": step, "loss": 2.5, "lr": 0.001,
                "tokens_per_s": 15234.4, "step_ms": 100.0}));
        }
        view.take(&json!({"step": 100, "loss": 2.25, "tokens_per_s": 15234.4,
            "step_ms": 100.0, "val_loss": 2.3, "hellaswag_acc": 0.25}));
        assert_eq!(
            view.step_line(),
            "step    100/300 (33%)  loss 2.2500  15234 tokens/s  ETA 20s"
        );
        assert_eq!(
            view.eval_line().unwrap(),
            "eval    val_loss 2.3000  hellaswag_acc 0.2500  (step 100)"
        );
    }

    #[test]
    fn gpu_rows_fill_the_gpu_lines_and_leave_the_step_alone() {
        let mut view = View::new("r", "docker");
        view.take(&json!({"step": 3, "loss": 1.0}));
        view.take(&json!({"time_s": 1.5, "gpu": [
            {"index": 0, "util_percent": 97, "memory_used_gb": 30.0, "memory_total_gb": 80.0},
            {"index": 1, "util_percent": 5, "memory_used_gb": 1.5, "memory_total_gb": 80.0}]}));
        assert_eq!(view.step, Some(3));
        assert_eq!(
            view.gpu_lines(),
            [
                "gpu 0   97% util  30.0/80.0 GB",
                "gpu 1   5% util  1.5/80.0 GB"
            ]
        );
    }

    #[test]
    fn a_new_stage_starts_its_steps_afresh_and_rows_may_carry_their_total() {
        let mut view = View::new("r", "native");
        view.enter_stage(Some("pretrain".into()), Some(40));
        view.take(&json!({"step": 40, "loss": 1.0, "step_ms": 5.0}));
        view.enter_stage(Some("round-1/finetune".into()), Some(10));
        assert_eq!(view.step, None);
        view.take(&json!({"step": 2, "loss": 0.5, "step_ms": 5.0}));
        assert_eq!(view.step_line(), "step    2/10 (20%)  loss 0.5000  ETA 0s");
        view.enter_stage(None, None);
        view.take(&json!({"step": 0, "total_steps": 25}));
        view.enter_stage(None, None);
        view.take(&json!({"step": 1, "loss": 0.5}));
        assert_eq!(view.total, Some(25));
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(44.6), "45s");
        assert_eq!(duration(725.0), "12m05s");
        assert_eq!(duration(11_220.0), "3h07m");
        assert_eq!(duration(-1.0), "0s");
    }
}
