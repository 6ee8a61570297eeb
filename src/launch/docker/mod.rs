//! `--where docker`: a run in a Docker container. Here the run directory
//! is made, doctor's verdict for the image is checked and the image is
//! built on demand; the image's envgen trains into the directory (`run EXP
//! --launched --resume /run/envgen/run`, paths in `mounts`). The image's ID
//! and digest go into the manifest; the container is followed to its end.

mod flags;
mod life;

pub use flags::check_flags;
pub use life::{container_of, DockerLife};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bollard::Docker as Daemon;
use envgen_experiments::backend::BackendChoice;
use envgen_experiments::engine::{rundir, Status, Summary};
use serde_json::json;

use super::launcher::{mark_ended, Launcher, RunOutcome};
use super::mounts::{self, CONTAINER_RUN_DIR};
use super::plan::{job_args, launched_runs};
use super::request::{PlaceOptions, RunRequest};
use crate::compat::verdict::{evaluate, CheckRequest, VerdictStatus};
use crate::compat::{ImageFacts, KnowledgeBase};
use crate::error::{Result, UserError};
use crate::host::Host;
use crate::image::daemon::container::{self, ContainerSpec, GpuRequest, Mount, IMAGE_ENVGEN};
use crate::runs::manifest::{self, DockerImage, DockerRecord, ImageRecord};

/// A run in a container: what `prepare` found, for `start` and `follow`.
#[derive(Default)]
pub struct Docker {
    runtime: Option<tokio::runtime::Runtime>,
    daemon: Option<Daemon>,
    /// The image reference to run (a tag, or an image ID for reruns).
    image: String,
    gpus: GpuRequest,
    /// Host directories with the run's data, mounted read-only.
    data_dirs: Vec<PathBuf>,
    /// A user command's code (its git top level, else its directory),
    /// mounted read-only at `mounts::CONTAINER_WORKSPACE`.
    workspace: Option<PathBuf>,
    spec: Option<ContainerSpec>,
}

impl Launcher for Docker {
    fn stop_message(&self) -> &'static str {
        "interrupted: stopping the container (the run checkpoints first)"
    }

    /// Doctor's verdict first, the image (built on demand), then the run directory.
    fn prepare(&mut self, req: &RunRequest) -> Result<Vec<PathBuf>> {
        let host = req.host();
        let asked = match &req.options {
            PlaceOptions::Docker { gpus } => gpus.clone(),
            PlaceOptions::Native | PlaceOptions::Slurm { .. } => None,
        };
        self.gpus = match asked {
            Some(gpus) => gpus,
            // By default all GPUs for the cuda backend, none for cpu.
            None => match req.flags.backend {
                BackendChoice::Cpu => GpuRequest::None,
                BackendChoice::Cuda => GpuRequest::All,
                BackendChoice::Auto if host.gpus.is_empty() => GpuRequest::None,
                BackendChoice::Auto => GpuRequest::All,
            },
        };
        let runtime = crate::image::daemon::runtime()?;
        let (reference, profile) = image_for(&runtime, req, &self.gpus)?;
        let facts = crate::image::profile_facts(profile);
        check_verdict(host, &reference, facts)?;
        if let Some(dir) = &req.flags.resume {
            // Before the run directory is touched: a container left by an
            // earlier attempt would make this one's creation fail (409).
            let name = container_name(&std::path::absolute(dir)?);
            runtime.block_on(async {
                let daemon = crate::image::daemon::connect().await?;
                clear_leftover(&daemon, &name, dir).await
            })?;
        }
        let (mut prepared, _) = launched_runs(req)?;
        let run = prepared.remove(0);
        self.data_dirs = mounts::data_dirs(&run.science);
        self.workspace = run
            .manifest
            .environment
            .command
            .map(|c| c.git.map_or(c.workdir, |g| g.toplevel));
        let runs = vec![run.dir];
        self.image = reference;
        self.runtime = Some(runtime);
        crate::output::notice!("envgen: run directory {}", runs[0].display());
        Ok(runs)
    }

    /// Record the image the run starts in, then create and start its container.
    fn start(
        &mut self,
        req: &RunRequest,
        runs: &[PathBuf],
        _: &Arc<AtomicBool>,
    ) -> Result<Option<String>> {
        let runtime = self.runtime.take().expect("prepared");
        let run_dir = std::path::absolute(&runs[0])?;
        let started = runtime.block_on(async {
            let daemon = crate::image::daemon::connect().await?;
            let spec = self.container_spec(&daemon, req, &run_dir).await?;
            clear_leftover(&daemon, &spec.name, &run_dir).await?;
            container::start(&daemon, &spec).await?;
            Ok::<_, anyhow::Error>((daemon, spec))
        });
        self.runtime = Some(runtime);
        let (daemon, spec) = match started {
            Ok(started) => started,
            Err(err) => {
                // Nothing will train it: say so in the run, not "running" forever.
                mark_ended(
                    &run_dir,
                    Status::Failed,
                    &format!("the container did not start: {err:#}"),
                )?;
                return Err(err);
            }
        };
        self.daemon = Some(daemon);
        self.spec = Some(spec);
        Ok(None)
    }

    /// Follow the container to its end; a Ctrl-C stops it (SIGTERM: envgen
    /// checkpoints and stops). How it ended comes from the run directory.
    fn follow(
        &mut self,
        _: &RunRequest,
        runs: &[PathBuf],
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<RunOutcome>> {
        let (Some(runtime), Some(daemon), Some(spec)) = (
            self.runtime.as_ref(),
            self.daemon.as_ref(),
            self.spec.as_ref(),
        ) else {
            anyhow::bail!("docker run followed before it started");
        };
        let interrupt = async {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        };
        let outcome = runtime.block_on(container::follow(daemon, spec, interrupt))?;
        let run_dir = std::path::absolute(&runs[0])?;
        let summary = self.collect(&run_dir, outcome)?;
        Ok(vec![RunOutcome { run_dir, summary }])
    }
}

