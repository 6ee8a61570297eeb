//! `envgen image build`: lock check → glibc check → staged context →
//! bollard build with streamed output → labelled image (→ push).
//!
//! A failed or interrupted build leaves nothing behind: the classic builder
//! keeps the image of every step that worked as cache, and a Ctrl-C leaves
//! the running step's container; both are removed here, and the tag is only
//! ever set by the daemon once the whole build succeeded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::query_parameters::{BuildImageOptions, PushImageOptions};
use futures_util::StreamExt;
use serde::Serialize;

use super::build_log::{emit, BuildLog};
use super::daemon;
use super::elf;
use super::lock::{self, DigestSource, LockEntry};
use super::profile::{Containers, ImageProfile};
use super::python;
use super::render;
use crate::error::{Result, UserError};

/// What `io.envgen.config-schema` says: the schema of the science configs the image's envgen reads.
pub const CONFIG_SCHEMA: &str = "1";
/// The label carrying the sha256 of the envgen binary inside (before stripping).
pub const BINARY_LABEL: &str = "io.envgen.binary-sha256";

/// How strictly a build follows `containers/envgen.lock`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LockCheck {
    /// The profile must be locked and match the lock entirely (`envgen image build`).
    #[default]
    Strict,
    /// Like `Strict`, but an unlocked profile builds unpinned (the launcher:
    /// see [`ensure_built`]).
    RecipeOnly,
    /// Ignore the lock (`--unlocked`).
    Skip,
}

/// Inputs of one build.
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    pub profile: String,
    pub base: Option<String>,
    pub tag: Option<String>,
    pub binary: Option<PathBuf>,
    pub lock: LockCheck,
    pub no_cache: bool,
    /// Push the tag to its registry after the build and report the RepoDigest.
    pub push: bool,
    pub json: bool,
}

/// What a build produced.
#[derive(Debug, Clone, Serialize)]
pub struct BuildOutcome {
    pub profile: String,
    pub image_id: String,
    pub tag: String,
    pub base: String,
    /// `FROM` as built: `base@sha256:…` when the lock pins it.
    pub from: String,
    pub labels: HashMap<String, String>,
    /// diff_id of the envgen layer (the image's last layer).
    pub envgen_layer: Option<String>,
    /// `repository@sha256:…` after a push.
    pub repo_digest: Option<String>,
}

/// A build stopped by Ctrl-C (the CLI exits 130).
#[derive(Debug)]
pub struct Interrupted {
    pub profile: String,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "building profile {} was interrupted: the build was stopped and nothing was tagged",
            self.profile
        )
    }
}

impl std::error::Error for Interrupted {}

/// The default tag of a profile's image.
pub fn default_tag(profile: &str) -> String {
    format!("envgen/{profile}:{}", env!("CARGO_PKG_VERSION"))
}

/// The envgen binary that goes in: `--binary` or the running executable.
pub fn binary_path(explicit: Option<&Path>) -> Result<PathBuf> {
    match explicit {
        Some(path) if path.is_file() => Ok(path.to_path_buf()),
        Some(path) => Err(
            UserError::usage(format!("--binary {}: no such file", path.display()))
                .with_fix("pass the path of a Linux build of envgen (e.g. target/release/envgen)")
                .into(),
        ),
        None => Ok(std::env::current_exe()?),
    }
}

pub fn binary_sha256(path: &Path) -> Result<String> {
    let bytes =
        std::fs::read(path).map_err(|err| anyhow::anyhow!("reading {}: {err}", path.display()))?;
    Ok(super::hash::sha256_hex(&bytes))
}

