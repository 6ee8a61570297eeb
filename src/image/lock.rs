//! `containers/envgen.lock`: per profile, the base resolved to a digest (with
//! where the digest was read), the sha256 of every rendered file and of the
//! profile source, the package pins, and the profile's requirements file
//! (its sha256 and `name==version` pins, see `python.rs`). These are the *inputs* of an image;
//! the envgen binary that goes in is derived from the source revision and is
//! recorded in the image's labels and the run manifest, not here, so the same
//! lock holds on every machine. `verify` recomputes it all and names each
//! entry that drifted.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profile::{Containers, ImageProfile, EMBEDDED_LOCK_NAME};
use super::python::{self, RequirementsLock};
use super::render;
use crate::error::{Result, UserError};

pub const SCHEMA: u32 = 2;
pub const UNRESOLVED: &str = "unresolved";

// Defined below the lock (python.rs hashes with it too); named here as well
// because callers outside `image` know it by this path.
pub use super::hash::sha256_hex;

/// How a base reference was pinned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DigestSource {
    /// Manifest digest from the registry (`/distribution/{name}/json`).
    Registry,
    /// Manifest digest the local daemon recorded when the image was pushed or pulled.
    RepoDigest,
    /// Only the local image ID (config digest): cannot go into `FROM …@`, is checked before building.
    ImageId,
    /// Read from a cited public record (`digest_cited_from`), NOT yet checked
    /// against the registry: pinned in `FROM …@`, re-checked by
    /// `envgen image lock --check-remote` / `verify` where the registry answers.
    Cited,
    #[default]
    Unresolved,
}

/// The outcome of resolving a base reference.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolution {
    /// The digest `FROM` pins: the multi-arch index (manifest list) digest
    /// when the tag is multi-arch.
    pub digest: Option<String>,
    pub source: DigestSource,
    pub reason: Option<String>,
    /// The linux/amd64 image manifest digest inside that index, when known.
    pub amd64: Option<String>,
    /// Where a `cited` digest was read (repository + path, or URL).
    pub cited_from: Option<String>,
}

impl Resolution {
    pub fn unresolved(reason: impl Into<String>) -> Resolution {
        Resolution {
            digest: None,
            source: DigestSource::Unresolved,
            reason: Some(reason.into()),
            ..Default::default()
        }
    }
    /// The digest that may go into `FROM base@digest`.
    pub fn pinnable(&self) -> Option<&str> {
        match self.source {
            DigestSource::Registry | DigestSource::RepoDigest | DigestSource::Cited => {
                self.digest.as_deref()
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    pub base: String,
    /// "sha256:…", or "unresolved".
    pub digest: String,
    pub digest_source: DigestSource,
    /// The linux/amd64 manifest digest inside the index `digest` names, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_amd64: Option<String>,
    /// For `digest_source = "cited"`: the public record the digests were read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_cited_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unresolved_reason: Option<String>,
    pub profile_sha256: String,
    /// Rendered file name → sha256.
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub apt: BTreeMap<String, String>,
    #[serde(default)]
    pub pip: BTreeMap<String, String>,
    /// The profile's requirements file (`[python]`): its sha256 and pins.
    /// Absent for a profile without one, so older locks read unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<RequirementsLock>,
}

impl LockEntry {
    pub fn resolution(&self) -> Resolution {
        Resolution {
            digest: (self.digest != UNRESOLVED).then(|| self.digest.clone()),
            source: self.digest_source,
            reason: self.unresolved_reason.clone(),
            amd64: self.digest_amd64.clone(),
            cited_from: self.digest_cited_from.clone(),
        }
    }
    /// What `io.envgen.lock-sha256` carries: the hash of this entry as written.
    pub fn sha256(&self) -> String {
        sha256_hex(toml::to_string(self).unwrap_or_default().as_bytes())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    pub schema: u32,
    #[serde(default)]
    pub profiles: BTreeMap<String, LockEntry>,
}

impl Lockfile {
    /// Read the lockfile; a missing file is an empty lock.
    pub fn read(path: &Path) -> Result<Lockfile> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Lockfile {
                    schema: SCHEMA,
                    ..Default::default()
                })
            }
            // Kept as the source: a binary lockfile (not UTF-8) is then exit 2
            // with a fix (error::io_class), not an unexplained exit 1.
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!("reading {}", path.display())))
            }
        };
        Lockfile::parse(&text, &path.display().to_string())
    }

    /// Parse a lockfile's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Lockfile> {
        let lock: Lockfile = toml::from_str(text).map_err(|err| {
            UserError::usage(format!("{origin}: {err}"))
                .with_fix("regenerate it with `envgen image lock`")
        })?;
        if lock.schema != SCHEMA {
            return Err(UserError::usage(format!(
                "{origin}: schema = {} (this envgen reads schema {SCHEMA})",
                lock.schema
            ))
            .with_fix("regenerate it with `envgen image lock`")
            .into());
        }
        Ok(lock)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        let body = toml::to_string_pretty(self)?;
        let text = format!(
            "# Written by `envgen image lock`; checked by `envgen image verify`.\n\
             # It pins inputs only (base digests, recipes, profile files, package pins); the envgen\n\
             # binary is derived from the source revision and recorded in image labels and run manifests.\n\
             # digest_source = \"cited\": read from the public record in digest_cited_from, NOT yet\n\
             # checked against the registry (`envgen image lock --check-remote` does, where reachable).\n\
             # digest = \"unresolved\" means the base could not be resolved where the lock was written\n\
             # (see unresolved_reason): such a profile is NOT pinned; re-lock where the base is reachable.\n\n{body}"
        );
        std::fs::write(path, text)
            .map_err(|err| anyhow::anyhow!("writing {}: {err}", path.display()))
    }
}

