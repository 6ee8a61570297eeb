//! What a user asked `envgen run` for, checked once: the CLI turns its
//! flags into a [`RunFlags`] (plain values), and [`RunRequest::new`]
//! validates them together — where (with `auto` decided now), the sweep,
//! the ranks and nodes, `--gpus`, the Slurm container — so every place
//! receives a request that is already consistent, and every refusal
//! happens before anything is made.

use std::path::PathBuf;
use std::sync::OnceLock;

use envgen_experiments::backend::BackendChoice;
use envgen_experiments::registry::Experiment;

use super::auto::{self, Decision, Place};
use super::command::{self, CommandSpec};
use super::slurm::directives::{check_sbatch_arg, gres_gpus};
use super::slurm::sbatch::{check_directive, check_job_dir, Runtime};
use super::world::{plan_world, WorldPlan};
use crate::error::{Result, UserError};
use crate::host::Host;
use crate::image::daemon::container::GpuRequest;
use crate::image::daemon::options::Ipc;
use crate::profiles::Profiles;

pub use super::flags::{RunFlags, Where};
/// The where-specific flags (`runs::launch_flags`: they are recorded in
/// the manifest, typed, so `envgen rerun` launches the same way).
pub use crate::runs::launch_flags::{Container, LaunchFlags};

/// A run request every place can act on: the flags plus what was decided
/// from them once (the experiment, where and why, the sweep, the world, the
/// Docker GPUs asked for).
pub struct RunRequest {
    pub flags: RunFlags,
    pub experiment: &'static dyn Experiment,
    pub decision: Decision,
    pub sweep: Option<Sweep>,
    pub world: WorldPlan,
    /// `--gpus` parsed (Docker); `None`: the backend's default.
    pub gpus: Option<GpuRequest>,
    /// A user command to make a new run of (`-- CMD`, or `rerun` of one).
    pub command: Option<CommandSpec>,
    /// The doctor's snapshot of this machine, probed on first use and then
    /// shared: the launcher's checks and the manifest see one probe.
    host: OnceLock<Host>,
}

impl RunRequest {
    /// Check the flags together; `auto` is decided (and said on stderr).
    pub fn new(mut flags: RunFlags) -> Result<RunRequest> {
        // The training loop falls back to the default; a typo is said here,
        // before anything runs (and by --dry-run).
        envgen_experiments::engine::progress::Cadence::from_env()?;
        resolve_resume(&mut flags)?;
        let experiment = command::find_experiment(&flags)?;
        let decision = if flags.launched {
            // Inside the Slurm job or the container: train into the prepared directory.
            Decision {
                place: Place::Native,
                reason: "launched".into(),
            }
        } else {
            decide_where(flags.place)
        };
        let command = if experiment.name() == command::NAME {
            command::check_flags(&flags)?;
            // envgen itself trains nothing: no CUDA context of its own
            // beside the command's on the GPU.
            flags.backend = BackendChoice::Cpu;
            command::spec(&flags)?
        } else {
            None
        };
        let sweep = flags.sweep.as_deref().map(Sweep::parse).transpose()?;
        if let Some(sweep) = &sweep {
            check_sweep_target(sweep, command.as_ref(), &flags.experiment)?;
        }
        if sweep.is_some() && decision.place != Place::Slurm {
            return Err(UserError::usage(format!(
                "--sweep fans out a Slurm job array, but this run goes to {} ({})",
                decision.place.name(),
                decision.reason
            ))
            .with_fix(
                "add --where slurm on a Slurm login node, or run the values one by one with --set",
            )
            .into());
        }
        let world = if flags.launched {
            // The ranks of a launched run learn their world from the environment.
            plan_world(Place::Native, None, None, None)?
        } else {
            world_plan(&flags, experiment, decision.place)?
        };
        if decision.place == Place::Slurm && !flags.launched {
            // The job trains on a node: its memory is checked there.
            envgen_experiments::engine::budget::trains_elsewhere();
            for dir in [Some(&flags.out), flags.resume.as_ref()]
                .into_iter()
                .flatten()
            {
                check_job_dir(&std::path::absolute(dir)?)?;
            }
        }
        let gpus = match flags.launch.gpus.as_deref() {
            Some(spec) if decision.place == Place::Docker => Some(parse_gpus(spec)?),
            _ => None,
        };
        if !flags.launched {
            check_container_options(&flags, decision.place)?;
        }
        if flags.detach && decision.place == Place::Docker && !flags.launched {
            return Err(UserError::usage(
                "--detach is for Slurm jobs: a Docker run is followed until it ends",
            )
            .with_fix("drop --detach (Ctrl-C stops the container and keeps the run resumable), or use --where slurm")
            .into());
        }
        Ok(RunRequest {
            flags,
            experiment,
            decision,
            sweep,
            world,
            gpus,
            command,
            host: OnceLock::new(),
        })
    }

