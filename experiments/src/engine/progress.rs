//! Training progress on stderr: an indicatif bar on a terminal, and off a
//! terminal (slurm.out, nohup.out, a pipe) plain lines a job file can be
//! read from — indicatif draws nothing there, so a long run printed
//! nothing between its start and its end (issue #39).
//!
//! A line is printed every `ENVGEN_PROGRESS_EVERY` (default `30s,10%`:
//! every 30 seconds or every tenth of the total, whichever comes first) and
//! at the end, e.g. `progress: step 30/100 (30%) loss 4.1234 5120
//! tokens/s elapsed 12s eta 28s`; no ANSI codes. `-q` silences both kinds.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::UserError;

/// The environment variable that sets how often a plain line is printed.
pub const PROGRESS_EVERY_ENV: &str = "ENVGEN_PROGRESS_EVERY";
const DEFAULT_EVERY: &str = "30s,10%";

/// How often a plain progress line is printed: after `seconds` have passed
/// or `percent` of the total has been done since the last line, whichever
/// comes first (either may be off).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cadence {
    pub seconds: Option<f64>,
    pub percent: Option<f64>,
}

impl Cadence {
    /// Parse `30s`, `10%` or both, comma-separated (`30s,10%`).
    pub fn parse(text: &str) -> Result<Cadence, UserError> {
        let mut cadence = Cadence {
            seconds: None,
            percent: None,
        };
        for part in text.split(',').map(str::trim) {
            let (number, slot) = if let Some(n) = part.strip_suffix('s') {
                (n, &mut cadence.seconds)
            } else if let Some(n) = part.strip_suffix('%') {
                (n, &mut cadence.percent)
            } else {
                return Err(bad_cadence(text));
            };
            match number.trim().parse::<f64>() {
                Ok(value) if value > 0.0 && value.is_finite() && slot.is_none() => {
                    *slot = Some(value)
                }
                _ => return Err(bad_cadence(text)),
            }
        }
        Ok(cadence)
    }

    /// The cadence `ENVGEN_PROGRESS_EVERY` sets (the default when unset).
    pub fn from_env() -> Result<Cadence, UserError> {
        match std::env::var(PROGRESS_EVERY_ENV) {
            Ok(text) if !text.trim().is_empty() => Cadence::parse(&text),
            _ => Cadence::parse(DEFAULT_EVERY),
        }
    }
}

fn bad_cadence(text: &str) -> UserError {
    UserError::usage(format!(
        "{PROGRESS_EVERY_ENV}={text:?} is not a progress cadence"
    ))
    .with_fix(format!(
        "{PROGRESS_EVERY_ENV}=30s (seconds), =10% (of the steps), or both: ={DEFAULT_EVERY} (the default)"
    ))
}

/// Progress of one loop (training steps, questions generated): what
/// [`progress_bar`] returns. Methods take `&self`, as indicatif's do, so a
/// callback can move it.
pub struct Progress {
    kind: Kind,
}

enum Kind {
    Hidden,
    Bar(indicatif::ProgressBar),
    Lines(Mutex<Lines>),
}

struct Lines {
    cadence: Cadence,
    prefix: String,
    noun: &'static str,
    message: String,
    total: u64,
    position: u64,
    started: Instant,
    start_position: u64,
    printed_at: Instant,
    printed_position: u64,
}

