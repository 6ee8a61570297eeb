//! `envgen image lock`'s work: resolve each profile's base (through the
//! Docker daemon when it answers), merge what is found with what the lock
//! already pins, and write the new entries into `envgen.lock`.

use std::path::Path;

use super::daemon;
use super::lock::{self, DigestSource, Lockfile, Resolution};
use super::profile::{Containers, ImageProfile};
use crate::error::Result;

/// Lock `profiles` into the lockfile at `path`, each on `base` (default:
/// its own base), keeping the other profiles' entries. Each resolution is
/// reported on stderr as it is made.
pub fn relock(
    containers: &Containers,
    profiles: &[ImageProfile],
    base: Option<String>,
    path: &Path,
) -> Result<()> {
    let bases: Vec<String> = profiles
        .iter()
        .map(|p| base.clone().unwrap_or_else(|| p.base.reference.clone()))
        .collect();
    let resolutions = resolve_all(&bases);
    let mut lockfile = Lockfile::read(path)?;
    for ((profile, base), resolution) in profiles.iter().zip(&bases).zip(&resolutions) {
        let old = lockfile
            .profiles
            .get(&profile.name)
            .filter(|old| old.base == *base)
            .map(|old| old.resolution());
        let resolution = merge_resolution(old.as_ref(), resolution);
        let entry = lock::compute_entry(containers, profile, base, &resolution)?;
        match &resolution.digest {
            Some(digest) => eprintln!(
                "{}: {base} → {digest} ({:?})",
                profile.name, resolution.source
            ),
            None => eprintln!(
                "warning: {}: {base} unresolved — NOT pinned ({})",
                profile.name,
                resolution.reason.as_deref().unwrap_or("")
            ),
        }
        lockfile.profiles.insert(profile.name.clone(), entry);
    }
    lockfile.write(path)
}

/// Resolve bases through the daemon when it answers; say why not otherwise.
pub fn resolve_all(bases: &[String]) -> Vec<Resolution> {
    let runtime = match daemon::runtime() {
        Ok(rt) => rt,
        Err(err) => {
            return bases
                .iter()
                .map(|_| Resolution::unresolved(err.to_string()))
                .collect()
        }
    };
    runtime.block_on(async {
        match daemon::connect().await {
            Ok(docker) => {
                let mut out = Vec::new();
                for base in bases {
                    out.push(daemon::resolve(&docker, base).await);
                }
                out
            }
            Err(err) => {
                let reason = format!(
                    "docker daemon unreachable ({})",
                    err.to_string().lines().next().unwrap_or("")
                );
                bases
                    .iter()
                    .map(|_| Resolution::unresolved(reason.clone()))
                    .collect()
            }
        }
    })
}

/// What a re-lock writes, given the old entry's resolution and the one found now.
/// A base that cannot be resolved here (no registry access) keeps the digest
/// it was locked at rather than losing its pin; a content pin (registry,
/// RepoDigest, cited) is not replaced by a local image ID (only this daemon's
/// view); the registry's answer always wins, keeping the amd64 digest when the
/// index digest is unchanged.
pub fn merge_resolution(old: Option<&Resolution>, now: &Resolution) -> Resolution {
    let Some(old) = old else {
        return now.clone();
    };
    let keep = (now.digest.is_none() && old.digest.is_some())
        || (old.pinnable().is_some() && now.source == DigestSource::ImageId);
    if keep {
        eprintln!(
            "note: keeping the locked digest {} ({:?}): {}",
            old.digest.as_deref().unwrap_or(""),
            old.source,
            now.reason.as_deref().unwrap_or("only a local image ID now")
        );
        return old.clone();
    }
    let mut now = now.clone();
    if now.source == DigestSource::Registry && now.digest == old.digest {
        now.amd64 = now.amd64.or_else(|| old.amd64.clone());
    }
    now
}
