//! Every container's life, through the Engine API (bollard), never the
//! docker CLI: created from one [`ContainerSpec`] by [`create_body`] (never
//! root, never privileged, no network, a read-only root filesystem with a
//! tmpfs at [`SCRATCH_DIR`], GPUs only through device requests — NVIDIA
//! runtime or CDI), then either followed to its end with its logs on
//! our stderr ([`run`], a training run) or run to completion with its output
//! captured ([`run_once`], a check inside an image); removed either way.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, MountTmpfsOptions};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StopContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::options::ContainerOptions;
use crate::error::{Result, UserError};

/// Processes (threads included) a container may have: far above what
/// training uses (a rayon pool per core, a few helpers), far below a fork bomb.
pub const PIDS_LIMIT: i64 = 16384;

/// The one writable place in a container besides its mounts: a tmpfs (the
/// root filesystem is read-only), which is also `HOME` unless the spec sets
/// one, so caches that default to `~/.cache` (CubeCL's, CUDA's, Mesa's) land
/// here instead of failing. Docker mounts a tmpfs `noexec,nosuid,nodev`.
pub const SCRATCH_DIR: &str = "/tmp";
/// The scratch tmpfs's default size (`--home-size` changes it).
pub const SCRATCH_BYTES: i64 = super::options::DEFAULT_HOME_BYTES;

/// The envgen binary inside an image.
pub const IMAGE_ENVGEN: &str = "/usr/local/bin/envgen";

/// Which GPUs the container gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuRequest {
    #[default]
    None,
    All,
    Count(i64),
    /// Device indices or UUIDs.
    Devices(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// The program to run: the image's envgen when `None`
    /// ([`IMAGE_ENVGEN`]); `Some(vec![])` keeps the image's own entrypoint.
    pub entrypoint: Option<Vec<String>>,
    /// Arguments to the entrypoint.
    pub args: Vec<String>,
    pub mounts: Vec<Mount>,
    pub env: Vec<(String, String)>,
    /// "uid:gid", never root; `None`: the image's own (non-root) `USER`.
    pub user: Option<String>,
    pub gpus: GpuRequest,
    /// Use CDI device names (`nvidia.com/gpu=…`) instead of the nvidia runtime hook.
    pub cdi: bool,
    /// Network, IPC, `/dev/shm`, `HOME` size: hardened unless relaxed.
    pub options: ContainerOptions,
}

/// How a container run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerOutcome {
    pub exit_code: i64,
    /// Stopped because `interrupt` fired (Ctrl-C): the container got SIGTERM first.
    pub interrupted: bool,
}

/// Device requests for `gpus`, the way `docker run --gpus` / `--device` ask.
pub fn device_requests(gpus: &GpuRequest, cdi: bool) -> Option<Vec<DeviceRequest>> {
    let gpu_caps = Some(vec![vec!["gpu".to_string()]]);
    let request = match (gpus, cdi) {
        (GpuRequest::None, _) => return None,
        (GpuRequest::All, false) => DeviceRequest {
            count: Some(-1),
            capabilities: gpu_caps,
            ..Default::default()
        },
        (GpuRequest::Count(n), false) => DeviceRequest {
            count: Some(*n),
            capabilities: gpu_caps,
            ..Default::default()
        },
        (GpuRequest::Devices(ids), false) => DeviceRequest {
            device_ids: Some(ids.clone()),
            capabilities: gpu_caps,
            ..Default::default()
        },
        (GpuRequest::All, true) => DeviceRequest {
            driver: Some("cdi".into()),
            device_ids: Some(vec!["nvidia.com/gpu=all".into()]),
            ..Default::default()
        },
        (GpuRequest::Count(n), true) => DeviceRequest {
            driver: Some("cdi".into()),
            device_ids: Some((0..*n).map(|i| format!("nvidia.com/gpu={i}")).collect()),
            ..Default::default()
        },
        (GpuRequest::Devices(ids), true) => DeviceRequest {
            driver: Some("cdi".into()),
            device_ids: Some(
                ids.iter()
                    .map(|id| format!("nvidia.com/gpu={id}"))
                    .collect(),
            ),
            ..Default::default()
        },
    };
    Some(vec![request])
}