/// Refuse to build when the lock is missing or does not match the inputs.
/// The envgen binary is not an input the lock pins (it is derived from the
/// source revision): it goes into the labels and the run manifest.
pub fn check_lock(
    containers: &Containers,
    profile: &ImageProfile,
    base: &str,
    policy: LockCheck,
) -> Result<Option<LockEntry>> {
    if policy == LockCheck::Skip {
        return Ok(None);
    }
    // The embedded profiles come with their embedded lock: a build outside
    // the repository is pinned like one inside it.
    let path = containers.lock_name();
    let lockfile = containers.lockfile()?;
    let Some(locked) = lockfile.profiles.get(&profile.name) else {
        if policy == LockCheck::RecipeOnly {
            return Ok(None);
        }
        return Err(
            UserError::usage(format!("profile {} is not locked in {path}", profile.name))
                .with_fix(format!(
                    "run `envgen image lock {}` (or build with --unlocked)",
                    profile.name
                ))
                .into(),
        );
    };
    let now = lock::compute_entry(containers, profile, base, &locked.resolution())?;
    let drifts = lock::compare(&profile.name, locked, &now);
    if !drifts.is_empty() {
        let names: Vec<String> = drifts
            .iter()
            .map(|d| format!("{} ({})", d.entry, d.source))
            .collect();
        return Err(UserError::usage(format!(
            "profile {} drifted from {path}: {}",
            profile.name,
            names.join(", ")
        ))
        .with_fix(format!("re-lock with `envgen image lock {}` after reviewing the change, or build with --unlocked", profile.name))
        .into());
    }
    Ok(Some(locked.clone()))
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `org.opencontainers.image.created`: SOURCE_DATE_EPOCH, else the commit time, so rebuilds agree.
pub fn created_timestamp() -> String {
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .or_else(|| git(&["log", "-1", "--format=%ct"]).and_then(|s| s.parse().ok()))
        .unwrap_or(super::context::FIXED_MTIME as i64);
    time::OffsetDateTime::from_unix_timestamp(epoch)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1980-01-01T00:00:00Z".into())
}

pub fn labels(profile: &str, lock_sha: &str, binary_sha: &str) -> HashMap<String, String> {
    HashMap::from([
        (
            "org.opencontainers.image.source".into(),
            env!("CARGO_PKG_REPOSITORY").into(),
        ),
        (
            "org.opencontainers.image.revision".into(),
            git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into()),
        ),
        (
            "org.opencontainers.image.created".into(),
            created_timestamp(),
        ),
        (
            "org.opencontainers.image.version".into(),
            env!("CARGO_PKG_VERSION").into(),
        ),
        ("io.envgen.profile".into(), profile.into()),
        ("io.envgen.lock-sha256".into(), lock_sha.into()),
        ("io.envgen.config-schema".into(), CONFIG_SCHEMA.into()),
        (BINARY_LABEL.into(), binary_sha.into()),
    ])
}

/// `ENVGEN_BASE_STAND_IN`: bases a build may replace by a local image when
/// the pinned digest is neither in the daemon nor pullable — for machines
/// with no registry access (this project's tests). A comma-separated list
/// of `REF` (use the daemon's own `REF` tag) or `REF=LOCAL`. Unset, a pinned
/// base is always pulled by digest. A build on a stand-in says so loudly and
/// carries the `io.envgen.base-stand-in` label.
pub const STAND_IN_ENV: &str = "ENVGEN_BASE_STAND_IN";

/// The label a build on a stand-in base carries.
pub const STAND_IN_LABEL: &str = "io.envgen.base-stand-in";

/// The local stand-in named for `base` in [`STAND_IN_ENV`], if any.
pub fn stand_in(base: &str) -> Option<String> {
    let list = std::env::var(STAND_IN_ENV).ok()?;
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .find_map(|item| match item.split_once('=') {
            Some((reference, local)) if reference == base => Some(local.to_string()),
            None if item == base => Some(item.to_string()),
            _ => None,
        })
}

/// The base's glibc, asked from a throwaway container of it (`ldd
/// --version`); the profile's declared value when the base has no ldd.
async fn base_glibc(
    docker: &bollard::Docker,
    profile: &ImageProfile,
    from: &str,
) -> Result<Option<elf::GlibcVersion>> {
    let out =
        daemon::container::run_once(docker, from, &["ldd", "--version"], None, Some(&[])).await;
    let measured = out
        .ok()
        .filter(|out| out.exit_code == 0)
        .and_then(|out| out.output.lines().next().and_then(elf::parse_glibc));
    Ok(measured.or_else(|| elf::parse_glibc(&profile.base.glibc)))
}

/// A host-built binary needs a glibc at least as new as the one it linked
/// against; refuse a base with an older one (a static binary needs none).
pub fn check_glibc(
    binary: &Path,
    needed: Option<elf::GlibcVersion>,
    base: &str,
    have: Option<elf::GlibcVersion>,
) -> Result<()> {
    match (needed, have) {
        (Some(needed), Some(have)) if needed > have => Err(UserError::usage(format!(
            "{} needs glibc {}.{} but the base {base} has glibc {}.{}",
            binary.display(), needed.0, needed.1, have.0, have.1
        ))
        .with_fix("pass a release binary with --binary (scripts/release.sh links it for glibc 2.17), or one built on a system with an older glibc")
        .into()),
        _ => Ok(()),
    }
}

