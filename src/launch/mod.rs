//! Running an experiment somewhere: in this process, as ranks on this
//! machine, in a Docker container, or as a Slurm job (or job array). Every
//! place is a [`Launcher`] behind one sequence, [`run`]:
//!
//! 1. **prepare**: check what the place needs (doctor's verdict, the image,
//!    the job's runtime) and make the run directories (`plan`, which writes
//!    `config.toml` and the manifest through `runs::manifest`);
//! 2. **start**: start training there (spawn the ranks, start the
//!    container, submit the job);
//! 3. **follow**: wait until it ended (or return at once with `--detach`),
//!    forwarding a Ctrl-C as the place's own stop (`signals`);
//! 4. **record**: put what the run read into its manifest.
//!
//! A launched run ends up in [`native`] on the node, in the container or
//! once per rank (`envgen run EXP --launched --resume RUN_DIR`). The
//! experiments never know where they run. Whether a run without a summary
//! still trains in its place is [`liveness`]'s question (`runs list`), and
//! stopping it there is [`cancel`]'s (`runs cancel`); both ask the run's
//! place through [`life::RunLife`], picked by [`life_of`]. A user's own
//! command (`envgen run -- CMD`) is one more kind of run behind the same
//! sequence ([`command`]).
//!
//! A place is a [`Place`](crate::runs::place::Place) (what the manifest's
//! `"where"` holds), and code asks it by exhaustive `match`es — none has a
//! `_` arm — never by comparing words. Adding Podman would take:
//!
//! - one new file, `src/launch/podman.rs`: a `Podman` implementing
//!   [`Launcher`] (prepare/start/follow, as `docker/mod.rs` does), a
//!   `PodmanLife` implementing [`life::RunLife`] (liveness, stop, clearing a
//!   left-over container, as `docker/life.rs` does) and its `check_flags`;
//! - one variant, `Place::Podman` (src/runs/place.rs), with its options as
//!   a `PlaceOptions::Podman { … }` variant (src/launch/request.rs) and
//!   `Where::Podman` for `--where podman` (src/launch/flags.rs);
//! - one arm in each `match` the compiler then lists (14): here
//!   [`launcher_for`], [`life_of`] and [`place_options`] (the three that
//!   pick the place's code); in src/runs/place.rs `name`,
//!   `is_this_machine`, `is_cluster_job`, `is_local_container` (what the
//!   place is); and `decide_where`, `world_plan`,
//!   `refuse_container_knobs_elsewhere` (request.rs), `checked_resources`
//!   (slurm/mod.rs), the asked GPUs in `docker/mod.rs`'s `prepare`, the
//!   dry run's job script (dry_run.rs) and `resume_command`
//!   (src/cli/runs/mod.rs).

pub mod auto;
pub mod cancel;
pub mod command;
pub mod command_exec;
pub mod data_files;
pub mod docker;
pub mod dry_run;
pub mod flags;
pub mod launcher;
pub mod life;
pub mod liveness;
pub mod mounts;
pub mod native;
pub mod plan;
pub mod preflight;
pub mod ranks;
pub mod request;
pub mod signals;
pub mod slurm;
pub mod stop;
pub mod world;

use std::path::Path;
use std::sync::atomic::Ordering;

use envgen_experiments::engine::Summary;

use crate::error::Result;
use crate::runs::manifest::{self, Manifest};
use auto::Place;
pub use launcher::{exit_code, failed_summary, mark_ended, Launched, Launcher, RunOutcome};
use liveness::{Checker, Liveness};
pub use request::RunRequest;

/// A checked request for `flags`: the checks every place shares
/// (`request::Asked`), the place's own in its file ([`place_options`]),
/// then what depends on both (the world of ranks). Called in this order
/// from here, so the request's file never calls back up into this one.
pub fn request(flags: flags::RunFlags) -> Result<RunRequest> {
    let asked = request::Asked::new(flags)?;
    let options = asked
        .place_to_check()
        .map(|place| place_options(asked.flags(), place))
        .transpose()?;
    asked.with_place(options)
}

/// The place's own check of its flags, in its file: the one `match` that
/// sends the flags to the place they are for.
fn place_options(flags: &flags::RunFlags, place: Place) -> Result<request::PlaceOptions> {
    use request::PlaceOptions;
    Ok(match place {
        Place::Native => PlaceOptions::Native,
        Place::Docker => PlaceOptions::Docker {
            gpus: docker::check_flags(flags)?,
        },
        Place::Slurm => PlaceOptions::Slurm {
            resources: Box::new(slurm::resources::check_flags(flags)?),
        },
    })
}

/// The launcher for the request's place.
fn launcher_for(req: &RunRequest) -> Box<dyn Launcher> {
    match req.decision.place {
        Place::Native if req.world.size > 1 && !req.flags.launched => {
            Box::new(ranks::Ranks::default())
        }
        Place::Native if req.is_command() => Box::new(native::Native::for_command()),
        Place::Native => Box::new(native::Native::default()),
        Place::Docker => Box::new(docker::Docker::default()),
        Place::Slurm => Box::new(slurm::Slurm::default()),
    }
}

/// The life of a run that was started in `place` (whether it still
/// trains, how to stop it): the one `match` that picks a place's ways for
/// a run `runs list`, `show` and `cancel` look at.
pub fn life_of(place: Place) -> &'static dyn life::RunLife {
    match place {
        Place::Native => &native::NativeLife,
        Place::Docker => &docker::DockerLife,
        Place::Slurm => &slurm::SlurmLife,
    }
}

/// Whether the run in `dir`, which has no final summary, still trains:
/// its lock first (the trainer itself, wherever it runs), else its place.
pub fn liveness_of(checker: &mut Checker, dir: &Path, manifest: &Manifest) -> Liveness {
    let lock = crate::runs::lock::lock_state(dir);
    if let crate::runs::lock::LockState::Held(_) = &lock {
        // The trainer itself (natively, in the container or on the node).
        return liveness::by_lock(lock);
    }
    life_of(manifest.environment.place).liveness(checker, dir, manifest, lock)
}

/// Prepare, start, follow and record the run `req` asks for.
pub fn run(req: &RunRequest) -> Result<Launched> {
    let mut launcher = launcher_for(req);
    // Installed first: a Ctrl-C while an image builds or a job is
    // submitted still stops what was started (the follow looks at it first).
    let stop = signals::install_stop_handler(launcher.stop_message());
    let runs = launcher.prepare(req)?;
    let job = launcher.start(req, &runs, &stop)?;
    if let Some(job) = job.filter(|_| req.flags.detach && !stop.load(Ordering::SeqCst)) {
        return Ok(Launched::Detached { job, runs });
    }
    let outcomes = launcher.follow(req, &runs, &stop)?;
    if !launcher.reports() {
        return Ok(Launched::RankEnded(outcomes));
    }
    for outcome in &outcomes {
        record_data_files(&outcome.run_dir, &outcome.summary)?;
    }
    Ok(Launched::Ended(outcomes))
}

/// Provenance: the data files the run read (path, sha256, tokens) from its
/// summary into its manifest, where `runs compare` and `rerun` look.
fn record_data_files(run_dir: &Path, summary: &Summary) -> Result<()> {
    let Some(files) = summary.metrics.get("data_files") else {
        return Ok(());
    };
    let files = serde_json::from_value(files.clone())?;
    manifest::update(run_dir, |m| m.environment.data_files = Some(files))
}
