//! Training in this process: a new native run, `--resume`, or (`--launched`)
//! the run (or the rank of a run) a launcher prepared.

use super::*;

/// The precision a GPU run here will use, known before the backend is set
/// up (TF32 is decided with it): the flag, else the resumed run's, else the
/// hardware profile's for this host's GPU.
fn planned_precision(args: &Args, experiment: &dyn Experiment, host: &Host) -> Result<Precision> {
    if let Some(p) = args.precision {
        return Ok(p.into());
    }
    if let Some(dir) = &args.resume {
        let (_, manifest) = config_of_run(experiment, dir)?;
        return Ok(Precision::from_name(&manifest.profile.precision).unwrap_or(Precision::Fp32));
    }
    let choice = Profiles::load()?.choose(
        host.gpus.first(),
        args.profile.as_deref(),
        None,
        &args.experiment,
        args.preset.as_deref().unwrap_or("custom"),
    )?;
    Ok(choice.precision)
}

/// Train in this process: a new native run, `--resume`, or (`--launched`)
/// the run a launcher prepared for this job or container.
pub(super) fn run_here(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
) -> Result<i32> {
    // A rank of a data-parallel run (started by `--ranks` or srun) learns
    // its place from the environment its launcher set.
    let world = if args.launched {
        engine::World::from_env()?
    } else {
        None
    };
    if let Some(w) = &world {
        if !experiment.data_parallel() {
            return Err(not_data_parallel(experiment, w.size));
        }
        select_gpu_of_rank();
    }
    let leader = engine::distributed::writes_files(world.as_ref());
    let world_size = world.as_ref().map_or(1, |w| w.size);
    let threads = configure_threads(args.threads)?;
    let host = crate::probe::probe_host();
    let may_use_cuda = args.backend == Backend::Cuda
        || (args.backend == Backend::Auto && std::path::Path::new("/dev/nvidiactl").exists());
    if may_use_cuda {
        backend::use_tf32(planned_precision(args, experiment, &host)? == Precision::Tf32);
    }
    let resolved = backend::resolve(args.backend.into())?;

    let (run_dir, science, profile, resume) = match &args.resume {
        Some(dir) => {
            let (loaded, mut manifest) = config_of_run(experiment, dir)?;
            let resume = dir.join("checkpoints").join("latest").is_file();
            if !resume && !args.launched {
                eprintln!(
                    "envgen: {} has no checkpoint yet: starting at step 0",
                    dir.display()
                );
            }
            let mut profile = manifest.profile.clone();
            let share = engine::distributed::rank_batch(loaded.batch_size, world_size)?;
            if args.launched && !resume {
                // First start of a launched run: its hardware is this node's
                // (or this container's), not the submitting host's.
                let choice =
                    hardware_choice(args, &host, resolved.name(), manifest.preset.as_deref())?;
                let (micro_batch, grad_accum) = engine::split_batch(
                    share,
                    args.micro_batch
                        .or(choice.micro_batch)
                        .or(loaded.hardware.micro_batch),
                )?;
                profile.name = Some(choice.profile);
                profile.micro_batch = micro_batch;
                profile.grad_accum = grad_accum;
                profile.precision = choice.precision.name().into();
            } else {
                if let Some(requested) = args.precision {
                    // A resumed run may change its precision (not its science):
                    // checkpoints hold f32 weights and moments whatever it was.
                    profile.precision = Precision::from(requested).name().into();
                }
                // ... and its world size: the split of each global batch
                // follows; the data of every step stays the same.
                let (micro_batch, grad_accum) = engine::split_batch(
                    share,
                    Some(args.micro_batch.unwrap_or(profile.micro_batch)),
                )?;
                profile.micro_batch = micro_batch;
                profile.grad_accum = grad_accum;
            }
            profile.backend = resolved.name().into();
            profile.device = resolved.device().into();
            profile.threads = Some(threads);
            if leader {
                if args.launched {
                    manifest
                        .environment
                        .insert("host".into(), serde_json::to_value(&host)?);
                }
                manifest
                    .environment
                    .insert("world_size".into(), json!(world_size));
                if let Some(w) = &world {
                    manifest
                        .environment
                        .insert("distributed".into(), distributed_record(w));
                }
                manifest.profile = profile.clone();
                rundir::write_json(&dir.join("manifest.json"), &manifest)?;
                // A stale summary (interrupted) must not describe the run while it goes on.
                let _ = std::fs::remove_file(dir.join("summary.json"));
            }
            (dir.clone(), loaded.science, profile, resume)
        }
        None => {
            let setup = Setup {
                decision,
                host: &host,
                backend: resolved.name(),
                device: resolved.device(),
                threads: Some(threads),
                world_size: 1,
            };
            let (dir, science, profile) =
                create_run(args, experiment, &setup, &[], NewDir::Fresh(&args.out))?;
            (dir, science, profile, false)
        }
    };
    if leader {
        eprintln!("envgen: run directory {}", run_dir.display());
    }

    let control = RunControl {
        run_dir: run_dir.clone(),
        micro_batch: profile.micro_batch,
        resume,
        stop_after: args.stop_after,
        stop: install_stop_handler("stopping after this step (checkpoint follows)"),
        progress: !args.json,
        precision: Precision::from_name(&profile.precision).ok_or_else(|| {
            UserError::usage(format!(
                "{}: profile.precision = {:?} is not fp32, tf32, bf16 or fp16",
                run_dir.join("manifest.json").display(),
                profile.precision
            ))
            .with_fix("restore the manifest.json that `envgen run` wrote")
        })?,
        world: world.clone(),
    };
    let mut science = science;
    if args.launched {
        // In a container the data is mounted at neutral paths: map the host
        // paths the config names (its hash was checked above, unchanged).
        crate::launch::docker_job::map_paths(
            &mut science,
            &crate::launch::docker_job::path_map_from_env(),
        );
    }
    let sampler =
        leader.then(|| GpuSampler::start(&run_dir.join("metrics.jsonl"), GPU_SAMPLE_INTERVAL));
    let outcome = experiment.run(&science, &control, resolved);
    drop(sampler);
    let mut summary = match outcome {
        Ok(summary) => summary,
        Err(err) => {
            if leader {
                let _ = rundir::write_json(
                    &run_dir.join("summary.json"),
                    &registry::failed_summary(&err),
                );
            }
            return Err(err);
        }
    };
    if !leader {
        // The run's files are rank 0's; this rank says only how it ended.
        let rank = world.as_ref().map_or(0, |w| w.rank);
        eprintln!(
            "envgen: rank {rank}: {:?} after {} steps",
            summary.status, summary.steps_done
        );
        return Ok(crate::launch::exit_code(&[RunOutcome { run_dir, summary }]));
    }
    // The process's peak memory, for `envgen probe` and for readers sizing
    // a machine (CPU runs: it is the tensors' memory too).
    if let Some(mib) = crate::probe::proc::peak_rss_mib() {
        summary.metrics.insert("peak_rss_mib".into(), json!(mib));
        rundir::write_json(&run_dir.join("summary.json"), &summary)?;
    }
    record_data_files(&run_dir, &summary)?;
    let outcomes = [RunOutcome { run_dir, summary }];
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

/// With one process per GPU, each sees only its own: the `local rank`-th of
/// the GPUs the job was given (CUDA_VISIBLE_DEVICES, set by Slurm or by
/// `--devices`), so every CUDA device 0 below is this rank's.
pub(super) fn select_gpu_of_rank() {
    let local = std::env::var("ENVGEN_LOCAL_RANK")
        .or_else(|_| std::env::var("SLURM_LOCALID"))
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let gpus: Vec<&str> = visible.split(',').filter(|g| !g.is_empty()).collect();
    if let (Some(local), true) = (local, gpus.len() > 1) {
        if let Some(gpu) = gpus.get(local) {
            // Before any CUDA call in this process (the backend is resolved after).
            std::env::set_var("CUDA_VISIBLE_DEVICES", gpu);
        }
    }
}

/// The manifest's `distributed`: how the ranks sat and how they reduced.
pub(super) fn distributed_record(world: &engine::World) -> Value {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let nodes: Vec<String> = match var("SLURM_JOB_NODELIST") {
        Some(list) => std::process::Command::new("scontrol")
            .args(["show", "hostnames", &list])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_else(|| vec![list]),
        None => vec![std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())],
    };
    let per_node = var("SLURM_NTASKS_PER_NODE")
        .and_then(|v| {
            v.split(['(', ','])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(world.size / nodes.len().max(1));
    json!({
        "ranks_per_node": per_node,
        "nodes": nodes,
        "reduction": "collective",
        "reduction_detail": "burn-collective tree all-reduce over TCP (one bucket per step)",
        "rendezvous": format!("{}:{}", world.rendezvous.0, world.rendezvous.1),
    })
}

/// Size the global rayon pool, which Burn's CPU backend and envgen's fused
/// kernels run on: `--threads N`, else rayon's default (every core this
/// process may use: its CPU affinity, e.g. a Slurm task's or a container's
/// cpuset). Returns the pool's size, for the manifest.
pub(super) fn configure_threads(requested: Option<u16>) -> Result<usize> {
    if let Some(n) = requested {
        rayon::ThreadPoolBuilder::new()
            .num_threads(usize::from(n))
            .build_global()
            .map_err(|e| {
                UserError::environment(format!("--threads {n}: cannot size the thread pool: {e}"))
                    .with_fix("leave out --threads")
            })?;
    }
    Ok(rayon::current_num_threads())
}

/// How often NVML is sampled on GPU hosts (W&B's system metrics default: 10-15 s;
/// a run of minutes wants finer).
pub(super) const GPU_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
