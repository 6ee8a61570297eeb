//! `--where auto`: Slurm if `sbatch` is found and the cluster answers, else
//! Docker if a daemon answers, else native. The reason is part of the
//! answer: it is printed and recorded in the manifest (`where_reason`).

use std::time::Duration;

use crate::probe::command::run_tool;

pub use crate::runs::place::Place;

/// A place and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub place: Place,
    pub reason: String,
}

/// A cluster or a daemon that does not answer within this is treated as absent.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Probe Slurm, then Docker, and decide.
pub fn decide() -> Decision {
    let slurm = slurm_answers();
    let docker = match &slurm {
        Ok(_) => None,
        Err(_) => Some(docker_answers()),
    };
    choose(slurm, docker)
}

/// The decision from the probes' answers (Ok: what answered; Err: why not).
fn choose(slurm: Result<String, String>, docker: Option<Result<String, String>>) -> Decision {
    match (slurm, docker) {
        (Ok(cluster), _) => Decision {
            place: Place::Slurm,
            reason: format!("sbatch found and the cluster answers ({cluster})"),
        },
        (Err(no_slurm), Some(Ok(daemon))) => Decision {
            place: Place::Docker,
            reason: format!("no Slurm ({no_slurm}); a Docker daemon answers ({daemon})"),
        },
        (Err(no_slurm), Some(Err(no_docker))) => Decision {
            place: Place::Native,
            reason: format!("no Slurm ({no_slurm}) and no Docker daemon ({no_docker})"),
        },
        (Err(no_slurm), None) => Decision {
            place: Place::Native,
            reason: format!("no Slurm ({no_slurm})"),
        },
    }
}

/// Ok("partition debug: 1 node idle") when sbatch is on PATH and sinfo gets
/// an answer from the controller.
fn slurm_answers() -> Result<String, String> {
    which::which("sbatch").map_err(|_| "sbatch not on PATH".to_string())?;
    let out = run_tool("sinfo", &["-h", "-o", "%P %D %T"], PROBE_TIMEOUT)
        .ok_or_else(|| format!("sinfo did not answer within {PROBE_TIMEOUT:?}"))?;
    let first = out.stdout.lines().next().unwrap_or("").trim().to_string();
    if !out.status.success() || first.is_empty() {
        let why = out.stderr.lines().last().unwrap_or("no partitions").trim();
        return Err(format!(
            "sbatch found but the controller does not answer: {why}"
        ));
    }
    Ok(format!("sinfo: {first}"))
}

/// Ok("Docker 26.1.5 at unix:///…") when the daemon answers a version request.
fn docker_answers() -> Result<String, String> {
    let runtime = crate::image::daemon::runtime().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let docker = tokio::time::timeout(PROBE_TIMEOUT, crate::image::daemon::connect())
            .await
            .map_err(|_| "the daemon did not answer in time".to_string())?
            .map_err(|e| first_line(&e.to_string()))?;
        let version = tokio::time::timeout(PROBE_TIMEOUT, docker.version())
            .await
            .map_err(|_| "the daemon did not answer in time".to_string())?
            .map_err(|e| first_line(&e.to_string()))?;
        let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "the default socket".into());
        Ok(format!(
            "Docker {} at {host}",
            version.version.unwrap_or_default()
        ))
    })
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_first_then_docker_then_native_with_reasons() {
        let slurm = choose(Ok("sinfo: debug 1 idle".into()), None);
        assert_eq!(slurm.place, Place::Slurm);
        assert!(slurm.reason.contains("debug 1 idle"));
        let docker = choose(
            Err("sbatch not on PATH".into()),
            Some(Ok("Docker 26.1".into())),
        );
        assert_eq!(docker.place, Place::Docker);
        assert!(docker.reason.contains("sbatch not on PATH") && docker.reason.contains("26.1"));
        let native = choose(
            Err("sbatch not on PATH".into()),
            Some(Err("connection refused".into())),
        );
        assert_eq!(native.place, Place::Native);
        assert!(native.reason.contains("connection refused"));
    }
}
