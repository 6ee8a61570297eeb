//! Training in this process: a new native run, `--resume`, or (`--launched`)
//! the run (or the rank of a run) a launcher prepared in a Slurm job or a
//! container. This is where every place ends up: the other places prepare
//! a run directory, then start this on the node, in the container or once
//! per rank.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use envgen_experiments::backend::{self, Resolved};
use envgen_experiments::engine::{self, rundir, RunControl, Summary};
use serde_json::json;

use super::launcher::{failed_summary, Launcher, RunOutcome};
use super::life::RunLife;
use super::liveness::{self, Checker, Liveness};
use super::plan::{
    config_of_run, create_run, fresh_knobs, resumed_knobs, NewDir, PreparedRun, Setup,
};
use super::request::{not_data_parallel, RunRequest};
use super::{mounts, stop};
use crate::error::{Result, UserError};
use crate::profiles::Precision;
use crate::runs::gpu_sampler::GpuSampler;
use crate::runs::lock::LockState;
use crate::runs::lock::{lock_run, RunLock};
use crate::runs::manifest::Manifest;
use crate::runs::manifest::{self, DistributedRecord, HardwareKnobs};

/// This process trains (`--where native`, or launched by another place).
#[derive(Default)]
pub struct Native {
    /// The rank this process is, when a launcher started several.
    world: Option<engine::World>,
    /// Whether this process writes the run's files (rank 0, or the only one).
    leader: bool,
    threads: usize,
    backend: Option<Resolved>,
    prepared: Option<Prepared>,
    /// The leader's lock on the run directory, held while it trains.
    lock: Option<RunLock>,
    /// A user command runs here (`envgen run -- CMD`), not an experiment.
    command: bool,
}

/// A run directory ready to train in.
struct Prepared {
    science: toml::Value,
    knobs: HardwareKnobs,
    /// Continue from `checkpoints/latest`.
    resume: bool,
}

