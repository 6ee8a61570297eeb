//! `envgen run --ranks N` on this machine: one `envgen run --launched`
//! process per rank, wired to each other through the environment
//! (engine::distributed::World reads it), watched until all have ended.
//!
//! This is what `srun` does for a Slurm job and torchrun for PyTorch; it is
//! written here because neither exists on a workstation without Slurm, and
//! it is small: pick ports, start, forward a stop, and when one rank fails,
//! stop the others instead of leaving them waiting for it.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envgen_experiments::backend;
use envgen_experiments::engine::{rundir, Status, Summary};

use super::launcher::{mark_ended, Launcher, RunOutcome};
use super::plan::{config_of_run, create_run, job_args, NewDir, Setup};
use super::request::RunRequest;
use crate::error::{Result, UserError};
use crate::runs::lock::LAUNCHER_PID_ENV;

/// `--ranks N` on this machine: the run directory is made here, then N
/// ranks train into it and rank 0 writes its files.
#[derive(Default)]
pub struct Ranks {
    /// The GPU of each rank (`--devices`, or 0…N-1 on the CUDA backend).
    devices: Option<Vec<String>>,
    /// The CPU backend: ranks share this machine's cores.
    cpu: bool,
}

impl Launcher for Ranks {
    fn stop_message(&self) -> &'static str {
        "interrupted: stopping every rank (rank 0 checkpoints first)"
    }

    fn prepare(&mut self, req: &RunRequest) -> Result<Vec<PathBuf>> {
        let size = req.world.size;
        let resolved = backend::resolve(req.flags.backend)?;
        self.devices = devices_for(&req.flags.launch.devices, size)?;
        if self.devices.is_none() && resolved.name() == "cuda" {
            // One GPU per rank by default: GPUs 0 … N-1.
            self.devices = Some((0..size).map(|g| g.to_string()).collect());
        }
        self.cpu = resolved.name() == "cpu";
        if req.is_command() {
            // torchrun agents: the command's processes choose their GPUs.
            self.devices = None;
            self.cpu = false;
        }
        let run_dir = match &req.flags.resume {
            Some(dir) => {
                config_of_run(req.experiment, dir)?;
                dir.clone()
            }
            None => {
                let setup = Setup {
                    host: req.host(),
                    backend: resolved.name(),
                    device: resolved.device(),
                    threads: None,
                    world_size: size,
                };
                create_run(req, &setup, &[], NewDir::Fresh(&req.flags.out), None)?.dir
            }
        };
        crate::output::notice!(
            "envgen: run directory {} ({size} ranks on this machine)",
            run_dir.display()
        );
        Ok(vec![run_dir])
    }

    fn follow(
        &mut self,
        req: &RunRequest,
        runs: &[PathBuf],
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<RunOutcome>> {
        let run_dir = runs[0].clone();
        let size = req.world.size;
        let mut words = vec![
            "run".to_string(),
            req.experiment.name().to_string(),
            "--launched".into(),
            "--resume".into(),
            run_dir.display().to_string(),
        ];
        words.extend(job_args(req));
        if req.flags.threads.is_none() && self.cpu {
            // Ranks share this machine's cores instead of each taking all.
            let per_rank = (rayon::current_num_threads() / size).max(1);
            words.extend(["--threads".to_string(), per_rank.to_string()]);
        }
        let launch = RankLaunch {
            args: &words,
            ranks: size,
            devices: self.devices.as_deref(),
        };
        let ends = spawn_and_watch(&launch, stop)?;
        if let Some(err) = failure(&ends, req.experiment.name(), &run_dir, size) {
            let state: Option<Summary> = rundir::read_json(&run_dir.join("summary.json")).ok();
            if state.is_none_or(|s| s.status == Status::Running) {
                mark_ended(&run_dir, Status::Failed, &format!("{err}"))?;
            }
            return Err(err);
        }
        let summary: Summary = rundir::read_json(&run_dir.join("summary.json"))?;
        Ok(vec![RunOutcome { run_dir, summary }])
    }
}

/// How long ranks get to stop by themselves (checkpoint included) after a
/// SIGTERM, before SIGKILL.
const GRACE: Duration = Duration::from_secs(20);

/// What to start: the same envgen arguments for every rank.
pub struct RankLaunch<'a> {
    pub args: &'a [String],
    pub ranks: usize,
    /// GPU per rank (`--devices`), as CUDA_VISIBLE_DEVICES; none on the CPU.
    pub devices: Option<&'a [String]>,
}

/// How a rank ended.
#[derive(Debug)]
pub struct RankEnd {
    pub rank: usize,
    pub status: ExitStatus,
}

impl RankEnd {
    /// Completed (0) or stopped after its checkpoint (130).
    pub fn ok(&self) -> bool {
        matches!(self.status.code(), Some(0 | 130))
    }

    /// "rank 1 of 2 was killed by signal 9".
    pub fn describe(&self, ranks: usize) -> String {
        use std::os::unix::process::ExitStatusExt;
        let who = format!("rank {} of {ranks}", self.rank);
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => format!("{who} exited with code {code}"),
            (None, Some(signal)) => format!("{who} was killed by signal {signal}"),
            _ => format!("{who} ended ({})", self.status),
        }
    }
}

/// Free TCP ports on this machine: the rendezvous, then one per rank.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    // All listeners are held until every port is known, so the n ports differ.
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on a child we started and have not reaped.
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
}

