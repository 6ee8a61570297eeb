//! `envgen runs list`: one aligned row per run directory, with filters.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use crate::error::{Result, UserError};
use crate::launch::liveness::Checker;
use crate::runs::store;

/// The statuses a run can be listed with (docs/cli.md, `runs list`).
const STATUSES: [&str; 6] = [
    "completed",
    "interrupted",
    "failed",
    "running",
    "lost",
    "unknown",
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory holding run directories (`envgen run --out`).
    #[arg(
        long = "runs-dir",
        alias = "out",
        value_name = "DIR",
        env = "ENVGEN_RUNS_DIR",
        default_value = "runs"
    )]
    runs_dir: PathBuf,
    /// Only runs of this experiment (gpt2, hrm-sudoku, rft, quantize).
    #[arg(long, value_name = "NAME")]
    experiment: Option<String>,
    /// Only runs with this status.
    #[arg(long, value_parser = STATUSES)]
    status: Option<String>,
    /// Only runs started since: a date (2026-11-20), an RFC 3339 time, or an
    /// age (30m, 12h, 7d).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn list(args: &Args) -> Result<i32> {
    // Flags first: a bad --since is exit 2 before any directory is read.
    let since = args.since.as_deref().map(parse_since).transpose()?;
    let mut checker = Checker::default();
    let dirs = store::run_dirs(&args.runs_dir);
    let mut runs = Vec::new();
    for dir in &dirs {
        let Ok(run) = super::explain(dir, &mut checker) else {
            continue;
        };
        let keep = args
            .experiment
            .as_ref()
            .is_none_or(|e| run["experiment"].as_str() == Some(e))
            && args
                .status
                .as_ref()
                .is_none_or(|s| run["status"].as_str() == Some(s))
            && since.is_none_or(|t| started(&run).is_some_and(|s| s >= t));
        if keep {
            runs.push(run);
        }
    }
    runs.sort_by_key(started);
    if args.json {
        crate::output::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({ "runs": runs }))?
        );
        return Ok(0);
    }
    if dirs.is_empty() {
        // Said on stderr, so a script reading stdout sees an empty list.
        eprintln!(
            "envgen: no run directories in {} (give --runs-dir DIR or set ENVGEN_RUNS_DIR)",
            args.runs_dir.display()
        );
    }
    crate::output::out!("{}", table(&runs));
    Ok(0)
}

/// The aligned text table: a header and one row per run; a `lost` or
/// `unknown` run has the reason after its row.
fn table(runs: &[Value]) -> String {
    let header = [
        "ID",
        "EXPERIMENT",
        "PRESET",
        "STATUS",
        "WHERE",
        "PROFILE",
        "STEPS",
        "FINAL METRIC",
        "STARTED",
    ];
    // Cells come from run directories (ids, presets, metric names, reasons):
    // control characters are escaped before widths are measured (issue #40).
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            row(run)
                .into_iter()
                .map(|cell| crate::output::escape_control(&cell).into_owned())
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>, reason: Option<&str>| {
        let mut text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        if let Some(why) = reason {
            text.push(format!("({})", crate::output::escape_control(why)));
        }
        text.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect(), None);
    for (run, cells) in runs.iter().zip(rows) {
        let reason = match run["status"].as_str() {
            Some("lost" | "unknown") => run["status_reason"].as_str(),
            _ => None,
        };
        out += &line(cells, reason);
    }
    out
}

fn row(run: &Value) -> Vec<String> {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let profile = &run["profile"];
    let profile = match profile["name"].as_str() {
        Some(name) => name.to_string(),
        None => format!(
            "{} {}",
            profile["backend"].as_str().unwrap_or("?"),
            profile["precision"].as_str().unwrap_or("?")
        ),
    };
    let final_metric = match &run["final_metric"] {
        Value::Object(m) => format!(
            "{} {}",
            m.get("name").and_then(Value::as_str).unwrap_or("?"),
            m.get("value").and_then(Value::as_str).unwrap_or("?")
        ),
        _ => "-".into(),
    };
    let started = run["started_at"]
        .as_str()
        .map(|s| s.get(..16).unwrap_or(s).replace('T', " "))
        .unwrap_or_else(|| "-".into());
    vec![
        text(&run["run_id"]),
        text(&run["experiment"]),
        text(&run["preset"]),
        text(&run["status"]),
        text(&run["where"]),
        profile,
        run["steps"]
            .as_u64()
            .map_or_else(|| "-".into(), |s| s.to_string()),
        final_metric,
        started,
    ]
}

fn started(run: &Value) -> Option<OffsetDateTime> {
    let text = run["started_at"].as_str()?;
    OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

/// The experiment's headline metric in a summary's metrics, as text for
/// the table: a number to 4 significant digits, a list (quantize's
/// schemes) by its length.
pub fn headline(experiment: &str, metrics: &Map<String, Value>) -> Option<Value> {
    let name = crate::launch::command::experiment_named(experiment)?.headline_metric();
    let value = match metrics.get(name)? {
        Value::Number(n) => format_number(n.as_f64()?),
        Value::Array(items) => items.len().to_string(),
        Value::String(s) => s.clone(),
        _ => return None,
    };
    Some(json!({ "name": name, "value": value }))
}

fn format_number(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e5 || x.abs() < 1e-3) {
        format!("{x:.3e}")
    } else {
        // 4 significant digits, without trailing zeros.
        let decimals = (3 - x.abs().log10().floor().max(0.0) as i32).max(0) as usize;
        let text = format!("{x:.decimals$}");
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    }
}

