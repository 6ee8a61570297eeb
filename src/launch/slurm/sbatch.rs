//! The Slurm client: render an sbatch script from `containers/templates/sbatch.hbs`,
//! submit it with `sbatch`, follow it with `squeue`/`scontrol`/`sacct`,
//! cancel it with `scancel`. Slurm is the distributed engine; envgen only
//! writes the script and reads the state back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

pub use super::directives::check_directive;
use super::refusal;
use crate::error::{Result, UserError};

const SBATCH_TEMPLATE: &str = include_str!("../../../containers/templates/sbatch.hbs");

/// How the job runs envgen on the compute node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// The envgen binary on the node's PATH (or an absolute path in the command).
    Native,
    /// `ch-run` on an image directory made by `envgen image export --format charliecloud`.
    Charliecloud { image_dir: PathBuf },
    /// `apptainer exec [--nv]` on a SIF built from the exported definition.
    Apptainer { sif: PathBuf },
    /// pyxis/enroot: `srun --container-image=…`.
    Pyxis { image: String },
}

/// Everything an sbatch script says. Resources come from the hardware
/// profile and flags; `command` is the envgen argv to run on the node.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub job_name: String,
    /// The job's directory: sbatch is run from here, so the job starts here.
    pub workdir: PathBuf,
    /// The job's output file, relative to `workdir` (`%j` / `%a` allowed,
    /// as sbatch expands them). sbatch reads `#SBATCH` lines with its own
    /// parser, which knows no shell quoting: a path with a space, a quote
    /// or a newline cannot be written there safely, so this is always a
    /// name envgen made (`slurm.out`, `../RUN-s%a/slurm.out`) and is checked.
    pub output: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time: Option<String>,
    pub nodes: u32,
    /// srun tasks per node: the data-parallel ranks there (1: not distributed).
    pub tasks_per_node: u32,
    pub cpus_per_task: u32,
    pub mem: Option<String>,
    pub gpus_per_node: Option<u32>,
    /// `--qos`, `--constraint`: as given (checked by [`check_directive`]).
    pub qos: Option<String>,
    pub constraint: Option<String>,
    /// `--gres`: written instead of `--gpus-per-node` (which still counts
    /// the node's GPUs for the ranks and `apptainer --nv`).
    pub gres: Option<String>,
    /// Raw options (`--sbatch-arg`, a profile's `[slurm] extra`), one
    /// `#SBATCH` line each, after envgen's own: see [`super::directives`].
    pub extra: Vec<String>,
    pub runtime: Runtime,
    /// Host directories the job needs inside a container, mounted at the same path.
    pub binds: Vec<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub command: Vec<String>,
    /// A job array: task N appends `array_tasks[N]` to `command` (e.g. a
    /// sweep's `--set train.seed=2`, or the run directory of task N).
    /// Empty: a single job.
    pub array_tasks: Vec<Vec<String>>,
}

