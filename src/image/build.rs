//! `envgen image build`: lock check → glibc check → staged context →
//! bollard build with streamed output → labelled image.

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use bollard::query_parameters::BuildImageOptions;
use futures_util::StreamExt;
use serde::Serialize;

use super::docker;
use super::elf;
use super::lock::{self, DigestSource, LockEntry, Lockfile};
use super::profile::{Containers, Profile};
use super::render;
use crate::error::{Result, UserError};

/// What `io.envgen.config-schema` says: the schema of the science configs the image's envgen reads.
pub const CONFIG_SCHEMA: &str = "1";

/// Inputs of one build.
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    pub profile: String,
    pub base: Option<String>,
    pub tag: Option<String>,
    pub binary: Option<PathBuf>,
    pub unlocked: bool,
    pub no_cache: bool,
    pub json: bool,
}

/// What a build produced.
#[derive(Debug, Clone, Serialize)]
pub struct BuildOutcome {
    pub profile: String,
    pub image_id: String,
    pub tag: String,
    pub base: String,
    pub labels: HashMap<String, String>,
    /// diff_id of the last layer: the envgen binary.
    pub envgen_layer: Option<String>,
}

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
    Ok(lock::sha256_hex(&bytes))
}

/// Refuse to build when the lock is missing or does not match the inputs.
pub fn check_lock(
    containers: &Containers,
    profile: &Profile,
    base: &str,
    binary_sha: &str,
) -> Result<LockEntry> {
    let path = containers
        .lock_path()
        .unwrap_or_else(|| PathBuf::from("containers/envgen.lock"));
    let lockfile = Lockfile::read(&path)?;
    let Some(locked) = lockfile.profiles.get(&profile.name) else {
        return Err(UserError::usage(format!(
            "profile {} is not locked in {}",
            profile.name,
            path.display()
        ))
        .with_fix(format!(
            "run `envgen image lock {}` (or build with --unlocked)",
            profile.name
        ))
        .into());
    };
    let now = lock::compute_entry(containers, profile, base, &locked.resolution(), binary_sha)?;
    let drifts = lock::compare(&profile.name, locked, &now);
    if !drifts.is_empty() {
        let names: Vec<String> = drifts
            .iter()
            .map(|d| format!("{} ({})", d.entry, d.source))
            .collect();
        return Err(UserError::usage(format!(
            "profile {} drifted from {}: {}",
            profile.name,
            path.display(),
            names.join(", ")
        ))
        .with_fix(format!("re-lock with `envgen image lock {}` after reviewing the change, or build with --unlocked", profile.name))
        .into());
    }
    Ok(locked.clone())
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

pub fn labels(profile: &str, lock_sha: &str) -> HashMap<String, String> {
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
    ])
}

/// The base's glibc: the profile's data for its own base, else asked from a throwaway container.
async fn base_glibc(
    docker: &bollard::Docker,
    profile: &Profile,
    base: &str,
) -> Result<Option<elf::GlibcVersion>> {
    if base == profile.base.reference {
        return Ok(elf::parse_glibc(&profile.base.glibc));
    }
    let out = docker::run_once(docker, base, &["ldd", "--version"], None, Some(&[])).await?;
    Ok(out.output.lines().next().and_then(elf::parse_glibc))
}

