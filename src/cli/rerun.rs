//! `envgen rerun MANIFEST_OR_RUN_DIR`: a new run with the same science
//! config (config.toml, so the same config_hash), the same `where` and its
//! launch flags, and — for a containerized run — the very image it ran in,
//! by ID. An image that is gone is refused: rebuilding it would give
//! another digest, so it would not be the same run.

use std::path::PathBuf;

use clap::Parser as _;

use crate::error::{Result, UserError};
use crate::runs::manifest::{ImageRecord, Manifest};
use crate::runs::store::RunDir;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run id (or a unique prefix of one) under --out, a run directory, or its manifest.json.
    pub source: PathBuf,
    /// Parent directory of run directories: where the new run goes and ids are looked up.
    #[arg(
        long,
        value_name = "DIR",
        env = "ENVGEN_RUNS_DIR",
        default_value = "runs"
    )]
    pub out: PathBuf,
    /// Do not follow a Slurm job (or a container) after starting it.
    #[arg(long)]
    pub detach: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `envgen run` as a rerun of `args.source`: the argv it amounts to.
pub fn run_argv(args: &Args, manifest: &Manifest, dir: &std::path::Path) -> Result<Vec<String>> {
    let location = manifest.environment.place.name().to_string();
    let mut argv = vec![
        "run".to_string(),
        manifest.experiment.clone(),
        "--from-run".into(),
        dir.display().to_string(),
        "--where".into(),
        location,
        "--out".into(),
        args.out.display().to_string(),
    ];
    if manifest.experiment != crate::launch::command::NAME {
        // A command run has no backend of envgen's: its own code picks.
        argv.extend(["--backend".into(), manifest.profile.backend.clone()]);
    }
    let launch = manifest.environment.launch_words();
    // The image goes by the ID it ran as, not by its (movable) tag.
    let image_id = manifest
        .environment
        .image
        .as_ref()
        .and_then(ImageRecord::docker_id);
    let mut words = launch.into_iter();
    while let Some(word) = words.next() {
        if word == "--image" && image_id.is_some() {
            words.next();
            continue;
        }
        argv.push(word);
    }
    if let Some(id) = image_id {
        argv.extend(["--image".to_string(), id.to_string()]);
    }
    if args.detach {
        argv.push("--detach".into());
    }
    if args.json {
        argv.push("--json".into());
    }
    Ok(argv)
}

/// Refuse when the run's image is no longer in the daemon (exit 3).
fn require_image(manifest: &Manifest) -> Result<()> {
    let Some(ImageRecord::Docker(image)) = &manifest.environment.image else {
        return Ok(());
    };
    let (id, reference) = (image.id.as_str(), image.reference.as_str());
    let runtime = crate::image::daemon::runtime()?;
    runtime.block_on(async {
        let docker = crate::image::daemon::connect().await?;
        if docker.inspect_image(id).await.is_ok() {
            return Ok(());
        }
        Err(UserError::environment(format!(
            "the run's image {reference} ({id}) is gone from the Docker daemon: a rebuild would have another digest, so this would not be the same run"
        ))
        .with_fix("restore the image (`docker load` from an `envgen image export` archive, or pull it by digest), or start a fresh run with `envgen run`")
        .into())
    })
}

pub fn execute(args: Args) -> Result<i32> {
    let run = RunDir::open(&crate::runs::store::resolve(&args.source, &args.out)?)?;
    let manifest = run.manifest.clone();
    require_image(&manifest)?;
    let argv = run_argv(&args, &manifest, &run.path)?;
    crate::output::notice!(
        "envgen: rerun of {}: envgen {}",
        run.path.display(),
        argv.join(" ")
    );
    let cli = crate::cli::Cli::try_parse_from(std::iter::once("envgen".to_string()).chain(argv))
        .map_err(|e| {
            UserError::usage(format!(
                "{}: its manifest's launch flags do not parse: {e}",
                run.path.display()
            ))
        })?;
    crate::cli::dispatch(cli)
}
