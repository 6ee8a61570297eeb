//! A profile's own Python dependencies (issue #25): `[python] requirements
//! = "requirements/NAME.txt"`, a file in pip's hash-checking format (every
//! requirement `name==version` with its `--hash=sha256:…`), as
//! `uv pip compile --generate-hashes` or `pip-compile --generate-hashes`
//! write it.
//!
//! Build containers often have no network (HPC build nodes; this project's
//! test daemon), so the wheels are downloaded on the host by pip itself
//! (`pip download --require-hashes`, an argument vector, never a shell),
//! checked against the file's hashes once more here, and sent in the build
//! context; the image installs them with `--no-index --require-hashes`.
//! The lock records the file's sha256 and its pins, so `image verify`
//! names the file when it changes.
//!
//! The file is read by the small parser below rather than a crate: the
//! requirements.txt parsers on crates.io (`requirements` 0.3, `pyreq-rs`
//! 0.1, `use-pip` 0.0.1) are unmaintained or only validate strings, and
//! hold at most one hash per requirement; the subset accepted here (exact
//! pins with hashes, comments, continuations) is a few lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::hash::sha256_hex;
use super::profile::{Containers, ImageProfile};
use crate::error::{Result, UserError};

/// The label carrying the sha256 of the requirements file an image was built with.
pub const REQUIREMENTS_LABEL: &str = "io.envgen.requirements-sha256";
/// Where the requirements file and its wheels sit in the build context
/// (`COPY python/ …` in Dockerfile.hbs).
pub const CONTEXT_DIR: &str = "python";

/// How to write a file this parser accepts.
const COMPILE_FIX: &str = "pin every requirement with its hashes: `uv pip compile --generate-hashes requirements.in -o requirements.txt` (or `pip-compile --generate-hashes requirements.in`); see docs/images.md, \"Your Python dependencies\"";

/// One requirement: `name==version` and its hashes (hex sha256).
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    pub name: String,
    pub version: String,
    pub hashes: Vec<String>,
    /// The (first) line it is written on.
    pub line: usize,
}

/// What the lock records of a profile's requirements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequirementsLock {
    /// As the profile names it (relative to the containers directory).
    pub file: String,
    pub sha256: String,
    pub python: String,
    /// Normalized name → version.
    pub packages: BTreeMap<String, String>,
}

/// A profile's requirements, read and parsed.
#[derive(Debug, Clone)]
pub struct Requirements {
    pub path: PathBuf,
    pub text: String,
    pub pins: Vec<Pin>,
    pub lock: RequirementsLock,
}

/// PEP 503 normalization: lowercase, runs of `-_.` become one `-`.
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if "-_.".contains(c) {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// pip's logical lines: a line ending in `\` continues on the next (a
/// comment line ends it, as in pip); comments (`#` at the start or after
/// whitespace) are dropped. (first line number, text), empty ones skipped.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    let finish = |number: usize, line: String, out: &mut Vec<(usize, String)>| {
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
                cut = i;
                break;
            }
        }
        let kept = line[..cut].trim();
        if !kept.is_empty() {
            out.push((number, kept.to_string()));
        }
    };
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let comment = raw.trim_start().starts_with('#');
        match raw.strip_suffix('\\').filter(|_| !comment) {
            Some(part) => {
                let entry = pending.get_or_insert((number, String::new()));
                entry.1.push_str(part);
                entry.1.push(' ');
            }
            None => {
                let (start, mut line) = pending.take().unwrap_or((number, String::new()));
                if !comment {
                    line.push_str(raw);
                }
                finish(start, line, &mut out);
            }
        }
    }
    if let Some((start, line)) = pending {
        finish(start, line, &mut out);
    }
    out
}