impl Launcher for Native {
    fn stop_message(&self) -> &'static str {
        if self.command {
            "forwarding the stop to the command (SIGINT)"
        } else {
            "stopping after this step (checkpoint follows)"
        }
    }

    /// Resolve the backend, then make the run directory or reopen the one
    /// given (`--resume`; a launched run's first start chooses its knobs on
    /// this node, not on the submitting host).
    fn prepare(&mut self, req: &RunRequest) -> Result<Vec<PathBuf>> {
        let flags = &req.flags;
        // A rank of a data-parallel run (started by `--ranks` or srun) learns
        // its place from the environment its launcher set.
        self.world = if flags.launched {
            engine::World::from_env()?
        } else {
            None
        };
        if let Some(w) = &self.world {
            if !req.experiment.data_parallel() {
                return Err(not_data_parallel(req.experiment, w.size));
            }
            // A command's rank is a torchrun agent: every GPU of the node is its.
            if !req.is_command() {
                select_gpu_of_rank();
            }
        }
        self.leader = engine::distributed::writes_files(self.world.as_ref());
        let world_size = self.world.as_ref().map_or(1, |w| w.size);
        self.threads = configure_threads(flags.threads)?;
        let resolved = backend::resolve(flags.backend)?;
        let setup = Setup {
            host: req.host(),
            backend: resolved.name(),
            device: resolved.device(),
            threads: Some(self.threads),
            world_size,
        };
        let (run_dir, prepared) = match &flags.resume {
            Some(dir) => (dir.clone(), self.reopen(req, dir, &setup)?),
            None => {
                let PreparedRun {
                    dir,
                    science,
                    manifest,
                } = create_run(req, &setup, &[], NewDir::Fresh(&flags.out), None)?;
                self.lock = Some(lock_run(&dir)?);
                let prepared = Prepared {
                    science,
                    knobs: manifest.profile,
                    resume: false,
                };
                (dir, prepared)
            }
        };
        if self.leader {
            crate::output::notice!("envgen: run directory {}", run_dir.display());
        }
        self.backend = Some(resolved);
        self.prepared = Some(prepared);
        Ok(vec![run_dir])
    }

    /// Only rank 0 (or the only process) reports and records the run.
    fn reports(&self) -> bool {
        self.leader
    }

    /// Train until the run ends; the leader records how it ended.
    fn follow(
        &mut self,
        req: &RunRequest,
        runs: &[PathBuf],
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<RunOutcome>> {
        let run_dir = runs[0].clone();
        let (Some(prepared), Some(resolved)) = (self.prepared.take(), self.backend.take()) else {
            anyhow::bail!("native run followed before it was prepared");
        };
        let control = RunControl {
            run_dir: run_dir.clone(),
            micro_batch: prepared.knobs.micro_batch,
            gen_batch: prepared.knobs.gen_batch,
            label: None,
            resume: prepared.resume,
            stop_after: req.flags.stop_after,
            stop: stop.clone(),
            progress: req.flags.progress,
            // A command picks its own precision: its knobs say `-`.
            precision: Precision::from_name(&prepared.knobs.precision)
                .or(req.is_command().then_some(Precision::Fp32))
                .ok_or_else(|| {
                    UserError::usage(format!(
                        "{}: profile.precision = {:?} is not fp32, tf32, bf16 or fp16",
                        run_dir.join(manifest::MANIFEST_FILE).display(),
                        prepared.knobs.precision
                    ))
                    .with_fix("restore the manifest.json that `envgen run` wrote")
                })?,
            world: self.world.clone(),
        };
        let mut science = prepared.science;
        if req.flags.launched {
            // In a container the data is mounted at neutral paths: map the host
            // paths the config names (its hash was checked above, unchanged).
            mounts::map_paths(&mut science, &mounts::path_map_from_env());
        }
        let sampler = self
            .leader
            .then(|| GpuSampler::start(&run_dir.join("metrics.jsonl"), GPU_SAMPLE_INTERVAL));
        let outcome = req.experiment.run(&science, &control, resolved);
        drop(sampler);
        let mut summary = match outcome {
            Ok(summary) => summary,
            Err(err) => {
                if self.leader {
                    let _ = rundir::write_json(
                        &run_dir.join("summary.json"),
                        &failed_summary(&run_dir, &err),
                    );
                }
                return Err(err);
            }
        };
        if !self.leader {
            // The run's files are rank 0's; this rank says only how it ended.
            let rank = self.world.as_ref().map_or(0, |w| w.rank);
            crate::output::notice!(
                "envgen: rank {rank}: {:?} after {} steps",
                summary.status,
                summary.steps_done
            );
            return Ok(vec![RunOutcome { run_dir, summary }]);
        }
        manifest::stamp_finished(&run_dir)?;
        // The process's peak memory, for `envgen tune` and for readers sizing
        // a machine (CPU runs: it is the tensors' memory too).
        // (A command's summary has its own process's peak already.)
        let peak = (!req.is_command())
            .then(crate::probe::proc::peak_rss_mib)
            .flatten();
        if let Some(mib) = peak {
            summary.metrics.insert("peak_rss_mib".into(), json!(mib));
        }
        // A CUDA run: what its kernel cache gave (envgen warmup's purpose).
        let kernels = envgen_experiments::kernel_cache::usage();
        if let Some(usage) = &kernels {
            summary
                .metrics
                .insert("kernel_cache".into(), usage.to_json());
        }
        if peak.is_some() || kernels.is_some() {
            rundir::write_json(&run_dir.join("summary.json"), &summary)?;
        }
        Ok(vec![RunOutcome { run_dir, summary }])
    }
}

impl Native {
    /// The launcher of a user command's run.
    pub fn for_command() -> Native {
        Native {
            command: true,
            ..Native::default()
        }
    }

