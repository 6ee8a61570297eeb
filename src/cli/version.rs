//! `envgen -V` and `envgen --version`: the version, the git revision and
//! date it was built from (compiled in by build.rs), the target, the
//! backends compiled in and, for `--version` only, whether this machine's
//! CUDA driver and NVRTC are usable (a bug report's first lines).

/// The revision as `--version` shows it: 12 hex digits, `-dirty` kept.
fn short_revision(full: &str) -> String {
    let (hash, dirty) = match full.strip_suffix("-dirty") {
        Some(hash) => (hash, "-dirty"),
        None => (full, ""),
    };
    format!("{}{dirty}", &hash[..hash.len().min(12)])
}

fn revision() -> String {
    option_env!("ENVGEN_GIT_REVISION")
        .map(short_revision)
        .unwrap_or_else(|| "unknown".to_string())
}

fn build_date() -> &'static str {
    option_env!("ENVGEN_BUILD_DATE").unwrap_or("unknown")
}

/// `-V`: one line, e.g. `0.1.0 (1f78c3d0a1b2 2026-11-27)`.
pub fn short() -> String {
    format!(
        "{} ({} {})",
        env!("CARGO_PKG_VERSION"),
        revision(),
        build_date()
    )
}

/// The backends this binary can train on: the CPU one always, wgpu
/// always (CubeCL's portable path), CUDA when built with the feature.
pub fn backends() -> Vec<&'static str> {
    let mut backends = vec!["cpu (flex)", "wgpu"];
    if envgen_experiments::backend::cuda_compiled() {
        backends.push("cuda");
    }
    backends
}

/// `--version`: the short line, then one fact per line. `cuda_here` is
/// the run-time CUDA line (see [`cuda_here`]), passed in so tests need
/// no driver.
pub fn long(cuda_here: &str) -> String {
    let revision = match option_env!("ENVGEN_GIT_REVISION") {
        Some(_) => revision(),
        None => "unknown (built outside a git checkout)".to_string(),
    };
    format!(
        "{}\nrevision:   {revision}\nbuild date: {} (the commit's, or SOURCE_DATE_EPOCH)\ntarget:     {}\nbackends:   {}\nCUDA here:  {cuda_here}",
        short(),
        build_date(),
        env!("ENVGEN_TARGET"),
        backends().join(", "),
    )
}

/// Whether this machine could run the CUDA backend now: the driver and
/// its devices, NVRTC, or the first missing piece (the same probe
/// `--backend cuda` starts with; loads libraries, runs no kernel). Never
/// fails: a panic inside a vendor library becomes a line of text.
pub fn cuda_here() -> String {
    if !envgen_experiments::backend::cuda_compiled() {
        return "not compiled in".to_string();
    }
    let probed = std::panic::catch_unwind(|| {
        let stack = envgen_experiments::cuda_stack::CudaStack::probe();
        match stack.first_problem() {
            None => format!("usable: {}", stack.describe()),
            Some(problem) => format!("not usable: {}", problem.message),
        }
    });
    probed.unwrap_or_else(|_| "not usable: the CUDA probe failed".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_is_shortened_and_keeps_its_dirty_flag() {
        let hash = "1f78c3d0a1b2c3d4e5f60718293a4b5c6d7e8f90";
        assert_eq!(short_revision(hash), "1f78c3d0a1b2");
        assert_eq!(
            short_revision(&format!("{hash}-dirty")),
            "1f78c3d0a1b2-dirty"
        );
        assert_eq!(short_revision("abc"), "abc");
    }

    #[test]
    fn the_long_version_names_every_fact() {
        let text = long("not usable: test");
        for label in [
            "revision:",
            "build date:",
            "target:",
            "backends:",
            "CUDA here:  not usable: test",
        ] {
            assert!(text.contains(label), "{label} missing from:\n{text}");
        }
        assert!(text.starts_with(env!("CARGO_PKG_VERSION")), "{text}");
        assert!(text.contains(env!("ENVGEN_TARGET")), "{text}");
        assert!(text.contains("cpu (flex)"), "{text}");
    }
}