fn name_ok(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

fn version_ok(version: &str) -> bool {
    version.chars().next().is_some_and(|c| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+!_-".contains(c))
}

/// Why a logical line is refused, and the fix for it.
fn refuse_line(first: &str, line: &str) -> (String, String) {
    let compile = COMPILE_FIX.to_string();
    let option = first.split('=').next().unwrap_or(first);
    match option {
        "-r" | "--requirement" | "-c" | "--constraint" => (
            "includes another file (only one flat, hash-pinned file is read)".into(),
            compile,
        ),
        "-e" | "--editable" => (
            "an editable install cannot be pinned by hash".into(),
            compile,
        ),
        "-i" | "--index-url" | "--extra-index-url" | "-f" | "--find-links" | "--trusted-host" | "--no-index" => (
            "pip options are not read from this file".into(),
            "remove the line; to download from another index, set PIP_INDEX_URL (or PIP_EXTRA_INDEX_URL) for `envgen image build` (uv: --no-emit-index-url)".into(),
        ),
        "--hash" => (
            "a --hash without its requirement (is the `\\` ending the line before missing?)".into(),
            compile,
        ),
        _ if first.starts_with('-') => ("a pip option, not a requirement".into(), compile),
        _ if line.contains("://") || line.contains(" @ ") || first.contains('@') => (
            "a URL or direct reference cannot be pinned here".into(),
            format!("publish it as a wheel on an index, then {COMPILE_FIX}"),
        ),
        _ if line.contains(';') => (
            "environment markers are not read (the file is for the image's one Python)".into(),
            "compile for the image's Python without --universal: `uv pip compile --generate-hashes --python-version 3.N requirements.in -o requirements.txt`".into(),
        ),
        _ => (
            "not pinned to one exact version (`name==version`)".into(),
            compile,
        ),
    }
}

/// Parse a requirements file in pip's hash-checking format; `origin` names
/// it in errors (exit 2 with `origin:line`, the line and the fix).
pub fn parse(text: &str, origin: &str) -> Result<Vec<Pin>> {
    let refuse = |number: usize, line: &str, why: &str, fix: &str| -> anyhow::Error {
        UserError::usage(format!("{origin}:{number}: {line:?}: {why}"))
            .with_fix(fix.to_string())
            .into()
    };
    let mut pins: Vec<Pin> = Vec::new();
    let mut seen = BTreeSet::new();
    for (number, line) in logical_lines(text) {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let pinned = first.split_once("==").filter(|(name, version)| {
            let bare = name.split('[').next().unwrap_or(name);
            let extras_ok = match name.split_once('[') {
                None => true,
                Some((_, rest)) => rest.strip_suffix(']').is_some_and(|e| {
                    e.chars()
                        .all(|c| c.is_ascii_alphanumeric() || ",._-".contains(c))
                }),
            };
            name_ok(bare) && extras_ok && version_ok(version)
        });
        let Some((name, version)) = pinned.filter(|_| !line.contains(';')) else {
            let (why, fix) = refuse_line(first, &line);
            return Err(refuse(number, &line, &why, &fix));
        };
        let mut hashes = Vec::new();
        let mut rest = words.peekable();
        while let Some(word) = rest.next() {
            let value = match word.strip_prefix("--hash=") {
                Some(value) => value.to_string(),
                None if word == "--hash" => rest.next().unwrap_or_default().to_string(),
                None => {
                    return Err(refuse(
                        number,
                        &line,
                        &format!("{word:?} is not a --hash=sha256:… option"),
                        COMPILE_FIX,
                    ))
                }
            };
            let hex = value
                .strip_prefix("sha256:")
                .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()));
            let Some(hex) = hex else {
                return Err(refuse(
                    number,
                    &line,
                    &format!("--hash={value} is not sha256:<64 hex digits>"),
                    COMPILE_FIX,
                ));
            };
            hashes.push(hex.to_ascii_lowercase());
        }
        if hashes.is_empty() {
            return Err(refuse(
                number,
                &line,
                "no --hash=sha256:… (every requirement needs the hashes of its files)",
                COMPILE_FIX,
            ));
        }
        let bare = name.split('[').next().unwrap_or(name);
        if !seen.insert(normalize(bare)) {
            return Err(refuse(
                number,
                &line,
                &format!("{bare} is pinned twice"),
                COMPILE_FIX,
            ));
        }
        pins.push(Pin {
            name: bare.to_string(),
            version: version.to_string(),
            hashes,
            line: number,
        });
    }
    if pins.is_empty() {
        return Err(
            UserError::usage(format!("{origin}: no requirements in the file"))
                .with_fix(format!(
                    "add some ({COMPILE_FIX}), or remove [python] from the profile"
                ))
                .into(),
        );
    }
    Ok(pins)
}