    /// This machine, as the doctor sees it (probed once per request).
    pub fn host(&self) -> &Host {
        self.host.get_or_init(crate::probe::probe_host)
    }

    /// Whether this is a user command's run (`envgen run -- CMD`).
    pub fn is_command(&self) -> bool {
        self.experiment.name() == command::NAME
    }

    /// `--backend` as the word launched envgens get.
    pub fn backend_name(&self) -> &'static str {
        backend_word(self.flags.backend)
    }

    /// The Slurm job's resources: flags first, then the `[slurm]` defaults
    /// of the forced hardware profile.
    pub fn slurm_resources(&self) -> Result<SlurmResources> {
        slurm_resources(&self.flags)
    }

    /// How the Slurm job runs envgen, from --container and --image.
    pub fn slurm_runtime(&self) -> Result<Runtime> {
        slurm_runtime(&self.flags.launch, true)
    }

    /// The runtime a `--dry-run` renders the script with: the charliecloud
    /// image directory is not looked into (the run checks it, as before).
    pub fn planned_slurm_runtime(&self) -> Result<Runtime> {
        slurm_runtime(&self.flags.launch, false)
    }
}

/// `--resume RUN`: the run by id (or any unique part of it) under `--out`,
/// or its directory; the experiment, when not given, is the run's own
/// (`envgen run --resume 1126-2`). A launched envgen gets the prepared
/// directory's path and the experiment from its launcher.
fn resolve_resume(flags: &mut RunFlags) -> Result<()> {
    let Some(name) = flags.resume.as_ref().filter(|_| !flags.launched) else {
        return Ok(());
    };
    let dir = crate::runs::store::resolve(name, &flags.out)?;
    if flags.experiment.is_empty() && flags.command.is_empty() {
        flags.experiment = crate::runs::manifest::read(&dir)?.experiment;
    }
    flags.resume = Some(dir);
    Ok(())
}

/// `--backend` as a word (`auto`, `cpu`, `cuda`).
pub fn backend_word(backend: BackendChoice) -> &'static str {
    match backend {
        BackendChoice::Auto => "auto",
        BackendChoice::Cpu => "cpu",
        BackendChoice::Cuda => "cuda",
    }
}

/// `--where`, with `auto` decided now and said on stderr.
fn decide_where(place: Where) -> Decision {
    let given = |place: Place| Decision {
        place,
        reason: format!("--where {}", place.name()),
    };
    match place {
        Where::Native => given(Place::Native),
        Where::Docker => given(Place::Docker),
        Where::Slurm => given(Place::Slurm),
        Where::Auto => {
            let decision = auto::decide();
            crate::output::notice!(
                "envgen: --where auto: {} ({})",
                decision.place.name(),
                decision.reason
            );
            Decision {
                place: decision.place,
                reason: format!("--where auto: {}", decision.reason),
            }
        }
    }
}

