//! `envgen image …`: list, render, build, lock, verify, export.

use std::path::{Path, PathBuf};

use crate::error::{Result, UserError};
use crate::image::build::{self, BuildRequest, LockCheck};
use crate::image::daemon;
use crate::image::export::{self, Format};
use crate::image::lock::{self, DigestSource, Lockfile};
use crate::image::python;
use crate::image::{render, Containers};
use crate::launch::signals::EXIT_INTERRUPTED;

/// Options every image subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// The containers directory (profiles/, templates/, envgen.lock); default ./containers, else the embedded copy.
    #[arg(long, value_name = "DIR", env = "ENVGEN_CONTAINERS_DIR")]
    pub containers: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the image profiles in containers/.
    List {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Render a profile's Dockerfile, Apptainer definition and charliecloud recipe.
    Render {
        /// The image profile, e.g. cpu (`envgen image list`).
        profile: String,
        /// Write the files into DIR (default: print the Dockerfile on stdout).
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
        /// Render on another base than the profile's.
        #[arg(long, value_name = "REF")]
        base: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Build a profile through the Docker Engine API.
    Build {
        /// The image profile, e.g. cpu (`envgen image list`).
        profile: String,
        /// Build on another base than the profile's (it must be locked with the same --base).
        #[arg(long, value_name = "REF")]
        base: Option<String>,
        /// The image tag (default: envgen/PROFILE:VERSION).
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        /// The envgen binary to put in (default: this executable).
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
        /// Build even if the profile is not locked or has drifted from the lock.
        #[arg(long)]
        unlocked: bool,
        /// Do not reuse cached layers.
        #[arg(long)]
        no_cache: bool,
        /// Push the tag to its registry afterwards and print the RepoDigest.
        #[arg(long)]
        push: bool,
        /// Build events as JSON lines on stdout (the last one carries the result).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Resolve bases to digests and write containers/envgen.lock.
    Lock {
        /// The profile to lock (default: every profile).
        profile: Option<String>,
        /// Lock the profile on another base than its own (as `image build --base`).
        #[arg(long, value_name = "REF", requires = "profile")]
        base: Option<String>,
        /// Write nothing: re-resolve each locked base at its registry and report
        /// a different digest as drift (exit 1); offline, say "not re-checked: offline".
        #[arg(long, conflicts_with = "base")]
        check_remote: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Recompute the lock and name every drifted entry (exit 1 on drift).
    Verify {
        /// The profile to verify (default: every profile).
        profile: Option<String>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Export a built profile for HPC.
    Export {
        /// The built profile to export, e.g. cpu.
        profile: String,
        /// The file (or, for charliecloud, the directory) to write.
        #[arg(short = 'o', long = "out", value_name = "FILE")]
        out: PathBuf,
        /// What to write: a `docker save` archive, a charliecloud image, or an Apptainer definition.
        #[arg(long, value_enum, default_value = "docker-archive")]
        format: ExportFormat,
        /// The image to export (default: the profile's default tag).
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    DockerArchive,
    Charliecloud,
    ApptainerDef,
}

pub fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::List { json, common } => {
            list(&Containers::locate(common.containers.as_deref())?, json)
        }
        Command::Render {
            profile,
            out,
            base,
            common,
        } => render_cmd(
            &Containers::locate(common.containers.as_deref())?,
            &profile,
            base,
            out.as_deref(),
        ),
        Command::Build {
            profile,
            base,
            tag,
            binary,
            unlocked,
            no_cache,
            push,
            json,
            common,
        } => {
            let containers = Containers::locate(common.containers.as_deref())?;
            let request = BuildRequest {
                profile,
                base,
                tag,
                binary,
                lock: if unlocked {
                    LockCheck::Skip
                } else {
                    LockCheck::Strict
                },
                no_cache,
                push,
                json,
            };
            let outcome = match daemon::runtime()?.block_on(build::build(&containers, &request)) {
                Ok(outcome) => outcome,
                Err(err) => match err.downcast_ref::<build::Interrupted>() {
                    Some(interrupted) => {
                        eprintln!("{interrupted}");
                        return Ok(EXIT_INTERRUPTED);
                    }
                    None => return Err(err),
                },
            };
            if !json {
                eprintln!(
                    "built {} from {} ({})",
                    outcome.tag, outcome.from, outcome.image_id
                );
                if let Some(digest) = &outcome.repo_digest {
                    eprintln!("pushed {digest}");
                }
                crate::output::outln!("{}", outcome.image_id);
            }
            Ok(0)
        }
        Command::Lock {
            profile,
            base,
            check_remote,
            common,
        } => {
            let containers = Containers::locate(common.containers.as_deref())?;
            if check_remote {
                check_remote_cmd(&containers, profile.as_deref())
            } else {
                lock_cmd(&containers, profile.as_deref(), base)
            }
        }
        Command::Verify {
            profile,
            json,
            common,
        } => {
            let containers = Containers::locate(common.containers.as_deref())?;
            verify_cmd(&containers, profile.as_deref(), json)
        }
        Command::Export {
            profile,
            out,
            format,
            tag,
            common,
        } => {
            let containers = Containers::locate(common.containers.as_deref())?;
            let format = match format {
                ExportFormat::DockerArchive => Format::DockerArchive,
                ExportFormat::Charliecloud => Format::Charliecloud,
                ExportFormat::ApptainerDef => Format::ApptainerDef,
            };
            let image = tag.unwrap_or_else(|| build::default_tag(&profile));
            let exported = daemon::runtime()?.block_on(export::export(
                &containers,
                &profile,
                &image,
                &out,
                format,
            ))?;
            for path in &exported.paths {
                crate::output::outln!("{}", path.display());
            }
            eprintln!("next: {}", exported.next);
            Ok(0)
        }
    }
}

fn read_lock(containers: &Containers) -> Result<Lockfile> {
    containers.lockfile()
}

fn list(containers: &Containers, json: bool) -> Result<i32> {
    let lockfile = read_lock(containers)?;
    let rows: Vec<serde_json::Value> = containers
        .profiles()?
        .into_iter()
        .map(|p| {
            let locked = lockfile.profiles.get(&p.name);
            serde_json::json!({
                "name": p.name,
                "description": p.description,
                "base": p.base.reference,
                "cuda": p.cuda.as_ref().map(|c| c.version.clone()),
                "digest": locked.map(|l| l.digest.clone()),
                "tag": build::default_tag(&p.name),
            })
        })
        .collect();
    if json {
        crate::output::outln!("{}", serde_json::Value::Array(rows));
    } else {
        for row in rows {
            crate::output::outln!(
                "{:<20} {:<45} digest: {}",
                row["name"].as_str().unwrap_or(""),
                row["base"].as_str().unwrap_or(""),
                row["digest"].as_str().unwrap_or("(not locked)")
            );
        }
    }
    Ok(0)
}

fn render_cmd(
    containers: &Containers,
    name: &str,
    base: Option<String>,
    out: Option<&Path>,
) -> Result<i32> {
    let profile = containers.profile(name)?;
    let base = base.unwrap_or_else(|| profile.base.reference.clone());
    let lockfile = read_lock(containers)?;
    let digest = lockfile
        .profiles
        .get(name)
        .filter(|l| l.base == base)
        .map(|l| l.resolution())
        .and_then(|r| r.pinnable().map(str::to_string));
    if digest.is_none() {
        eprintln!(
            "warning: {name}: FROM {base} is NOT pinned by digest ({} has no pinned digest for that base; `envgen image lock {name}` pins it)",
            containers.lock_name()
        );
    }
    let files = render::render(containers, &profile, &base, digest.as_deref())?;
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|err| {
                UserError::usage(format!("cannot create {}: {err}", dir.display()))
            })?;
            for (file, text) in &files {
                let path = dir.join(file);
                std::fs::write(&path, text).map_err(|e| {
                    anyhow::Error::new(e).context(format!("writing {}", path.display()))
                })?;
                crate::output::outln!("{}", dir.join(file).display());
            }
            if let Some(path) = python::write_beside(containers, &profile, dir)? {
                crate::output::outln!("{}", path.display());
            }
        }
        None => {
            for (file, text) in &files {
                crate::output::outln!("# ===== {file} =====\n{text}");
            }
        }
    }
    Ok(0)
}