/// Quote one word for bash: no word of a user-supplied argv is ever
/// interpreted by the shell in the rendered script.
/// A word with control characters (a newline) is written in ANSI-C quoting
/// (`$'…\n…'`), so that every value stays on its own line. NUL cannot be in
/// a bash word at all: [`render`] refuses it first.
fn quote(word: &str) -> String {
    if !word.chars().any(char::is_control) {
        return shlex::try_quote(word)
            .map(|q| q.into_owned())
            .unwrap_or_else(|_| format!("'{}'", word.replace('\'', r"'\''")));
    }
    let mut out = String::from("$'");
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Every word, value and path that goes into the script, for the NUL check.
fn words_of(spec: &JobSpec) -> Vec<String> {
    let mut words: Vec<String> = spec.command.clone();
    words.extend(spec.array_tasks.iter().flatten().cloned());
    words.extend(spec.env.values().cloned());
    words.extend(
        std::iter::once(&spec.workdir)
            .chain(&spec.binds)
            .map(|p| p.to_string_lossy().into_owned()),
    );
    words.extend(match &spec.runtime {
        Runtime::Native => None,
        Runtime::Charliecloud { image_dir } => Some(image_dir.to_string_lossy().into_owned()),
        Runtime::Apptainer { sif } => Some(sif.to_string_lossy().into_owned()),
        Runtime::Pyxis { image } => Some(image.clone()),
    });
    words
}

fn quote_path(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

/// The job's output path as an `#SBATCH` line can hold it: letters, digits
/// and `._%/-`, relative to the job's directory, no `..` except leading
/// ones (a sweep's tasks write beside the first run's directory).
fn check_output(output: &str) -> Result<()> {
    let alphabet = |c: char| c.is_ascii_alphanumeric() || "._%/-".contains(c);
    let parts: Vec<&str> = output.split('/').collect();
    let upward = parts.iter().take_while(|p| **p == "..").count();
    let valid = !output.is_empty()
        && !output.starts_with('/')
        && output.chars().all(alphabet)
        && parts[upward..]
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != "..");
    if !valid {
        return Err(UserError::usage(format!(
            "the job output path {output:?} cannot be written in an #SBATCH line"
        ))
        .with_fix("name the run directory with letters, digits and `._-` only")
        .into());
    }
    Ok(())
}

/// A directory Slurm can start a job in and write its output under. Slurm
/// expands `%` in output paths as its filename patterns, and a `\\`
/// anywhere turns that expansion off and is dropped (sbatch(1), "filename
/// pattern"): either way the output file would not be where the path says,
/// and the job fails before it starts. Any other byte is carried as is.
pub fn check_job_dir(dir: &Path) -> Result<()> {
    let text = dir.to_string_lossy();
    if let Some(c) = text.chars().find(|c| matches!(c, '%' | '\\')) {
        return Err(UserError::usage(format!(
            "{} holds {c:?}, which Slurm reads as a filename pattern in the job's output path",
            dir.display()
        ))
        .with_fix("choose an --out directory without `%` and `\\` for --where slurm")
        .into());
    }
    Ok(())
}

/// Render the script for `spec` into `path` (which the script names for re-submission).
pub fn write_script(spec: &JobSpec, path: &Path) -> Result<()> {
    let text = render_with_path(spec, &path.display().to_string())?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Render the sbatch script for `spec`.
pub fn render(spec: &JobSpec) -> Result<String> {
    render_with_path(spec, "SCRIPT")
}

pub(super) fn render_with_path(spec: &JobSpec, script_path: &str) -> Result<String> {
    let mut command: Vec<String> = spec.command.iter().map(|w| quote(w)).collect();
    if !spec.array_tasks.is_empty() {
        // Each task's words were quoted when the `case` arm was rendered.
        command.push("\"${task_args[@]}\"".into());
    }
    let runtime = match &spec.runtime {
        Runtime::Native => serde_json::json!({ "native": true }),
        Runtime::Charliecloud { image_dir } => serde_json::json!({ "charliecloud": {
            "image": quote_path(image_dir),
            "bind": spec.binds.iter().map(|b| format!("-b {}", quote_path(b))).collect::<Vec<_>>().join(" "),
        }}),
        Runtime::Apptainer { sif } => serde_json::json!({ "apptainer": {
            "image": quote_path(sif),
            "bind": spec.binds.iter().map(|b| format!("--bind {}", quote_path(b))).collect::<Vec<_>>().join(" "),
        }}),
        Runtime::Pyxis { image } => serde_json::json!({ "pyxis": {
            "image": quote(image),
            "mounts": if spec.binds.is_empty() { String::new() } else {
                let mounts: Vec<String> = spec.binds.iter().map(|b| format!("{0}:{0}", b.display())).collect();
                format!("--container-mounts={}", quote(&mounts.join(",")))
            },
        }}),
    };
    if let Some(word) = words_of(spec).iter().find(|w| w.contains('\0')) {
        return Err(UserError::usage(format!(
            "{word:?} holds a NUL byte, which no shell word can carry"
        ))
        .with_fix("remove the NUL from the value")
        .into());
    }
    for (flag, value) in [
        ("--partition", &spec.partition),
        ("--account", &spec.account),
        ("--time", &spec.time),
        ("--mem", &spec.mem),
        ("--qos", &spec.qos),
        ("--constraint", &spec.constraint),
        ("--gres", &spec.gres),
    ] {
        if let Some(value) = value {
            check_directive(flag, value)?;
        }
    }
    for arg in &spec.extra {
        super::directives::check_sbatch_arg("--sbatch-arg", arg)?;
    }
    check_output(&spec.output)?;
    check_job_dir(&spec.workdir)?;
    for key in spec.env.keys() {
        let valid = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(UserError::usage(format!(
                "environment variable name {key:?} is not valid in a job script"
            ))
            .into());
        }
    }
    let context = TemplateContext {
        envgen_version: env!("CARGO_PKG_VERSION"),
        script_path: quote(script_path),
        job_name: sanitize_job_name(&spec.job_name),
        output: spec.output.clone(),
        nodes: spec.nodes.max(1),
        tasks_per_node: spec.tasks_per_node.max(1),
        distributed: distributed_context(spec)?,
        cpus_per_task: spec.cpus_per_task.max(1),
        partition: spec.partition.clone(),
        account: spec.account.clone(),
        time: spec.time.clone(),
        mem: spec.mem.clone(),
        gpus_per_node: spec.gpus_per_node.filter(|&g| g > 0),
        qos: spec.qos.clone(),
        constraint: spec.constraint.clone(),
        gres: spec.gres.clone(),
        extra: spec.extra.clone(),
        array: (!spec.array_tasks.is_empty()).then(|| format!("0-{}", spec.array_tasks.len() - 1)),
        workdir: quote_path(&spec.workdir),
        env: spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), quote(v)))
            .collect(),
        array_tasks: spec
            .array_tasks
            .iter()
            .map(|words| words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "))
            .collect(),
        runtime,
        command: command.join(" "),
    };
    let mut handlebars = handlebars::Handlebars::new();
    handlebars.set_strict_mode(true);
    // sbatch scripts are shell, not HTML: values are quoted above, not escaped.
    handlebars.register_escape_fn(handlebars::no_escape);
    handlebars
        .render_template(SBATCH_TEMPLATE, &context)
        .context("rendering containers/templates/sbatch.hbs")
}