/// How many ranks the run trains on and where they sit (launch::ranks).
fn world_plan(flags: &RunFlags, experiment: &dyn Experiment, place: Place) -> Result<WorldPlan> {
    let l = &flags.launch;
    let gpus_per_node = match place {
        Place::Slurm => slurm_resources(flags)?.gpus_per_node,
        Place::Native | Place::Docker => None,
    };
    let plan = plan_world(
        place,
        l.ranks,
        l.nodes,
        // A command's task is a torchrun agent for the whole node.
        gpus_per_node
            .filter(|_| flags.backend != BackendChoice::Cpu && flags.experiment != command::NAME),
    )?;
    if !l.devices.is_empty() && place != Place::Native {
        return Err(
            UserError::usage("--devices picks GPUs for --ranks on this machine")
                .with_fix("under Slurm, ask for GPUs with --gpus-per-node")
                .into(),
        );
    }
    if plan.size > 1 && !experiment.data_parallel() {
        return Err(not_data_parallel(experiment, plan.size));
    }
    Ok(plan)
}

pub fn not_data_parallel(experiment: &dyn Experiment, size: usize) -> anyhow::Error {
    UserError::usage(format!(
        "{} does not train data-parallel yet ({size} ranks asked for)",
        experiment.name()
    ))
    .with_fix("run it on one rank (leave out --ranks; under Slurm one GPU per node), or train gpt2, which does")
    .into()
}

/// `--gpus` for Docker: all, a count, or device IDs.
fn parse_gpus(spec: &str) -> Result<GpuRequest> {
    if spec == "all" {
        return Ok(GpuRequest::All);
    }
    if let Ok(n) = spec.parse::<i64>() {
        if n > 0 {
            return Ok(GpuRequest::Count(n));
        }
    }
    let ids: Vec<String> = spec.split(',').map(str::trim).map(str::to_owned).collect();
    if ids
        .iter()
        .any(|id| id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(UserError::usage(format!(
            "--gpus {spec:?}: not `all`, a count, or device IDs"
        ))
        .with_fix("e.g. --gpus all, --gpus 2, --gpus 0,1 or --gpus GPU-<uuid>")
        .into());
    }
    Ok(GpuRequest::Devices(ids))
}

/// Resources of a Slurm job (flags, then the hardware profile's `[slurm]`
/// defaults; Slurm's own defaults for anything left unset).
#[derive(Debug, Clone, Default)]
pub struct SlurmResources {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time: Option<String>,
    pub nodes: Option<u32>,
    /// Tasks (data-parallel ranks) per node; 0 or 1: one.
    pub tasks_per_node: u32,
    pub gpus_per_node: Option<u32>,
    /// `None`: [`default_cpus_per_task`](super::slurm::directives::default_cpus_per_task)
    /// once the tasks per node are known.
    pub cpus_per_task: Option<u32>,
    pub mem: Option<String>,
    pub qos: Option<String>,
    pub gres: Option<String>,
    pub constraint: Option<String>,
    pub job_name: Option<String>,
    /// The profile's `[slurm] extra`, then `--sbatch-arg`s: sbatch takes
    /// the last of a repeated option, so a flag wins over the profile.
    pub extra: Vec<String>,
}

