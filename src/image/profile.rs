//! Profiles (`containers/profiles/NAME.toml`) and where they are read from.
//!
//! The containers directory is found in this order: `--containers DIR`,
//! `$ENVGEN_CONTAINERS_DIR`, `./containers` when it holds `profiles/`; else
//! the copy embedded in the binary (read-only: `lock` needs a directory).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};

/// The profiles and templates compiled into the binary, so `envgen image
/// render cpu` works from any directory.
const EMBEDDED_PROFILES: &[(&str, &str)] = &[
    ("cpu", include_str!("../../containers/profiles/cpu.toml")),
    (
        "cuda12.8",
        include_str!("../../containers/profiles/cuda12.8.toml"),
    ),
    (
        "ngc-pytorch-25.06",
        include_str!("../../containers/profiles/ngc-pytorch-25.06.toml"),
    ),
];
const EMBEDDED_TEMPLATES: &[(&str, &str)] = &[
    (
        "Dockerfile.hbs",
        include_str!("../../containers/templates/Dockerfile.hbs"),
    ),
    (
        "apptainer.def.hbs",
        include_str!("../../containers/templates/apptainer.def.hbs"),
    ),
    (
        "apptainer-archive.def.hbs",
        include_str!("../../containers/templates/apptainer-archive.def.hbs"),
    ),
    (
        "charliecloud.Dockerfile.hbs",
        include_str!("../../containers/templates/charliecloud.Dockerfile.hbs"),
    ),
];

/// How the embedded lock is named in messages.
pub const EMBEDDED_LOCK_NAME: &str = "<embedded>/envgen.lock";

/// The default profile (what `envgen run --where docker` uses on CPU hosts).
pub const DEFAULT_PROFILE: &str = "cpu";

/// One image profile, as written in `containers/profiles/NAME.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageProfile {
    #[serde(skip)]
    pub name: String,
    pub description: String,
    pub base: Base,
    #[serde(default)]
    pub cuda: Option<Cuda>,
    /// Debian/Ubuntu packages, name → exact version.
    #[serde(default)]
    pub apt: BTreeMap<String, String>,
    /// Python packages, name → exact version.
    #[serde(default)]
    pub pip: BTreeMap<String, String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The profile's own Python dependencies: a hash-pinned requirements file.
    #[serde(default)]
    pub python: Option<Python>,
    pub user: User,
}

/// `[python]` in a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Python {
    /// The image's Python ("3.11"): pip downloads the wheels for it.
    pub version: String,
    /// The hash-pinned requirements file, relative to the containers directory.
    pub requirements: String,
}

