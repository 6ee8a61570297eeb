//! Container runtimes: the Docker daemon (through bollard) and the CLIs
//! of podman, Apptainer/Singularity, Charliecloud, enroot and the NVIDIA
//! container toolkit. A missing tool or an unreachable daemon is normal: it
//! becomes a note, never an error.

use std::time::Duration;

use bollard::Docker;

use super::command::{first_line, first_version_token, run_tool};
use crate::host::ContainerRuntime;

const DOCKER_TIMEOUT: Duration = Duration::from_secs(2);
const CLI_TIMEOUT: Duration = Duration::from_secs(3);

/// (runtime name, executable, arguments that print its version).
const CLIS: &[(&str, &str, &[&str])] = &[
    ("podman", "podman", &["--version"]),
    ("apptainer", "apptainer", &["--version"]),
    ("singularity", "singularity", &["--version"]),
    ("charliecloud", "ch-run", &["--version"]),
    ("enroot", "enroot", &["version"]),
    ("nvidia-ctk", "nvidia-ctk", &["--version"]),
    (
        "nvidia-container-cli",
        "nvidia-container-cli",
        &["--version"],
    ),
];

pub fn probe() -> Vec<ContainerRuntime> {
    let mut found: Vec<ContainerRuntime> = docker().into_iter().collect();
    found.extend(CLIS.iter().filter_map(|(name, tool, args)| {
        let out = run_tool(tool, args, CLI_TIMEOUT)?;
        Some(ContainerRuntime {
            name: name.to_string(),
            version: first_version_token(&out.all_output()),
            notes: if out.status.success() {
                Vec::new()
            } else {
                vec![format!(
                    "`{tool} {}` exited with {}: {}",
                    args.join(" "),
                    out.status,
                    first_line(&out.all_output())
                )]
            },
        })
    }));
    found
}

/// Facts from `docker info` worth showing: the `nvidia` runtime and CDI spec dirs.
fn docker_notes(info: &bollard::models::SystemInfo) -> Vec<String> {
    let mut notes = Vec::new();
    let mut runtimes: Vec<&String> = info.runtimes.iter().flat_map(|r| r.keys()).collect();
    runtimes.sort();
    if !runtimes.is_empty() {
        let names: Vec<&str> = runtimes.iter().map(|s| s.as_str()).collect();
        notes.push(format!("runtimes: {}", names.join(", ")));
    }
    notes.push(if runtimes.iter().any(|r| r.as_str() == "nvidia") {
        "nvidia runtime registered".to_string()
    } else {
        "no nvidia runtime registered (use CDI or install nvidia-container-toolkit)".to_string()
    });
    if let Some(dirs) = info.cdi_spec_dirs.as_ref().filter(|dirs| !dirs.is_empty()) {
        notes.push(format!("CDI spec dirs: {}", dirs.join(", ")));
    }
    notes
}

/// The Docker daemon via `DOCKER_HOST` or the default socket. `None` when no
/// daemon is configured and no docker CLI is installed; an entry with a note
/// when one should be there but does not answer.
fn docker() -> Option<ContainerRuntime> {
    let expected = std::env::var_os("DOCKER_HOST").is_some()
        || which::which("docker").is_ok()
        || std::path::Path::new("/var/run/docker.sock").exists();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let answer = runtime.block_on(async {
        let docker = Docker::connect_with_defaults()
            .map_err(|err| err.to_string())?
            .with_timeout(DOCKER_TIMEOUT);
        tokio::time::timeout(DOCKER_TIMEOUT, async {
            // Negotiate down to the daemon's API (Debian's dockerd speaks 1.41).
            let docker = docker.negotiate_version().await?;
            docker.info().await
        })
        .await
        .map_err(|_| format!("no answer within {DOCKER_TIMEOUT:?}"))?
        .map_err(|err| err.to_string())
    });
    match answer {
        Ok(info) => Some(ContainerRuntime {
            name: "docker".to_string(),
            version: info.server_version.clone(),
            notes: docker_notes(&info),
        }),
        Err(err) if expected => Some(ContainerRuntime {
            name: "docker".to_string(),
            version: None,
            notes: vec![format!("daemon unreachable: {err}")],
        }),
        Err(err) => {
            tracing::debug!("docker: {err}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_notes_name_the_nvidia_runtime_and_cdi() {
        let info = bollard::models::SystemInfo {
            runtimes: Some(
                [
                    ("runc".to_string(), Default::default()),
                    ("nvidia".to_string(), Default::default()),
                ]
                .into_iter()
                .collect(),
            ),
            cdi_spec_dirs: Some(vec!["/etc/cdi".to_string(), "/var/run/cdi".to_string()]),
            ..Default::default()
        };
        let notes = docker_notes(&info);
        assert_eq!(notes[0], "runtimes: nvidia, runc");
        assert_eq!(notes[1], "nvidia runtime registered");
        assert_eq!(notes[2], "CDI spec dirs: /etc/cdi, /var/run/cdi");
    }
}