/// Where the binary sits in the build context: a whole tree under
/// `rootfs/`, copied with `COPY rootfs/ /` (see Dockerfile.hbs for why).
pub const STAGED_BINARY: &str = "rootfs/usr/local/bin/envgen";

/// Stage the binary: a copy without symbols, debug sections and the GNU
/// build ID when `strip` exists (smaller context and layer; `strip` output is
/// a pure function of its input). The build ID goes too because the linker
/// computes it over the whole binary, debug information included, which
/// records the directory the crate was built in: with it, one commit built in
/// two checkouts differs in exactly those 20 bytes; without it, the staged
/// binary — hence the envgen layer — is the same (tests/it/places/fresh_clone.rs).
pub fn stage_binary(binary: &Path, staging: &Path) -> Result<()> {
    let dest = staging.join(STAGED_BINARY);
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let stripped = which::which("strip").ok().is_some_and(|strip| {
        std::process::Command::new(strip)
            .arg("--strip-all")
            .arg("--remove-section=.note.gnu.build-id")
            .arg("-o")
            .arg(&dest)
            .arg(binary)
            .status()
            .is_ok_and(|s| s.success())
    });
    if !stripped {
        std::fs::copy(binary, &dest)?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Files the build sends, and the ones `.dockerignore` keeps out.
const DOCKERIGNORE: &str = "# the other recipes are rendered next to the Dockerfile for reference only\n*.def\ncharliecloud.Dockerfile\n";

/// The error for a base that is neither in the daemon nor pullable.
fn base_missing(base: &str, from: &str, message: &str) -> anyhow::Error {
    UserError::environment(format!(
        "the base image {from} is not in the Docker daemon and could not be pulled: {message}"
    ))
    .with_fix(format!(
        "make the base available to the daemon first (`docker pull {from}`, or `docker load` an archive of {base} on a machine without registry access), then build again"
    ))
    .into()
}

/// Build a profile (see the module docs).
pub async fn build(containers: &Containers, request: &BuildRequest) -> Result<BuildOutcome> {
    let profile = containers.profile(&request.profile)?;
    // A bad requirements file is refused (with its line) before anything runs.
    let requirements = python::read(containers, &profile)?;
    let base = request
        .base
        .clone()
        .unwrap_or_else(|| profile.base.reference.clone());
    let binary = binary_path(request.binary.as_deref())?;
    let binary_sha = binary_sha256(&binary)?;
    let locked = check_lock(containers, &profile, &base, request.lock)?;
    let docker = daemon::connect().await?;
    let resolution = match &locked {
        Some(entry) => entry.resolution(),
        None => daemon::resolve(&docker, &base).await,
    };
    let pinned = render::from_reference(&base, resolution.pinnable());
    // The daemon must have the base (pulled by digest when pinned): fail
    // here, fast and with the fix, rather than in the build's first step.
    let mut from = pinned.clone();
    let mut stand_in_label = None;
    if let Err(message) = daemon::ensure_present(&docker, &pinned).await {
        // Only where ENVGEN_BASE_STAND_IN names this base (no registry here).
        let local = stand_in(&base).filter(|_| pinned != base);
        let Some(local) = local else {
            return Err(base_missing(&base, &pinned, &message));
        };
        let local_id = docker
            .inspect_image(&local)
            .await
            .ok()
            .and_then(|image| image.id)
            .ok_or_else(|| base_missing(&base, &pinned, &format!("{message}; and the stand-in {local} named in {STAND_IN_ENV} is not in the daemon either")))?;
        eprintln!(
            "warning: building {} on the LOCAL STAND-IN {local} ({local_id}) in place of {pinned}, which cannot be pulled here ({STAND_IN_ENV}); this image is NOT the pinned one",
            profile.name
        );
        stand_in_label = Some(format!("{local} ({local_id}) in place of {pinned}"));
        from = local;
    }

    let needed = elf::required_glibc(&std::fs::read(&binary)?)?;
    let have = base_glibc(&docker, &profile, &from).await?;
    check_glibc(&binary, needed, &base, have)?;

    if locked.is_some() && resolution.source == DigestSource::ImageId {
        // Pinned by local image ID: check it is still the same image.
        let now = docker.inspect_image(&base).await.ok().and_then(|i| i.id);
        if now != resolution.digest {
            return Err(UserError::usage(format!(
                "base {base} is now image {} but the lock has {}",
                now.unwrap_or_else(|| "(absent)".into()),
                resolution.digest.clone().unwrap_or_default()
            ))
            .with_fix(format!(
                "re-lock with `envgen image lock {}`, or restore the locked base",
                profile.name
            ))
            .into());
        }
    }
    let files = render::render_from(containers, &profile, &base, &from)?;
    let staging = tempfile::tempdir()?;
    for (name, text) in &files {
        std::fs::write(staging.path().join(name), text)?;
    }
    std::fs::write(staging.path().join(".dockerignore"), DOCKERIGNORE)?;
    stage_binary(&binary, staging.path())?;
    if let Some(requirements) = &requirements {
        // The wheels for the base's glibc (measured, else the profile's).
        let glibc = have.map_or(profile.base.glibc.clone(), |(major, minor)| {
            format!("{major}.{minor}")
        });
        python::stage(requirements, &glibc, staging.path())?;
    }
    let context = super::context::pack(staging.path())?;

    let tag = request
        .tag
        .clone()
        .unwrap_or_else(|| default_tag(&profile.name));
    let lock_sha = locked
        .as_ref()
        .map(LockEntry::sha256)
        .unwrap_or_else(|| "unlocked".into());
    let mut labels = labels(&profile.name, &lock_sha, &binary_sha);
    if let Some(stand_in) = stand_in_label {
        labels.insert(STAND_IN_LABEL.into(), stand_in);
    }
    if let Some(requirements) = &requirements {
        labels.insert(
            python::REQUIREMENTS_LABEL.into(),
            requirements.lock.sha256.clone(),
        );
    }
    let options = BuildImageOptions {
        dockerfile: render::DOCKERFILE.into(),
        t: Some(tag.clone()),
        // Never force a pull: a base the daemon has is used as is (pinned by
        // digest when the lock knows one); a missing one is pulled by the daemon.
        pull: None,
        rm: true,
        forcerm: true,
        nocache: request.no_cache,
        labels: Some(labels.clone()),
        // RUN steps get the host's network (daemons started with --bridge=none have no other).
        networkmode: Some("host".into()),
        ..Default::default()
    };
    let (images_before, _) = daemon::snapshot(&docker).await?;
    emit(
        request.json,
        serde_json::json!({"event": "start", "profile": profile.name, "base": base, "from": from, "tag": tag, "context_bytes": context.len()}),
    );
    let mut log = BuildLog::new(request.json);
    let mut interrupted = false;
    {
        let mut stream =
            docker.build_image(options, None, Some(bollard::body_full(context.into())));
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                item = stream.next() => match item {
                    Some(item) => {
                        log.absorb(item);
                        if log.failure.is_some() { break; }
                    }
                    None => break,
                },
                _ = &mut ctrl_c => { interrupted = true; break; }
            }
        }
        // Dropping the stream closes the connection: the daemon cancels the build.
    }
    log.bar.finish_and_clear();
    if interrupted {
        // Give the daemon a moment to notice the closed connection and stop
        // the step, then remove whatever the build left.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        log.clean_up(&docker, &images_before).await?;
        emit(
            request.json,
            serde_json::json!({"event": "interrupted", "step": log.step}),
        );
        return Err(Interrupted {
            profile: profile.name.clone(),
        }
        .into());
    }
    if let Some(message) = log.failure.clone() {
        log.clean_up(&docker, &images_before).await?;
        emit(
            request.json,
            serde_json::json!({"event": "failed", "step": log.step, "message": message}),
        );
        return Err(UserError::failed(format!(
            "building profile {} failed at {}\n{}{message}",
            profile.name,
            log.step,
            log.step_output.lines().map(|l| format!("    {l}\n")).collect::<String>()
        ))
        .with_fix("fix the failing step in the profile or template (the output above is the step's own), then re-lock")
        .into());
    }
    let inspect = docker.inspect_image(&tag).await.map_err(|err| {
        UserError::failed(format!(
            "the build finished but {tag} is not inspectable: {err}"
        ))
    })?;
    let image_id = inspect.id.clone().unwrap_or_default();
    let envgen_layer = inspect
        .root_fs
        .and_then(|r| r.layers)
        .and_then(|l| l.last().cloned());
    let repo_digest = if request.push {
        Some(push(&docker, &tag, request.json).await?)
    } else {
        None
    };
    let outcome = BuildOutcome {
        profile: profile.name.clone(),
        image_id,
        tag,
        base,
        from,
        labels,
        envgen_layer,
        repo_digest,
    };
    emit(
        request.json,
        serde_json::json!({"event": "done", "result": outcome}),
    );
    Ok(outcome)
}