/// Read and parse the requirements a profile names (`None` without `[python]`).
pub fn read(containers: &Containers, profile: &ImageProfile) -> Result<Option<Requirements>> {
    let Some(python) = &profile.python else {
        return Ok(None);
    };
    let origin = profile_origin(containers, &profile.name);
    let Some(root) = &containers.root else {
        return Err(UserError::usage(format!(
            "{origin}: python.requirements = {:?} needs a containers directory (the embedded profiles have none)",
            python.requirements
        ))
        .with_fix("pass --containers DIR (a copy of the repository's containers/ holding the file)")
        .into());
    };
    let path = root.join(&python.requirements);
    if let Err(err) = std::fs::metadata(&path) {
        return Err(UserError::usage(format!(
            "{origin}: python.requirements = {:?}: cannot read {}: {err}",
            python.requirements,
            path.display()
        ))
        .with_fix(format!(
            "write the file there ({COMPILE_FIX}), or fix the path (relative to {})",
            root.display()
        ))
        .into());
    }
    // The rule for files of a user directory (issue #40): a link out of the
    // containers directory (to /etc/shadow) is refused before its first
    // line could be quoted by a parse error; so are FIFOs and huge files.
    let text = envgen_experiments::fsutil::read_user_text(
        root,
        &path,
        envgen_experiments::fsutil::limit::TEXT,
    )
    .map_err(|err| {
        err.context(format!(
            "{origin}: python.requirements = {:?}",
            python.requirements
        ))
    })?;
    let pins = parse(&text, &path.display().to_string())?;
    let lock = RequirementsLock {
        file: python.requirements.clone(),
        sha256: sha256_hex(text.as_bytes()),
        python: python.version.clone(),
        packages: pins
            .iter()
            .map(|pin| (normalize(&pin.name), pin.version.clone()))
            .collect(),
    };
    Ok(Some(Requirements {
        path,
        text,
        pins,
        lock,
    }))
}

/// `image render -o DIR`: the requirements file beside the recipes, as the
/// Apptainer and charliecloud recipes expect it (`requirements.txt`).
pub fn write_beside(
    containers: &Containers,
    profile: &ImageProfile,
    dir: &Path,
) -> Result<Option<PathBuf>> {
    let Some(requirements) = read(containers, profile)? else {
        return Ok(None);
    };
    let path = dir.join("requirements.txt");
    std::fs::write(&path, &requirements.text)
        .map_err(|e| anyhow::Error::new(e).context(format!("writing {}", path.display())))?;
    Ok(Some(path))
}

fn profile_origin(containers: &Containers, name: &str) -> String {
    match &containers.root {
        Some(root) => root
            .join("profiles")
            .join(format!("{name}.toml"))
            .display()
            .to_string(),
        None => format!("<embedded>/profiles/{name}.toml"),
    }
}

/// The lock's view of the requirements as drift entries: (entry, locked, now, source).
pub fn drifts(
    locked: Option<&RequirementsLock>,
    now: Option<&RequirementsLock>,
) -> Vec<(String, String, String, String)> {
    let absent = || "(absent)".to_string();
    let source = now.or(locked).map(|r| r.file.clone()).unwrap_or_default();
    let field = |r: Option<&RequirementsLock>, f: fn(&RequirementsLock) -> &String| {
        r.map(|r| f(r).clone()).unwrap_or_else(absent)
    };
    let mut out = Vec::new();
    for (entry, f) in [
        (
            "requirements.file",
            (|r| &r.file) as fn(&RequirementsLock) -> &String,
        ),
        ("requirements.sha256", |r| &r.sha256),
        ("requirements.python", |r| &r.python),
    ] {
        let (a, b) = (field(locked, f), field(now, f));
        if a != b {
            out.push((entry.to_string(), a, b, source.clone()));
        }
    }
    let empty = BTreeMap::new();
    let a = locked.map(|r| &r.packages).unwrap_or(&empty);
    let b = now.map(|r| &r.packages).unwrap_or(&empty);
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for name in names {
        let (x, y) = (
            a.get(name).cloned().unwrap_or_else(absent),
            b.get(name).cloned().unwrap_or_else(absent),
        );
        if x != y {
            out.push((format!("requirements.{name}"), x, y, source.clone()));
        }
    }
    out
}

