//! Everything that talks to the Docker daemon, through bollard (never the
//! docker CLI): connecting, resolving digests, images in and out
//! (import/export/save), and in [`container`] every container's life
//! (a run's, followed to its end, and a throwaway one's, captured), with
//! the knobs a run may relax in [`options`].

pub mod container;
pub mod options;

use std::collections::HashMap;
use std::path::Path;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateImageOptions, ListContainersOptions, ListImagesOptions, RemoveContainerOptions,
    RemoveImageOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::lock::{DigestSource, Resolution};
use crate::error::{Result, UserError};

/// A current-thread runtime for the sync entry points.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn where_docker() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
}

/// The "cannot reach the daemon" error, with the fix.
pub fn unreachable(detail: impl std::fmt::Display) -> anyhow::Error {
    UserError::environment(format!(
        "the Docker daemon at {} is unreachable: {detail}",
        where_docker()
    ))
    .with_fix("start dockerd (e.g. `sudo systemctl start docker`), or set DOCKER_HOST to a running daemon's socket (./scripts/test.sh starts a private one)")
    .into()
}

/// Connect (DOCKER_HOST or the default socket), check the daemon answers, and
/// negotiate the API version (Debian 12's docker.io speaks 1.41).
pub async fn connect() -> Result<Docker> {
    let docker = Docker::connect_with_defaults().map_err(unreachable)?;
    let ping = tokio::time::timeout(std::time::Duration::from_secs(10), docker.ping()).await;
    match ping {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => return Err(unreachable(err)),
        Err(_) => return Err(unreachable("no answer within 10 s")),
    }
    docker.negotiate_version().await.map_err(unreachable)
}

/// The repository part of a reference ("127.0.0.1:5000/x/debian:tag" → "127.0.0.1:5000/x/debian").
pub fn repository_of(reference: &str) -> &str {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// A repository name as Docker shows it: Docker Hub's `docker.io/` and
/// `library/` prefixes dropped ("docker.io/library/debian" → "debian"), so
/// that a RepoDigest from another registry never counts as the base's.
fn familiar(repository: &str) -> &str {
    let name = repository.strip_prefix("docker.io/").unwrap_or(repository);
    name.strip_prefix("library/").unwrap_or(name)
}

/// Whether a reference names a registry host explicitly ("host:port/…", "a.b/…", "localhost/…").
fn names_registry(reference: &str) -> bool {
    match reference.split_once('/') {
        Some((first, _)) => first.contains('.') || first.contains(':') || first == "localhost",
        None => false,
    }
}

/// How long a registry gets to answer a digest lookup.
const REGISTRY_TIMEOUT_S: u64 = 15;

/// Ask the registry (through the daemon's distribution inspect, bounded by
/// [`REGISTRY_TIMEOUT_S`]) for the digest `reference` names now: the
/// multi-arch index digest for a multi-arch tag. `Err` says why it did not answer.
pub async fn registry_digest(
    docker: &Docker,
    reference: &str,
) -> std::result::Result<String, String> {
    // Without internet a registry lookup may hang on connect instead of
    // failing on DNS: bound it.
    let registry = tokio::time::timeout(
        std::time::Duration::from_secs(REGISTRY_TIMEOUT_S),
        docker.inspect_registry_image(reference, None),
    )
    .await;
    let where_ = if names_registry(reference) {
        "its registry"
    } else {
        "Docker Hub"
    };
    match registry {
        Ok(Ok(inspect)) => inspect
            .descriptor
            .digest
            .ok_or_else(|| format!("{where_} answered without a digest")),
        Ok(Err(err)) => Err(format!(
            "{where_} did not answer ({})",
            short(&err.to_string())
        )),
        Err(_) => Err(format!(
            "{where_} did not answer (no answer within {REGISTRY_TIMEOUT_S} s)"
        )),
    }
}

/// Resolve a base reference to a digest: the registry first (when the
/// reference names one and it answers), then the local daemon's RepoDigest,
/// then its image ID; else unresolved with the reason.
pub async fn resolve(docker: &Docker, reference: &str) -> Resolution {
    let mut reasons = Vec::new();
    match registry_digest(docker, reference).await {
        Ok(digest) => {
            return Resolution {
                digest: Some(digest),
                source: DigestSource::Registry,
                ..Default::default()
            }
        }
        Err(reason) => reasons.push(reason),
    }
    match docker.inspect_image(reference).await {
        Ok(image) => {
            let repository = repository_of(reference);
            let repo_digest = image
                .repo_digests
                .unwrap_or_default()
                .into_iter()
                .find_map(|d| {
                    let (repo, digest) = d.split_once('@')?;
                    (familiar(repo) == familiar(repository)).then(|| digest.to_string())
                });
            if let Some(digest) = repo_digest {
                return Resolution {
                    digest: Some(digest),
                    source: DigestSource::RepoDigest,
                    ..Default::default()
                };
            }
            if let Some(id) = image.id {
                return Resolution {
                    digest: Some(id),
                    source: DigestSource::ImageId,
                    reason: Some("local image without a registry digest: pinned by image ID, which only this daemon can check".into()),
                    ..Default::default()
                };
            }
            reasons.push("local image has no ID".into());
        }
        Err(err) => reasons.push(format!(
            "not in the local daemon ({})",
            short(&err.to_string())
        )),
    }
    Resolution::unresolved(reasons.join("; "))
}

fn short(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(160).collect()
}

/// Image IDs (all, including intermediate) and container IDs (all) right now.
pub async fn snapshot(docker: &Docker) -> Result<(Vec<String>, Vec<String>)> {
    let images = docker
        .list_images(Some(ListImagesOptions {
            all: true,
            ..Default::default()
        }))
        .await
        .map_err(unreachable)?
        .into_iter()
        .map(|i| i.id)
        .collect();
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            ..Default::default()
        }))
        .await
        .map_err(unreachable)?
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    Ok((images, containers))
}