fn selected(
    containers: &Containers,
    profile: Option<&str>,
) -> Result<Vec<crate::image::ImageProfile>> {
    match profile {
        Some(name) => Ok(vec![containers.profile(name)?]),
        None => containers.profiles(),
    }
}

fn lock_cmd(containers: &Containers, profile: Option<&str>, base: Option<String>) -> Result<i32> {
    let Some(path) = containers.lock_path() else {
        return Err(UserError::usage(
            "no containers directory to write envgen.lock into (using the embedded profiles)",
        )
        .with_fix("run from the repository root, or pass --containers DIR")
        .into());
    };
    let profiles = selected(containers, profile)?;
    crate::image::relock::relock(containers, &profiles, base, &path)?;
    crate::output::outln!("{}", path.display());
    Ok(0)
}

/// Re-resolve each locked base at its registry; `None` when offline (with why).
fn registry_digests(bases: &[String]) -> Vec<std::result::Result<String, String>> {
    let Ok(runtime) = daemon::runtime() else {
        return bases
            .iter()
            .map(|_| Err("no async runtime".into()))
            .collect();
    };
    runtime.block_on(async {
        match daemon::connect().await {
            Ok(daemon) => {
                let mut out = Vec::new();
                for base in bases {
                    out.push(daemon::registry_digest(&daemon, base).await);
                }
                out
            }
            Err(err) => {
                let reason = format!(
                    "no Docker daemon to ask the registry through ({})",
                    err.to_string().lines().next().unwrap_or("")
                );
                bases.iter().map(|_| Err(reason.clone())).collect()
            }
        }
    })
}