impl Python {
    /// The path must stay inside the containers directory and be inert in
    /// messages; the version must be `3.N`.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let path = Path::new(&self.requirements);
        let inside = !self.requirements.is_empty()
            && path
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        let plain = self
            .requirements
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
        if !inside || !plain {
            return Err(UserError::usage(format!(
                "{origin}: python.requirements = {:?} is not allowed (a path relative to the containers directory, inside it: no `..`, not absolute; letters, digits, / . _ -)",
                self.requirements
            ))
            .with_fix("put the file in the containers directory, e.g. requirements/NAME.txt, and name it so: requirements = \"requirements/NAME.txt\"")
            .into());
        }
        let version_ok = self
            .version
            .strip_prefix("3.")
            .is_some_and(|minor| !minor.is_empty() && minor.chars().all(|c| c.is_ascii_digit()));
        if !version_ok {
            return Err(UserError::usage(format!(
                "{origin}: python.version = {:?} is not allowed (the image's Python as 3.N)",
                self.version
            ))
            .with_fix("write the base image's Python version, e.g. version = \"3.11\" (`python3 --version` in the base)")
            .into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Base {
    /// A catalog reference, e.g. "nvidia/cuda:12.8.1-runtime-ubuntu24.04".
    pub reference: String,
    /// glibc version of the base (decides whether a host-built envgen runs there).
    pub glibc: String,
    pub distro: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cuda {
    pub version: String,
    /// The `NVIDIA_REQUIRE_CUDA` rule the image carries.
    pub require: String,
    #[serde(default)]
    pub compiles_at_runtime: bool,
    #[serde(default)]
    pub pytorch: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    pub uid: u32,
}

/// Where profiles, templates and the lockfile come from.
#[derive(Debug, Clone)]
pub struct Containers {
    /// `None` for the embedded copy.
    pub root: Option<PathBuf>,
    profiles: BTreeMap<String, (String, String)>,
    templates: BTreeMap<String, String>,
}

/// Profile names become file names: only this shape is accepted.
pub fn valid_profile_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name.len() <= 64
}

impl Containers {
    /// Resolve the containers directory (see the module docs).
    pub fn locate(explicit: Option<&Path>) -> Result<Containers> {
        let from_env = std::env::var_os("ENVGEN_CONTAINERS_DIR").map(PathBuf::from);
        if let Some(dir) = explicit.map(Path::to_path_buf).or(from_env) {
            if !dir.join("profiles").is_dir() {
                return Err(UserError::usage(format!(
                    "containers directory {} has no profiles/ folder",
                    dir.display()
                ))
                .with_fix("point --containers (or ENVGEN_CONTAINERS_DIR) at a copy of the repository's containers/")
                .into());
            }
            return Containers::load(&dir);
        }
        let local = PathBuf::from("containers");
        if local.join("profiles").is_dir() && local.join("templates").is_dir() {
            return Containers::load(&local);
        }
        Ok(Containers::embedded())
    }

    pub fn embedded() -> Containers {
        Containers {
            root: None,
            profiles: EMBEDDED_PROFILES
                .iter()
                .map(|(name, text)| {
                    let origin = format!("<embedded>/profiles/{name}.toml");
                    (name.to_string(), (origin, text.to_string()))
                })
                .collect(),
            templates: EMBEDDED_TEMPLATES
                .iter()
                .map(|(name, text)| (name.to_string(), text.to_string()))
                .collect(),
        }
    }

    fn load(dir: &Path) -> Result<Containers> {
        let mut profiles = BTreeMap::new();
        let read_dir = |sub: &str| {
            std::fs::read_dir(dir.join(sub))
                .with_context(|| format!("reading {}", dir.join(sub).display()))
        };
        for entry in read_dir("profiles")? {
            let path = entry?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".toml"))
            else {
                continue;
            };
            if !valid_profile_name(name) {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            profiles.insert(name.to_string(), (path.display().to_string(), text));
        }
        let mut templates = BTreeMap::new();
        for (name, _) in EMBEDDED_TEMPLATES {
            let path = dir.join("templates").join(name);
            let text = std::fs::read_to_string(&path).map_err(|err| {
                UserError::usage(format!("template {} unreadable: {err}", path.display()))
                    .with_fix("restore it from the repository's containers/templates/")
            })?;
            templates.insert(name.to_string(), text);
        }
        Ok(Containers {
            root: Some(dir.to_path_buf()),
            profiles,
            templates,
        })
    }

    /// Names of every profile, sorted.
    pub fn names(&self) -> Vec<String> {
        self.profiles.keys().cloned().collect()
    }

    /// A template's text by file name ("Dockerfile.hbs", …).
    pub fn template(&self, name: &str) -> &str {
        self.templates.get(name).map(String::as_str).unwrap_or("")
    }

    /// Where the lockfile lives (None for the embedded copy).
    pub fn lock_path(&self) -> Option<PathBuf> {
        self.root.as_ref().map(|root| root.join("envgen.lock"))
    }

    /// The lockfile's name for messages: its path, or the embedded copy's name.
    pub fn lock_name(&self) -> String {
        self.lock_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| EMBEDDED_LOCK_NAME.into())
    }

    /// The profile's source text, for hashing into the lock.
    pub fn profile_text(&self, name: &str) -> Result<&str> {
        self.check_name(name)?;
        Ok(self.profiles[name].1.as_str())
    }

    fn check_name(&self, name: &str) -> Result<()> {
        if valid_profile_name(name) && self.profiles.contains_key(name) {
            return Ok(());
        }
        let shape = if valid_profile_name(name) {
            "no such profile"
        } else {
            "invalid profile name (allowed: [a-z0-9][a-z0-9._-]*)"
        };
        Err(UserError::usage(format!(
            "image profile {name:?}: {shape}; profiles: {}",
            self.names().join(", ")
        ))
        .with_fix("use one of the listed profiles, or add containers/profiles/NAME.toml")
        .into())
    }

    /// Parse and validate one profile.
    pub fn profile(&self, name: &str) -> Result<ImageProfile> {
        self.check_name(name)?;
        let (origin, text) = &self.profiles[name];
        let mut profile: ImageProfile = toml::from_str(text).map_err(|err| {
            UserError::usage(format!("{origin}: {err}"))
                .with_fix("fix the profile; see docs/images.md for the fields")
        })?;
        profile.name = name.to_string();
        profile.validate(origin)?;
        Ok(profile)
    }

    /// Every profile, parsed.
    pub fn profiles(&self) -> Result<Vec<ImageProfile>> {
        self.names().iter().map(|name| self.profile(name)).collect()
    }
}

fn token_ok(value: &str, extra: &str) -> bool {
    !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

impl ImageProfile {
    /// Everything that ends up in a Dockerfile or shell line must be inert
    /// there: reject anything that could break quoting.
    fn validate(&self, origin: &str) -> Result<()> {
        let bad = |field: String, value: &str, rule: &str| -> anyhow::Error {
            UserError::usage(format!(
                "{origin}: {field} = {value:?} is not allowed ({rule})"
            ))
            .with_fix("use exact versions and plain names; see docs/images.md")
            .into()
        };
        if !token_ok(&self.base.reference, "/:._-@") {
            return Err(bad(
                "base.reference".into(),
                &self.base.reference,
                "an image reference",
            ));
        }
        for (table, pins, sep) in [("apt", &self.apt, "+.-"), ("pip", &self.pip, "._-")] {
            for (name, version) in pins {
                if !token_ok(name, sep) {
                    return Err(bad(format!("{table}.{name}"), name, "a package name"));
                }
                if !token_ok(version, ".+~:_-") || version.contains('*') {
                    return Err(bad(format!("{table}.{name}"), version, "an exact version"));
                }
            }
        }
        for (key, value) in &self.env {
            let key_ok = key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && token_ok(key, "_");
            if !key_ok {
                return Err(bad(
                    format!("env.{key}"),
                    key,
                    "an environment variable name",
                ));
            }
            if value.chars().any(|c| "\"\\$`\n".contains(c)) {
                return Err(bad(
                    format!("env.{key}"),
                    value,
                    "no quotes, $, ` or newlines",
                ));
            }
        }
        if !token_ok(&self.user.name, "_-") || self.user.uid == 0 {
            return Err(bad(
                "user".into(),
                &self.user.name,
                "a non-root user name and uid",
            ));
        }
        if let Some(python) = &self.python {
            python.validate(origin)?;
        }
        if let Some(cuda) = &self.cuda {
            if cuda.require.chars().any(|c| "\"\\$`\n".contains(c)) {
                return Err(bad(
                    "cuda.require".into(),
                    &cuda.require,
                    "no quotes, $, ` or newlines",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_be_paths_are_rejected() {
        for name in ["../etc", "a/b", "", ".hidden", "Cpu", "cpu ", "-x"] {
            assert!(!valid_profile_name(name), "{name:?}");
        }
        for name in ["cpu", "cuda12.8", "ngc-pytorch-25.06"] {
            assert!(valid_profile_name(name), "{name:?}");
        }
    }

    #[test]
    fn embedded_profiles_parse() {
        let containers = Containers::embedded();
        let profiles = containers.profiles().unwrap();
        assert_eq!(profiles.len(), 3);
        let cpu = containers.profile("cpu").unwrap();
        assert!(cpu.cuda.is_none());
        let cuda = containers.profile("cuda12.8").unwrap();
        assert!(cuda.cuda.unwrap().require.starts_with("cuda>=12.8"));
    }

    #[test]
    fn unknown_profile_lists_the_known_ones() {
        let err = Containers::embedded().profile("../x").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"../x\"") && text.contains("cuda12.8"),
            "{text}"
        );
    }
}
