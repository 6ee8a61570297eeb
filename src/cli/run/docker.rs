//! `--where docker`: the image, the container, followed to its end.

use super::*;

/// `--gpus` for Docker; by default all GPUs for the cuda backend, none for cpu.
pub(super) fn docker_gpus(args: &Args, host: &Host) -> Result<GpuRequest> {
    let Some(spec) = &args.launch.gpus else {
        return Ok(match args.backend {
            Backend::Cpu => GpuRequest::None,
            Backend::Cuda => GpuRequest::All,
            Backend::Auto if host.gpus.is_empty() => GpuRequest::None,
            Backend::Auto => GpuRequest::All,
        });
    };
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

/// `--where docker`: doctor's verdict first, the image (built on demand),
/// then the run directory, then the container, followed to its end.
pub(super) fn run_docker(
    args: &Args,
    experiment: &dyn Experiment,
    decision: &Decision,
) -> Result<i32> {
    if args.detach {
        return Err(UserError::usage(
            "--detach is for Slurm jobs: a Docker run is followed until it ends",
        )
        .with_fix("drop --detach (Ctrl-C stops the container and keeps the run resumable), or use --where slurm")
        .into());
    }
    let host = crate::probe::probe_host();
    let gpus = docker_gpus(args, &host)?;
    let runtime = crate::image::docker::runtime()?;
    let stop =
        install_stop_handler("interrupted: stopping the container (the run checkpoints first)");
    let image = docker_image(&runtime, args, &gpus)?;
    let facts = crate::image::profile_facts(&image.profile);
    docker_job::check_verdict(&host, &image.reference, facts)?;
    let (runs, _) = launched_runs(args, experiment, decision, None, 1)?;
    let run_dir = runs[0].clone();
    let job = docker_job::DockerRun {
        experiment: experiment.name().into(),
        run_dir: run_dir.clone(),
        image: image.reference.clone(),
        job_args: job_args(args),
        data_dirs: data_dirs(&science_of(&run_dir)?),
        gpus,
        cdi: args.launch.cdi,
    };
    eprintln!("envgen: run directory {}", run_dir.display());
    let outcome = runtime.block_on(async {
        let docker = crate::launch::docker::connect().await?;
        let interrupt = async {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        };
        docker_job::run(&docker, &job, interrupt).await
    })?;
    record_data_files(&outcome.run_dir, &outcome.summary)?;
    let outcomes = [outcome];
    print_outcomes(experiment, &outcomes, args.json)?;
    Ok(crate::launch::exit_code(&outcomes))
}

/// The image a Docker run uses: --image, else the profile image for the
/// backend (`cpu`, `cuda12.8`), built now if the daemon lacks one holding
/// this very envgen binary.
pub(super) struct DockerImage {
    reference: String,
    profile: String,
}

pub(super) fn docker_image(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
    gpus: &GpuRequest,
) -> Result<DockerImage> {
    let profile = if *gpus == GpuRequest::None {
        "cpu"
    } else {
        "cuda12.8"
    };
    let reference = match &args.launch.image {
        Some(reference) => reference.clone(),
        None => {
            let containers = crate::image::Containers::locate(None)?;
            eprintln!("envgen: docker: using the {profile} profile image (built now if missing)");
            runtime.block_on(crate::image::build::ensure_built(
                &containers,
                profile,
                None,
            ))?;
            crate::image::build::default_tag(profile)
        }
    };
    Ok(DockerImage {
        reference,
        profile: profile.into(),
    })
}
