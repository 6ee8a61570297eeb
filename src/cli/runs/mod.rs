//! `envgen runs list | show | compare | report | export | pack | cancel | watch`

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::Result;
use crate::launch::liveness::{self, Checker};
use crate::launch::{self, slurm};
use crate::runs::manifest;
use crate::runs::place::Place;
use crate::runs::{self, store, store::RunDir};

mod list;
mod watch;

/// Where run directories are looked up by id: the `--out` of `envgen run`.
#[derive(Debug, clap::Args)]
pub struct RunsDir {
    /// The directory holding run directories (`envgen run --out`); ids and
    /// unique id prefixes are looked up in it.
    #[arg(
        long = "runs-dir",
        value_name = "DIR",
        env = "ENVGEN_RUNS_DIR",
        default_value = "runs"
    )]
    pub dir: PathBuf,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List run directories: one aligned row per run, newest last.
    List(list::Args),
    /// Explain one run: config, profile, status, final metrics.
    Show {
        /// A run id (or a unique prefix of one) as `runs list` prints it, or a run directory.
        run: PathBuf,
        #[command(flatten)]
        runs_dir: RunsDir,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Same science config? Which config keys, hardware knobs and
    /// environment differ; metric deltas.
    Compare {
        /// Run ids, unique prefixes or run directories.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        #[command(flatten)]
        runs_dir: RunsDir,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write a Markdown + HTML report with loss curves and throughput plots.
    Report {
        /// Run ids, unique prefixes or run directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        #[command(flatten)]
        runs_dir: RunsDir,
        /// The report's folder (default: ./report).
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Write runs' metrics and config as TensorBoard event files, one
    /// folder DIR/<run_id>/ per run (a run's own are in its directory).
    Export {
        /// The folder to write the event files into.
        #[arg(long, value_name = "DIR")]
        tensorboard: PathBuf,
        /// Run ids, unique prefixes or run directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        #[command(flatten)]
        runs_dir: RunsDir,
    },
    /// Copy runs' small files (manifest, config, summary, metrics, logs,
    /// TensorBoard events) into DIR/<run_id>/ to commit to git: never
    /// checkpoints, weights or links (the runs folder is git-ignored).
    Pack {
        /// Run ids, unique prefixes or run directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        #[command(flatten)]
        runs_dir: RunsDir,
        /// The folder to pack into (made if missing).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        /// Files larger than this are left out (and listed), in MiB.
        #[arg(long, value_name = "MIB", default_value_t = 10)]
        max_file_size: u64,
    },
    /// Stop a run (native: SIGINT; Docker: the container; Slurm: scancel) or
    /// end a lost one; it is marked interrupted (resumable) or failed.
    Cancel {
        /// A run id, a unique prefix of one, or a run directory.
        run: PathBuf,
        #[command(flatten)]
        runs_dir: RunsDir,
    },
    /// Follow a run live until it ends: step/total, loss, eval metrics,
    /// throughput, ETA, GPUs, stage; exits with the run's final status.
    Watch(watch::Args),
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::List(args) => list::list(&args),
        Command::Show {
            run,
            runs_dir,
            json,
        } => show(&store::resolve(&run, &runs_dir.dir)?, json),
        Command::Compare {
            runs,
            runs_dir,
            json,
        } => compare(&resolve_all(&runs, &runs_dir)?, json),
        Command::Report {
            runs,
            runs_dir,
            out,
        } => report(&resolve_all(&runs, &runs_dir)?, out),
        Command::Cancel { run, runs_dir } => cancel(&store::resolve(&run, &runs_dir.dir)?),
        Command::Watch(args) => watch::execute(args),
        Command::Export {
            tensorboard,
            runs,
            runs_dir,
        } => export(&resolve_all(&runs, &runs_dir)?, &tensorboard),
        Command::Pack {
            runs,
            runs_dir,
            to,
            max_file_size,
        } => pack(&resolve_all(&runs, &runs_dir)?, &to, max_file_size),
    }
}

fn pack(runs: &[PathBuf], to: &Path, max_file_mib: u64) -> Result<i32> {
    for run in runs {
        let packed = runs::pack::pack(run, to, max_file_mib.saturating_mul(1 << 20))?;
        crate::output::outln!(
            "{} -> {}: {} files, {}",
            run.display(),
            packed.dest.display(),
            packed.files,
            mib(packed.bytes)
        );
        for skipped in &packed.skipped {
            crate::output::outln!(
                "  left out {} ({}, {})",
                skipped.path.display(),
                skipped.why,
                mib(skipped.bytes)
            );
        }
    }
    Ok(0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn resolve_all(names: &[PathBuf], runs_dir: &RunsDir) -> Result<Vec<PathBuf>> {
    names
        .iter()
        .map(|name| store::resolve(name, &runs_dir.dir))
        .collect()
}

/// What `runs show` and `runs list` say about one run directory. A run
/// without a summary is asked after where it trains: `running`, `lost`
/// (nothing trains it any more) or `unknown` (the place does not answer),
/// with the reason.
pub(super) fn explain(dir: &Path, checker: &mut Checker) -> Result<Value> {
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
            let live = launch::liveness_of(checker, dir, &manifest);
            (json!(live.status()), json!(live.reason()))
        }
    };
    let mut doc = json!({
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
        // What `runs list` shows as steps: done, or (still running) logged so far.
        "steps": summary.as_ref().map(|s| s.steps_done).or_else(|| list::last_logged_step(dir)),
        "final_metric": summary.as_ref().and_then(|s| list::headline(&manifest.experiment, &s.metrics)),
        "wall_s": summary.as_ref().map(|s| s.wall_s),
        "metrics": summary.as_ref().map(|s| &s.metrics),
    });
    if let Some(command) = &manifest.environment.command {
        // Only for command runs: the experiments' documents stay as they were.
        doc["command"] = serde_json::to_value(command)?;
    }
    if let Some(options) = manifest
        .environment
        .docker
        .as_ref()
        .and_then(|d| d.options.as_ref())
    {
        // Docker runs: the container's knobs and what they relax (issue #39).
        doc["container"] = json!({
            "options": options,
            "relaxed": options.relaxations(),
        });
    }
    Ok(doc)
}

fn open_all(paths: &[PathBuf]) -> Result<Vec<RunDir>> {
    paths.iter().map(|p| RunDir::open(p)).collect()
}

fn compare(paths: &[PathBuf], as_json: bool) -> Result<i32> {
    let comparison = runs::compare::compare(&open_all(paths)?);
    if as_json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        crate::output::out!("{}", runs::compare::render_text(&comparison));
    }
    Ok(0)
}

