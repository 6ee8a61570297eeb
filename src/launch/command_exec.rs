//! Running a user command in its run directory: spawned directly (argv as
//! recorded, never through a shell), stdout and stderr each copied to the
//! terminal and to `stdout.log`/`stderr.log`, `ENVGEN_RUN_DIR` and
//! `ENVGEN_METRICS` exported, a stop (Ctrl-C, `runs cancel`) forwarded as
//! SIGINT, and `summary.json` written from how it ended plus the last value
//! of each number it logged as JSON lines.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use envgen_experiments::engine::run_files::TIME_KEY;
use envgen_experiments::engine::tensorboard::EventsFile;
use envgen_experiments::engine::{rundir, RunControl, Status, Summary, World};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::UserError;

/// The command a run runs (`[command]` of its `config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandLine {
    pub argv: Vec<String>,
    pub workdir: PathBuf,
    /// Processes under torchrun (`--nproc-per-node`); absent: the command alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc_per_node: Option<u32>,
    /// The command's TensorBoard directory (`--tensorboard-dir`), relative
    /// to `workdir` unless absolute: its scalars are imported at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard_dir: Option<PathBuf>,
}

/// How long a command may take to stop after the forwarded SIGINT before
/// it is killed (a training script's checkpoint-on-interrupt fits).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The directory in the run directory a command may write its outputs to
/// (`ENVGEN_OUTPUT_DIR`).
pub const OUTPUT_DIR: &str = "outputs";

/// The metrics file a command writes to (`ENVGEN_METRICS`): the user's own
/// path if they set one, else the run's `metrics.jsonl`.
fn metrics_path(run_dir: &Path) -> PathBuf {
    match std::env::var_os("ENVGEN_METRICS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => run_dir.join("metrics.jsonl"),
    }
}

