//! `envgen runs list | show | compare | report | export | cancel`

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::Result;
use crate::launch::liveness::{self, Checker};
use crate::launch::{self, slurm};
use crate::runs::manifest;
use crate::runs::{self, store::RunDir};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List run directories.
    List {
        #[arg(long, value_name = "DIR", default_value = "runs")]
        out: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Explain one run: config, profile, status, final metrics.
    Show {
        run: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Same science config? What differs in profile, image, host; metric deltas.
    Compare {
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Write a Markdown + HTML report with loss curves and throughput plots.
    Report {
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Write runs' metrics and config as TensorBoard event files, one
    /// folder DIR/<run_id>/ per run (a run's own are in its tb/).
    Export {
        #[arg(long, value_name = "DIR")]
        tensorboard: PathBuf,
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Stop a run (native: SIGINT; Docker: the container; Slurm: scancel) or
    /// end a lost one; it is marked interrupted (resumable) or failed.
    Cancel { run: PathBuf },
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::List { out, json } => list(&out, json),
        Command::Show { run, json } => show(&run, json),
        Command::Compare { runs, json } => compare(&runs, json),
        Command::Report { runs, out } => report(&runs, out),
        Command::Export { tensorboard, runs } => export(&runs, &tensorboard),
        Command::Cancel { run } => cancel(&run),
    }
}

/// What `runs show` and `runs list` say about one run directory. A run
/// without a summary is asked after where it trains: `running`, `lost`
/// (nothing trains it any more) or `unknown` (the place does not answer),
/// with the reason.
fn explain(dir: &Path, checker: &mut Checker) -> Result<Value> {
    let manifest = manifest::read(dir)?;
    let summary = liveness::final_summary(dir);
    // A Slurm run without a summary yet: ask Slurm where its job is.
    let job = if summary.is_none() {
        slurm::live_state(&manifest)
    } else {
        manifest
            .environment
            .slurm
            .as_ref()
            .map(serde_json::to_value)
            .transpose()?
    };
    let (status, reason) = match &summary {
        Some(s) => (
            serde_json::to_value(s.status)?,
            s.metrics.get("reason").cloned().unwrap_or(Value::Null),
        ),
        None => {
            let live = checker.check(dir, &manifest);
            (json!(live.status()), json!(live.reason()))
        }
    };
    Ok(json!({
        "run_dir": dir,
        "run_id": manifest.run_id,
        "experiment": manifest.experiment,
        "preset": manifest.preset,
        "status": status,
        "status_reason": reason,
        "config_hash": manifest.config_hash,
        "profile": manifest.profile,
        "where": manifest.environment.place,
        "image": manifest.environment.image,
        "slurm_job": job,
        "started_at": manifest.started_at,
        "finished_at": manifest.finished_at,
        "steps_done": summary.as_ref().map(|s| s.steps_done),
        "wall_s": summary.as_ref().map(|s| s.wall_s),
        "metrics": summary.as_ref().map(|s| &s.metrics),
    }))
}

fn list(out: &Path, as_json: bool) -> Result<i32> {
    let mut runs = Vec::new();
    let mut checker = Checker::default();
    if let Ok(entries) = std::fs::read_dir(out) {
        let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            if dir.join("manifest.json").is_file() {
                if let Ok(run) = explain(&dir, &mut checker) {
                    runs.push(run);
                }
            }
        }
    }
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "runs": runs }))?
        );
    } else {
        for r in &runs {
            let status = r["status"].as_str().unwrap_or("");
            print!(
                "{}  {status}  {}",
                r["run_id"].as_str().unwrap_or(""),
                r["config_hash"].as_str().unwrap_or("")
            );
            // Why a run is lost (or cannot be told), on its line.
            match (status, r["status_reason"].as_str()) {
                ("lost" | "unknown", Some(why)) => println!("  ({why})"),
                _ => println!(),
            }
        }
    }
    Ok(0)
}

