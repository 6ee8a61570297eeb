//! `--where slurm`: a run (or a sweep of runs) as one Slurm job (or job
//! array). The submitting envgen creates the run directories (config.toml +
//! manifest.json); the job runs the same envgen (natively, or the image's
//! envgen in a container) with `run EXP --launched --resume RUN_DIR`, which
//! trains into that directory. Here: write the script, submit it, follow
//! it, collect what it left, cancel it. The script and the Slurm commands
//! themselves are in [`sbatch`].

pub mod directives;
mod life;
mod refusal;
pub mod resources;
pub mod sbatch;

pub use life::SlurmLife;

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envgen_experiments::engine::{rundir, Status, Summary};
use envgen_experiments::kernel_cache;
use serde_json::{json, Value};

use self::sbatch as slurm;
use self::sbatch::{JobSpec, JobState, Runtime};
use super::launcher::{mark_ended, Launcher, RunOutcome};
use super::mounts;
use super::plan::{job_args, launched_runs};
use super::request::PlaceOptions;
use super::request::RunRequest;
use crate::error::{Result, UserError};
use crate::runs::manifest::{self, ClusterImage, ImageRecord, Manifest, SlurmRecord};
use resources::SlurmResources;

/// A run as a Slurm job: the submission `prepare` wrote, for `start`.
#[derive(Default)]
pub struct Slurm {
    submission: Option<Submission>,
    job: Option<String>,
}