/// Push `tag` to its registry; the RepoDigest (`repository@sha256:…`) the daemon records.
pub async fn push(docker: &bollard::Docker, tag: &str, json: bool) -> Result<String> {
    let repository = daemon::repository_of(tag);
    let tag_part = tag
        .strip_prefix(repository)
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or("latest");
    let options = PushImageOptions {
        tag: Some(tag_part.to_string()),
        ..Default::default()
    };
    let mut stream = docker.push_image(repository, Some(options), None);
    while let Some(item) = stream.next().await {
        let info = item.map_err(|err| {
            UserError::environment(format!("pushing {tag} failed: {err}"))
                .with_fix("check that the registry in the tag is reachable and accepts pushes (docker login for one that needs auth)")
        })?;
        if let Some(status) = info.status {
            emit(json, serde_json::json!({"event": "push", "status": status}));
        }
    }
    let inspect = docker
        .inspect_image(tag)
        .await
        .map_err(|err| UserError::failed(format!("{tag} vanished after the push: {err}")))?;
    inspect
        .repo_digests
        .unwrap_or_default()
        .into_iter()
        .find(|d| {
            d.split_once('@')
                .is_some_and(|(repo, _)| repo == repository)
        })
        .ok_or_else(|| {
            UserError::failed(format!(
                "pushed {tag} but the daemon recorded no RepoDigest for {repository}"
            ))
            .into()
        })
}