fn open_all(paths: &[PathBuf]) -> Result<Vec<RunDir>> {
    paths.iter().map(|p| RunDir::open(p)).collect()
}

fn compare(paths: &[PathBuf], as_json: bool) -> Result<i32> {
    let comparison = runs::compare::compare(&open_all(paths)?);
    if as_json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", runs::compare::render_text(&comparison));
    }
    Ok(0)
}

fn report(paths: &[PathBuf], out: Option<PathBuf>) -> Result<i32> {
    let runs = open_all(paths)?;
    let out = out.unwrap_or_else(|| PathBuf::from("report"));
    for file in runs::report::write_report(&runs, &out)? {
        println!("{}", file.display());
    }
    Ok(0)
}

fn export(paths: &[PathBuf], tensorboard: &Path) -> Result<i32> {
    for file in runs::tensorboard::export(&open_all(paths)?, tensorboard)? {
        println!("{}", file.display());
    }
    Ok(0)
}

fn show(dir: &Path, as_json: bool) -> Result<i32> {
    let dir = RunDir::open(dir)?.path;
    let run = explain(&dir, &mut Checker::default())?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(0);
    }
    println!("run         {}", run["run_id"].as_str().unwrap_or(""));
    println!(
        "experiment  {} (preset {})",
        run["experiment"].as_str().unwrap_or(""),
        run["preset"].as_str().unwrap_or("-")
    );
    match run["status_reason"].as_str() {
        Some(why) => println!(
            "status      {} ({why})",
            run["status"].as_str().unwrap_or("")
        ),
        None => println!("status      {}", run["status"].as_str().unwrap_or("")),
    }
    println!("config_hash {}", run["config_hash"].as_str().unwrap_or(""));
    println!("profile     {}", run["profile"]);
    println!("where       {}", run["where"].as_str().unwrap_or("-"));
    if let Some(job) = run["slurm_job"].as_object() {
        println!(
            "slurm job   {} {}",
            job.get("job").and_then(Value::as_str).unwrap_or("-"),
            job.get("state").and_then(Value::as_str).unwrap_or("-")
        );
    }
    if let Some(image) = run["image"].as_object() {
        println!(
            "image       {} {}",
            image.get("ref").and_then(Value::as_str).unwrap_or("-"),
            image.get("digest").and_then(Value::as_str).unwrap_or("-")
        );
    }
    println!(
        "started     {}  finished {}",
        run["started_at"].as_str().unwrap_or("-"),
        run["finished_at"].as_str().unwrap_or("-")
    );
    if let Some(metrics) = run["metrics"].as_object() {
        for (k, v) in metrics {
            println!("  {k:<32} {v}");
        }
    }
    Ok(0)
}

/// `runs cancel RUN`: stop a run that has not ended wherever it trains
/// (it checkpoints and ends `interrupted`), or end a lost one; then say
/// how to resume it.
fn cancel(dir: &Path) -> Result<i32> {
    let dir = RunDir::open(dir)?.path;
    let manifest = manifest::read(&dir)?;
    let cancelled = launch::cancel::cancel(&dir)?;
    let summary = &cancelled.outcome.summary;
    println!(
        "{}: {} after {} steps ({}); resume with `{}`",
        dir.display(),
        serde_json::to_value(summary.status)?
            .as_str()
            .unwrap_or("?"),
        summary.steps_done,
        cancelled.what,
        resume_command(&manifest, &dir)
    );
    Ok(0)
}

/// `envgen run EXP --resume DIR`, in the place the run was launched to.
fn resume_command(manifest: &manifest::Manifest, dir: &Path) -> String {
    let mut words = vec![
        "envgen".to_string(),
        "run".into(),
        manifest.experiment.clone(),
    ];
    let place = &manifest.environment.place;
    if place != "native" {
        words.extend(["--where".to_string(), place.clone()]);
    }
    words.extend(manifest.environment.launch_args.iter().flatten().cloned());
    words.extend(["--resume".to_string(), dir.display().to_string()]);
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}