impl Launcher for Slurm {
    fn stop_message(&self) -> &'static str {
        "interrupted: cancelling the Slurm job (the run checkpoints first)"
    }

    /// The job's runtime, the run directories (one per sweep value) and
    /// the image each records.
    fn prepare(&mut self, req: &RunRequest) -> Result<Vec<PathBuf>> {
        // Every flag is checked before a run directory is made (a refused
        // --partition must leave none behind).
        let resources = checked_resources(req);
        let runtime = resources::runtime_of(&req.flags.launch, true)?;
        if let Some(spec) = &req.command {
            let line = &spec.config.command;
            crate::launch::preflight::before_submit(
                &line.argv,
                &line.workdir,
                resources.partition.as_deref(),
            )?;
        }
        let (prepared, sweep_base) = launched_runs(req)?;
        let output = match &sweep_base {
            Some(base) => sweep_output(base),
            None => JOB_OUTPUT.into(),
        };
        let (runs, sciences): (Vec<PathBuf>, Vec<toml::Value>) = prepared
            .into_iter()
            .map(|run| (run.dir, run.science))
            .unzip();
        let submission = submission_of(req, runs.clone(), output, &sciences, runtime)?;
        if let Some(image) = image_provenance(&submission.runtime)? {
            for run in &runs {
                manifest::update(run, |m| m.environment.image = Some(image.clone()))?;
            }
        }
        self.submission = Some(submission);
        Ok(runs)
    }

    /// Submit; the job ID comes back (kept with `--detach`).
    fn start(
        &mut self,
        _: &RunRequest,
        runs: &[PathBuf],
        _: &Arc<AtomicBool>,
    ) -> Result<Option<String>> {
        let submission = self.submission.as_ref().expect("prepared");
        let job_id = match submit(submission) {
            Ok(job_id) => job_id,
            Err(err) => {
                // Nothing will train them: say so in each run, not "running" forever.
                for run in runs {
                    mark_ended(
                        run,
                        Status::Failed,
                        &format!("the Slurm job was not submitted: {err:#}"),
                    )?;
                }
                return Err(err);
            }
        };
        eprintln!(
            "envgen: submitted Slurm job {job_id} ({} run{}): {}",
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            runs.iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.job = Some(job_id.clone());
        Ok(Some(job_id))
    }

    fn follow(
        &mut self,
        _: &RunRequest,
        runs: &[PathBuf],
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<RunOutcome>> {
        let job = self.job.clone().expect("started");
        follow(&job, runs, stop)
    }
}

/// What to submit for `req` into `runs` (made, or for `--dry-run` only
/// named), whose configs are `sciences`.
fn submission_of(
    req: &RunRequest,
    runs: Vec<PathBuf>,
    output: String,
    sciences: &[toml::Value],
    runtime: Runtime,
) -> Result<Submission> {
    let mut data: Vec<PathBuf> = sciences.iter().flat_map(mounts::data_dirs).collect();
    // A command in a Slurm container: its code is bound at its own path
    // (the command runs in the same directory as natively).
    if let Some(spec) = &req.command {
        let record = &spec.record;
        data.push(
            record
                .git
                .as_ref()
                .map_or(&record.workdir, |g| &g.toplevel)
                .clone(),
        );
    }
    Ok(Submission {
        experiment: req.experiment.name().into(),
        runs,
        job_args: job_args(req),
        output,
        resources: SlurmResources {
            nodes: Some(req.world.nodes as u32),
            tasks_per_node: req.world.per_node as u32,
            ..checked_resources(req)
        },
        runtime,
        data_dirs: data,
    })
}

/// The resources `slurm::resources::check_flags` checked with the request.
fn checked_resources(req: &RunRequest) -> SlurmResources {
    match &req.options {
        PlaceOptions::Slurm { resources } => SlurmResources::clone(resources),
        // Not a Slurm request (a dry run of another place renders no job):
        // the flags as they are, unchecked defaults.
        PlaceOptions::Native | PlaceOptions::Docker { .. } => SlurmResources::default(),
    }
}

/// The name `--dry-run` gives the run directory the job would start in:
/// the real one is named when the run is made.
pub const PLANNED_RUN_DIR: &str = "RUN_DIR";

/// `--dry-run --where slurm`: the script the job would be submitted with
/// (issue #39), rendered as a real run renders it, into
/// `OUT/RUN_DIR` (a sweep: `OUT/RUN_DIR-sN`) or the `--resume` directory.
/// `sciences`: the config of each run.
pub fn planned_script(req: &RunRequest, sciences: &[toml::Value]) -> Result<String> {
    let out = absolute(&req.flags.out)?;
    let (runs, output) = match (&req.flags.resume, &req.sweep) {
        (Some(dir), _) => (vec![dir.clone()], JOB_OUTPUT.to_string()),
        (None, Some(sweep)) => (
            (0..sweep.values.len())
                .map(|i| out.join(format!("{PLANNED_RUN_DIR}-s{i}")))
                .collect(),
            sweep_output(PLANNED_RUN_DIR),
        ),
        (None, None) => (vec![out.join(PLANNED_RUN_DIR)], JOB_OUTPUT.to_string()),
    };
    let runtime = resources::runtime_of(&req.flags.launch, false)?;
    let submission = submission_of(req, runs, output, sciences, runtime)?;
    let (spec, first) = job_spec(&submission)?;
    slurm::render_with_path(&spec, &first.join(JOB_SCRIPT).display().to_string())
}

/// Where the job's output goes inside each run directory.
pub const JOB_OUTPUT: &str = "slurm.out";
/// The rendered script, kept in each run directory.
pub const JOB_SCRIPT: &str = "job.sbatch";

/// What to submit: the run directories (one per array task; one = a plain
/// job) and the arguments every task's envgen gets.
#[derive(Debug, Clone)]
pub struct Submission {
    pub experiment: String,
    pub runs: Vec<PathBuf>,
    /// Hardware flags forwarded to the job (`--backend cpu`, `--profile a30`…).
    pub job_args: Vec<String>,
    /// `sbatch --output`, relative to the first run's directory (may hold
    /// `%a` for arrays): `slurm.out` for a single run.
    pub output: String,
    pub resources: SlurmResources,
    pub runtime: Runtime,
    /// Host directories the job reads (data files), for container binds.
    pub data_dirs: Vec<PathBuf>,
}

/// `sbatch --output` for the runs of a sweep made by [`create_sweep_dirs`],
/// relative to the first one (the job's directory).
pub fn sweep_output(base: &str) -> String {
    format!("../{base}-s%a/{JOB_OUTPUT}")
}

/// The envgen the job runs: this very binary when native (the cluster's
/// shared filesystem makes it visible on the node), the image's otherwise.
fn job_envgen(runtime: &Runtime) -> Result<String> {
    Ok(match runtime {
        Runtime::Native => std::env::current_exe()?.display().to_string(),
        _ => "envgen".into(),
    })
}

fn absolute(path: &Path) -> Result<PathBuf> {
    Ok(std::path::absolute(path)?)
}

/// Write the script into every run directory and submit it; records the
/// job in each manifest. Returns the job ID.
pub fn submit(sub: &Submission) -> Result<String> {
    let (spec, first) = job_spec(sub)?;
    let runs: Vec<PathBuf> = sub
        .runs
        .iter()
        .map(|r| absolute(r))
        .collect::<Result<_>>()?;
    for run in &runs {
        slurm::write_script(&spec, &run.join(JOB_SCRIPT))?;
    }
    let job_id = slurm::submit(&spec, &first.join(JOB_SCRIPT), &first)?;
    record_job(&runs, &job_id)?;
    Ok(job_id)
}

/// The job `sub` is, and the directory it starts in (the first run's).
fn job_spec(sub: &Submission) -> Result<(JobSpec, PathBuf)> {
    let runs: Vec<PathBuf> = sub
        .runs
        .iter()
        .map(|r| absolute(r))
        .collect::<Result<_>>()?;
    let first = runs
        .first()
        .ok_or_else(|| anyhow::anyhow!("nothing to submit"))?;
    let mut command = vec![
        job_envgen(&sub.runtime)?,
        "run".to_string(),
        sub.experiment.clone(),
        "--launched".into(),
    ];
    command.extend(sub.job_args.iter().cloned());
    let resume = |dir: &Path| vec!["--resume".to_string(), dir.display().to_string()];
    let array_tasks: Vec<Vec<String>> = if runs.len() > 1 {
        runs.iter().map(|r| resume(r)).collect()
    } else {
        command.extend(resume(first));
        Vec::new()
    };
    // Containers see the run directories' parents and the data at the same paths.
    let mut binds = mounts::same_path_binds(&runs, &sub.data_dirs);
    // A kernel cache warmed on the login node (`envgen warmup --target`,
    // docs/running.md): the job's envgen seeds its own cache from it, so
    // the job compiles nothing; explicit, as a cluster may not pass the
    // submitting environment on (SBATCH_EXPORT=NONE).
    let mut env: BTreeMap<String, String> = envgen_experiments::notice::quiet_env()
        .into_iter()
        .collect();
    if let Some(seeds) = std::env::var_os(kernel_cache::SEED_ENV) {
        env.insert(
            kernel_cache::SEED_ENV.to_string(),
            seeds.to_string_lossy().into_owned(),
        );
        binds.extend(std::env::split_paths(&seeds).filter(|p| p.is_absolute()));
        binds.sort();
        binds.dedup();
    }
    let r = &sub.resources;
    let tasks_per_node = r.tasks_per_node.max(1);
    let spec = JobSpec {
        job_name: r
            .job_name
            .clone()
            .unwrap_or_else(|| format!("envgen-{}", sub.experiment)),
        workdir: first.clone(),
        output: sub.output.clone(),
        partition: r.partition.clone(),
        account: r.account.clone(),
        time: r.time.clone(),
        nodes: r.nodes.unwrap_or(1),
        tasks_per_node,
        cpus_per_task: r
            .cpus_per_task
            .unwrap_or_else(|| directives::default_cpus_per_task(r.gpus_per_node, tasks_per_node)),
        mem: r.mem.clone(),
        gpus_per_node: r.gpus_per_node,
        qos: r.qos.clone(),
        constraint: r.constraint.clone(),
        gres: r.gres.clone(),
        extra: r.extra.clone(),
        runtime: sub.runtime.clone(),
        binds,
        env,
        command,
        array_tasks,
    };
    Ok((spec, first.clone()))
}

/// Each run's manifest names the job (or array task) it trains in.
fn record_job(runs: &[PathBuf], job_id: &str) -> Result<()> {
    for (index, run) in runs.iter().enumerate() {
        let task = if runs.len() > 1 {
            format!("{job_id}_{index}")
        } else {
            job_id.to_string()
        };
        manifest::update(run, |m| {
            let mut earlier = Vec::new();
            if let Some(previous) = m.environment.slurm.take() {
                earlier = previous.earlier_jobs;
                earlier.push(previous.job);
            }
            m.environment.slurm = Some(SlurmRecord {
                job_id: job_id.to_string(),
                job: task,
                script: JOB_SCRIPT.into(),
                output: JOB_OUTPUT.into(),
                state: "PENDING".into(),
                earlier_jobs: earlier,
            });
        })?;
    }
    Ok(())
}

/// The manifest's `image` for a containerized job. A charliecloud image
/// directory has no registry digest: its `digest` is the sha256 of the envgen
/// binary in it (what decides the science); a SIF or a pyxis reference is
/// recorded as given (hashing a multi-GB SIF on every submit costs minutes).
pub fn image_provenance(runtime: &Runtime) -> Result<Option<ImageRecord>> {
    let image = |reference: String, runtime: &str| ClusterImage {
        reference,
        runtime: runtime.into(),
        digest: None,
        digest_of: None,
    };
    Ok(match runtime {
        Runtime::Native => None,
        Runtime::Charliecloud { image_dir } => {
            let binary = image_dir.join("usr/local/bin/envgen");
            let bytes = std::fs::read(&binary)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", binary.display()))?;
            Some(ClusterImage {
                digest: Some(format!("sha256:{}", crate::image::lock::sha256_hex(&bytes))),
                digest_of: Some("usr/local/bin/envgen".into()),
                ..image(image_dir.display().to_string(), "charliecloud")
            })
        }
        Runtime::Apptainer { sif } => Some(image(sif.display().to_string(), "apptainer")),
        Runtime::Pyxis { image: reference } => Some(image(reference.clone(), "pyxis")),
    }
    .map(ImageRecord::Cluster))
}

/// The Slurm job (or array task) a run was submitted as, from its manifest.
pub fn job_of(manifest: &Manifest) -> Option<String> {
    manifest.environment.slurm.as_ref().map(|s| s.job.clone())
}

/// Streams what the job writes to each run's slurm.out onto our stderr.
struct OutputTail {
    files: Vec<(String, PathBuf, u64)>,
}

impl OutputTail {
    fn new(runs: &[PathBuf]) -> Self {
        let files = runs
            .iter()
            .enumerate()
            .map(|(i, dir)| {
                let label = if runs.len() > 1 {
                    format!("[task {i}] ")
                } else {
                    String::new()
                };
                (label, dir.join(JOB_OUTPUT), 0)
            })
            .collect();
        OutputTail { files }
    }

    fn pump(&mut self) {
        let mut stderr = std::io::stderr().lock();
        for (label, path, offset) in &mut self.files {
            let Ok(mut file) = std::fs::File::open(&*path) else {
                continue;
            };
            if file.seek(SeekFrom::Start(*offset)).is_err() {
                continue;
            }
            let mut text = String::new();
            if file.read_to_string(&mut text).is_err() {
                continue;
            }
            // Only whole lines: the rest comes with the next pump.
            let Some(end) = text.rfind('\n') else {
                continue;
            };
            for line in text[..=end].lines() {
                let _ = writeln!(stderr, "{label}{line}");
            }
            *offset += end as u64 + 1;
        }
    }
}

/// Follow the job until every task ended (streaming its output), or until
/// `stop` is set (Ctrl-C): then `scancel` and wait for it to end. Either way
/// each run directory ends with a summary (the job's, or one written here
/// from the job state) and the final state in its manifest.
pub fn follow(job_id: &str, runs: &[PathBuf], stop: &AtomicBool) -> Result<Vec<RunOutcome>> {
    let mut tail = OutputTail::new(runs);
    let mut last_states: Vec<(String, String)> = Vec::new();
    let mut cancelled = false;
    let mut cancel_started: Option<Instant> = None;
    loop {
        let state = slurm::state(job_id)?;
        if state.tasks != last_states {
            let words: Vec<String> = state
                .tasks
                .iter()
                .map(|(id, s)| format!("{id} {s}"))
                .collect();
            crate::output::notice!("envgen: slurm job {}", words.join(", "));
            last_states = state.tasks.clone();
        }
        tail.pump();
        if state.finished() {
            break;
        }
        if stop.load(Ordering::SeqCst) && !cancelled {
            eprintln!("envgen: interrupted: scancel {job_id} (the run checkpoints and stops)");
            slurm::cancel(job_id)?;
            cancelled = true;
            cancel_started = Some(Instant::now());
        }
        if cancel_started.is_some_and(|t| t.elapsed() > Duration::from_secs(120)) {
            return Err(UserError::environment(format!(
                "Slurm job {job_id} did not end within 120 s of scancel"
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // The last lines may land after the state flips.
    std::thread::sleep(Duration::from_millis(300));
    tail.pump();
    let state = slurm::state(job_id)?;
    runs.iter()
        .enumerate()
        .map(|(i, dir)| collect(dir, &task_state(&state, job_id, i, runs.len())))
        .collect()
}

/// The state of array task `index` (or of the plain job).
fn task_state(state: &JobState, job_id: &str, index: usize, tasks: usize) -> String {
    let wanted = if tasks > 1 {
        format!("{job_id}_{index}")
    } else {
        job_id.to_string()
    };
    state
        .tasks
        .iter()
        .find(|(id, _)| *id == wanted)
        .or(state.tasks.first().filter(|_| tasks == 1))
        .map(|(_, s)| s.clone())
        .unwrap_or_else(|| "UNKNOWN".into())
}

/// Record the job's final state; when the job left no summary (cancelled
/// before training, killed, node failure), write one from that state.
pub fn collect(dir: &Path, job_state: &str) -> Result<RunOutcome> {
    manifest::update(dir, |m| {
        if let Some(slurm) = m.environment.slurm.as_mut() {
            slurm.state = job_state.into();
        }
    })?;
    let summary: Option<Summary> = rundir::read_json(&dir.join("summary.json")).ok();
    let summary = match summary {
        Some(s) if s.status != Status::Running => s,
        _ => {
            let status = match job_state {
                "CANCELLED" | "TIMEOUT" | "PREEMPTED" | "DEADLINE" => Status::Interrupted,
                _ => Status::Failed,
            };
            let why = format!(
                "Slurm job ended {job_state} before the run wrote its summary; see {JOB_OUTPUT}"
            );
            mark_ended(dir, status, &why)?
        }
    };
    Ok(RunOutcome {
        run_dir: dir.to_path_buf(),
        summary,
    })
}

/// `envgen runs cancel RUN` for a Slurm run: scancel its job (or array
/// task), wait until it ended, collect.
pub fn cancel(dir: &Path, manifest: &Manifest) -> Result<RunOutcome> {
    let job = job_of(manifest).ok_or_else(|| {
        UserError::usage(format!(
            "{} was not submitted to Slurm (its manifest has no slurm job)",
            dir.display()
        ))
        .with_fix("stop a native run with Ctrl-C, a Docker run with Ctrl-C or `docker stop`")
    })?;
    slurm::cancel(&job)?;
    let state = slurm::wait(&job, Duration::from_secs(120))?;
    let final_state = state
        .tasks
        .first()
        .map(|(_, s)| s.clone())
        .unwrap_or_else(|| "CANCELLED".into());
    collect(dir, &final_state)
}

/// The live state for `runs show`: the manifest's job, asked of Slurm
/// (falls back to the last state recorded when Slurm does not answer).
pub fn live_state(manifest: &Manifest) -> Option<Value> {
    let slurm = manifest.environment.slurm.as_ref()?;
    let live = slurm::state(&slurm.job)
        .ok()
        .and_then(|s| s.tasks.first().map(|(_, st)| st.clone()));
    Some(json!({
        "job": slurm.job,
        "state": live.unwrap_or_else(|| slurm.state.clone()),
    }))
}
