//! A run in a Docker container: the submitting envgen has created the run
//! directory; the image's envgen trains into it (`run EXP --launched
//! --resume /run/envgen/run`). The run directory is bind-mounted read-write
//! at the fixed path [`CONTAINER_RUN_DIR`] and each data directory read-only
//! at [`CONTAINER_DATA_DIR`]`/N`, whatever their host paths: the daemon
//! resolves a bind mount's source as root, so the modes of the host path's
//! parents (a 0700 home directory) never matter to the container user, and
//! nothing of the host's layout leaks into the container. The science config
//! keeps its host paths (its hash is unchanged); the container's envgen maps
//! them through [`PATH_MAP_ENV`]. Doctor's verdict for the image is checked
//! first; the image's ID and digest go into the manifest.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bollard::Docker;
use envgen_experiments::engine::{rundir, Status, Summary};
use serde_json::json;

use super::docker::{run_container, ContainerSpec, GpuRequest, Mount};
use super::slurm_job::update_manifest;
use super::{mark_ended, RunOutcome};
use crate::compat::verdict::{evaluate, CheckRequest, Status as VerdictStatus};
use crate::compat::{ImageFacts, KnowledgeBase};
use crate::error::{Result, UserError};
use crate::host::Host;

/// The uid:gid containers run as when envgen itself runs as root: the
/// profiles' `envgen` user (containers/profiles/*.toml `[user] uid`).
const CONTAINER_USER_WHEN_ROOT: u32 = 1000;

/// Where the run directory is mounted in the container.
pub const CONTAINER_RUN_DIR: &str = "/run/envgen/run";
/// Where data directory N is mounted (read-only) in the container.
pub const CONTAINER_DATA_DIR: &str = "/run/envgen/data";
/// Where the host's CUDA kernel cache (`<cache>/cubecl`) is mounted for GPU
/// runs, so a container compiles a kernel once per host, not once per run.
pub const CONTAINER_CACHE_DIR: &str = "/run/envgen/cache";
/// `HOST=CONTAINER` pairs, `\n`-separated: how the container's envgen maps
/// the host paths in the science config to the mounts.
pub const PATH_MAP_ENV: &str = "ENVGEN_PATH_MAP";

/// Rewrite the path-like strings of a science config (keys `path`, `*_path`,
/// `*_dir`) through `map` (host prefix → container prefix, longest first).
pub fn map_paths(science: &mut toml::Value, map: &[(PathBuf, PathBuf)]) {
    fn walk(value: &mut toml::Value, key: &str, map: &[(PathBuf, PathBuf)]) {
        match value {
            toml::Value::Table(table) => table.iter_mut().for_each(|(k, v)| walk(v, k, map)),
            toml::Value::Array(items) => items.iter_mut().for_each(|v| walk(v, key, map)),
            toml::Value::String(text)
                if key == "path" || key.ends_with("_path") || key.ends_with("_dir") =>
            {
                let path = Path::new(text.as_str());
                let best = map
                    .iter()
                    .filter_map(|(host, inside)| {
                        path.strip_prefix(host)
                            .ok()
                            .map(|rest| (host, inside, rest))
                    })
                    .max_by_key(|(host, _, _)| host.as_os_str().len());
                if let Some((_, inside, rest)) = best {
                    *text = inside.join(rest).display().to_string();
                }
            }
            _ => {}
        }
    }
    walk(science, "", map);
}

/// This user's kernel cache folder (created if missing), for GPU containers;
/// None when there is no cache folder or it cannot be made.
fn kernel_cache_on_host() -> Option<PathBuf> {
    let dir = envgen_experiments::backend::cache_dir()?.join("cubecl");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// The host path of a path inside the container (data mounts only), for
/// provenance written by the container's envgen (`data_files[].path`).
pub fn host_path(inside: &str, data_dirs: &[PathBuf]) -> Option<PathBuf> {
    let rest = Path::new(inside).strip_prefix(CONTAINER_DATA_DIR).ok()?;
    let mut parts = rest.components();
    let index: usize = parts.next()?.as_os_str().to_str()?.parse().ok()?;
    Some(data_dirs.get(index)?.join(parts.as_path()))
}

/// Parse [`PATH_MAP_ENV`].
pub fn path_map_from_env() -> Vec<(PathBuf, PathBuf)> {
    std::env::var(PATH_MAP_ENV)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(host, inside)| (PathBuf::from(host), PathBuf::from(inside)))
        .collect()
}