/// Start the ranks and wait for all of them. When one fails, or `stop` is
/// set, the others get SIGTERM (they checkpoint and stop), then SIGKILL
/// after [`GRACE`]. Returns how each rank ended, in the order they were
/// seen to end.
pub fn spawn_and_watch(launch: &RankLaunch, stop: &AtomicBool) -> Result<Vec<RankEnd>> {
    let envgen = std::env::current_exe()?;
    let ports = free_ports(launch.ranks + 1)?;
    let mut children: Vec<(usize, Child)> = Vec::new();
    for rank in 0..launch.ranks {
        let mut command = Command::new(&envgen);
        command
            .args(launch.args)
            .env("ENVGEN_RENDEZVOUS", format!("127.0.0.1:{}", ports[0]))
            .env("ENVGEN_RANK", rank.to_string())
            .env("ENVGEN_WORLD_SIZE", launch.ranks.to_string())
            .env("ENVGEN_LOCAL_RANK", rank.to_string())
            .env("ENVGEN_DATA_PORT", ports[rank + 1].to_string())
            .env("ENVGEN_NODE_HOST", "127.0.0.1")
            // Rank 0 writes it into the run's lock: `runs cancel` stops the
            // run through this process, which stops every rank.
            .env(LAUNCHER_PID_ENV, std::process::id().to_string())
            // A rank's stdout (its summary line) would mix into ours.
            .stdout(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?));
        if let Some(devices) = launch.devices {
            command.env("CUDA_VISIBLE_DEVICES", &devices[rank]);
        }
        match command.spawn() {
            Ok(child) => children.push((rank, child)),
            Err(e) => {
                for (_, child) in &children {
                    signal(child, libc::SIGKILL);
                }
                return Err(UserError::environment(format!(
                    "cannot start rank {rank} ({}): {e}",
                    envgen.display()
                ))
                .into());
            }
        }
    }
    let mut ended: Vec<RankEnd> = Vec::new();
    let mut stopping_since: Option<Instant> = None;
    while !children.is_empty() {
        let mut still = Vec::new();
        for (rank, mut child) in children {
            match child.try_wait()? {
                Some(status) => ended.push(RankEnd { rank, status }),
                None => still.push((rank, child)),
            }
        }
        children = still;
        let failed = ended.iter().any(|e| !e.ok());
        if stopping_since.is_none() && (failed || stop.load(Ordering::SeqCst)) {
            if let Some(first) = first_failure(&ended) {
                eprintln!(
                    "envgen: {}: stopping the other ranks",
                    first.describe(launch.ranks)
                );
            }
            for (_, child) in &children {
                signal(child, libc::SIGTERM);
            }
            stopping_since = Some(Instant::now());
        }
        if stopping_since.is_some_and(|t| t.elapsed() > GRACE) {
            for (_, child) in &children {
                signal(child, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(ended)
}

/// The failure that caused the others: a rank killed by a signal, else the
/// first rank seen to fail. (When one rank dies, the others fail at their
/// next all-reduce — often before this loop has looked — with an error
/// exit: those are consequences.)
fn first_failure(ends: &[RankEnd]) -> Option<&RankEnd> {
    use std::os::unix::process::ExitStatusExt;
    let failed = || ends.iter().filter(|e| !e.ok());
    failed()
        .find(|e| e.status.signal().is_some())
        .or_else(|| failed().next())
}

/// `--devices 0,1` checked against `--ranks`.
pub fn devices_for(devices: &[String], ranks: usize) -> Result<Option<Vec<String>>> {
    if devices.is_empty() {
        return Ok(None);
    }
    if devices.len() != ranks {
        return Err(UserError::usage(format!(
            "--devices names {} GPUs for {ranks} ranks",
            devices.len()
        ))
        .with_fix("name one GPU per rank, e.g. --ranks 2 --devices 0,1")
        .into());
    }
    Ok(Some(devices.to_vec()))
}

/// The rank whose failure ended the run ([`first_failure`]), as an error
/// for the run in `run_dir`.
pub fn failure(
    ends: &[RankEnd],
    experiment: &str,
    run_dir: &Path,
    ranks: usize,
) -> Option<anyhow::Error> {
    let first = first_failure(ends)?;
    Some(
        UserError::environment(format!(
            "{}; the other ranks were stopped",
            first.describe(ranks)
        ))
        .with_fix(format!(
            "see the rank's output above; continue from the last checkpoint with: envgen run {experiment} --resume {} --ranks {ranks}",
            run_dir.display()
        ))
        .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_rank_is_named_before_the_ranks_it_brought_down() {
        use std::os::unix::process::ExitStatusExt;
        let end = |rank, raw| RankEnd {
            rank,
            status: ExitStatus::from_raw(raw),
        };
        // Rank 0 seen first with exit code 3, rank 1 killed by SIGKILL.
        let ends = [end(0, 3 << 8), end(1, libc::SIGKILL)];
        assert_eq!(first_failure(&ends).unwrap().rank, 1);
        let ends = [end(1, 0), end(0, 3 << 8), end(2, 1 << 8)];
        assert_eq!(first_failure(&ends).unwrap().rank, 0);
        assert!(first_failure(&[end(0, 0), end(1, 130 << 8)]).is_none());
    }
}
