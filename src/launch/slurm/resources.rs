//! What a Slurm job is given — its resources and its container runtime —
//! checked from the flags before anything is made: the Slurm place's own
//! flag checks ([`check_flags`], called through `launch::place_options`).

use std::path::PathBuf;

use envgen_experiments::backend::BackendChoice;

use super::directives::{check_sbatch_arg, gres_gpus};
use super::sbatch::{check_directive, check_job_dir, Runtime};
use crate::error::{Result, UserError};
use crate::launch::flags::RunFlags;
use crate::profiles::Profiles;
use crate::runs::launch_flags::{Container, LaunchFlags};

/// The Slurm place's flags, checked: the job's resources; its run
/// directories must be where the nodes can reach them.
pub fn check_flags(flags: &RunFlags) -> Result<SlurmResources> {
    let resources = resources_of(flags)?;
    // The job trains on a node: its memory is checked there.
    envgen_experiments::engine::budget::trains_elsewhere();
    for dir in [Some(&flags.out), flags.resume.as_ref()]
        .into_iter()
        .flatten()
    {
        check_job_dir(&std::path::absolute(dir)?)?;
    }
    Ok(resources)
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

pub fn resources_of(flags: &RunFlags) -> Result<SlurmResources> {
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

/// How the Slurm job runs envgen, from --container and --image; with
/// `check_image`, a charliecloud directory is looked into (a `--dry-run`
/// leaves that to the run).
pub fn runtime_of(launch: &LaunchFlags, check_image: bool) -> Result<Runtime> {
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