/// The last `step` in `metrics.jsonl`, read from its tail (a long run's log
/// is large; the last few lines are enough).
pub fn last_logged_step(dir: &Path) -> Option<u64> {
    let mut file = std::fs::File::open(dir.join("metrics.jsonl")).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)))
        .ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|row| row["step"].as_u64())
}

/// `--since`: a date, an RFC 3339 time, or an age back from now.
fn parse_since(text: &str) -> Result<OffsetDateTime> {
    let bad = || {
        UserError::usage(format!("--since {text}: not a date, a time or an age"))
            .with_fix("give e.g. --since 2026-11-20, --since 2026-11-20T08:00:00Z or --since 12h (s, m, h, d)")
            .into()
    };
    if let Ok(t) = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        return Ok(t);
    }
    let date_format = time::macros::format_description!("[year]-[month]-[day]");
    if let Ok(date) = time::Date::parse(text, &date_format) {
        return Ok(date.midnight().assume_utc());
    }
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: i64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let age = time::Duration::seconds(n.checked_mul(seconds).ok_or_else(bad)?);
    OffsetDateTime::now_utc().checked_sub(age).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever a run directory holds, the table reaching the terminal has
    /// no control character but its line ends (issue #40).
    #[test]
    fn escape_sequences_in_a_run_are_escaped_in_the_table() {
        let run = json!({
            "run_id": "run\u{1b}[2J", "experiment": "command", "preset": "p\u{7}",
            "status": "lost", "status_reason": "gone\u{1b}]0;title\u{7}",
            "profile": {"name": "x\r"},
        });
        let text = table(&[run]);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("run\\u{1b}[2J"), "{text}");
    }

    #[test]
    fn since_takes_a_date_a_time_or_an_age_and_refuses_the_rest() {
        let day = parse_since("2026-11-20").unwrap();
        assert_eq!(day.unix_timestamp(), 1_795_132_800);
        let t = parse_since("2026-11-20T08:00:00Z").unwrap();
        assert_eq!(t.unix_timestamp() - day.unix_timestamp(), 8 * 3600);
        let ago = OffsetDateTime::now_utc() - parse_since("2h").unwrap();
        assert!((ago.whole_seconds() - 7200).abs() <= 5, "{ago}");
        for bad in ["yesterday", "2h30", "12", "-3d", "9999999999999999d", ""] {
            let err = parse_since(bad).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{bad}");
        }
    }

    #[test]
    fn the_table_aligns_columns_and_says_why_a_run_is_lost() {
        let runs = [
            json!({"run_id": "gpt2-tiny-1", "experiment": "gpt2", "preset": "tiny", "status": "completed",
                   "where": "native", "profile": {"name": "cpu"}, "steps": 10,
                   "final_metric": {"name": "final_val_loss", "value": "5.178"}, "started_at": "2026-11-26T05:20:31Z"}),
            json!({"run_id": "hrm-sudoku-tiny-2", "experiment": "hrm-sudoku", "preset": null, "status": "lost",
                   "status_reason": "process 7 on host h is gone without a summary",
                   "where": "docker", "profile": {"backend": "cuda", "precision": "bf16"}, "steps": null,
                   "started_at": "2026-11-26T06:00:00Z"}),
        ];
        let text = table(&runs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("ID                 EXPERIMENT  PRESET  STATUS"),
            "{text}"
        );
        let status_col = lines[0].find("STATUS").unwrap();
        assert_eq!(&lines[1][status_col..status_col + 9], "completed");
        assert_eq!(&lines[2][status_col..status_col + 4], "lost");
        assert!(lines[1].contains("final_val_loss 5.178") && lines[1].contains("2026-11-26 05:20"));
        assert!(
            lines[2].contains("cuda bf16")
                && lines[2].ends_with("(process 7 on host h is gone without a summary)")
        );
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(format_number(5.178495407), "5.178");
        assert_eq!(format_number(0.484), "0.484");
        assert_eq!(format_number(177.4157), "177.4");
        assert_eq!(format_number(1.0), "1");
        assert_eq!(format_number(123_456.0), "1.235e5");
        assert_eq!(format_number(0.0), "0");
    }

    #[test]
    fn the_headline_comes_from_the_experiments_registry() {
        let metrics: Map<String, Value> =
            serde_json::from_value(json!({"final_val_loss": 5.1784954, "schemes": [1, 2, 3]}))
                .unwrap();
        assert_eq!(
            headline("gpt2", &metrics).unwrap(),
            json!({"name": "final_val_loss", "value": "5.178"})
        );
        assert_eq!(headline("quantize", &metrics).unwrap()["value"], "3");
        assert_eq!(headline("rft", &metrics), None, "accuracy_after is absent");
        assert_eq!(headline("no-such", &metrics), None);
    }
}