impl Docker {
    /// The container of this run, recorded in its manifest with the image.
    async fn container_spec(
        &self,
        daemon: &Daemon,
        req: &RunRequest,
        run_dir: &Path,
    ) -> Result<ContainerSpec> {
        let (image_id, repo_digest) = inspect(daemon, &self.image).await?;
        let config = daemon
            .inspect_image(&image_id)
            .await
            .ok()
            .and_then(|image| image.config);
        // The envgen binary inside (derived from the source revision, so not in
        // the lock): its hash as the image's label records it.
        let mut binary_sha256 = config
            .as_ref()
            .and_then(|config| config.labels.as_ref())
            .and_then(|labels| labels.get(crate::image::build::BINARY_LABEL).cloned());
        // A command's image need not carry envgen (NGC's PyTorch image does
        // not): then this envgen runs the command from a read-only mount.
        let has_envgen = binary_sha256.is_some()
            || config
                .as_ref()
                .and_then(|c| c.entrypoint.as_deref())
                .is_some_and(|e| e.first().map(String::as_str) == Some(IMAGE_ENVGEN));
        let mounted_envgen = match req.is_command() && !has_envgen {
            true => {
                let exe = std::env::current_exe()?;
                binary_sha256 = Some(crate::image::lock::sha256_hex(&std::fs::read(&exe)?));
                Some(exe)
            }
            false => None,
        };
        let record = DockerImage {
            reference: self.image.clone(),
            id: image_id.clone(),
            // The content digest: the registry's when the image has one,
            // else the image ID (what a local daemon can check).
            digest: repo_digest
                .as_deref()
                .and_then(|d| d.split_once('@'))
                .map(|(_, d)| d.to_string())
                .unwrap_or_else(|| image_id.clone()),
            repo_digest,
            envgen_binary_sha256: binary_sha256,
            envgen_mounted: mounted_envgen.is_some(),
        };
        manifest::update(run_dir, |m| {
            m.environment.image = Some(ImageRecord::Docker(record));
        })?;
        let mut args = vec![
            "run".to_string(),
            req.experiment.name().to_string(),
            "--launched".into(),
        ];
        args.extend(job_args(req));
        args.extend(["--resume".to_string(), CONTAINER_RUN_DIR.to_string()]);
        let (mut mounts, mut mount_env) =
            mounts::docker_mounts(run_dir, &self.data_dirs, &self.gpus);
        if let Some(workspace) = &self.workspace {
            let read_only = !req.flags.launch.docker.writable_workspace;
            mounts::add_workspace(&mut mounts, &mut mount_env, workspace, read_only);
        }
        if let Some(exe) = &mounted_envgen {
            mounts.push(Mount {
                host: exe.clone(),
                container: MOUNTED_ENVGEN.into(),
                read_only: true,
            });
        }
        let mut env = vec![(
            "ENVGEN_LOG".to_string(),
            std::env::var("ENVGEN_LOG").unwrap_or_default(),
        )];
        env.extend(mount_env);
        env.extend(envgen_experiments::notice::quiet_env());
        let spec = ContainerSpec {
            name: container_name(run_dir),
            // Run exactly the image inspected above, even if the tag moves meanwhile.
            image: image_id,
            entrypoint: mounted_envgen
                .as_ref()
                .map(|_| vec![MOUNTED_ENVGEN.to_string()]),
            args,
            mounts,
            env,
            user: Some(container_user(run_dir)?),
            gpus: self.gpus.clone(),
            cdi: req.flags.launch.cdi,
            options: req.flags.launch.docker.clone(),
        };
        manifest::update(run_dir, |m| {
            m.environment.docker = Some(DockerRecord {
                container: spec.name.clone(),
                options: Some(spec.options.clone()),
            });
        })?;
        let relaxed = spec.options.relaxations();
        if !relaxed.is_empty() {
            // Said once here, recorded in the manifest, shown by `runs show`.
            crate::output::notice!(
                "envgen: docker: relaxed: {} (recorded in manifest.json)",
                relaxed.join(", ")
            );
        }
        crate::output::notice!(
            "envgen: docker: running {} as {} in container {}",
            self.image,
            spec.user.as_deref().unwrap_or("?"),
            spec.name
        );
        Ok(spec)
    }