fn slurm_resources(flags: &RunFlags) -> Result<SlurmResources> {
    let defaults = match &flags.profile {
        Some(name) => Profiles::load()?
            .get(name)?
            .slurm
            .clone()
            .unwrap_or_default(),
        None => Default::default(),
    };
    let l = &flags.launch;
    for (flag, value) in [
        ("--partition", &l.partition),
        ("--account", &l.account),
        ("--time", &l.time),
        ("--mem", &l.mem),
        ("--qos", &l.qos),
        ("--gres", &l.gres),
        ("--constraint", &l.constraint),
        ("--job-name", &l.job_name),
    ] {
        if let Some(value) = value {
            check_directive(flag, value)?;
        }
    }
    for arg in &defaults.extra {
        check_sbatch_arg("the profile's [slurm] extra", arg)?;
    }
    for arg in &l.sbatch_args {
        check_sbatch_arg("--sbatch-arg", arg)?;
    }
    // `--gres gpu:a30:2` says how many GPUs the node gives the job; a
    // different --gpus-per-node beside it would plan the wrong ranks.
    let gres_count = l.gres.as_deref().and_then(gres_gpus);
    if let (Some(from_gres), Some(given)) = (gres_count, l.gpus_per_node) {
        if from_gres != given {
            return Err(UserError::usage(format!(
                "--gres {} asks for {from_gres} GPU(s) per node, --gpus-per-node {given}",
                l.gres.as_deref().unwrap_or_default()
            ))
            .with_fix(
                "give the GPU count once: in --gres (it is written instead of --gpus-per-node)",
            )
            .into());
        }
    }
    Ok(SlurmResources {
        qos: l.qos.clone(),
        gres: l.gres.clone(),
        constraint: l.constraint.clone(),
        job_name: l.job_name.clone(),
        extra: defaults
            .extra
            .iter()
            .chain(&l.sbatch_args)
            .cloned()
            .collect(),
        partition: l.partition.clone(),
        account: l.account.clone(),
        time: l.time.clone(),
        nodes: l.nodes,
        // `--backend cuda` needs a GPU in the allocation even without a profile.
        gpus_per_node: l
            .gpus_per_node
            .or(gres_count)
            .or(defaults.gpus_per_node)
            .or((flags.backend == BackendChoice::Cuda).then_some(1)),
        cpus_per_task: l.cpus_per_task.or(defaults.cpus_per_task),
        mem: l.mem.clone().or(defaults.mem),
        tasks_per_node: 1,
    })
}

fn slurm_runtime(launch: &LaunchFlags, check_image: bool) -> Result<Runtime> {
    let image = || {
        launch.image.clone().ok_or_else(|| -> anyhow::Error {
            UserError::usage(format!(
                "--container {} needs --image",
                launch.container.name()
            ))
            .with_fix("--image DIR (charliecloud: `envgen image export cpu --format charliecloud`, then ch-convert), --image FILE.sif (apptainer), --image REF (pyxis)")
            .into()
        })
    };
    Ok(match launch.container {
        Container::None => Runtime::Native,
        Container::Charliecloud => {
            let dir = PathBuf::from(image()?);
            if check_image && !dir.join("usr/local/bin/envgen").is_file() {
                return Err(UserError::usage(format!(
                    "--image {}: not a charliecloud image directory with envgen in it",
                    dir.display()
                ))
                .with_fix("export one with `envgen image export cpu --format charliecloud -o cpu.tar` and `ch-convert cpu.tar DIR`")
                .into());
            }
            Runtime::Charliecloud {
                image_dir: std::path::absolute(dir)?,
            }
        }
        Container::Apptainer => Runtime::Apptainer {
            sif: std::path::absolute(image()?)?,
        },
        Container::Pyxis => Runtime::Pyxis { image: image()? },
    })
}

/// Refuse container knobs where there is no container to give them to, and
/// combinations Docker would silently ignore.
fn check_container_options(flags: &RunFlags, place: Place) -> Result<()> {
    let options = &flags.launch.docker;
    let given = options.flags();
    if given.is_empty() {
        return Ok(());
    }
    let named: Vec<&str> = given
        .iter()
        .filter(|w| w.starts_with("--"))
        .map(String::as_str)
        .collect();
    if place != Place::Docker {
        return Err(UserError::usage(format!(
            "{} {} Docker's container knobs, but this run goes to {}",
            named.join(", "),
            if named.len() == 1 { "is one of" } else { "are" },
            place.name()
        ))
        .with_fix("add --where docker, or drop them")
        .into());
    }
    if options.ipc == Ipc::Host && options.shm_size_bytes.is_some() {
        return Err(UserError::usage(
            "--shm-size with --ipc host: the container uses the host's /dev/shm, so the size would be ignored",
        )
        .with_fix("keep one: --ipc host (the host's /dev/shm) or --shm-size SIZE (its own)")
        .into());
    }
    if options.writable_workspace && flags.experiment != command::NAME {
        return Err(UserError::usage(format!(
            "--writable-workspace is for your own command's code; envgen run {} mounts none",
            flags.experiment
        ))
        .with_fix("drop it (a bundled experiment writes into its run directory), or run your code: envgen run --where docker --writable-workspace -- python train.py")
        .into());
    }
    Ok(())
}

