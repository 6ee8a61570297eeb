//! A Docker run after it started: whether its container still runs, and
//! stopping it through the daemon (`runs list`, `runs cancel`).

use std::path::Path;

use envgen_experiments::engine::Summary;

use super::container_name;
use crate::error::Result;
use crate::image::daemon::container;
use crate::launch::life::RunLife;
use crate::launch::liveness::{Checker, Liveness};
use crate::launch::stop;
use crate::runs::lock::LockState;
use crate::runs::manifest::Manifest;

/// A Docker run's life: the daemon is asked about its container.
pub struct DockerLife;

/// The grace a container gets between SIGTERM and SIGKILL (`runs cancel`).
const CONTAINER_GRACE_S: i32 = 60;

impl RunLife for DockerLife {
    fn liveness(
        &self,
        checker: &mut Checker,
        dir: &Path,
        manifest: &Manifest,
        _: LockState,
    ) -> Liveness {
        let name = container_of(dir, manifest);
        let (runtime, daemon) = match checker.daemon() {
            Ok(connected) => connected,
            Err(why) => {
                return Liveness::Unknown(format!(
                    "cannot ask whether container {name} still runs: {why}"
                ))
            }
        };
        match runtime.block_on(container::present(daemon, &name)) {
            Ok(None) if manifest.environment.docker.is_none() => {
                Liveness::Lost(format!("container {name} was never started"))
            }
            Ok(None) => Liveness::Lost(format!("container {name} no longer exists")),
            // Starting: its envgen has not taken the lock yet.
            Ok(Some(c)) if c.running => Liveness::Running(format!("container {name} runs")),
            Ok(Some(c)) => Liveness::Lost(format!(
                "container {name} is {} (exit code {}) without a summary",
                c.status,
                c.exit_code.map_or("?".into(), |c| c.to_string())
            )),
            Err(e) => Liveness::Unknown(format!(
                "cannot ask whether container {name} still runs: {e:#}"
            )),
        }
    }

    fn stop(&self, checker: &mut Checker, dir: &Path, manifest: &Manifest) -> Result<Summary> {
        if stop::lock_held_here(dir) {
            // The lock is held on this host, not by the container's envgen
            // (its own hostname): signal that process, as for a native run.
            return stop::stop_process(dir);
        }
        stop_container(checker, dir, &container_of(dir, manifest))
    }

    fn clear_lost(&self, checker: &mut Checker, dir: &Path, manifest: &Manifest) {
        if let Ok((runtime, daemon)) = checker.daemon() {
            let name = container_of(dir, manifest);
            if let Ok(Some(_)) = runtime.block_on(container::present(daemon, &name)) {
                runtime.block_on(container::remove(daemon, &name));
                eprintln!("envgen: removed the left-over container {name}");
            }
        }
    }
}

/// The container a Docker run trains in (as recorded, else as it would be named).
pub fn container_of(dir: &Path, manifest: &Manifest) -> String {
    manifest
        .environment
        .docker
        .as_ref()
        .map(|d| d.container.clone())
        .unwrap_or_else(|| container_name(dir))
}

/// Stop the run's container through the daemon (SIGTERM: the run
/// checkpoints and writes its summary), then remove it.
fn stop_container(checker: &mut Checker, dir: &Path, name: &str) -> Result<Summary> {
    let (runtime, daemon) = checker
        .daemon()
        .map_err(crate::image::daemon::unreachable)?;
    eprintln!("envgen: stopping container {name} (SIGTERM, {CONTAINER_GRACE_S} s grace)");
    let code = runtime.block_on(container::stop_and_remove(daemon, name, CONTAINER_GRACE_S))?;
    stop::ended_summary(
        dir,
        &format!(
            "container {name} was stopped by `envgen runs cancel` (exit code {}) before the run wrote its summary",
            code.map_or("?".into(), |c| c.to_string())
        ),
    )
}