    /// An existing run directory, to train on (from its checkpoint, if any).
    fn reopen(
        &mut self,
        req: &RunRequest,
        dir: &std::path::Path,
        setup: &Setup,
    ) -> Result<Prepared> {
        let flags = &req.flags;
        let (loaded, mut record) = config_of_run(req.experiment, dir)?;
        if self.leader {
            // Before anything of the run is changed: one trainer at a time.
            self.lock = Some(lock_run(dir)?);
        }
        let resume = dir.join("checkpoints").join("latest").is_file();
        if req.is_command() && !flags.launched {
            // A command has no checkpoint of envgen's: it runs again from its start.
            eprintln!("envgen: running the command of {} again", dir.display());
        } else if !resume && !flags.launched {
            eprintln!(
                "envgen: {} has no checkpoint yet: starting at step 0",
                dir.display()
            );
        }
        let mut knobs = if flags.launched && !resume {
            // First start of a launched run: its hardware is this node's
            // (or this container's), not the submitting host's.
            fresh_knobs(req, setup, &loaded, record.preset.as_deref())?
        } else {
            resumed_knobs(req, &record.profile, loaded.batch_size, setup.world_size)?
        };
        if !req.is_command() {
            knobs.backend = setup.backend.into();
            knobs.device = setup.device.into();
            knobs.threads = setup.threads;
        }
        if self.leader {
            if flags.launched {
                record.environment.host = setup.host.clone();
            }
            record.environment.world_size = Some(setup.world_size);
            if let Some(w) = &self.world {
                let mut distributed = distributed_record(w);
                if req.is_command() {
                    distributed.reduction = "torchrun".into();
                    distributed.reduction_detail = format!(
                        "torchrun node ranks, static rendezvous at {}:{}",
                        w.rendezvous.0, w.rendezvous.1
                    );
                }
                record.environment.distributed = Some(distributed);
            }
            record.profile = knobs.clone();
            manifest::write(dir, &record)?;
            // The earlier attempt's summary must not describe the run while
            // it goes on, nor be overwritten if this attempt fails.
            manifest::keep_attempt(dir)?;
        }
        Ok(Prepared {
            science: loaded.science,
            knobs,
            resume,
        })
    }
}

/// With one process per GPU, each sees only its own: the `local rank`-th of
/// the GPUs the job was given (CUDA_VISIBLE_DEVICES, set by Slurm or by
/// `--devices`), so every CUDA device 0 below is this rank's.
fn select_gpu_of_rank() {
    let local = std::env::var("ENVGEN_LOCAL_RANK")
        .or_else(|_| std::env::var("SLURM_LOCALID"))
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let gpus: Vec<&str> = visible.split(',').filter(|g| !g.is_empty()).collect();
    if let (Some(local), true) = (local, gpus.len() > 1) {
        if let Some(gpu) = gpus.get(local) {
            // Before any CUDA call in this process (the backend is resolved after).
            std::env::set_var("CUDA_VISIBLE_DEVICES", gpu);
        }
    }
}

/// The manifest's `distributed`: how the ranks sat and how they reduced.
fn distributed_record(world: &engine::World) -> DistributedRecord {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let nodes: Vec<String> = match var("SLURM_JOB_NODELIST") {
        Some(list) => std::process::Command::new("scontrol")
            .args(["show", "hostnames", &list])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_else(|| vec![list]),
        None => vec![std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())],
    };
    let per_node = var("SLURM_NTASKS_PER_NODE")
        .and_then(|v| {
            v.split(['(', ','])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(world.size / nodes.len().max(1));
    DistributedRecord {
        ranks_per_node: per_node,
        nodes,
        reduction: "collective".into(),
        reduction_detail: "burn-collective tree all-reduce over TCP (one bucket per step)".into(),
        rendezvous: format!("{}:{}", world.rendezvous.0, world.rendezvous.1),
    }
}

/// Size the global rayon pool, which Burn's CPU backend and envgen's fused
/// kernels run on: `--threads N`, else rayon's default (every core this
/// process may use: its CPU affinity, e.g. a Slurm task's or a container's
/// cpuset). Returns the pool's size, for the manifest.
fn configure_threads(requested: Option<u16>) -> Result<usize> {
    if let Some(n) = requested {
        rayon::ThreadPoolBuilder::new()
            .num_threads(usize::from(n))
            .build_global()
            .map_err(|e| {
                UserError::environment(format!("--threads {n}: cannot size the thread pool: {e}"))
                    .with_fix("leave out --threads")
            })?;
    }
    Ok(rayon::current_num_threads())
}

/// How often NVML is sampled on GPU hosts (W&B's system metrics default: 10-15 s;
/// a run of minutes wants finer).
const GPU_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// A run on this machine: its lock says whether its envgen still trains it.
pub struct NativeLife;

impl RunLife for NativeLife {
    fn liveness(&self, _: &mut Checker, _: &Path, _: &Manifest, lock: LockState) -> Liveness {
        liveness::by_lock(lock)
    }

    fn stop(&self, _: &mut Checker, dir: &Path, _: &Manifest) -> Result<Summary> {
        stop::stop_process(dir)
    }
}