/// A sweep of a command applies to each value (a `{KEY}` it lacks is
/// refused now); `ENV:` sweeps are for commands only.
fn check_sweep_target(
    sweep: &Sweep,
    command: Option<&CommandSpec>,
    experiment: &str,
) -> Result<()> {
    match command {
        Some(spec) => {
            for value in &sweep.values {
                command::with_sweep_values(&spec.config, &[format!("{}={value}", sweep.key)])?;
            }
            Ok(())
        }
        None if sweep.key.starts_with(command::SWEEP_ENV) => Err(UserError::usage(format!(
            "--sweep {}=…: a variable sweep is for your own command; envgen run {experiment} reads its science config only",
            sweep.key
        ))
        .with_fix("sweep a config key (--sweep train.seed=1,2), or run your code: envgen run --where slurm --sweep ENV:NAME=a,b -- python train.py")
        .into()),
        None => Ok(()),
    }
}

/// Run one value of a config key per array task (`--sweep key=v1,v2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub key: String,
    pub values: Vec<String>,
}

impl Sweep {
    /// Parse `key=v1,v2,…` (key: letters, digits, `_`, `.`, or `ENV:` and a
    /// variable's name; at least one value).
    pub fn parse(spec: &str) -> Result<Sweep> {
        let bad = |why: &str| -> anyhow::Error {
            UserError::usage(format!("--sweep {spec:?}: {why}"))
                .with_fix("write it as KEY=V1,V2,… e.g. --sweep train.seed=1,2")
                .into()
        };
        let (key, values) = spec.split_once('=').ok_or_else(|| bad("missing '='"))?;
        let bare = key.strip_prefix(command::SWEEP_ENV).unwrap_or(key);
        let key_ok = !bare.is_empty()
            && bare
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !key_ok {
            return Err(bad("the key may hold only letters, digits, '_' and '.'"));
        }
        let values: Vec<String> = values.split(',').map(str::to_owned).collect();
        if values.iter().any(String::is_empty) {
            return Err(bad("empty value"));
        }
        Ok(Sweep {
            key: key.to_owned(),
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_sweeps_name_a_variable() {
        let sweep = Sweep::parse("ENV:MICRO_BATCH_SIZE=4,16").unwrap();
        assert_eq!(sweep.key, "ENV:MICRO_BATCH_SIZE");
        assert_eq!(sweep.values, ["4", "16"]);
        for spec in ["ENV:=1", "ENV:A B=1", "ENV:A$=1"] {
            assert!(Sweep::parse(spec).is_err(), "{spec}");
        }
    }

    #[test]
    fn bad_sweeps_are_usage_errors() {
        for spec in ["seed", "=1,2", "a b=1", "seed=1,,2", "se$ed=1"] {
            let err = Sweep::parse(spec).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{spec}");
        }
    }

    #[test]
    fn gpus_are_all_a_count_or_ids() {
        assert_eq!(parse_gpus("all").unwrap(), GpuRequest::All);
        assert_eq!(parse_gpus("2").unwrap(), GpuRequest::Count(2));
        assert_eq!(
            parse_gpus("0,GPU-ab").unwrap(),
            GpuRequest::Devices(vec!["0".into(), "GPU-ab".into()])
        );
        for bad in ["", "0,,1", "a b", "$(x)"] {
            let err = parse_gpus(bad).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{bad}");
        }
    }
}