/// The platforms pip downloads wheels for: the manylinux tags a base with
/// glibc 2.`minor` runs (pip 23 does not expand `manylinux_2_N` downward
/// itself), and `manylinux2014` (which it expands to 2010 and 1). Pure
/// Python wheels (`none-any`) always match.
pub fn platforms(glibc: &str, arch: &str) -> Vec<String> {
    let minor = glibc
        .strip_prefix("2.")
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(17)
        .max(17);
    let mut out: Vec<String> = (17..=minor)
        .rev()
        .map(|m| format!("manylinux_2_{m}_{arch}"))
        .collect();
    out.push(format!("manylinux2014_{arch}"));
    out
}

fn pip_failed(message: String) -> anyhow::Error {
    UserError::environment(message)
        .with_fix(format!("check that PyPI (or PIP_INDEX_URL) is reachable from this host and that every pinned version has a wheel for Python and Linux {}; a hash mismatch means the file is wrong or the index served another file: re-compile it ({COMPILE_FIX})", std::env::consts::ARCH))
        .into()
}

/// Download the wheels into `context/python/wheels` with the host's pip,
/// hash-checked, and put the file beside them as `requirements.txt`.
/// Missing python3 or pip, a failed download, a hash mismatch: exit 3.
pub fn stage(requirements: &Requirements, glibc: &str, context: &Path) -> Result<()> {
    let dir = context.join(CONTEXT_DIR);
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels)?;
    std::fs::write(dir.join("requirements.txt"), &requirements.text)?;
    let python = which::which("python3").map_err(|_| {
        UserError::environment(format!(
            "the profile's Python dependencies ({}) are downloaded on this host with pip, but there is no python3 on PATH",
            requirements.path.display()
        ))
        .with_fix("install Python 3 with pip on the build host (e.g. `apt-get install python3-pip`), then build again")
    })?;
    let mut command = std::process::Command::new(python);
    command
        .args(["-m", "pip", "download", "--no-deps", "--require-hashes"])
        .args([
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .args(["--implementation", "cp", "--python-version"])
        .arg(&requirements.lock.python);
    for platform in platforms(glibc, std::env::consts::ARCH) {
        command.arg("--platform").arg(platform);
    }
    command
        .arg("-r")
        .arg(&requirements.path)
        .arg("-d")
        .arg(&wheels);
    let output = command.output().map_err(|err| {
        UserError::environment(format!("cannot run python3 -m pip: {err}")).with_fix(
            "install Python 3 with pip on the build host (e.g. `apt-get install python3-pip`)",
        )
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("No module named pip") {
            return Err(UserError::environment(format!(
                "the profile's Python dependencies ({}) are downloaded with pip on this host, but python3 has no pip: {}",
                requirements.path.display(),
                stderr.trim()
            ))
            .with_fix("install pip for the host's python3 (e.g. `apt-get install python3-pip`, or `python3 -m ensurepip --user`)")
            .into());
        }
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(pip_failed(format!(
            "pip could not download the wheels of {}:\n    {}",
            requirements.path.display(),
            tail.join("\n    ")
        )));
    }
    // pip checked the hashes; check once more here that every file sent to
    // the build is one the requirements name (nothing else is installed).
    let allowed: BTreeSet<&str> = requirements
        .pins
        .iter()
        .flat_map(|pin| pin.hashes.iter().map(String::as_str))
        .collect();
    for entry in std::fs::read_dir(&wheels)? {
        let path = entry?.path();
        let sha = sha256_hex(&std::fs::read(&path)?);
        if !allowed.contains(sha.as_str()) {
            return Err(pip_failed(format!(
                "{} (sha256 {sha}) downloaded for {} matches no --hash in it",
                path.display(),
                requirements.path.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "python_tests.rs"]
mod tests;