fn create_body(spec: &ContainerSpec) -> Result<ContainerCreateBody> {
    if let Some(user) = &spec.user {
        if user.is_empty() || user == "0" || user.starts_with("0:") || user == "root" {
            return Err(UserError::usage("envgen never runs containers as root").into());
        }
    }
    // Typed mounts, not `host:container:ro` strings: a `:` in a path (an
    // `--out` like `runs:v2`) cannot change what is mounted where.
    let mut mounts: Vec<bollard::models::Mount> = spec
        .mounts
        .iter()
        .map(|m| bollard::models::Mount {
            source: Some(m.host.to_string_lossy().into_owned()),
            target: Some(m.container.clone()),
            typ: Some(bollard::models::MountType::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect();
    mounts.push(bollard::models::Mount {
        target: Some(SCRATCH_DIR.into()),
        typ: Some(bollard::models::MountType::TMPFS),
        tmpfs_options: Some(MountTmpfsOptions {
            size_bytes: Some(spec.options.home_size_bytes),
            // Sticky and world-writable like any /tmp: the container's user
            // is whoever owns the run directory, not a uid known in advance.
            mode: Some(0o1777),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !spec.env.iter().any(|(k, _)| k == "HOME") {
        env.push(format!("HOME={SCRATCH_DIR}"));
    }
    Ok(ContainerCreateBody {
        image: Some(spec.image.clone()),
        // Where every envgen profile image installs it (containers/templates).
        entrypoint: Some(
            spec.entrypoint
                .clone()
                .unwrap_or_else(|| vec![IMAGE_ENVGEN.to_string()]),
        ),
        cmd: Some(spec.args.clone()),
        env: Some(env),
        user: spec.user.clone(),
        labels: Some([("io.envgen.run".to_string(), spec.name.clone())].into()),
        // Training reads only its mounts: no network unless --network
        // relaxes it (the test daemon has no bridge either).
        network_disabled: Some(spec.options.network == super::options::Network::None),
        host_config: Some(HostConfig {
            network_mode: Some(spec.options.network.mode().into()),
            ipc_mode: Some(spec.options.ipc.name().into()),
            shm_size: spec.options.shm_size_bytes,
            mounts: Some(mounts),
            device_requests: device_requests(&spec.gpus, spec.cdi),
            // Forward signals to envgen and reap children: envgen is PID 1 otherwise.
            init: Some(true),
            privileged: Some(false),
            // Training needs no capability and no privilege escalation (a
            // setuid binary in the image gains nothing); a fork bomb stops
            // at the pids limit.
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            pids_limit: Some(PIDS_LIMIT),
            // Nothing in the image can be changed: the run writes into its
            // run directory (a read-write mount) and scratch into SCRATCH_DIR.
            readonly_rootfs: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Create, start and follow a container until it exits or `interrupt`
/// resolves (then SIGTERM with a grace period, so envgen can checkpoint).
/// The container is always removed; logs go to this process's stderr.
pub async fn run(
    docker: &Docker,
    spec: &ContainerSpec,
    interrupt: impl Future<Output = ()>,
) -> Result<ContainerOutcome> {
    start(docker, spec).await?;
    follow(docker, spec, interrupt).await
}

/// Create and start the container of `spec` (removed again if it does not start).
pub async fn start(docker: &Docker, spec: &ContainerSpec) -> Result<()> {
    let body = create_body(spec)?;
    create(docker, spec, body).await.map_err(|e| {
        UserError::environment(format!(
            "creating container {} from {}: {e}",
            spec.name, spec.image
        ))
        .with_fix("build the image first (`envgen image build PROFILE`) and check the daemon's log")
    })?;
    if let Err(e) = docker.start_container(&spec.name, None).await {
        remove(docker, &spec.name).await;
        return Err(
            UserError::environment(format!("starting container {}: {e}", spec.name)).into(),
        );
    }
    Ok(())
}

/// Follow a started container (logs onto our stderr) until it exits or
/// `interrupt` resolves (then SIGTERM, 60 s grace); then remove it.
pub async fn follow(
    docker: &Docker,
    spec: &ContainerSpec,
    interrupt: impl Future<Output = ()>,
) -> Result<ContainerOutcome> {
    let outcome = follow_logs(docker, spec, interrupt).await;
    remove(docker, &spec.name).await;
    outcome
}

/// The output of a command run in a throwaway container.
pub struct RunOutput {
    pub exit_code: i64,
    pub output: String,
}

/// Run `cmd` in a throwaway container of `image` (as `user` if given, else
/// the image's user; with `entrypoint`, else the image's envgen), wait for
/// it, collect its output, remove it.
pub async fn run_once(
    docker: &Docker,
    image: &str,
    cmd: &[&str],
    user: Option<&str>,
    entrypoint: Option<&[&str]>,
) -> Result<RunOutput> {
    // Unique per process and call: several checks may run at once.
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let spec = ContainerSpec {
        name: format!(
            "envgen-once-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ),
        image: image.to_string(),
        entrypoint: entrypoint.map(|e| e.iter().map(|s| s.to_string()).collect()),
        args: cmd.iter().map(|s| s.to_string()).collect(),
        user: user.map(str::to_string),
        ..Default::default()
    };
    create(docker, &spec, create_body(&spec)?)
        .await
        .map_err(|err| UserError::failed(format!("creating a container from {image}: {err}")))?;
    let result = async {
        docker
            .start_container(&spec.name, None)
            .await
            .map_err(|e| e.to_string())?;
        let exit_code = wait_exit(docker, &spec.name)
            .await
            .map_err(|e| e.to_string())?;
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail("all")
            .build();
        let mut logs = docker.logs(&spec.name, Some(options));
        let mut output = String::new();
        while let Some(chunk) = logs.next().await {
            output.push_str(&chunk.map_err(|e| e.to_string())?.to_string());
        }
        Ok::<_, String>(RunOutput { exit_code, output })
    }
    .await;
    remove(docker, &spec.name).await;
    result.map_err(|err| UserError::failed(format!("running {cmd:?} in {image}: {err}")).into())
}

async fn create(
    docker: &Docker,
    spec: &ContainerSpec,
    body: ContainerCreateBody,
) -> std::result::Result<(), bollard::errors::Error> {
    let options = CreateContainerOptionsBuilder::default()
        .name(&spec.name)
        .build();
    docker.create_container(Some(options), body).await?;
    Ok(())
}

/// A container as the daemon has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Present {
    /// Running, paused or restarting: its process may still write.
    pub running: bool,
    /// The daemon's word for its state: `created`, `exited`, `running`…
    pub status: String,
    pub exit_code: Option<i64>,
}

/// The container named `name`, or `None` when the daemon has none (an
/// unreachable daemon is an error, never "gone").
pub async fn present(docker: &Docker, name: &str) -> Result<Option<Present>> {
    match docker.inspect_container(name, None).await {
        Ok(info) => {
            let state = info.state.unwrap_or_default();
            let running = state.running.unwrap_or(false)
                || state.paused.unwrap_or(false)
                || state.restarting.unwrap_or(false);
            Ok(Some(Present {
                running,
                status: state
                    .status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown".into()),
                exit_code: state.exit_code,
            }))
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(super::unreachable(e)),
    }
}

/// Stop a container (SIGTERM, then SIGKILL after `grace_s`; the daemon
/// answers once it stopped) and remove it. Returns its exit code, unless
/// someone else (the envgen following it) removed it first.
pub async fn stop_and_remove(docker: &Docker, name: &str, grace_s: i32) -> Result<Option<i64>> {
    let stop = StopContainerOptionsBuilder::default().t(grace_s).build();
    // 304 (already stopped) and 404 (already gone) are fine: asked below.
    let _ = docker.stop_container(name, Some(stop)).await;
    let Some(stopped) = present(docker, name).await? else {
        return Ok(None);
    };
    remove(docker, name).await;
    Ok(stopped.exit_code)
}

/// Remove a container (stopped or not; its anonymous volumes too), and
/// wait (up to 30 s) until the daemon no longer knows it: when envgen's
/// follower and `runs cancel` both remove one container, the second request
/// answers "removal in progress" at once, and a caller that then says
/// "removed" must not be early.
pub async fn remove(docker: &Docker, name: &str) {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    if let Err(e) = docker.remove_container(name, Some(options)).await {
        tracing::debug!("removing container {name}: {e}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        match present(docker, name).await {
            Ok(None) => return,
            Ok(Some(_)) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            Err(e) => {
                tracing::warn!("asking whether container {name} is gone: {e:#}");
                return;
            }
        }
    }
    tracing::warn!("container {name} was still there 30 s after its removal");
}

async fn follow_logs(
    docker: &Docker,
    spec: &ContainerSpec,
    interrupt: impl Future<Output = ()>,
) -> Result<ContainerOutcome> {
    let logs = docker.logs(
        &spec.name,
        Some(
            LogsOptionsBuilder::default()
                .follow(true)
                .stdout(true)
                .stderr(true)
                .build(),
        ),
    );
    let log_task = tokio::spawn(async move {
        let mut logs = logs;
        while let Some(Ok(chunk)) = logs.next().await {
            eprint!("{chunk}");
        }
    });

    let wait = wait_exit(docker, &spec.name);
    tokio::pin!(wait);
    tokio::pin!(interrupt);
    let outcome = tokio::select! {
        code = &mut wait => ContainerOutcome { exit_code: code?, interrupted: false },
        () = &mut interrupt => {
            eprintln!("envgen: interrupted: stopping container {} (SIGTERM, 60 s grace)", spec.name);
            let stop = StopContainerOptionsBuilder::default().t(60).build();
            let _ = docker.stop_container(&spec.name, Some(stop)).await;
            ContainerOutcome { exit_code: wait.await?, interrupted: true }
        }
    };
    let _ = log_task.await;
    Ok(outcome)
}

/// The container's exit code (bollard reports non-zero codes as errors).
async fn wait_exit(docker: &Docker, name: &str) -> Result<i64> {
    let options = WaitContainerOptionsBuilder::default()
        .condition("not-running")
        .build();
    let mut stream = docker.wait_container(name, Some(options));
    match stream.next().await {
        Some(Ok(response)) => Ok(response.status_code),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(e)) => {
            Err(UserError::environment(format!("waiting for container {name}: {e}")).into())
        }
        None => Err(UserError::environment(format!(
            "the daemon closed the wait stream of container {name}"
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(user: &str) -> ContainerSpec {
        ContainerSpec {
            name: "envgen-test".into(),
            image: "envgen/cpu:dev".into(),
            args: vec!["run".into(), "gpt2".into()],
            mounts: vec![
                Mount {
                    host: "/runs:v2".into(),
                    container: "/runs".into(),
                    read_only: false,
                },
                Mount {
                    host: "/data".into(),
                    container: "/data".into(),
                    read_only: true,
                },
            ],
            env: vec![("ENVGEN_LOG".into(), "info".into())],
            user: Some(user.into()),
            gpus: GpuRequest::Count(2),
            cdi: false,
            entrypoint: None,
            options: ContainerOptions::default(),
        }
    }

    #[test]
    fn container_is_unprivileged_with_ro_data_and_gpu_device_requests() {
        let body = create_body(&spec("1000:1000")).unwrap();
        let host = body.host_config.unwrap();
        let mut mounts = host.mounts.clone().unwrap();
        // Last: the scratch tmpfs, the only writable place outside the mounts.
        let scratch = mounts.pop().unwrap();
        assert_eq!(scratch.typ, Some(bollard::models::MountType::TMPFS));
        assert_eq!(scratch.target.as_deref(), Some(SCRATCH_DIR));
        let tmpfs = scratch.tmpfs_options.unwrap();
        assert_eq!(tmpfs.size_bytes, Some(SCRATCH_BYTES));
        assert_eq!(tmpfs.mode, Some(0o1777));
        assert_eq!(host.readonly_rootfs, Some(true));
        let env = body.env.clone().unwrap();
        assert!(env.contains(&format!("HOME={SCRATCH_DIR}")), "{env:?}");
        let mounts: Vec<(String, String, bool)> = mounts
            .into_iter()
            .map(|m| (m.source.unwrap(), m.target.unwrap(), m.read_only.unwrap()))
            .collect();
        assert_eq!(
            mounts,
            [
                ("/runs:v2".to_string(), "/runs".to_string(), false),
                ("/data".to_string(), "/data".to_string(), true)
            ]
        );
        assert!(host.binds.is_none());
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(
            host.security_opt.as_deref(),
            Some(&["no-new-privileges".to_string()][..])
        );
        assert_eq!(host.pids_limit, Some(PIDS_LIMIT));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(body.network_disabled, Some(true));
        assert_eq!(host.ipc_mode.as_deref(), Some("private"));
        assert_eq!(host.shm_size, None, "Docker's own 64 MiB");
        let request = &host.device_requests.unwrap()[0];
        assert_eq!(request.count, Some(2));
        assert_eq!(request.capabilities, Some(vec![vec!["gpu".to_string()]]));
        assert_eq!(body.user.as_deref(), Some("1000:1000"));
    }

    /// Issue #39: each knob reaches the daemon; the rest stays hardened.
    #[test]
    fn relaxed_options_reach_the_host_config() {
        use crate::image::daemon::options::{Ipc, Network};
        let mut spec = spec("1000:1000");
        spec.options = ContainerOptions {
            network: Network::Named("lab-net".into()),
            ipc: Ipc::Shareable,
            shm_size_bytes: Some(2 << 30),
            home_size_bytes: 8 << 30,
            writable_workspace: true,
        };
        let body = create_body(&spec).unwrap();
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("lab-net"));
        assert_eq!(body.network_disabled, Some(false));
        assert_eq!(host.ipc_mode.as_deref(), Some("shareable"));
        assert_eq!(host.shm_size, Some(2 << 30));
        let scratch = host.mounts.unwrap().pop().unwrap();
        assert_eq!(scratch.tmpfs_options.unwrap().size_bytes, Some(8 << 30));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
    }

    #[test]
    fn a_home_the_spec_sets_is_kept() {
        let mut spec = spec("1000:1000");
        spec.env.push(("HOME".into(), "/run/envgen/run".into()));
        let env = create_body(&spec).unwrap().env.unwrap();
        let homes: Vec<&String> = env.iter().filter(|e| e.starts_with("HOME=")).collect();
        assert_eq!(homes, ["HOME=/run/envgen/run"]);
    }

    #[test]
    fn root_is_refused() {
        for user in ["0", "0:0", "root", ""] {
            assert!(create_body(&spec(user)).is_err(), "{user}");
        }
    }

    #[test]
    fn cdi_names_devices_and_no_gpus_means_no_request() {
        let cdi =
            device_requests(&GpuRequest::Devices(vec!["0".into(), "3".into()]), true).unwrap();
        assert_eq!(cdi[0].driver.as_deref(), Some("cdi"));
        assert_eq!(
            cdi[0].device_ids.as_deref().unwrap(),
            ["nvidia.com/gpu=0", "nvidia.com/gpu=3"]
        );
        assert!(device_requests(&GpuRequest::None, true).is_none());
        assert_eq!(
            device_requests(&GpuRequest::All, false).unwrap()[0].count,
            Some(-1)
        );
    }
}