fn report(paths: &[PathBuf], out: Option<PathBuf>) -> Result<i32> {
    let runs = open_all(paths)?;
    let out = out.unwrap_or_else(|| PathBuf::from("report"));
    for file in runs::report::write_report(&runs, &out)? {
        crate::output::outln!("{}", file.display());
    }
    Ok(0)
}

fn export(paths: &[PathBuf], tensorboard: &Path) -> Result<i32> {
    for file in runs::tensorboard::export(&open_all(paths)?, tensorboard)? {
        crate::output::outln!("{}", file.display());
    }
    Ok(0)
}

/// `outln!` for a line of `runs show`: the run's strings are user-derived
/// (metric keys, argv, paths), so control characters are escaped before
/// they reach the terminal (issue #40).
macro_rules! shown {
    ($($arg:tt)*) => {
        crate::output::outln!("{}", crate::output::escape_control(&format!($($arg)*)))
    };
}

fn show(dir: &Path, as_json: bool) -> Result<i32> {
    let dir = RunDir::open(dir)?.path;
    let run = explain(&dir, &mut Checker::default())?;
    if as_json {
        crate::output::outln!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(0);
    }
    shown!("run         {}", run["run_id"].as_str().unwrap_or(""));
    shown!(
        "experiment  {} (preset {})",
        run["experiment"].as_str().unwrap_or(""),
        run["preset"].as_str().unwrap_or("-")
    );
    match run["status_reason"].as_str() {
        Some(why) => shown!(
            "status      {} ({why})",
            run["status"].as_str().unwrap_or("")
        ),
        None => shown!("status      {}", run["status"].as_str().unwrap_or("")),
    }
    shown!("config_hash {}", run["config_hash"].as_str().unwrap_or(""));
    match run["command"].as_object() {
        // A command picks its own knobs: its line and code say more.
        Some(command) => show_command(command),
        None => shown!("profile     {}", knobs(&run["profile"])),
    }
    shown!("where       {}", run["where"].as_str().unwrap_or("-"));
    if let Some(job) = run["slurm_job"].as_object() {
        shown!(
            "slurm job   {} {}",
            job.get("job").and_then(Value::as_str).unwrap_or("-"),
            job.get("state").and_then(Value::as_str).unwrap_or("-")
        );
    }
    if let Some(image) = run["image"].as_object() {
        shown!(
            "image       {} {}",
            image.get("ref").and_then(Value::as_str).unwrap_or("-"),
            image.get("digest").and_then(Value::as_str).unwrap_or("-")
        );
    }
    if let Some(relaxed) = run["container"]["relaxed"].as_array() {
        let relaxed: Vec<&str> = relaxed.iter().filter_map(Value::as_str).collect();
        match relaxed.is_empty() {
            true => shown!("container   hardened (no network, private IPC, code read-only)"),
            false => shown!("container   relaxed: {}", relaxed.join(", ")),
        }
    }
    shown!(
        "started     {}  finished {}",
        run["started_at"].as_str().unwrap_or("-"),
        run["finished_at"].as_str().unwrap_or("-")
    );
    if let Some(metrics) = run["metrics"].as_object() {
        for (k, v) in metrics {
            shown!("  {k:<32} {v}");
        }
    }
    Ok(0)
}