#[derive(Serialize)]
struct TemplateContext {
    envgen_version: &'static str,
    script_path: String,
    job_name: String,
    output: String,
    nodes: u32,
    tasks_per_node: u32,
    distributed: Option<DistributedContext>,
    cpus_per_task: u32,
    partition: Option<String>,
    account: Option<String>,
    time: Option<String>,
    mem: Option<String>,
    gpus_per_node: Option<u32>,
    qos: Option<String>,
    constraint: Option<String>,
    gres: Option<String>,
    extra: Vec<String>,
    array: Option<String>,
    workdir: String,
    env: BTreeMap<String, String>,
    /// Per array task: its extra words, already quoted.
    array_tasks: Vec<String>,
    runtime: serde_json::Value,
    command: String,
}

/// The rendezvous of a data-parallel job (more than one task in all).
#[derive(Serialize)]
struct DistributedContext {
    world_size: u32,
    /// First port of the range jobs draw their rendezvous port from.
    port_base: u32,
    /// Ports one job uses: the orchestrator and one per rank.
    stride: u32,
    /// How many jobs' port ranges fit below 60000.
    slots: u32,
}

/// Each job picks its ports from its job ID, so that two jobs sharing a
/// node do not collide: rank r listens on port + 1 + r on its node.
///
/// Checked arithmetic (issue #40): `--nodes 4294967295` overflowed the world
/// size and divided by zero. A job whose ranks need more ports than the
/// range holds is refused, naming the flags.
fn distributed_context(spec: &JobSpec) -> Result<Option<DistributedContext>> {
    const BASE: u32 = 20000;
    const TOP: u32 = 60000;
    let (nodes, per_node) = (spec.nodes.max(1), spec.tasks_per_node.max(1));
    let stride = nodes
        .checked_mul(per_node)
        .and_then(|w| w.checked_add(1))
        .filter(|&s| s <= TOP - BASE);
    let Some(stride) = stride else {
        return Err(UserError::usage(format!(
            "--nodes {nodes} × {per_node} task(s) per node is more ranks than a job can have \
             (each rank needs its own port in {BASE}..{TOP})"
        ))
        .with_fix(format!("use at most {} ranks in all", TOP - BASE - 1))
        .into());
    };
    let world_size = stride - 1;
    Ok((world_size > 1).then(|| DistributedContext {
        world_size,
        port_base: BASE,
        stride,
        slots: ((TOP - BASE) / stride).max(1),
    }))
}

/// Job names end up in `#SBATCH` lines: keep them to a safe alphabet.
fn sanitize_job_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "envgen".into()
    } else {
        cleaned
    }
}

/// A Slurm job's state as `squeue`/`scontrol`/`sacct` print it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobState {
    pub job_id: String,
    /// One entry per job (or per array task): e.g. ("12_0", "COMPLETED").
    pub tasks: Vec<(String, String)>,
}

impl JobState {
    /// True once no task is pending or running.
    pub fn finished(&self) -> bool {
        !self.tasks.is_empty() && self.tasks.iter().all(|(_, s)| is_terminal(s))
    }
    pub fn all_completed(&self) -> bool {
        !self.tasks.is_empty() && self.tasks.iter().all(|(_, s)| s == "COMPLETED")
    }
}

fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "OUT_OF_MEMORY"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
    )
}

/// Run a Slurm client command; a missing tool is an environment error.
fn slurm_command(program: &str, args: &[&str]) -> Result<String> {
    slurm_command_in(None, program, args)
}