    /// How the container's run ended: its summary (data files given their
    /// host paths back), or one written from how the container exited.
    fn collect(&self, run_dir: &Path, outcome: container::ContainerOutcome) -> Result<Summary> {
        let mut summary: Option<Summary> = rundir::read_json(&run_dir.join("summary.json")).ok();
        // The container recorded the data files at their mount paths: give them
        // their host paths back (the summary's copy goes into the manifest).
        if let Some(files) = summary
            .as_mut()
            .and_then(|s| s.metrics.get_mut("data_files"))
            .and_then(|f| f.as_array_mut())
        {
            for file in files {
                let host = file["path"]
                    .as_str()
                    .and_then(|inside| mounts::host_path(inside, &self.data_dirs));
                if let Some(host) = host {
                    file["path"] = json!(host);
                }
            }
            if let Some(summary) = &summary {
                let path = run_dir.join("summary.json");
                rundir::write_json(&path, summary)?;
                // Keep it the run directory owner's, like the rest of the run.
                let owner = std::fs::metadata(run_dir)?;
                std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))?;
            }
        }
        Ok(match summary {
            Some(s) if s.status != Status::Running => s,
            // Ctrl-C here, or `docker stop`/`docker kill` from outside (128+2/9/15).
            _ if outcome.interrupted || matches!(outcome.exit_code, 130 | 137 | 143) => mark_ended(
                run_dir,
                Status::Interrupted,
                "the container was stopped before the run wrote its summary",
            )?,
            _ => mark_ended(
                run_dir,
                Status::Failed,
                &format!(
                    "the container exited with status {} without a summary",
                    outcome.exit_code
                ),
            )?,
        })
    }
}