/// `envgen image lock --check-remote`: compare each locked digest with the
/// registry's answer now; write nothing.
fn check_remote_cmd(containers: &Containers, profile: Option<&str>) -> Result<i32> {
    let lockfile = read_lock(containers)?;
    let profiles = selected(containers, profile)?;
    let locked: Vec<(String, lock::LockEntry)> = profiles
        .iter()
        .filter_map(|p| {
            lockfile
                .profiles
                .get(&p.name)
                .map(|l| (p.name.clone(), l.clone()))
        })
        .collect();
    let bases: Vec<String> = locked.iter().map(|(_, l)| l.base.clone()).collect();
    let mut drift = 0;
    for ((name, entry), now) in locked.iter().zip(registry_digests(&bases)) {
        match now {
            Ok(digest) if digest == entry.digest => {
                crate::output::outln!("ok: {name}: {} is {digest} at the registry", entry.base)
            }
            Ok(digest) => {
                drift += 1;
                crate::output::outln!(
                    "drift: {name}: digest — locked {} ({:?}), registry now {digest} (base {}: the tag moved, or the cited record was wrong)",
                    entry.digest, entry.digest_source, entry.base
                );
            }
            Err(reason) => crate::output::outln!(
                "note: {name}: {} locked at {} ({:?}), not re-checked: offline ({reason})",
                entry.base,
                entry.digest,
                entry.digest_source
            ),
        }
    }
    for p in &profiles {
        if !lockfile.profiles.contains_key(&p.name) {
            crate::output::outln!("note: {}: not locked", p.name);
        }
    }
    Ok(if drift == 0 { 0 } else { 1 })
}