fn slurm_command_in(cwd: Option<&Path>, program: &str, args: &[&str]) -> Result<String> {
    let path = which::which(program).map_err(|_| {
        UserError::environment(format!("`{program}` not found on PATH")).with_fix(
            "run on a Slurm login node, or install the Slurm client tools (Debian: slurm-client)",
        )
    })?;
    let mut command = Command::new(path);
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let output = command
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(UserError::environment(format!("`{program} {}` failed: {}", args.join(" "), stderr.trim()))
            .with_fix("check that slurmctld is reachable (`sinfo`) and SLURM_CONF points at the right cluster")
            .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Submit the script written for `spec` from `workdir` (the job's
/// directory, which its relative output path starts from); returns the job
/// ID. A refusal shows sbatch's own words with the fix that matches them.
pub fn submit(spec: &JobSpec, script: &Path, workdir: &Path) -> Result<String> {
    let sbatch = which::which("sbatch").map_err(|_| {
        UserError::environment("`sbatch` not found on PATH").with_fix(
            "run on a Slurm login node, or install the Slurm client tools (Debian: slurm-client)",
        )
    })?;
    let output = Command::new(sbatch)
        .current_dir(workdir)
        .arg("--parsable")
        .arg(script)
        .output()
        .context("running sbatch")?;
    if !output.status.success() {
        let asked = refusal::Asked {
            script: &script.display().to_string(),
            resources: resources_of(spec),
        };
        return Err(refusal::explain(
            &String::from_utf8_lossy(&output.stderr),
            &asked,
        ));
    }
    job_id_of(&String::from_utf8_lossy(&output.stdout))
}

/// What a job asks of a node, as the flags that set it (for a refusal's fix).
fn resources_of(spec: &JobSpec) -> String {
    let mut asked = vec![
        format!("--nodes {}", spec.nodes.max(1)),
        format!("{} task(s) per node", spec.tasks_per_node.max(1)),
        format!("--cpus-per-task {}", spec.cpus_per_task.max(1)),
    ];
    let optional = [
        ("--mem", spec.mem.clone()),
        ("--gres", spec.gres.clone()),
        (
            "--gpus-per-node",
            spec.gres
                .is_none()
                .then_some(spec.gpus_per_node)
                .flatten()
                .map(|g| g.to_string()),
        ),
        ("--constraint", spec.constraint.clone()),
        ("--partition", spec.partition.clone()),
    ];
    asked.extend(
        optional
            .into_iter()
            .filter_map(|(flag, v)| v.map(|v| format!("{flag} {v}"))),
    );
    asked.join(", ")
}

/// The job ID in what `sbatch --parsable` printed: "ID" or "ID;cluster".
fn job_id_of(out: &str) -> Result<String> {
    let id = out.trim().split(';').next().unwrap_or_default().to_owned();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(UserError::environment(format!("sbatch printed no job ID: {out:?}")).into());
    }
    Ok(id)
}

/// The job's current state: `squeue` while it is known to the controller,
/// then `scontrol show job`, then `sacct` (needs accounting) for old jobs.
pub fn state(job_id: &str) -> Result<JobState> {
    let queue =
        slurm_command("squeue", &["-h", "-r", "-j", job_id, "-o", "%i %T"]).unwrap_or_default();
    let mut tasks = parse_pairs(&queue);
    if tasks.is_empty() {
        if let Ok(show) = slurm_command("scontrol", &["-o", "show", "job", job_id]) {
            tasks = parse_scontrol(&show);
        }
    }
    if tasks.is_empty() {
        if let Ok(acct) = slurm_command(
            "sacct",
            &["-n", "-X", "-P", "-j", job_id, "-o", "JobID,State"],
        ) {
            tasks = parse_pairs(&acct.replace('|', " "));
        }
    }
    Ok(JobState {
        job_id: job_id.to_owned(),
        tasks,
    })
}

fn parse_pairs(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let id = words.next()?;
            // sacct prints "CANCELLED by 0": the first word is the state.
            let state = words.next()?;
            Some((id.to_owned(), state.to_owned()))
        })
        .collect()
}

/// `scontrol -o show job` prints one line per job/array task with
/// `JobId=12 ArrayJobId=12 ArrayTaskId=0 … JobState=COMPLETED …`.
fn parse_scontrol(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            };
            let id = match (field("ArrayJobId"), field("ArrayTaskId")) {
                (Some(array), Some(task)) => format!("{array}_{task}"),
                _ => field("JobId")?.to_owned(),
            };
            Some((id, field("JobState")?.to_owned()))
        })
        .collect()
}

/// Whether the Slurm controller answers (`scontrol ping`): a job it does
/// not know is gone only when it could have been asked.
pub fn controller_answers() -> bool {
    slurm_command("scontrol", &["ping"]).is_ok()
}

/// Poll until every task finished or `timeout` passed.
pub fn wait(job_id: &str, timeout: Duration) -> Result<JobState> {
    let start = Instant::now();
    loop {
        let state = state(job_id)?;
        if state.finished() {
            return Ok(state);
        }
        if start.elapsed() > timeout {
            return Err(UserError::failed(format!(
                "Slurm job {job_id} did not finish within {}s (state: {:?})",
                timeout.as_secs(),
                state.tasks
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `scancel` the job (all array tasks).
pub fn cancel(job_id: &str) -> Result<()> {
    slurm_command("scancel", &[job_id]).map(|_| ())
}

#[cfg(test)]
#[path = "sbatch_tests.rs"]
mod tests;