/// Run `line` to its end in `control.run_dir`; the summary it wrote.
pub fn run(line: &CommandLine, control: &RunControl) -> anyhow::Result<Summary> {
    let run_dir = std::path::absolute(&control.run_dir)?;
    let metrics = metrics_path(&run_dir);
    let (program, args) = line
        .argv
        .split_first()
        .ok_or_else(|| UserError::usage("the command is empty"))?;
    // In a container the code is mounted elsewhere (`mounts::add_workspace`).
    let workdir = super::mounts::map_path(&line.workdir, &super::mounts::path_map_from_env())
        .unwrap_or_else(|| line.workdir.clone());
    // One torchrun agent per node when the run has several (`--nodes`):
    // node rank 0 keeps the run's files, the others their own logs.
    let node = control.world.as_ref().map(|w| w.rank).filter(|r| *r > 0);
    let own = |name: &str, ext: &str| match node {
        Some(rank) => run_dir.join(format!("{name}.node-{rank}.{ext}")),
        None => run_dir.join(format!("{name}.{ext}")),
    };
    // Doctor first, on the machine that runs it (a Slurm node, a container).
    super::preflight::check(&line.argv, &workdir, &own("preflight", "json"))?;
    let (program, args) = match line.nproc_per_node {
        Some(n) => under_torchrun(n, &line.argv, &workdir, &run_dir, control.world.as_ref())?,
        None => (program.into(), args.iter().map(Into::into).collect()),
    };
    let program = program.as_os_str();
    // A writable place for checkpoints and outputs wherever the command
    // runs, a read-only /workspace in Docker included (issue #39).
    let outputs = run_dir.join(OUTPUT_DIR);
    std::fs::create_dir_all(&outputs)?;
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(&args)
        .current_dir(&workdir)
        .env("ENVGEN_RUN_DIR", &run_dir)
        .env("ENVGEN_METRICS", &metrics)
        .env("ENVGEN_OUTPUT_DIR", &outputs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a terminal's Ctrl-C reaches envgen only,
        // which forwards it once (to the whole group, e.g. torchrun's workers).
        .process_group(0)
        .spawn()
        .map_err(|e| {
            UserError::usage(format!(
                "cannot start `{}` in {}: {e}",
                program.to_string_lossy(),
                workdir.display()
            ))
            .with_fix("check the command after `--` (it runs without a shell: no pipes, no `&&`, no $VARS; wrap those in a script)")
        })?;
    // With --json envgen's stdout is one JSON document: the command's goes to stderr.
    let to_stdout = control.progress;
    let copies = [
        tee(child.stdout.take(), own("stdout", "log"), to_stdout)?,
        tee(child.stderr.take(), own("stderr", "log"), false)?,
    ];
    let mut events = live_events(&run_dir, &metrics).filter(|_| node.is_none());
    let (status, stopped) = wait(&mut child, control, &mut events, &metrics)?;
    if let (Some(dir), None) = (&line.tensorboard_dir, node) {
        import_tensorboard(&workdir.join(dir), &metrics);
    }
    if let Some(events) = &mut events {
        let _ = events.catch_up(&metrics);
    }
    finish_copies(copies, OUTPUT_GRACE);
    let mut summary = ended(status, stopped, started.elapsed().as_secs_f64());
    let (logged, last_step) = last_metrics(&metrics);
    summary.steps_done = last_step.unwrap_or(0);
    for (key, value) in logged {
        summary.metrics.entry(key).or_insert(value);
    }
    if let Some(mib) = children_peak_rss_mib() {
        summary.metrics.insert("peak_rss_mib".into(), json!(mib));
    }
    if node.is_none() {
        rundir::write_json(&run_dir.join("summary.json"), &summary)?;
    }
    Ok(summary)
}

/// `torchrun` running `argv` as `n` processes on this machine: the
/// launcher PyTorch users already use (its environment contract: RANK,
/// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
/// with `--no-python` so that the command runs as given, and each rank's
/// output also kept under `RUN_DIR/torchrun/`. The torchrun next to the
/// command's Python is preferred (a venv's), else the one on PATH.
/// Alone, it is `--standalone`; as one of several node ranks (`world`:
/// srun's tasks, or `--ranks` here) it meets the others by torchrun's
/// static rendezvous at the address envgen's launcher gave rank 0.
fn under_torchrun(
    n: u32,
    argv: &[String],
    workdir: &Path,
    run_dir: &Path,
    world: Option<&World>,
) -> anyhow::Result<(PathBuf, Vec<std::ffi::OsString>)> {
    let path = std::env::var_os("PATH");
    let beside_python = crate::probe::torch::python_of(argv, path.as_deref(), workdir)
        .and_then(|python| Some(python.parent()?.join("torchrun")))
        .filter(|t| t.is_file());
    let torchrun = match beside_python {
        Some(t) => t,
        None => which::which_in("torchrun", path.as_deref(), workdir).map_err(|_| {
            UserError::environment(
                "--nproc-per-node runs the command under torchrun, and no torchrun was found (next to the command's Python, or on PATH)",
            )
            .with_fix("install torch where the command runs (torchrun comes with it), or drop --nproc-per-node and start your workers yourself")
        })?,
    };
    Ok((torchrun, torchrun_args(n, argv, run_dir, world)))
}

fn torchrun_args(
    n: u32,
    argv: &[String],
    run_dir: &Path,
    world: Option<&World>,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = match world {
        None => vec!["--standalone".into()],
        Some(w) => vec![
            "--nnodes".into(),
            w.size.to_string().into(),
            "--node-rank".into(),
            w.rank.to_string().into(),
            "--master-addr".into(),
            w.rendezvous.0.clone().into(),
            "--master-port".into(),
            w.rendezvous.1.to_string().into(),
        ],
    };
    let logs = match world {
        Some(w) => run_dir.join("torchrun").join(format!("node-{}", w.rank)),
        None => run_dir.join("torchrun"),
    };
    args.extend([
        "--nproc-per-node".into(),
        n.to_string().into(),
        "--log-dir".into(),
        logs.into(),
        "--tee".into(),
        "3".into(),
        "--no-python".into(),
    ]);
    args.extend(argv.iter().map(Into::into));
    args
}

/// The scalars the command logged to TensorBoard, as rows of its metrics
/// (a convenience: a missing or unreadable directory is said, not fatal).
fn import_tensorboard(dir: &Path, metrics: &Path) {
    match crate::runs::tensorboard_import::import(dir, metrics) {
        Ok(0) => eprintln!(
            "envgen: warning: no TensorBoard scalars under {} (--tensorboard-dir)",
            dir.display()
        ),
        Ok(rows) => crate::output::notice!(
            "envgen: {rows} step(s) of TensorBoard scalars from {} added to {}",
            dir.display(),
            metrics.display()
        ),
        Err(e) => eprintln!(
            "envgen: warning: cannot add the TensorBoard scalars of {} to {}: {e}",
            dir.display(),
            metrics.display()
        ),
    }
}

/// Copy `from` to `log` and to the terminal (stdout or stderr) as it comes.
fn tee(
    from: Option<impl Read + Send + 'static>,
    log: PathBuf,
    to_stdout: bool,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    // Appended to: a resumed or relaunched run keeps the earlier attempts' output.
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log);
    let mut file = opened.map_err(|e| {
        UserError::environment(format!("cannot create {}: {e}", log.display()))
            .with_fix("free space on the run directory's disk, or pass a writable --out")
    })?;
    Ok(std::thread::spawn(move || {
        let Some(mut from) = from else { return };
        let mut buf = [0u8; 8192];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // A closed terminal must not stop the log (nor the command).
            if to_stdout {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&buf[..n]).and_then(|_| out.flush());
            } else {
                let _ = std::io::stderr().lock().write_all(&buf[..n]);
            }
            let _ = file.write_all(&buf[..n]);
        }
        let _ = file.flush();
    }))
}

