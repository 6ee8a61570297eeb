//! Records the git revision envgen is built from (with a `-dirty` suffix when
//! the tree has uncommitted changes) for run manifests and image labels.
//! Builds outside a git checkout (e.g. `nix build`, a crate tarball) record none.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    println!("cargo:rerun-if-env-changed=ENVGEN_GIT_REVISION");
    if let Ok(given) = std::env::var("ENVGEN_GIT_REVISION") {
        println!("cargo:rustc-env=ENVGEN_GIT_REVISION={given}");
        return;
    }
    if let Some(revision) = git(&["rev-parse", "HEAD"]) {
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let suffix = if dirty { "-dirty" } else { "" };
        println!("cargo:rustc-env=ENVGEN_GIT_REVISION={revision}{suffix}");
    }
}