/// The image a launcher runs a profile in: the profile's default tag when
/// it already holds `binary` (default: the running envgen; checked through
/// the `io.envgen.binary-sha256` label), else built now — from the lock's
/// pinned base and recipes when the profile is locked
/// ([`LockCheck::RecipeOnly`]), unpinned otherwise.
/// Returns (image ID, RepoDigest when the image has one).
pub async fn ensure_built(
    containers: &Containers,
    profile: &str,
    binary: Option<&Path>,
) -> Result<(String, Option<String>)> {
    let binary = binary_path(binary)?;
    let binary_sha = binary_sha256(&binary)?;
    let tag = default_tag(profile);
    let docker = daemon::connect().await?;
    let current = docker.inspect_image(&tag).await.ok().filter(|image| {
        let labels = image.config.as_ref().and_then(|c| c.labels.as_ref());
        labels.and_then(|l| l.get(BINARY_LABEL)) == Some(&binary_sha)
    });
    let image = match current {
        Some(image) => image,
        None => {
            let request = BuildRequest {
                profile: profile.to_string(),
                binary: Some(binary),
                lock: LockCheck::RecipeOnly,
                ..Default::default()
            };
            build(containers, &request).await?;
            docker
                .inspect_image(&tag)
                .await
                .map_err(daemon::unreachable)?
        }
    };
    let repo_digest = image.repo_digests.and_then(|d| d.into_iter().next());
    Ok((image.id.unwrap_or_default(), repo_digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_needing_a_newer_glibc_than_the_base_is_refused() {
        let binary = Path::new("envgen");
        let err =
            check_glibc(binary, Some((2, 39)), "debian:bookworm-slim", Some((2, 36))).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2);
        let text = format!("{err:#}");
        assert!(
            text.contains("needs glibc 2.39") && text.contains("has glibc 2.36"),
            "{text}"
        );
        assert!(check_glibc(binary, Some((2, 36)), "b", Some((2, 36))).is_ok());
        assert!(check_glibc(binary, Some((2, 34)), "b", Some((2, 39))).is_ok());
        assert!(
            check_glibc(binary, None, "b", Some((2, 17))).is_ok(),
            "static"
        );
    }
}