fn verify_cmd(containers: &Containers, profile: Option<&str>, json: bool) -> Result<i32> {
    let path = containers.lock_name();
    let lockfile = read_lock(containers)?;
    let profiles = selected(containers, profile)?;
    let mut drifts = Vec::new();
    let mut notes = Vec::new();
    let mut to_resolve = Vec::new();
    for profile in &profiles {
        let Some(locked) = lockfile.profiles.get(&profile.name) else {
            drifts.push(lock::Drift {
                profile: profile.name.clone(),
                entry: "(whole profile)".into(),
                locked: "(absent)".into(),
                now: "not locked".into(),
                source: path.clone(),
            });
            continue;
        };
        let now = lock::compute_entry(containers, profile, &locked.base, &locked.resolution())?;
        drifts.extend(lock::compare(&profile.name, locked, &now));
        to_resolve.push((profile.name.clone(), locked.clone()));
    }
    // Re-resolve the bases: a moved tag is drift; an unreachable registry is said, not hidden.
    let bases: Vec<String> = to_resolve.iter().map(|(_, l)| l.base.clone()).collect();
    for ((name, locked), now) in to_resolve
        .iter()
        .zip(crate::image::relock::resolve_all(&bases))
    {
        let moved = |now_digest: &str, why: &str| lock::Drift {
            profile: name.clone(),
            entry: "digest".into(),
            locked: locked.digest.clone(),
            now: now_digest.into(),
            source: format!("base {} ({why})", locked.base),
        };
        match (locked.digest.as_str(), now.digest.as_deref()) {
            (lock::UNRESOLVED, Some(digest)) if now.source != DigestSource::ImageId => {
                drifts.push(moved(digest, "now resolvable: re-lock to pin it"))
            }
            (lock::UNRESOLVED, _) => notes.push(format!(
                "{name}: base {} is not pinned (digest unresolved: {})",
                locked.base,
                locked
                    .unresolved_reason
                    .as_deref()
                    .unwrap_or("no reason recorded")
            )),
            (locked_digest, Some(digest))
                if now.source == DigestSource::Registry
                    && locked.digest_source != DigestSource::ImageId =>
            {
                if locked_digest != digest {
                    drifts.push(moved(digest, "the registry has another digest for the tag"));
                }
            }
            (locked_digest, Some(digest))
                if now.source == locked.digest_source && locked_digest != digest =>
            {
                drifts.push(moved(digest, "the tag moved"))
            }
            (_, Some(_)) if now.source == locked.digest_source => {}
            (locked_digest, _) => notes.push(format!(
                "{name}: base {} locked at {locked_digest} ({}), not re-checked: offline ({})",
                locked.base,
                source_name(locked.digest_source),
                now.reason
                    .as_deref()
                    .unwrap_or("only a local image answers for it")
            )),
        }
    }
    if json {
        crate::output::outln!(
            "{}",
            serde_json::json!({"lockfile": path, "ok": drifts.is_empty(), "drift": drifts, "notes": notes})
        );
    } else {
        for note in &notes {
            crate::output::outln!("note: {note}");
        }
        for d in &drifts {
            crate::output::outln!(
                "drift: {}: {} — locked {} , now {} ({})",
                d.profile,
                d.entry,
                d.locked,
                d.now,
                d.source
            );
        }
        if drifts.is_empty() {
            crate::output::outln!("ok: {} profile(s) match {path}", profiles.len());
        }
    }
    Ok(if drifts.is_empty() { 0 } else { 1 })
}

fn source_name(source: DigestSource) -> &'static str {
    match source {
        DigestSource::Registry => "read from the registry",
        DigestSource::RepoDigest => "the local daemon's RepoDigest",
        DigestSource::ImageId => "local image ID",
        DigestSource::Cited => "cited from a public record, not yet checked against the registry",
        DigestSource::Unresolved => "unresolved",
    }
}