/// The lock of the embedded profiles and templates, so a rendered or built
/// recipe pins its base by digest outside the repository too (without it,
/// `FROM` carried the bare tag there).
const EMBEDDED_LOCK: &str = include_str!("../../containers/envgen.lock");
// Reading the lock is the lock's concern: `Containers` (profile.rs) only
// says where the file lives.
impl Containers {
    /// The lock of these profiles: `envgen.lock` in the directory (a missing
    /// file is an empty lock), or the copy embedded with the embedded profiles.
    pub fn lockfile(&self) -> Result<Lockfile> {
        match self.lock_path() {
            Some(path) => Lockfile::read(&path),
            None => Lockfile::parse(EMBEDDED_LOCK, EMBEDDED_LOCK_NAME),
        }
    }
}

/// Compute a profile's lock entry for `base` resolved as `resolution`.
pub fn compute_entry(
    containers: &Containers,
    profile: &ImageProfile,
    base: &str,
    resolution: &Resolution,
) -> Result<LockEntry> {
    let files = render::render(containers, profile, base, resolution.pinnable())?
        .into_iter()
        .map(|(name, text)| (name, sha256_hex(text.as_bytes())))
        .collect();
    Ok(LockEntry {
        base: base.to_string(),
        digest: resolution
            .digest
            .clone()
            .unwrap_or_else(|| UNRESOLVED.to_string()),
        digest_source: resolution.source,
        digest_amd64: resolution.amd64.clone(),
        digest_cited_from: resolution.cited_from.clone(),
        unresolved_reason: resolution.reason.clone(),
        profile_sha256: sha256_hex(containers.profile_text(&profile.name)?.as_bytes()),
        files,
        apt: profile.apt.clone(),
        pip: profile.pip.clone(),
        requirements: python::read(containers, profile)?.map(|r| r.lock),
    })
}

/// One difference between the lock and what the inputs give now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    pub profile: String,
    /// e.g. "files.Dockerfile", "apt.NAME", "digest".
    pub entry: String,
    pub locked: String,
    pub now: String,
    /// Where to look: the template or profile file behind the entry.
    pub source: String,
}

