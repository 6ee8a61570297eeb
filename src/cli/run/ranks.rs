//! Data-parallel runs: how many ranks, where they sit, and `--ranks N` on
//! this machine (the processes themselves: launch::ranks).

use super::*;

/// How many ranks the run trains on and where they sit (launch::ranks).
pub(super) fn world_plan(
    args: &Args,
    experiment: &dyn Experiment,
    place: Place,
) -> Result<WorldPlan> {
    let l = &args.launch;
    let gpus_per_node = match place {
        Place::Slurm => slurm_resources(args)?.gpus_per_node,
        _ => None,
    };
    let plan = crate::launch::ranks::plan_world(
        place,
        l.ranks,
        l.nodes,
        gpus_per_node.filter(|_| args.backend != Backend::Cpu),
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

pub(super) fn not_data_parallel(experiment: &dyn Experiment, size: usize) -> anyhow::Error {
    UserError::usage(format!(
        "{} does not train data-parallel yet ({size} ranks asked for)",
        experiment.name()
    ))
    .with_fix("run it on one rank (leave out --ranks; under Slurm one GPU per node), or train gpt2, which does")
    .into()
}

/// `--ranks N` on this machine: the run directory is made here, then N
/// ranks train into it (launch::ranks) and rank 0 writes its files.
pub(super) fn run_ranks(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
    world: &WorldPlan,
) -> Result<i32> {
    let resolved = backend::resolve(args.backend.into())?;
    let mut devices = crate::launch::ranks::devices_for(&args.launch.devices, world.size)?;
    if devices.is_none() && resolved.name() == "cuda" {
        // One GPU per rank by default: GPUs 0 … N-1.
        devices = Some((0..world.size).map(|g| g.to_string()).collect());
    }
    let run_dir = match &args.resume {
        Some(dir) => {
            config_of_run(experiment, dir)?;
            dir.clone()
        }
        None => {
            let host = crate::probe::probe_host();
            let setup = Setup {
                decision,
                host: &host,
                backend: resolved.name(),
                device: resolved.device(),
                threads: None,
                world_size: world.size,
            };
            create_run(args, experiment, &setup, &[], NewDir::Fresh(&args.out))?.0
        }
    };
    eprintln!(
        "envgen: run directory {} ({} ranks on this machine)",
        run_dir.display(),
        world.size
    );
    let mut words = vec![
        "run".to_string(),
        experiment.name().to_string(),
        "--launched".into(),
        "--resume".into(),
        run_dir.display().to_string(),
    ];
    words.extend(job_args(args));
    if args.threads.is_none() && resolved.name() == "cpu" {
        // Ranks share this machine's cores instead of each taking all.
        let per_rank = (rayon::current_num_threads() / world.size).max(1);
        words.extend(["--threads".to_string(), per_rank.to_string()]);
    }
    let stop = install_stop_handler("interrupted: stopping every rank (rank 0 checkpoints first)");
    let ends = crate::launch::ranks::run(
        &crate::launch::ranks::RankLaunch {
            args: &words,
            ranks: world.size,
            devices: devices.as_deref(),
        },
        &stop,
    )?;
    if let Some(err) = crate::launch::ranks::failure(&ends, experiment.name(), &run_dir, world.size)
    {
        let state: Option<engine::Summary> = rundir::read_json(&run_dir.join("summary.json")).ok();
        if state.is_none_or(|s| s.status == engine::Status::Running) {
            crate::launch::mark_ended(&run_dir, engine::Status::Failed, &format!("{err}"))?;
        }
        return Err(err);
    }
    let summary: engine::Summary = rundir::read_json(&run_dir.join("summary.json"))?;
    record_data_files(&run_dir, &summary)?;
    let outcomes = [RunOutcome { run_dir, summary }];
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}