/// A container named `name` left by an earlier attempt of the run in
/// `dir` (dockerd stopped under it): removed when stopped; while it runs it
/// is a second writer, refused (exit 2).
async fn clear_leftover(daemon: &Daemon, name: &str, dir: &Path) -> Result<()> {
    match container::present(daemon, name).await? {
        None => Ok(()),
        Some(c) if c.running => Err(UserError::usage(format!(
            "container {name} still runs ({}): it trains {}, a second container would be a second writer",
            c.status,
            dir.display()
        ))
        .with_fix(format!(
            "stop it with `envgen runs cancel {}`, then resume",
            dir.display()
        ))
        .into()),
        Some(c) => {
            crate::output::notice!(
                "envgen: docker: removing the {} container {name} an earlier attempt left",
                c.status
            );
            container::remove(daemon, name).await;
            Ok(())
        }
    }
}

/// The image a Docker run uses and the profile its facts come from:
/// --image, else the profile image for the backend (`cpu`, `cuda12.8`),
/// built now if the daemon lacks one holding this very envgen binary.
fn image_for(
    runtime: &tokio::runtime::Runtime,
    req: &RunRequest,
    gpus: &GpuRequest,
) -> Result<(String, &'static str)> {
    let profile = if *gpus == GpuRequest::None {
        "cpu"
    } else {
        "cuda12.8"
    };
    let reference = match &req.flags.launch.image {
        Some(reference) => reference.clone(),
        None => {
            let containers = crate::image::Containers::locate(None)?;
            crate::output::notice!(
                "envgen: docker: using the {profile} profile image (built now if missing)"
            );
            runtime.block_on(crate::image::build::ensure_built(
                &containers,
                profile,
                None,
            ))?;
            crate::image::build::default_tag(profile)
        }
    };
    Ok((reference, profile))
}

/// Where the launching envgen is mounted into an image that has none.
const MOUNTED_ENVGEN: &str = "/opt/envgen/bin/envgen";

/// The uid:gid containers run as when envgen itself runs as root: the
/// profiles' `envgen` user (containers/profiles/*.toml `[user] uid`).
const CONTAINER_USER_WHEN_ROOT: u32 = 1000;

/// The image as the daemon has it: (image ID, RepoDigest if pushed/pulled).
pub async fn inspect(docker: &Daemon, reference: &str) -> Result<(String, Option<String>)> {
    let image = docker.inspect_image(reference).await.map_err(|e| {
        UserError::environment(format!(
            "image {reference} is not in the Docker daemon ({e})"
        ))
        .with_fix("build it with `envgen image build cpu` or pass --image with a local tag")
    })?;
    let id = image.id.unwrap_or_default();
    Ok((id, image.repo_digests.and_then(|d| d.into_iter().next())))
}

/// Refuse an image doctor says fails on this host, with the text
/// `envgen doctor --image REF` prints for it.
pub fn check_verdict(host: &Host, reference: &str, facts: Option<ImageFacts>) -> Result<()> {
    let kb = KnowledgeBase::embedded();
    let facts = kb
        .image(reference)
        .or(facts)
        .or_else(|| crate::image::image_facts(kb, reference));
    let Some(facts) = facts else {
        // Nothing known about the image: doctor would say `unknown-image`
        // (a warning); the container's own envgen reports what it finds.
        return Ok(());
    };
    let verdicts = evaluate(kb, host, &CheckRequest::only_images(vec![facts]));
    if host.gpus.is_empty() || !verdicts.iter().any(|v| v.status == VerdictStatus::Fail) {
        return Ok(());
    }
    let answer = crate::compat::report::render_requested(host, &verdicts);
    Err(UserError::environment(format!(
        "doctor says image {reference} will not run on this host:{}",
        answer.trim_end().trim_start_matches("\nVerdicts")
    ))
    .with_fix(format!(
        "see `envgen doctor --image {reference}`; pick another profile or backend"
    ))
    .into())
}

/// The user the container runs as: ours when we are not root, else the
/// image's unprivileged user (the run directory is handed to it first).
fn container_user(run_dir: &Path) -> Result<String> {
    let meta = std::fs::metadata(run_dir)?;
    if meta.uid() != 0 {
        return Ok(format!("{}:{}", meta.uid(), meta.gid()));
    }
    let id = CONTAINER_USER_WHEN_ROOT;
    // lchown: a symlink planted in the run directory is handed over itself,
    // never the file it points at (walkdir does not follow links either).
    for entry in walkdir::WalkDir::new(run_dir) {
        let entry = entry.map_err(anyhow::Error::from)?;
        std::os::unix::fs::lchown(entry.path(), Some(id), Some(id))?;
    }
    Ok(format!("{id}:{id}"))
}

