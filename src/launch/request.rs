//! What a user asked `envgen run` for, checked once: the CLI turns its
//! flags into a [`RunFlags`] (plain values), and [`Asked::new`] and
//! [`Asked::with_place`] validate them together — where (with `auto` decided now), the sweep,
//! the ranks and nodes, `--gpus`, the Slurm container — so every place
//! receives a request that is already consistent, and every refusal
//! happens before anything is made.

use std::sync::OnceLock;

use envgen_experiments::backend::BackendChoice;
use envgen_experiments::registry::Experiment;

use super::auto::{self, Decision, Place};
use super::command::{self, CommandSpec};
use super::world::{plan_world, WorldPlan};
use crate::error::{Result, UserError};
use crate::host::Host;
use crate::image::daemon::container::GpuRequest;

pub use super::flags::{RunFlags, Where};
pub use super::slurm::resources::SlurmResources;
/// The where-specific flags (`runs::launch_flags`: they are recorded in
/// the manifest, typed, so `envgen rerun` launches the same way).
pub use crate::runs::launch_flags::{Container, LaunchFlags};

/// What a place was given, as its own file checked it: the variant is the
/// place, its data what only that place uses.
#[derive(Debug, Clone)]
pub enum PlaceOptions {
    Native,
    Docker {
        /// `--gpus` parsed; `None`: the backend's default.
        gpus: Option<GpuRequest>,
    },
    Slurm {
        /// The job's resources (flags, then the profile's `[slurm]`);
        /// boxed, being much the largest.
        resources: Box<SlurmResources>,
    },
}

/// A run request every place can act on: the flags plus what was decided
/// from them once (the experiment, where and why, the sweep, the world, the
/// place's own options).
pub struct RunRequest {
    pub flags: RunFlags,
    pub experiment: &'static dyn Experiment,
    pub decision: Decision,
    pub sweep: Option<Sweep>,
    pub world: WorldPlan,
    /// What the place was given, checked by the place's own file.
    pub options: PlaceOptions,
    /// A user command to make a new run of (`-- CMD`, or `rerun` of one).
    pub command: Option<CommandSpec>,
    /// The doctor's snapshot of this machine, probed on first use and then
    /// shared: the launcher's checks and the manifest see one probe.
    host: OnceLock<Host>,
}

/// The flags checked up to the place's own check: the experiment, where
/// (`auto` decided), a user command, the sweep. `super::request` gives
/// the place's flags to its file, then [`Asked::with_place`] finishes the
/// request: the place's check is called from above, not from here.
pub struct Asked {
    flags: RunFlags,
    experiment: &'static dyn Experiment,
    decision: Decision,
    sweep: Option<Sweep>,
    command: Option<CommandSpec>,
}

impl Asked {
    /// Check the flags together; `auto` is decided (and said on stderr).
    pub fn new(mut flags: RunFlags) -> Result<Asked> {
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
        if sweep.is_some() && !decision.place.is_cluster_job() {
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
        Ok(Asked {
            flags,
            experiment,
            decision,
            sweep,
            command,
        })
    }

    /// The flags, for the place's own check of them.
    pub fn flags(&self) -> &RunFlags {
        &self.flags
    }

    /// The place whose file checks its flags now; none for a launched run
    /// (its launcher checked them before it started this process).
    pub fn place_to_check(&self) -> Option<Place> {
        (!self.flags.launched).then_some(self.decision.place)
    }

    /// The request, with `options` as the place's file checked them
    /// (`None` where [`Asked::place_to_check`] named no place).
    pub fn with_place(self, options: Option<PlaceOptions>) -> Result<RunRequest> {
        let Asked {
            flags,
            experiment,
            decision,
            sweep,
            command,
        } = self;
        let (options, world) = match options {
            Some(options) => {
                let world = world_plan(&flags, experiment, decision.place, &options)?;
                refuse_container_knobs_elsewhere(&flags, decision.place)?;
                (options, world)
            }
            // The ranks of a launched run learn their world from the
            // environment; its launcher checked the place's flags.
            None => (
                PlaceOptions::Native,
                plan_world(Place::Native, None, None, None)?,
            ),
        };
        Ok(RunRequest {
            flags,
            experiment,
            decision,
            sweep,
            world,
            options,
            command,
            host: OnceLock::new(),
        })
    }
}

impl RunRequest {
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
fn world_plan(
    flags: &RunFlags,
    experiment: &dyn Experiment,
    place: Place,
    options: &PlaceOptions,
) -> Result<WorldPlan> {
    let l = &flags.launch;
    let gpus_per_node = match options {
        PlaceOptions::Slurm { resources } => resources.gpus_per_node,
        PlaceOptions::Native | PlaceOptions::Docker { .. } => None,
    };
    let plan = plan_world(
        place,
        l.ranks,
        l.nodes,
        // A command's task is a torchrun agent for the whole node.
        gpus_per_node
            .filter(|_| flags.backend != BackendChoice::Cpu && flags.experiment != command::NAME),
    )?;
    if !l.devices.is_empty() && !place.is_this_machine() {
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

/// Refuse Docker's container knobs where there is no container to give
/// them to (the place's own checks are in its file: `docker::check_flags`).
fn refuse_container_knobs_elsewhere(flags: &RunFlags, place: Place) -> Result<()> {
    let given = flags.launch.docker.flags();
    let named: Vec<&str> = given
        .iter()
        .filter(|w| w.starts_with("--"))
        .map(String::as_str)
        .collect();
    match place {
        Place::Docker => Ok(()),
        Place::Native | Place::Slurm if named.is_empty() => Ok(()),
        Place::Native | Place::Slurm => Err(UserError::usage(format!(
            "{} {} Docker's container knobs, but this run goes to {}",
            named.join(", "),
            if named.len() == 1 { "is one of" } else { "are" },
            place.name()
        ))
        .with_fix("add --where docker, or drop them")
        .into()),
    }
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
}