#[derive(Debug, Clone)]
pub struct DockerRun {
    pub experiment: String,
    pub run_dir: PathBuf,
    /// The image reference to run (a tag, or an image ID for reruns).
    pub image: String,
    pub job_args: Vec<String>,
    /// Host directories with the run's data, mounted read-only.
    pub data_dirs: Vec<PathBuf>,
    pub gpus: GpuRequest,
    pub cdi: bool,
}

/// The image as the daemon has it: (image ID, RepoDigest if pushed/pulled).
pub async fn inspect(docker: &Docker, reference: &str) -> Result<(String, Option<String>)> {
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
    for entry in walkdir::WalkDir::new(run_dir) {
        let entry = entry.map_err(anyhow::Error::from)?;
        std::os::unix::fs::chown(entry.path(), Some(id), Some(id))?;
    }
    Ok(format!("{id}:{id}"))
}

/// A container name from the run id (Docker allows [a-zA-Z0-9][a-zA-Z0-9_.-]).
fn container_name(run_dir: &Path) -> String {
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
    format!("envgen-{id}")
}

/// Run in a container until it exits, or until `interrupt` resolves (then
/// SIGTERM: envgen checkpoints and stops; the container is removed either way).
pub async fn run(
    docker: &Docker,
    job: &DockerRun,
    interrupt: impl Future<Output = ()>,
) -> Result<RunOutcome> {
    let run_dir = std::path::absolute(&job.run_dir)?;
    let (image_id, repo_digest) = inspect(docker, &job.image).await?;
    // The envgen binary inside (derived from the source revision, so not in
    // the lock): its hash as the image's label records it.
    let binary_sha256 = docker
        .inspect_image(&image_id)
        .await
        .ok()
        .and_then(|image| image.config)
        .and_then(|config| config.labels)
        .and_then(|labels| labels.get(crate::image::build::BINARY_LABEL).cloned());
    update_manifest(&run_dir, |env| {
        env.insert(
            "image".into(),
            json!({
                "ref": job.image,
                "id": image_id,
                // The content digest: the registry's when the image has one,
                // else the image ID (what a local daemon can check).
                "digest": repo_digest.as_deref().and_then(|d| d.split_once('@')).map(|(_, d)| d.to_string()).unwrap_or_else(|| image_id.clone()),
                "repo_digest": repo_digest,
                "envgen_binary_sha256": binary_sha256,
            }),
        );
    })?;
    let mut args = vec![
        "run".to_string(),
        job.experiment.clone(),
        "--launched".into(),
    ];
    args.extend(job.job_args.iter().cloned());
    args.extend(["--resume".to_string(), CONTAINER_RUN_DIR.to_string()]);
    let mut mounts = vec![Mount {
        host: run_dir.clone(),
        container: CONTAINER_RUN_DIR.to_string(),
        read_only: false,
    }];
    let mut path_map = vec![format!("{}={CONTAINER_RUN_DIR}", run_dir.display())];
    for (index, data) in job.data_dirs.iter().enumerate() {
        let inside = format!("{CONTAINER_DATA_DIR}/{index}");
        path_map.push(format!("{}={inside}", data.display()));
        mounts.push(Mount {
            host: data.clone(),
            container: inside,
            read_only: true,
        });
    }
    let mut env = vec![
        (
            "ENVGEN_LOG".into(),
            std::env::var("ENVGEN_LOG").unwrap_or_default(),
        ),
        (PATH_MAP_ENV.into(), path_map.join("\n")),
    ];
    if job.gpus != GpuRequest::None {
        if let Some(cache) = kernel_cache_on_host() {
            mounts.push(Mount {
                host: cache,
                container: format!("{CONTAINER_CACHE_DIR}/cubecl"),
                read_only: false,
            });
            env.push(("ENVGEN_CACHE_DIR".into(), CONTAINER_CACHE_DIR.into()));
        }
    }
    let spec = ContainerSpec {
        name: container_name(&run_dir),
        // Run exactly the image inspected above, even if the tag moves meanwhile.
        image: image_id.clone(),
        args,
        mounts,
        env,
        user: container_user(&run_dir)?,
        gpus: job.gpus.clone(),
        cdi: job.cdi,
    };
    update_manifest(&run_dir, |env| {
        env.insert("docker".into(), json!({ "container": spec.name }));
    })?;
    eprintln!(
        "envgen: docker: running {} as {} in container {}",
        job.image, spec.user, spec.name
    );
    let outcome = run_container(docker, &spec, interrupt).await?;
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
                .and_then(|inside| host_path(inside, &job.data_dirs));
            if let Some(host) = host {
                file["path"] = json!(host);
            }
        }
        if let Some(summary) = &summary {
            let path = run_dir.join("summary.json");
            rundir::write_json(&path, summary)?;
            // Keep it the run directory owner's, like the rest of the run.
            let owner = std::fs::metadata(&run_dir)?;
            std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))?;
        }
    }
    let summary = match summary {
        Some(s) if s.status != Status::Running => s,
        // Ctrl-C here, or `docker stop`/`docker kill` from outside (128+2/9/15).
        _ if outcome.interrupted || matches!(outcome.exit_code, 130 | 137 | 143) => mark_ended(
            &run_dir,
            Status::Interrupted,
            "the container was stopped before the run wrote its summary",
        )?,
        _ => mark_ended(
            &run_dir,
            Status::Failed,
            &format!(
                "the container exited with status {} without a summary",
                outcome.exit_code
            ),
        )?,
    };
    Ok(RunOutcome { run_dir, summary })
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
    fn host_paths_in_the_config_map_to_the_mounts() {
        let mut science: toml::Value = toml::from_str(
            "[data]\npath = \"/home/u/private/data/corpus.txt\"\nval_path = \"/elsewhere/v.txt\"\nname = \"/home/u/private/data/x\"\n",
        )
        .unwrap();
        let map = vec![
            (PathBuf::from("/home/u"), PathBuf::from("/nope")),
            (
                PathBuf::from("/home/u/private/data"),
                PathBuf::from("/run/envgen/data/0"),
            ),
        ];
        map_paths(&mut science, &map);
        assert_eq!(
            science["data"]["path"].as_str(),
            Some("/run/envgen/data/0/corpus.txt")
        );
        assert_eq!(
            science["data"]["val_path"].as_str(),
            Some("/elsewhere/v.txt")
        );
        assert_eq!(
            science["data"]["name"].as_str(),
            Some("/home/u/private/data/x")
        );
    }

    #[test]
    fn data_mount_paths_map_back_to_the_host() {
        let dirs = vec![PathBuf::from("/a"), PathBuf::from("/home/u/data")];
        assert_eq!(
            host_path("/run/envgen/data/1/sub/x.bin", &dirs),
            Some(PathBuf::from("/home/u/data/sub/x.bin"))
        );
        assert_eq!(host_path("/run/envgen/data/7/x", &dirs), None);
        assert_eq!(host_path("/elsewhere/x", &dirs), None);
    }

    #[test]
    fn container_names_keep_to_dockers_alphabet() {
        assert_eq!(
            container_name(Path::new("/runs/gpt2-tiny-20261123-0801-ab12 x")),
            "envgen-gpt2-tiny-20261123-0801-ab12-x"
        );
    }
}