/// Stage the binary: a stripped copy when `strip` exists (smaller context and layer).
fn stage_binary(binary: &Path, dest: &Path) -> Result<()> {
    let stripped = which::which("strip").ok().is_some_and(|strip| {
        std::process::Command::new(strip)
            .arg("--strip-debug")
            .arg("-o")
            .arg(dest)
            .arg(binary)
            .status()
            .is_ok_and(|s| s.success())
    });
    if !stripped {
        std::fs::copy(binary, dest)?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Files the build sends, and the ones `.dockerignore` keeps out.
const DOCKERIGNORE: &str = "# the other recipes are rendered next to the Dockerfile for reference only\n*.def\ncharliecloud.Dockerfile\n";

fn progress(json: bool) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(1), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{pos}/{len}] {wide_msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn emit(json: bool, event: serde_json::Value) {
    if json {
        println!("{event}");
    }
}

/// Build a profile (see the module docs).
pub async fn build(containers: &Containers, request: &BuildRequest) -> Result<BuildOutcome> {
    let profile = containers.profile(&request.profile)?;
    let base = request
        .base
        .clone()
        .unwrap_or_else(|| profile.base.reference.clone());
    let binary = binary_path(request.binary.as_deref())?;
    let binary_sha = binary_sha256(&binary)?;
    let locked = if request.unlocked {
        None
    } else {
        Some(check_lock(containers, &profile, &base, &binary_sha)?)
    };
    let docker = docker::connect().await?;

    // A host-built binary needs a glibc at least as new as the one it linked against.
    let needed = elf::required_glibc(&std::fs::read(&binary)?)?;
    if let (Some(needed), Some(have)) = (needed, base_glibc(&docker, &profile, &base).await?) {
        if needed > have {
            return Err(UserError::usage(format!(
                "{} needs glibc {}.{} but the base {base} has glibc {}.{}",
                binary.display(), needed.0, needed.1, have.0, have.1
            ))
            .with_fix("build envgen on a system with an older glibc (or statically, e.g. --target x86_64-unknown-linux-musl) and pass it with --binary")
            .into());
        }
    }

    let resolution = match &locked {
        Some(entry) => entry.resolution(),
        None => docker::resolve(&docker, &base).await,
    };
    if resolution.source == DigestSource::ImageId {
        // Pinned by local image ID: check it is still the same image.
        let now = docker.inspect_image(&base).await.ok().and_then(|i| i.id);
        if locked.is_some() && now != resolution.digest {
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
    let files = render::render(containers, &profile, &base, resolution.pinnable())?;
    let staging = tempfile::tempdir()?;
    for (name, text) in &files {
        std::fs::write(staging.path().join(name), text)?;
    }
    std::fs::write(staging.path().join(".dockerignore"), DOCKERIGNORE)?;
    stage_binary(&binary, &staging.path().join("envgen"))?;
    let context = super::context::pack(staging.path())?;

    let tag = request
        .tag
        .clone()
        .unwrap_or_else(|| default_tag(&profile.name));
    let lock_sha = locked
        .as_ref()
        .map(LockEntry::sha256)
        .unwrap_or_else(|| "unlocked".into());
    let labels = labels(&profile.name, &lock_sha);
    let options = BuildImageOptions {
        dockerfile: render::DOCKERFILE.into(),
        t: Some(tag.clone()),
        // Never pull: bases come from the local daemon (pinned by digest when known).
        pull: None,
        rm: true,
        forcerm: true,
        nocache: request.no_cache,
        labels: Some(labels.clone()),
        // RUN steps get the host's network (daemons started with --bridge=none have no other).
        networkmode: Some("host".into()),
        ..Default::default()
    };
    let (images_before, _) = docker::snapshot(&docker).await?;
    let bar = progress(request.json);
    emit(
        request.json,
        serde_json::json!({"event": "start", "profile": profile.name, "base": base, "tag": tag, "context_bytes": context.len()}),
    );
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    let mut step_output = String::new();
    let mut step = String::new();
    let mut intermediates = Vec::new();
    let mut image_id = None;
    let mut failure = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(text) = info.stream {
                    for line in text.lines() {
                        if let Some(rest) = line.strip_prefix("Step ") {
                            // "Step 3/9 : RUN …"
                            if let Some((counts, _)) = rest.split_once(' ') {
                                if let Some((n, total)) = counts.split_once('/') {
                                    bar.set_length(total.parse().unwrap_or(1));
                                    bar.set_position(n.parse().unwrap_or(0));
                                }
                            }
                            step = line.to_string();
                            step_output.clear();
                            bar.set_message(line.to_string());
                            emit(
                                request.json,
                                serde_json::json!({"event": "step", "step": line}),
                            );
                        } else if let Some(id) = line.trim().strip_prefix("---> ") {
                            if id.len() >= 12 && id.chars().all(|c| c.is_ascii_hexdigit()) {
                                intermediates.push(id.to_string());
                            }
                        }
                        if !line.trim().is_empty() {
                            step_output.push_str(line);
                            step_output.push('\n');
                            if request.json {
                                emit(true, serde_json::json!({"event": "output", "line": line}));
                            } else {
                                bar.suspend(|| eprintln!("{line}"));
                            }
                        }
                    }
                }
                if let Some(detail) = info.error_detail {
                    failure = detail.message.or(Some("the build failed".into()));
                }
                if let Some(aux) = info.aux {
                    image_id = aux.id;
                }
            }
            Err(err) => {
                failure = Some(match err {
                    bollard::errors::Error::DockerStreamError { error } => error,
                    other => other.to_string(),
                });
                break;
            }
        }
    }
    bar.finish_and_clear();
    if let Some(message) = failure {
        // The classic builder keeps the layers of the steps that worked as
        // cache; a failed build leaves nothing behind.
        let (images_after, _) = docker::snapshot(&docker).await?;
        let new: Vec<String> = images_after
            .into_iter()
            .filter(|id| !images_before.contains(id))
            .filter(|id| {
                intermediates
                    .iter()
                    .any(|short| id.trim_start_matches("sha256:").starts_with(short))
            })
            .collect();
        docker::remove_images(&docker, &new).await;
        emit(
            request.json,
            serde_json::json!({"event": "failed", "step": step, "message": message}),
        );
        return Err(UserError::failed(format!(
            "building profile {} failed at {step}\n{}{message}",
            profile.name,
            step_output.lines().map(|l| format!("    {l}\n")).collect::<String>()
        ))
        .with_fix("fix the failing step in the profile or template (the output above is the step's own), then re-lock")
        .into());
    }
    let inspect = docker.inspect_image(&tag).await.map_err(|err| {
        UserError::failed(format!(
            "the build finished but {tag} is not inspectable: {err}"
        ))
    })?;
    let image_id = inspect.id.clone().or(image_id).unwrap_or_default();
    let envgen_layer = inspect
        .root_fs
        .and_then(|r| r.layers)
        .and_then(|l| l.last().cloned());
    let outcome = BuildOutcome {
        profile: profile.name.clone(),
        image_id,
        tag,
        base,
        labels,
        envgen_layer,
    };
    emit(
        request.json,
        serde_json::json!({"event": "done", "result": outcome}),
    );
    Ok(outcome)
}
