//! `--where slurm`: one job (or an array) into prepared run directories.

use super::*;

/// `--where slurm`: prepare the run directories, submit one job (an array
/// for a sweep), then follow it (or return at once with --detach).
pub(super) fn run_slurm(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
    sweep: Option<&Sweep>,
    world: &WorldPlan,
) -> Result<i32> {
    let runtime = slurm_runtime(&args.launch)?;
    let (runs, sweep_base) = launched_runs(args, experiment, decision, sweep, world.size)?;
    let output = match &sweep_base {
        Some(base) => slurm_job::sweep_output(&args.out, base),
        None => runs[0].join(slurm_job::JOB_OUTPUT),
    };
    let mut data = Vec::new();
    for run in &runs {
        data.extend(data_dirs(&science_of(run)?));
    }
    let submission = slurm_job::Submission {
        experiment: experiment.name().into(),
        runs: runs.clone(),
        job_args: job_args(args),
        output,
        resources: slurm_job::Resources {
            nodes: Some(world.nodes as u32),
            tasks_per_node: world.per_node as u32,
            ..slurm_resources(args)?
        },
        runtime,
        data_dirs: data,
    };
    if let Some(image) = slurm_job::image_provenance(&submission.runtime)? {
        for run in &runs {
            slurm_job::update_manifest(run, |env| {
                env.insert("image".into(), image.clone());
            })?;
        }
    }
    // Installed before submitting: a Ctrl-C during sbatch still cancels the
    // job (the follow loop looks at the flag first).
    let stop =
        install_stop_handler("interrupted: cancelling the Slurm job (the run checkpoints first)");
    let job_id = slurm_job::submit(&submission)?;
    eprintln!(
        "envgen: submitted Slurm job {job_id} ({} run{}): {}",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        runs.iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // A Ctrl-C during submission goes on to follow, which cancels at once.
    if args.detach && !stop.load(Ordering::SeqCst) {
        detached(args, &job_id, &runs)?;
        return Ok(0);
    }
    let outcomes = slurm_job::follow(&job_id, &runs, &stop)?;
    for outcome in &outcomes {
        record_data_files(&outcome.run_dir, &outcome.summary)?;
    }
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

pub(super) fn detached(args: &Args, job: &str, runs: &[PathBuf]) -> Result<()> {
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "job_id": job, "run_dirs": runs }))?
        );
    } else {
        for run in runs {
            println!("run directory: {}", run.display());
        }
        println!("follow with `envgen runs show RUN`, stop with `envgen runs cancel RUN`");
    }
    Ok(())
}

/// How the Slurm job runs envgen, from --container and --image.
pub(super) fn slurm_runtime(launch: &LaunchArgs) -> Result<Runtime> {
    let image = || {
        launch.image.clone().ok_or_else(|| -> anyhow::Error {
            UserError::usage(format!(
                "--container {:?} needs --image",
                launch.container
            ))
            .with_fix("--image DIR (charliecloud: `envgen image export cpu --format charliecloud`, then ch-convert), --image FILE.sif (apptainer), --image REF (pyxis)")
            .into()
        })
    };
    Ok(match launch.container {
        Container::None => Runtime::Native,
        Container::Charliecloud => {
            let dir = PathBuf::from(image()?);
            if !dir.join("usr/local/bin/envgen").is_file() {
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

/// Flags first, then the `[slurm]` defaults of the forced hardware profile.
pub(super) fn slurm_resources(args: &Args) -> Result<slurm_job::Resources> {
    let defaults = match &args.profile {
        Some(name) => Profiles::load()?
            .get(name)?
            .slurm
            .clone()
            .unwrap_or_default(),
        None => Default::default(),
    };
    let l = &args.launch;
    Ok(slurm_job::Resources {
        partition: l.partition.clone(),
        account: l.account.clone(),
        time: l.time.clone(),
        nodes: l.nodes,
        // `--backend cuda` needs a GPU in the allocation even without a profile.
        gpus_per_node: l
            .gpus_per_node
            .or(defaults.gpus_per_node)
            .or((args.backend == Backend::Cuda).then_some(1)),
        cpus_per_task: l.cpus_per_task.or(defaults.cpus_per_task),
        mem: l.mem.clone().or(defaults.mem),
        tasks_per_node: 1,
    })
}