/// How long the output of a command that has exited is still read: a
/// process it left running in the background (`sleep 600 &`) holds its
/// stdout and stderr open, and waiting for their end kept the run open
/// until that orphan exited (issue #40).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Join the output copies of an exited command, giving them `grace` to
/// reach the end of what it wrote; copies still held open by a process it
/// left behind are left (what it writes later is not recorded), and said.
fn finish_copies(copies: [std::thread::JoinHandle<()>; 2], grace: Duration) {
    let deadline = Instant::now() + grace;
    while copies.iter().any(|c| !c.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if copies.iter().any(|c| !c.is_finished()) {
        eprintln!(
            "envgen: warning: the command exited but a process it started still holds its output; \
             the run ends now, and what that process writes later is not recorded"
        );
        return;
    }
    for copy in copies {
        let _ = copy.join();
    }
}

/// Wait for the command, forwarding a stop as SIGINT to its process group
/// (then SIGKILL after [`STOP_GRACE`]). Returns how it exited and whether
/// it was stopped.
fn wait(
    child: &mut Child,
    control: &RunControl,
    events: &mut Option<EventsFile>,
    metrics: &Path,
) -> anyhow::Result<(ExitStatus, bool)> {
    let group = -(child.id() as libc::pid_t);
    let mut stopped_at: Option<Instant> = None;
    for tick in 0u64.. {
        if let Some(status) = child.try_wait()? {
            return Ok((status, stopped_at.is_some()));
        }
        if let (Some(events), true) = (events.as_mut(), tick % 20 == 19) {
            // About once a second: TensorBoard follows the run as it logs.
            let _ = events.catch_up(metrics);
        }
        match stopped_at {
            None if control.stop.load(Ordering::SeqCst) => {
                // SAFETY: kill(2) on the child's own process group, no memory involved.
                unsafe { libc::kill(group, libc::SIGINT) };
                stopped_at = Some(Instant::now());
            }
            Some(at) if at.elapsed() > STOP_GRACE => {
                eprintln!(
                    "envgen: the command did not stop within {}s of SIGINT: killing it",
                    STOP_GRACE.as_secs()
                );
                // SAFETY: as above.
                unsafe { libc::kill(group, libc::SIGKILL) };
                stopped_at = Some(Instant::now() + Duration::from_secs(3600));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unreachable!("the loop returns")
}

/// The run's TensorBoard event file, following `metrics.jsonl` as for the
/// experiments; only when the command logs into the run directory (a
/// metrics file of the user's elsewhere gets no event file beside it). None when it cannot be made:
/// TensorBoard is a convenience, the run goes on.
fn live_events(run_dir: &Path, metrics: &Path) -> Option<EventsFile> {
    if metrics != run_dir.join("metrics.jsonl") {
        return None;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(metrics)
        .ok()?;
    EventsFile::open(metrics)
        .map_err(|e| eprintln!("envgen: warning: no TensorBoard events for this run: {e:#}"))
        .ok()
}

/// The summary of a command that exited with `status`.
fn ended(status: ExitStatus, stopped: bool, wall_s: f64) -> Summary {
    let mut metrics = Map::new();
    metrics.insert("exit_code".into(), json!(status.code()));
    if let Some(signal) = status.signal() {
        metrics.insert("signal".into(), json!(signal_name(signal)));
    }
    let state = if stopped {
        metrics.insert(
            "reason".into(),
            json!("stopped (Ctrl-C or runs cancel): SIGINT forwarded to the command"),
        );
        Status::Interrupted
    } else if status.success() {
        Status::Completed
    } else if let Some(signal) = status.signal() {
        let name = signal_name(signal);
        metrics.insert("reason".into(), json!(format!("killed by {name}")));
        Status::Failed
    } else {
        metrics.insert(
            "reason".into(),
            json!(format!("exited with code {}", status.code().unwrap_or(-1))),
        );
        Status::Failed
    };
    Summary {
        status: state,
        wall_s,
        steps_done: 0,
        metrics,
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGTERM => "SIGTERM".into(),
        other => format!("signal {other}"),
    }
}

/// The last value of each numeric key in the JSON-lines file (lines that
/// are not JSON objects, and envgen's own GPU samples, are skipped), and
/// the last `step`; a line's `time` is when it was logged, no metric.
fn last_metrics(path: &Path) -> (Map<String, Value>, Option<u64>) {
    let mut last = Map::new();
    let Ok(file) = File::open(path) else {
        return (last, None);
    };
    for line in BufReader::new(file).lines().map_while(|l| l.ok()) {
        let Ok(Value::Object(row)) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if row.contains_key("gpu") {
            continue;
        }
        for (key, value) in row {
            if value.is_number() && key != TIME_KEY {
                last.insert(key, value);
            }
        }
    }
    let step = last.get("step").and_then(Value::as_u64);
    (last, step)
}

/// The peak resident memory of the largest child that ended (the command).
fn children_peak_rss_mib() -> Option<f64> {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } == 0;
    (ok && usage.ru_maxrss > 0).then(|| usage.ru_maxrss as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_is_standalone_alone_and_a_node_rank_in_a_world() {
        let words = |args: Vec<std::ffi::OsString>| -> Vec<String> {
            args.into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let argv = vec!["python".to_string(), "train.py".into()];
        let alone = words(torchrun_args(4, &argv, Path::new("/r"), None));
        assert_eq!(alone[0], "--standalone");
        assert!(alone.ends_with(&["--no-python".into(), "python".into(), "train.py".into()]));
        let world = World {
            rank: 1,
            size: 3,
            rendezvous: ("node07".into(), 29400),
            node_host: "node08".into(),
            data_port: 29402,
            timeout: Duration::from_secs(60),
        };
        let node = words(torchrun_args(4, &argv, Path::new("/r"), Some(&world)));
        let joined = node.join(" ");
        assert!(
            joined.starts_with("--nnodes 3 --node-rank 1 --master-addr node07 --master-port 29400 --nproc-per-node 4 --log-dir /r/torchrun/node-1"),
            "{joined}"
        );
        assert!(!joined.contains("--standalone"), "{joined}");
    }

    #[test]
    fn the_last_number_of_each_key_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        std::fs::write(
            &path,
            "{\"step\": 1, \"loss\": 2.0, \"tag\": \"a\"}\nnot json\n{\"time_s\": 1, \"gpu\": []}\n{\"step\": 2, \"loss\": 1.5}\n",
        )
        .unwrap();
        let (last, step) = last_metrics(&path);
        assert_eq!(step, Some(2));
        assert_eq!(last["loss"], json!(1.5));
        assert!(!last.contains_key("tag") && !last.contains_key("time_s"));
    }
}