/// The container name of the run in `run_dir`: the run id (in Docker's
/// alphabet, [a-zA-Z0-9][a-zA-Z0-9_.-]) and 8 hex digits of the directory's
/// absolute path. Names are global on a daemon, and run ids are not: two
/// runs of one config started in the same second under two `--out`
/// directories (two users, two test runs) have the same id.
pub fn container_name(run_dir: &Path) -> String {
    use sha2::Digest as _;
    let id: String = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let path = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    format!("envgen-{id}-{}", &hex::encode(digest)[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_doctor_fails_is_refused_with_doctors_reasons() {
        let kb = KnowledgeBase::embedded();
        // RTX 5070 Ti on driver 535: the driver predates Blackwell (R570+), so it
        // cannot drive the GPU at all (doctor's first check, issue #27).
        let old = kb
            .assumed_host(&["RTX 5070 Ti".to_string()], Some("535.261.03"))
            .unwrap();
        let facts = crate::image::profile_facts("cuda12.8").expect("cuda12.8 profile");
        let err = check_verdict(&old, &facts.reference.clone(), Some(facts.clone())).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 3);
        let text = format!("{err:#}");
        assert!(text.contains("driver-predates-gpu"), "{text}");
        // Word for word what `envgen doctor --image` prints for it.
        let verdicts = evaluate(kb, &old, &CheckRequest::only_images(vec![facts.clone()]));
        let doctor = crate::compat::report::render_requested(&old, &verdicts);
        assert!(
            text.contains(doctor.trim_start_matches("\nVerdicts").trim_end()),
            "{text}\n---\n{doctor}"
        );
        // A new enough driver passes.
        let new = kb
            .assumed_host(&["RTX 5070 Ti".to_string()], Some("580.65.06"))
            .unwrap();
        check_verdict(&new, &facts.reference.clone(), Some(facts)).unwrap();
        // The CPU image runs anywhere.
        let cpu = crate::image::profile_facts("cpu").unwrap();
        check_verdict(&old, &cpu.reference.clone(), Some(cpu)).unwrap();
    }

    #[test]
    fn handing_the_run_dir_over_never_follows_a_planted_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "root only").unwrap();
        let run_dir = tmp.path().join("run");
        std::fs::create_dir(&run_dir).unwrap();
        std::os::unix::fs::symlink(&secret, run_dir.join("metrics.jsonl")).unwrap();
        let before = std::fs::metadata(&secret).unwrap().uid();
        let user = container_user(&run_dir).unwrap();
        let me = std::fs::metadata(&run_dir).unwrap();
        if before == 0 {
            // As root: the directory and the link itself go to the container user.
            assert_eq!(user, "1000:1000");
            assert_eq!(me.uid(), 1000);
            let link = std::fs::symlink_metadata(run_dir.join("metrics.jsonl")).unwrap();
            assert_eq!(link.uid(), 1000);
        } else {
            assert_eq!(user, format!("{}:{}", me.uid(), me.gid()));
        }
        assert_eq!(std::fs::metadata(&secret).unwrap().uid(), before);
    }

    #[test]
    fn container_names_keep_to_dockers_alphabet_and_differ_per_directory() {
        let name = container_name(Path::new("/runs/gpt2-tiny-20261123-0801-ab12 x"));
        assert!(
            name.starts_with("envgen-gpt2-tiny-20261123-0801-ab12-x-"),
            "{name}"
        );
        assert_eq!(
            name.len(),
            "envgen-gpt2-tiny-20261123-0801-ab12-x-".len() + 8
        );
        let other = container_name(Path::new("/home/b/runs/gpt2-tiny-20261123-0801-ab12 x"));
        assert_ne!(name, other);
        assert_eq!(
            name,
            container_name(Path::new("/runs/gpt2-tiny-20261123-0801-ab12 x"))
        );
    }
}