/// A command run's line, directory and git state, for `runs show`.
fn show_command(command: &serde_json::Map<String, Value>) {
    let argv: Vec<String> = command["argv"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| w.as_str().unwrap_or("").to_string())
        .collect();
    shown!("command     {argv:?}");
    shown!("workdir     {}", command["workdir"].as_str().unwrap_or("-"));
    match command["git"].as_object() {
        Some(git) => shown!(
            "git         {}, uncommitted diff {}, {} untracked",
            git["commit"].as_str().unwrap_or("(no commit)"),
            git["diff_hash"].as_str().unwrap_or("none"),
            git["untracked"].as_array().map_or(0, Vec::len)
        ),
        None => shown!("git         not a git repository"),
    }
}

/// The hardware knobs in a line: `cpu (cpu fp32, micro-batch 16 × 1, 2 threads)`.
fn knobs(profile: &Value) -> String {
    let text = |key: &str| profile[key].as_str().unwrap_or("?").to_string();
    let number = |key: &str| profile[key].as_u64().map_or("?".into(), |n| n.to_string());
    let threads = profile["threads"]
        .as_u64()
        .map(|n| format!(", {n} threads"))
        .unwrap_or_default();
    let gen_batch = profile["gen_batch"]
        .as_u64()
        .map(|n| format!(", {n} rows per generation call"))
        .unwrap_or_default();
    format!(
        "{} ({} {} on {}, micro-batch {} × {} accumulated{threads}{gen_batch})",
        profile["name"].as_str().unwrap_or("no profile"),
        text("backend"),
        text("precision"),
        text("device"),
        number("micro_batch"),
        number("grad_accum"),
    )
}

/// `runs cancel RUN`: stop a run that has not ended wherever it trains
/// (it checkpoints and ends `interrupted`), or end a lost one; then say
/// how to resume it.
fn cancel(dir: &Path) -> Result<i32> {
    let dir = RunDir::open(dir)?.path;
    let manifest = manifest::read(&dir)?;
    let cancelled = launch::cancel::cancel(&dir)?;
    let summary = &cancelled.outcome.summary;
    crate::output::outln!(
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
    match manifest.environment.place {
        // `--where native` is the default.
        Place::Native => {}
        place @ (Place::Docker | Place::Slurm) => {
            words.extend(["--where".to_string(), place.name().to_string()])
        }
    }
    words.extend(manifest.environment.launch_words());
    words.extend(["--resume".to_string(), dir.display().to_string()]);
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}
