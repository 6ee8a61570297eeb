//! Pinned container images: profiles (`containers/profiles/*.toml`) rendered
//! through templates, locked by digest and hash (`containers/envgen.lock`),
//! built through the Docker Engine API, exported for HPC.
//!
//! Surface used elsewhere: [`image_facts`] (doctor, run --where docker),
//! [`ensure_built`] and [`build::default_tag`] (run --where docker).

pub mod build;
mod build_log;
pub mod context;
pub mod daemon;
pub mod elf;
pub mod export;
pub mod hash;
pub mod lock;
pub mod profile;
pub mod python;
pub mod relock;
pub mod render;

pub use build::ensure_built;
pub use profile::{Containers, ImageProfile};

use crate::compat::ImageFacts;

/// Facts about an envgen profile, for doctor's verdicts (`None` for an unknown name).
pub fn profile_facts(name: &str) -> Option<ImageFacts> {
    let containers = Containers::locate(None).ok()?;
    let profile = containers.profile(name).ok()?;
    let cuda = profile.cuda.as_ref();
    Some(ImageFacts {
        reference: build::default_tag(name),
        cuda: cuda.map(|c| c.version.clone()),
        pytorch: cuda.and_then(|c| c.pytorch.clone()),
        ubuntu: profile
            .base
            .distro
            .strip_prefix("ubuntu")
            .map(str::to_string),
        require_cuda: cuda.map(|c| c.require.clone()),
        compiles_at_runtime: cuda.is_some_and(|c| c.compiles_at_runtime),
        origin: "profile".into(),
        ..Default::default()
    })
}

/// What doctor and `run --where docker` know about `reference`, in order: a
/// catalog image (`env/images.toml`), an envgen profile by bare name
/// (`cpu`), an image the local Docker daemon has (a built
/// `envgen/cuda12.8:0.1.0` is read from the daemon), else the profile a
/// default tag names. `None`: nothing is known (`unknown-image`).
pub fn image_facts(kb: &crate::compat::KnowledgeBase, reference: &str) -> Option<ImageFacts> {
    if let Some(facts) = kb.image(reference).or_else(|| profile_facts(reference)) {
        return Some(facts);
    }
    let profile = reference
        .strip_prefix("envgen/")
        .map(|rest| rest.split(':').next().unwrap_or(rest));
    local_image_facts(reference).or_else(|| profile.and_then(profile_facts))
}

/// Facts about an image the local Docker daemon has: its CUDA env
/// (`NVIDIA_REQUIRE_CUDA`, `CUDA_VERSION`, `NV_CUDNN_VERSION`,
/// `PYTORCH_VERSION`) and envgen labels. `None` when the daemon is
/// unreachable or does not have the image.
pub fn local_image_facts(reference: &str) -> Option<ImageFacts> {
    let runtime = daemon::runtime().ok()?;
    runtime.block_on(local_image_facts_async(reference))
}

pub async fn local_image_facts_async(reference: &str) -> Option<ImageFacts> {
    let docker = daemon::connect().await.ok()?;
    let image = docker.inspect_image(reference).await.ok()?;
    let config = image.config.unwrap_or_default();
    let env = daemon::env_map(config.env);
    let labels = config.labels.unwrap_or_default();
    // An envgen image: start from its profile's facts, the image's env wins.
    let profile = labels
        .get("io.envgen.profile")
        .and_then(|name| profile_facts(name));
    let origin = if profile.is_some() {
        "envgen-image"
    } else {
        "docker"
    };
    let mut facts = profile.unwrap_or_default();
    facts.reference = reference.to_string();
    facts.origin = origin.into();
    let pick = |key: &str| env.get(key).filter(|v| !v.is_empty()).cloned();
    facts.require_cuda = pick("NVIDIA_REQUIRE_CUDA").or(facts.require_cuda);
    facts.cuda = pick("CUDA_VERSION").or(facts.cuda);
    facts.cudnn = pick("NV_CUDNN_VERSION").or(facts.cudnn);
    facts.pytorch = pick("PYTORCH_VERSION").or(facts.pytorch);
    Some(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_facts_carry_the_cuda_rule() {
        let facts = profile_facts("cuda12.8").unwrap();
        assert_eq!(facts.cuda.as_deref(), Some("12.8.1"));
        assert_eq!(facts.ubuntu.as_deref(), Some("24.04"));
        assert!(facts.compiles_at_runtime);
        let cpu = profile_facts("cpu").unwrap();
        assert!(cpu.require_cuda.is_none() && cpu.cuda.is_none());
        assert!(profile_facts("../nope").is_none());
    }
}