/// Progress on stderr: hidden when disabled or under `--quiet`, a bar on
/// a terminal, plain lines off one. `done` is where a resumed loop starts.
pub fn progress_bar(enabled: bool, total: u64, done: u64) -> Progress {
    if !enabled || crate::notice::quiet() {
        return Progress { kind: Kind::Hidden };
    }
    if !std::io::stderr().is_terminal() {
        // The CLI refuses a bad value before a run starts (exit 2).
        let cadence = Cadence::from_env()
            .unwrap_or_else(|_| Cadence::parse(DEFAULT_EVERY).expect("the default cadence parses"));
        return Progress::lines(cadence, total, done, Instant::now());
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{prefix}{bar:30} {pos}/{len} {msg} eta {eta}")
    {
        bar.set_style(style);
    }
    bar.set_position(done);
    Progress {
        kind: Kind::Bar(bar),
    }
}

impl Progress {
    fn lines(cadence: Cadence, total: u64, done: u64, now: Instant) -> Progress {
        Progress {
            kind: Kind::Lines(Mutex::new(Lines {
                cadence,
                prefix: String::new(),
                noun: "",
                message: String::new(),
                total,
                position: done,
                started: now,
                start_position: done,
                printed_at: now,
                printed_position: done,
            })),
        }
    }

    /// What the count counts, written before it in a plain line ("step").
    pub fn counting(self, noun: &'static str) -> Progress {
        if let Kind::Lines(lines) = &self.kind {
            lines.lock().unwrap_or_else(|e| e.into_inner()).noun = noun;
        }
        self
    }

    pub fn set_prefix(&self, prefix: impl Into<String>) {
        match &self.kind {
            Kind::Hidden => {}
            Kind::Bar(bar) => bar.set_prefix(prefix.into()),
            Kind::Lines(lines) => {
                lines.lock().unwrap_or_else(|e| e.into_inner()).prefix = prefix.into()
            }
        }
    }

    /// Set before [`set_position`](Self::set_position): a plain line is
    /// printed by the position that makes it due, with this message.
    pub fn set_message(&self, message: impl Into<String>) {
        match &self.kind {
            Kind::Hidden => {}
            Kind::Bar(bar) => bar.set_message(message.into()),
            Kind::Lines(lines) => {
                lines.lock().unwrap_or_else(|e| e.into_inner()).message = message.into()
            }
        }
    }

    pub fn set_position(&self, position: u64) {
        match &self.kind {
            Kind::Hidden => {}
            Kind::Bar(bar) => bar.set_position(position),
            Kind::Lines(lines) => {
                let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(line) = lines.advance(position, Instant::now()) {
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            }
        }
    }

    pub fn finish_and_clear(&self) {
        if let Kind::Bar(bar) = &self.kind {
            bar.finish_and_clear();
        }
    }
}

impl Lines {
    /// Move to `position`; the line to print when one is due.
    fn advance(&mut self, position: u64, now: Instant) -> Option<String> {
        self.position = position;
        if position == self.printed_position {
            return None;
        }
        let by_time = self
            .cadence
            .seconds
            .is_some_and(|s| now.duration_since(self.printed_at) >= Duration::from_secs_f64(s));
        let by_share = self.cadence.percent.is_some_and(|p| {
            let every = ((self.total as f64 * p / 100.0).ceil() as u64).max(1);
            position - self.printed_position.min(position) >= every
        });
        if !(by_time || by_share || position >= self.total) {
            return None;
        }
        self.printed_at = now;
        self.printed_position = position;
        Some(self.line(now))
    }

    fn line(&self, now: Instant) -> String {
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let done = self.position.saturating_sub(self.start_position);
        let left = self.total.saturating_sub(self.position);
        let eta = match (done, left) {
            (_, 0) => "0s".to_string(),
            (0, _) => "?".to_string(),
            _ => clock(elapsed / done as f64 * left as f64),
        };
        let percent = match self.total {
            0 => 100,
            total => self.position * 100 / total,
        };
        let mut line = format!("progress: {}", self.prefix);
        if !self.noun.is_empty() {
            line.push_str(self.noun);
            line.push(' ');
        }
        line.push_str(&format!("{}/{} ({percent}%)", self.position, self.total));
        if !self.message.is_empty() {
            line.push(' ');
            line.push_str(&self.message);
        }
        line.push_str(&format!(" elapsed {} eta {eta}", clock(elapsed)));
        line
    }
}

/// `1h02m`, `3m05s`, `12s` (also `runs watch`'s durations).
pub fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(cadence: &str, total: u64, done: u64) -> (Lines, Instant) {
        let now = Instant::now();
        let Kind::Lines(lines) =
            Progress::lines(Cadence::parse(cadence).unwrap(), total, done, now).kind
        else {
            unreachable!()
        };
        (lines.into_inner().unwrap(), now)
    }

    #[test]
    fn a_line_every_tenth_of_the_steps_and_at_the_end() {
        let (mut lines, t0) = lines_of("30s,10%", 25, 0);
        lines.noun = "step";
        let printed: Vec<u64> = (1..=25)
            .filter(|&step| {
                lines.message = format!("loss {step}");
                lines.advance(step, t0).is_some()
            })
            .collect();
        // 10 % of 25 is 2.5 steps: a line every 3, and the last step.
        assert_eq!(printed, [3, 6, 9, 12, 15, 18, 21, 24, 25]);
        let last = lines.line(t0 + Duration::from_secs(75));
        assert_eq!(
            last,
            "progress: step 25/25 (100%) loss 25 elapsed 1m15s eta 0s"
        );
    }

    #[test]
    fn a_line_after_the_seconds_and_an_eta_from_this_session() {
        // Resumed at step 100 of 1000: the rate counts this session only.
        let (mut lines, t0) = lines_of("30s", 1000, 100);
        assert_eq!(lines.advance(101, t0 + Duration::from_secs(10)), None);
        let line = lines.advance(110, t0 + Duration::from_secs(30)).unwrap();
        // 10 steps in 30 s, 890 left: 2670 s.
        assert_eq!(line, "progress: 110/1000 (11%) elapsed 30s eta 44m30s");
        assert_eq!(lines.advance(111, t0 + Duration::from_secs(40)), None);
    }

    #[test]
    fn cadences_parse_and_bad_ones_name_the_variable() {
        let both = Cadence::parse(" 5s , 20% ").unwrap();
        assert_eq!((both.seconds, both.percent), (Some(5.0), Some(20.0)));
        for bad in ["", "30", "0s", "-1%", "10%,20%", "fast"] {
            let err = Cadence::parse(bad).unwrap_err();
            assert!(err.message.contains(PROGRESS_EVERY_ENV), "{bad}: {err:?}");
        }
        assert_eq!(clock(3725.0), "1h02m");
    }
}