/// Compare a locked entry with a freshly computed one (computed with the
/// locked resolution, so file drift means templates or the profile changed).
pub fn compare(profile: &str, locked: &LockEntry, now: &LockEntry) -> Vec<Drift> {
    let mut drifts = Vec::new();
    let mut push = |entry: String, a: &str, b: &str, source: String| {
        if a != b {
            drifts.push(Drift {
                profile: profile.to_string(),
                entry,
                locked: a.to_string(),
                now: b.to_string(),
                source,
            });
        }
    };
    let profile_file = format!("profiles/{profile}.toml");
    push("base".into(), &locked.base, &now.base, profile_file.clone());
    push(
        "profile_sha256".into(),
        &locked.profile_sha256,
        &now.profile_sha256,
        profile_file.clone(),
    );
    let names: std::collections::BTreeSet<&String> =
        locked.files.keys().chain(now.files.keys()).collect();
    for name in names {
        let template = format!("templates/{name}.hbs");
        push(
            format!("files.{name}"),
            locked
                .files
                .get(name)
                .map(String::as_str)
                .unwrap_or("(absent)"),
            now.files
                .get(name)
                .map(String::as_str)
                .unwrap_or("(absent)"),
            template,
        );
    }
    for (table, a, b) in [
        ("apt", &locked.apt, &now.apt),
        ("pip", &locked.pip, &now.pip),
    ] {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for key in keys {
            push(
                format!("{table}.{key}"),
                a.get(key).map(String::as_str).unwrap_or("(absent)"),
                b.get(key).map(String::as_str).unwrap_or("(absent)"),
                profile_file.clone(),
            );
        }
    }
    let (a, b) = (locked.requirements.as_ref(), now.requirements.as_ref());
    for (entry, was, is, source) in python::drifts(a, b) {
        push(entry, &was, &is, source);
    }
    drifts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_change_is_named_as_drift() {
        let containers = Containers::embedded();
        let profile = containers.profile("cuda12.8").unwrap();
        let resolution = Resolution::unresolved("not reachable in the test");
        let locked =
            compute_entry(&containers, &profile, &profile.base.reference, &resolution).unwrap();
        assert_eq!(locked.digest, UNRESOLVED);
        let mut now = locked.clone();
        assert!(compare("cuda12.8", &locked, &now).is_empty());
        now.files.insert("Dockerfile".into(), "0000".into());
        let drifts = compare("cuda12.8", &locked, &now);
        let entries: Vec<&str> = drifts.iter().map(|d| d.entry.as_str()).collect();
        assert_eq!(entries, ["files.Dockerfile"]);
        assert_eq!(drifts[0].source, "templates/Dockerfile.hbs");
    }

    #[test]
    fn lockfile_round_trips() {
        let containers = Containers::embedded();
        let profile = containers.profile("cpu").unwrap();
        let resolution = Resolution {
            digest: Some("sha256:aa".into()),
            source: DigestSource::Cited,
            amd64: Some("sha256:bb".into()),
            cited_from: Some("somewhere".into()),
            ..Default::default()
        };
        let entry =
            compute_entry(&containers, &profile, "debian:bookworm-slim", &resolution).unwrap();
        assert!(render::render(
            &containers,
            &profile,
            "debian:bookworm-slim",
            resolution.pinnable()
        )
        .unwrap()[0]
            .1
            .contains("FROM debian:bookworm-slim@sha256:aa\n"));
        let mut lock = Lockfile {
            schema: SCHEMA,
            ..Default::default()
        };
        lock.profiles.insert("cpu".into(), entry);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("envgen.lock");
        lock.write(&path).unwrap();
        assert_eq!(Lockfile::read(&path).unwrap(), lock);
    }

    /// The committed lock pins every public base by content and says where
    /// each digest was read; nothing in it depends on one build of envgen.
    #[test]
    fn the_committed_lock_pins_every_base_with_provenance() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers/envgen.lock");
        let lock = Lockfile::read(&path).unwrap();
        let containers = Containers::embedded();
        let hex = |d: &str| {
            d.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        };
        for profile in containers.profiles().unwrap() {
            let entry = &lock.profiles[&profile.name];
            assert_eq!(entry.base, profile.base.reference);
            assert!(hex(&entry.digest), "{}: {}", profile.name, entry.digest);
            assert!(
                entry.digest_amd64.as_deref().is_some_and(hex),
                "{}",
                profile.name
            );
            assert!(matches!(
                entry.digest_source,
                DigestSource::Registry | DigestSource::Cited
            ));
            if entry.digest_source == DigestSource::Cited {
                assert!(entry
                    .digest_cited_from
                    .as_deref()
                    .is_some_and(|c| c.len() > 20));
            }
            // The recipes in the lock are the ones rendered from it.
            let now =
                compute_entry(&containers, &profile, &entry.base, &entry.resolution()).unwrap();
            assert!(
                compare(&profile.name, entry, &now).is_empty(),
                "{}",
                profile.name
            );
        }
    }

    /// Outside the repository the embedded lock pins every embedded profile:
    /// its recipes say `FROM base@sha256:…`, not the bare tag (issue #21).
    #[test]
    fn the_embedded_lock_pins_every_embedded_profile() {
        let containers = Containers::embedded();
        let lock = containers.lockfile().unwrap();
        for profile in containers.profiles().unwrap() {
            let entry = &lock.profiles[&profile.name];
            let resolution = entry.resolution();
            let digest = resolution.pinnable().unwrap();
            let files = render::render(&containers, &profile, &entry.base, Some(digest)).unwrap();
            assert!(files[0]
                .1
                .contains(&format!("FROM {}@{digest}\n", entry.base)));
        }
        assert_eq!(containers.lock_name(), EMBEDDED_LOCK_NAME);
    }
}