/// Remove images by ID, newest first, ignoring ones already gone.
pub async fn remove_images(docker: &Docker, ids: &[String]) {
    for id in ids.iter().rev() {
        let options = RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        let _ = docker.remove_image(id, Some(options), None).await;
    }
}

/// Force-remove containers by (short) ID, ignoring ones already gone.
pub async fn remove_containers(docker: &Docker, ids: &[String]) {
    for id in ids {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let _ = docker.remove_container(id, Some(options)).await;
    }
}

/// Make `reference` (`repo:tag`, `repo@sha256:…` or `repo:tag@sha256:…`)
/// present in the daemon: nothing when it is there, else pull it (the
/// digest, when given, is what is pulled). The error carries the registry's answer.
pub async fn ensure_present(docker: &Docker, reference: &str) -> std::result::Result<(), String> {
    if docker.inspect_image(reference).await.is_ok() {
        return Ok(());
    }
    let repository = repository_of(reference);
    let tag = match reference.split_once('@') {
        Some((_, digest)) => digest,
        None => reference
            .strip_prefix(repository)
            .and_then(|rest| rest.strip_prefix(':'))
            .unwrap_or("latest"),
    };
    let options = CreateImageOptions {
        from_image: Some(repository.to_string()),
        tag: Some(tag.to_string()),
        ..Default::default()
    };
    let mut stream = docker.create_image(Some(options), None, None);
    while let Some(item) = stream.next().await {
        item.map_err(|err| short(&err.to_string()))?;
    }
    Ok(())
}

/// Import a root filesystem tarball as an image (`docker import`), via the
/// create-image API with a tar body.
pub async fn import_rootfs(
    docker: &Docker,
    tarball: &Path,
    repository: &str,
    tag: &str,
) -> Result<()> {
    let bytes = tokio::fs::read(tarball).await?;
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repository.into()),
        tag: Some(tag.into()),
        ..Default::default()
    };
    let mut stream =
        docker.create_image(Some(options), Some(bollard::body_full(bytes.into())), None);
    while let Some(item) = stream.next().await {
        item.map_err(|err| UserError::failed(format!("importing {}: {err}", tarball.display())))?;
    }
    Ok(())
}

/// Write a byte stream from the daemon into a file.
pub async fn stream_to_file(
    mut stream: impl futures_util::Stream<Item = std::result::Result<bytes::Bytes, bollard::errors::Error>>
        + Unpin,
    out: &Path,
    what: &str,
) -> Result<u64> {
    let mut file = tokio::fs::File::create(out)
        .await
        .map_err(|err| UserError::usage(format!("cannot write {}: {err}", out.display())))?;
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| UserError::failed(format!("{what}: {err}")))?;
        written += chunk.len() as u64;
        file.write_all(&chunk).await?;
    }
    file.flush().await?;
    Ok(written)
}

/// `docker save` of one image into a tar file.
pub async fn save_image(docker: &Docker, image: &str, out: &Path) -> Result<u64> {
    let stream = Box::pin(docker.export_image(image));
    stream_to_file(stream, out, &format!("exporting {image}")).await
}

/// The flattened root filesystem of an image (create a container, export it, remove it).
pub async fn flatten_image(docker: &Docker, image: &str, out: &Path) -> Result<u64> {
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        ..Default::default()
    };
    let created = docker
        .create_container(None, body)
        .await
        .map_err(|err| UserError::failed(format!("creating a container from {image}: {err}")))?;
    let stream = Box::pin(docker.export_container(&created.id));
    let result = stream_to_file(stream, out, &format!("exporting the filesystem of {image}")).await;
    let _ = docker
        .remove_container(
            &created.id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
    result
}

/// An image's env as a map.
pub fn env_map(env: Option<Vec<String>>) -> HashMap<String, String> {
    env.unwrap_or_default()
        .into_iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_strips_tag_and_digest_but_not_port() {
        assert_eq!(repository_of("debian:bookworm-slim"), "debian");
        assert_eq!(
            repository_of("127.0.0.1:5055/x/debian:b"),
            "127.0.0.1:5055/x/debian"
        );
        assert_eq!(
            repository_of("127.0.0.1:5055/x/debian"),
            "127.0.0.1:5055/x/debian"
        );
        assert_eq!(repository_of("a/b:c@sha256:00"), "a/b");
        assert!(names_registry("127.0.0.1:5055/x") && !names_registry("nvidia/cuda:1"));
        assert_eq!(familiar("docker.io/library/debian"), "debian");
        assert_ne!(familiar("127.0.0.1:5055/envgen-test/debian"), "debian");
    }
}
