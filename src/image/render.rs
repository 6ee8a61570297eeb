//! Profiles → Dockerfile, Apptainer definition and charliecloud recipe,
//! through the handlebars templates in `containers/templates/`.

use handlebars::Handlebars;
use serde_json::json;

use super::profile::{Containers, ImageProfile};
use crate::error::{Result, UserError};

/// The files a profile renders to, in a fixed order: (file name, text).
pub type Rendered = Vec<(String, String)>;

pub const DOCKERFILE: &str = "Dockerfile";
pub const APPTAINER_DEF: &str = "apptainer.def";
pub const CHARLIECLOUD: &str = "charliecloud.Dockerfile";

fn engine() -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    // Dockerfiles are not HTML; every value was validated when the profile loaded.
    hb.register_escape_fn(handlebars::no_escape);
    hb
}

fn render_one(containers: &Containers, template: &str, data: &serde_json::Value) -> Result<String> {
    engine()
        .render_template(containers.template(template), data)
        .map_err(|err| {
            UserError::usage(format!("containers/templates/{template}: {err}"))
                .with_fix("fix the template (handlebars syntax, known fields only)")
                .into()
        })
}

/// The `FROM` value: pinned by digest when one is known.
pub fn from_reference(base: &str, digest: Option<&str>) -> String {
    match digest {
        Some(digest) if digest.starts_with("sha256:") => {
            // A digest replaces the tag for pulling, but keeping the tag documents it.
            format!("{base}@{digest}")
        }
        _ => base.to_string(),
    }
}

fn profile_data(profile: &ImageProfile, base: &str, from: &str) -> serde_json::Value {
    let pins = |map: &std::collections::BTreeMap<String, String>| {
        map.iter()
            .map(|(name, version)| json!({"name": name, "version": version}))
            .collect::<Vec<_>>()
    };
    json!({
        "profile": profile.name,
        "base": base,
        "from": from,
        "bootstrap": "docker",
        "apt": pins(&profile.apt),
        "pip": pins(&profile.pip),
        "env": profile.env.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>(),
        "require_cuda": profile.cuda.as_ref().map(|c| c.require.clone()),
        "python": profile.python.as_ref().map(|p| json!({"version": p.version, "requirements": p.requirements})),
        "user": {"name": profile.user.name, "uid": profile.user.uid},
    })
}

/// Render the three recipes for `profile` built on `base` (pinned to `digest` when known).
pub fn render(
    containers: &Containers,
    profile: &ImageProfile,
    base: &str,
    digest: Option<&str>,
) -> Result<Rendered> {
    render_from(containers, profile, base, &from_reference(base, digest))
}

/// Render on `base` with an explicit `FROM` value (a local stand-in for the
/// pinned base: see `build::stand_in`).
pub fn render_from(
    containers: &Containers,
    profile: &ImageProfile,
    base: &str,
    from: &str,
) -> Result<Rendered> {
    let data = profile_data(profile, base, from);
    Ok(vec![
        (
            DOCKERFILE.into(),
            render_one(containers, "Dockerfile.hbs", &data)?,
        ),
        (
            APPTAINER_DEF.into(),
            render_one(containers, "apptainer.def.hbs", &data)?,
        ),
        (
            CHARLIECLOUD.into(),
            render_one(containers, "charliecloud.Dockerfile.hbs", &data)?,
        ),
    ])
}

/// The definition that turns an exported docker-archive into a SIF.
pub fn apptainer_archive_def(
    containers: &Containers,
    profile: &str,
    archive: &str,
    def_file: &str,
    image_id: &str,
) -> Result<String> {
    let data =
        json!({"profile": profile, "archive": archive, "def_file": def_file, "image_id": image_id});
    render_one(containers, "apptainer-archive.def.hbs", &data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apptainer_definition_wraps_the_archive() {
        let containers = Containers::embedded();
        let def = apptainer_archive_def(
            &containers,
            "cpu",
            "envgen-cpu.tar",
            "envgen-cpu.def",
            "sha256:abc",
        )
        .unwrap();
        assert!(
            def.contains("Bootstrap: docker-archive\nFrom: envgen-cpu.tar\n"),
            "{def}"
        );
        assert!(
            def.contains("apptainer build envgen-cpu.sif envgen-cpu.def"),
            "{def}"
        );
        assert!(def.contains("io.envgen.image-id sha256:abc"), "{def}");
    }

    #[test]
    fn cuda_profile_pins_packages_and_requirement() {
        let containers = Containers::embedded();
        let profile = containers.profile("cuda12.8").unwrap();
        let files = render(
            &containers,
            &profile,
            &profile.base.reference,
            Some("sha256:abc"),
        )
        .unwrap();
        let dockerfile = &files[0].1;
        assert!(dockerfile.contains("FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04@sha256:abc"));
        assert!(dockerfile.contains("cuda-nvrtc-12-8=12.8.93-1"));
        assert!(dockerfile.contains("ENV NVIDIA_REQUIRE_CUDA=\"cuda>=12.8 "));
        assert!(dockerfile.contains("USER 1000:1000"));
        assert!(files[1].1.contains(
            "Bootstrap: docker\nFrom: nvidia/cuda:12.8.1-runtime-ubuntu24.04@sha256:abc"
        ));
    }

    #[test]
    fn cpu_profile_has_no_cuda_requirement_and_unpinned_from_without_digest() {
        let containers = Containers::embedded();
        let profile = containers.profile("cpu").unwrap();
        let files = render(&containers, &profile, "debian:bookworm-slim", None).unwrap();
        assert!(files[0].1.contains("FROM debian:bookworm-slim\n"));
        assert!(!files[0].1.contains("NVIDIA_REQUIRE_CUDA"));
        assert!(!files[0].1.contains("apt-get"));
    }
}
