//! `envgen image export`: a built profile as a docker-archive tar, a
//! charliecloud directory, or an Apptainer definition over the archive.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::daemon;
use super::profile::Containers;
use super::render;
use crate::error::{Result, UserError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    DockerArchive,
    Charliecloud,
    ApptainerDef,
}

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    pub image: String,
    pub image_id: String,
    /// The files or directory written.
    pub paths: Vec<PathBuf>,
    /// What to run next on the cluster.
    pub next: String,
}

fn require_ch_convert() -> Result<PathBuf> {
    which::which("ch-convert").map_err(|_| {
        UserError::environment("charliecloud's ch-convert is not installed (not on PATH)")
            .with_fix("install charliecloud (Debian/Ubuntu: `apt-get install charliecloud`), or export --format docker-archive and convert on the cluster")
            .into()
    })
}

pub async fn export(
    containers: &Containers,
    profile: &str,
    image: &str,
    out: &Path,
    format: Format,
) -> Result<Exported> {
    // Validate the name before touching anything.
    containers.profile(profile)?;
    let ch_convert = match format {
        Format::Charliecloud => Some(require_ch_convert()?),
        _ => None,
    };
    let docker = daemon::connect().await?;
    let inspect = docker.inspect_image(image).await.map_err(|err| {
        UserError::usage(format!(
            "image {image} (profile {profile}) is not in the local daemon: {err}"
        ))
        .with_fix(format!(
            "build it first: `envgen image build {profile}` (or pass --tag)"
        ))
    })?;
    let image_id = inspect.id.unwrap_or_default();
    match format {
        Format::DockerArchive => {
            daemon::save_image(&docker, image, out).await?;
            Ok(Exported {
                image: image.into(),
                image_id,
                paths: vec![out.to_path_buf()],
                next: format!(
                    "apptainer build envgen-{profile}.sif docker-archive:{}   (or: ch-convert -i tar … after flattening; docker load -i {})",
                    out.display(),
                    out.display()
                ),
            })
        }
        Format::ApptainerDef => {
            let archive = out.with_extension("tar");
            daemon::save_image(&docker, image, &archive).await?;
            let archive_name = archive
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let def_name = out
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let def = render::apptainer_archive_def(
                containers,
                profile,
                &archive_name,
                &def_name,
                &image_id,
            )?;
            std::fs::write(out, def).map_err(|err| {
                UserError::usage(format!("cannot write {}: {err}", out.display()))
            })?;
            Ok(Exported {
                image: image.into(),
                image_id,
                paths: vec![out.to_path_buf(), archive],
                next: format!(
                    "cd {} && apptainer build envgen-{profile}.sif {def_name}",
                    out.parent()
                        .map(|p| p.display().to_string())
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| ".".into())
                ),
            })
        }
        Format::Charliecloud => {
            if out.exists() {
                return Err(UserError::usage(format!("{} already exists", out.display()))
                    .with_fix("choose a new directory for the charliecloud image (ch-convert refuses to overwrite)")
                    .into());
            }
            let scratch = tempfile::tempdir()?;
            let flat = scratch.path().join("rootfs.tar");
            daemon::flatten_image(&docker, image, &flat).await?;
            let output = std::process::Command::new(ch_convert.unwrap_or_default())
                // Both formats explicit: a destination path without a
                // known suffix would otherwise be taken as a ch-image name.
                .args(["-i", "tar", "-o", "dir"])
                .arg(&flat)
                .arg(out)
                .output()?;
            if !output.status.success() {
                return Err(UserError::failed(format!(
                    "ch-convert failed: {}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ))
                .into());
            }
            Ok(Exported {
                image: image.into(),
                image_id,
                paths: vec![out.to_path_buf()],
                next: format!("ch-run {} -- /usr/local/bin/envgen doctor", out.display()),
            })
        }
    }
}
