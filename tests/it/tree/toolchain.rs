//! The Rust version envgen says it needs is the one its locked dependencies
//! need (issue #39: the README said 1.85 while burn 0.21.0 declares 1.92,
//! so an older toolchain failed deep in the build instead of up front).
//!
//! The minimum is the highest `rust-version` among the packages
//! Cargo.lock pins, read from their manifests in cargo's registry cache
//! (the build that ran this test downloaded every package this platform
//! compiles; packages only other platforms use are not there and cannot
//! raise it here). The workspace's `rust-version`, the README and the
//! pinned toolchain must agree with it.

use std::path::{Path, PathBuf};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

type Version = (u64, u64, u64);

fn parse(v: &str) -> Version {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap());
    let major = parts.next().unwrap();
    (major, parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

fn toml_of(path: &Path) -> toml::Value {
    let text = std::fs::read_to_string(path).unwrap();
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unpacked crates of cargo's registry cache (`$CARGO_HOME/registry/src/*`).
fn registry_sources() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    std::fs::read_dir(home.join("registry/src"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn the_stated_rust_version_is_the_highest_any_locked_dependency_needs() {
    let lock = toml_of(&Path::new(REPO).join("Cargo.lock"));
    let sources = registry_sources();
    let mut needed: Vec<(Version, String)> = Vec::new();
    let mut found = 0;
    for package in lock["package"].as_array().unwrap() {
        if package.get("source").is_none() {
            continue; // ours, or vendored (vendor/PATCHES.md)
        }
        let id = format!(
            "{}-{}",
            package["name"].as_str().unwrap(),
            package["version"].as_str().unwrap()
        );
        let Some(manifest) = sources
            .iter()
            .map(|s| s.join(&id).join("Cargo.toml"))
            .find(|m| m.is_file())
        else {
            continue;
        };
        found += 1;
        if let Some(v) = toml_of(&manifest)["package"]
            .get("rust-version")
            .and_then(|v| v.as_str())
        {
            needed.push((parse(v), id));
        }
    }
    assert!(
        found > 300,
        "only {found} locked packages found in cargo's registry cache ({sources:?})"
    );
    needed.sort();
    let (highest, by) = needed.last().cloned().unwrap();

    let workspace = toml_of(&Path::new(REPO).join("Cargo.toml"));
    let stated = workspace["workspace"]["package"]["rust-version"]
        .as_str()
        .unwrap();
    assert_eq!(
        parse(stated),
        highest,
        "Cargo.toml says rust-version {stated}; {by} needs {highest:?}"
    );
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("Rust toolchain ≥ {stated}")),
        "the README does not state Rust ≥ {stated}"
    );
    let toolchain = toml_of(&Path::new(REPO).join("rust-toolchain.toml"));
    let pinned = toolchain["toolchain"]["channel"].as_str().unwrap();
    assert!(
        parse(pinned) >= highest,
        "rust-toolchain.toml pins {pinned}, older than {stated}"
    );
}
