//! Data-parallel training over processes and nodes, on Burn's collective
//! engine (burn-collective, vendored with the fixes in vendor/PATCHES.md).
//!
//! Each rank is one process (one GPU, or a share of the CPU) and a
//! burn-collective "node" with one local peer; rank 0's process also hosts
//! the orchestrator every node registers with. A step's gradients, the
//! step's loss and the stop flag travel in one flat f32 bucket through a
//! single all-reduce (mean), as PyTorch DDP buckets gradients, so that a
//! step costs one round of messages however many tensors the model has.
//! Every rank then applies the same averaged gradients to the same weights,
//! and the replicas stay identical without ever broadcasting weights.
//!
//! Why NCCL is not used on GPUs: Burn 0.21 exchanges NCCL's unique id only
//! between threads of one process (docs/running.md, "Multi-GPU").

use std::str::FromStr;
use std::time::Duration;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;
use burn_collective::{AllReduceStrategy, CollectiveConfig, PeerId, ReduceOperation};
use burn_communication::Address;

use crate::error::UserError;

/// Default for `ENVGEN_COLLECTIVE_TIMEOUT_S`: long enough for rank 0 to
/// evaluate and checkpoint a large model while the others wait in the next
/// all-reduce, short enough that a lost rank does not hold a cluster
/// allocation for hours.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(900);

/// This process's place in a data-parallel run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    pub rank: usize,
    pub size: usize,
    /// The orchestrator: rank 0's host and port.
    pub rendezvous: (String, u16),
    /// Host name or address at which the other ranks reach this one.
    pub node_host: String,
    /// Port of this rank's tensor data service.
    pub data_port: u16,
    /// How long any collective operation may wait for the other ranks.
    pub timeout: Duration,
}

impl World {
    /// The world the launcher described in the environment, or `None` for a
    /// single-process run. `ENVGEN_RENDEZVOUS=host:port` turns it on; rank
    /// and size come from `ENVGEN_RANK`/`ENVGEN_WORLD_SIZE`, else from
    /// Slurm's `SLURM_PROCID`/`SLURM_NTASKS` (a task started by `srun`).
    pub fn from_env() -> anyhow::Result<Option<World>> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let Some(rendezvous) = var("ENVGEN_RENDEZVOUS") else {
            return Ok(None);
        };
        let bad = |name: &str, value: &str, fix: &str| -> anyhow::Error {
            UserError::usage(format!("{name}={value:?} is not valid"))
                .with_fix(fix)
                .into()
        };
        let (host, port) = rendezvous
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| bad("ENVGEN_RENDEZVOUS", &rendezvous, "write HOST:PORT"))?;
        let number = |names: [&str; 2]| -> anyhow::Result<usize> {
            for name in names {
                if let Some(v) = var(name) {
                    return v
                        .parse()
                        .map_err(|_| bad(name, &v, "a non-negative integer"));
                }
            }
            Err(UserError::usage(format!(
                "ENVGEN_RENDEZVOUS is set but neither {} nor {} is",
                names[0], names[1]
            ))
            .with_fix("launch ranks with `envgen run --ranks N` or through Slurm's srun")
            .into())
        };
        let rank = number(["ENVGEN_RANK", "SLURM_PROCID"])?;
        let size = number(["ENVGEN_WORLD_SIZE", "SLURM_NTASKS"])?;
        if size == 0 || rank >= size {
            return Err(
                UserError::usage(format!("rank {rank} of a world of {size}"))
                    .with_fix("ranks run from 0 to the world size - 1")
                    .into(),
            );
        }
        let data_port = match var("ENVGEN_DATA_PORT") {
            Some(p) => p
                .parse()
                .map_err(|_| bad("ENVGEN_DATA_PORT", &p, "a port number"))?,
            None => u16::try_from(usize::from(port) + 1 + rank)
                .map_err(|_| bad("ENVGEN_RENDEZVOUS", &rendezvous, "a lower port"))?,
        };
        let node_host = var("ENVGEN_NODE_HOST")
            .or_else(|| var("SLURMD_NODENAME"))
            .unwrap_or_else(|| "127.0.0.1".into());
        let timeout = match var("ENVGEN_COLLECTIVE_TIMEOUT_S") {
            Some(s) => Duration::from_secs_f64(
                s.parse::<f64>()
                    .ok()
                    .filter(|t| *t > 0.0)
                    .ok_or_else(|| bad("ENVGEN_COLLECTIVE_TIMEOUT_S", &s, "seconds, e.g. 600"))?,
            ),
            None => DEFAULT_TIMEOUT,
        };
        Ok(Some(World {
            rank,
            size,
            rendezvous: (host, port),
            node_host,
            data_port,
            timeout,
        }))
    }

    /// Rank 0 alone writes metrics, checkpoints and the summary.
    pub fn is_leader(&self) -> bool {
        self.rank == 0
    }
}

/// Rows of each global batch one rank trains on. The global batch is the
/// science: it must split evenly over the ranks.
pub fn rank_batch(batch_size: usize, world_size: usize) -> anyhow::Result<usize> {
    if world_size == 0 || batch_size % world_size != 0 {
        return Err(UserError::usage(format!(
            "train.batch_size {batch_size} does not split over {world_size} ranks"
        ))
        .with_fix("use a number of ranks that divides the global batch (the batch is the science and stays as it is)")
        .into());
    }
    Ok(batch_size / world_size)
}

/// Whether this process writes the run's files: a single-process run, or
/// rank 0 of a data-parallel one.
pub fn writes_files(world: Option<&World>) -> bool {
    world.is_none_or(World::is_leader)
}

/// This rank's membership in the collective, for backend `B` (the inner,
/// non-autodiff backend: gradients live there).
pub struct Collective<B: Backend> {
    world: World,
    peer: PeerId,
    device: B::Device,
    _backend: std::marker::PhantomData<B>,
}

impl<B: Backend> Collective<B> {
    /// Join the run: rank 0 starts the orchestrator, every rank registers
    /// (and waits, up to the timeout, for all the others to register).
    pub fn join(world: &World, device: &B::Device) -> anyhow::Result<Self> {
        if world.is_leader() {
            start_orchestrator(world.rendezvous.1);
        }
        let address = |host: &str, port: u16| {
            Address::from_str(&format!("ws://{host}:{port}"))
                .map_err(|e| anyhow::anyhow!("address {host}:{port}: {e:?}"))
        };
        let config = CollectiveConfig::default()
            .with_num_devices(1)
            .with_num_nodes(world.size as u32)
            .with_global_address(address(&world.rendezvous.0, world.rendezvous.1)?)
            .with_node_address(address(&world.node_host, world.data_port)?)
            .with_data_service_port(world.data_port)
            // Ring splits each tensor into `size` chunks and fails on a
            // bucket shorter than that; a binary tree has no such limit.
            .with_global_all_reduce_strategy(AllReduceStrategy::Tree(2))
            .with_operation_timeout(world.timeout);
        let peer = PeerId::from(world.rank as u32);
        burn_collective::register::<B>(peer, device.clone(), config)
            .map_err(|e| collective_error(world, "joining the other ranks", e))?;
        Ok(Self {
            world: world.clone(),
            peer,
            device: device.clone(),
            _backend: std::marker::PhantomData,
        })
    }

    /// The element-wise mean of `bucket` over all ranks.
    pub fn all_reduce_mean(&self, bucket: Tensor<B, 1>) -> anyhow::Result<Tensor<B, 1>> {
        let reduced = burn_collective::all_reduce::<B>(
            self.peer,
            bucket.into_primitive().tensor(),
            ReduceOperation::Mean,
        )
        .map_err(|e| collective_error(&self.world, "averaging gradients", e))?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(reduced)))
    }

    /// This process's rank and the number of ranks.
    pub fn rank(&self) -> usize {
        self.world.rank
    }
    pub fn ranks(&self) -> usize {
        self.world.size
    }

    /// The element-wise sum of `counts` (whole numbers, such as items
    /// scored and items right) over all ranks. They travel as f32 means,
    /// exact for whole numbers below 2^24 / ranks, and are rounded back.
    pub fn sum_counts(&self, counts: &[f64]) -> anyhow::Result<Vec<f64>> {
        let values: Vec<f32> = counts.iter().map(|&c| c as f32).collect();
        let mean = self.all_reduce_mean(Tensor::from_floats(values.as_slice(), &self.device))?;
        let mean = mean
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("reading the summed counts: {e:?}"))?;
        let ranks = self.world.size as f64;
        Ok(mean
            .into_iter()
            .map(|m| (f64::from(m) * ranks).round())
            .collect())
    }

    /// Average `grads` over all ranks, together with `scalars` (the step's
    /// loss, the stop flag…) in the same message. Parameters are taken in
    /// the model's visit order, the same on every rank.
    pub fn average<AB, M>(
        &self,
        model: &M,
        grads: GradientsParams,
        scalars: &[f64],
    ) -> anyhow::Result<(GradientsParams, Vec<f64>)>
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let mut pack = Pack::<B> {
            grads,
            flat: Vec::new(),
            layout: Vec::new(),
        };
        model.visit(&mut pack);
        let extras: Vec<f32> = scalars.iter().map(|&s| s as f32).collect();
        let mut parts = pack.flat;
        let device = parts.first().map(Tensor::device).unwrap_or_default();
        parts.push(Tensor::from_floats(extras.as_slice(), &device));
        let reduced = self.all_reduce_mean(Tensor::cat(parts, 0))?;
        let total = reduced.dims()[0];
        let tail = reduced
            .clone()
            .slice(total - scalars.len()..total)
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("reading the averaged scalars: {e:?}"))?;
        let mut unpack = Unpack::<B> {
            grads: pack.grads,
            bucket: reduced,
            layout: pack.layout.into_iter(),
            offset: 0,
        };
        model.visit(&mut unpack);
        Ok((unpack.grads, tail.into_iter().map(f64::from).collect()))
    }
}

impl<B: Backend> Drop for Collective<B> {
    fn drop(&mut self) {
        // Unregister; a peer that has already gone makes this fail, which
        // at the end of a run is of no consequence.
        if let Err(e) = burn_collective::finish_collective::<B>(self.peer) {
            tracing::debug!("rank {}: leaving the collective: {e:?}", self.world.rank);
        }
    }
}

/// The orchestrator in a thread of this process, for as long as the process
/// lives: the other ranks may still be leaving the collective when rank 0
/// is done, and a stopped orchestrator would leave them waiting for an
/// answer (till the timeout). It ends with the process.
fn start_orchestrator(port: u16) {
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("envgen: cannot start the collective orchestrator: {e}");
                return;
            }
        };
        // Not `start_global_orchestrator`: its tokio signal handlers would
        // take SIGTERM away from envgen's own (patch C4).
        runtime.block_on(burn_collective::start_global_orchestrator_until(
            port,
            std::future::pending(),
        ));
    });
}

fn collective_error(
    world: &World,
    doing: &str,
    e: burn_collective::CollectiveError,
) -> anyhow::Error {
    let what = match &e {
        burn_collective::CollectiveError::Timeout(t) => format!(
            "no answer from the other ranks within {:.0} s: a rank has died or hangs",
            t.as_secs_f64()
        ),
        // GlobalCollectiveError is not exported by burn-collective: its
        // variants are known by their Debug text.
        burn_collective::CollectiveError::Global(global)
            if format!("{global:?}").starts_with("PeerLost") =>
        {
            format!(
                "{} is gone: it died or its node is unreachable ({global:?})",
                lost_peer(world)
            )
        }
        burn_collective::CollectiveError::LocalServerMissing => format!(
            "{} is gone: the collective's service stopped after a connection to it broke",
            lost_peer(world)
        ),
        other => format!("{other:?}"),
    };
    UserError::environment(format!(
        "rank {} of {}: {doing}: {what} (orchestrator {}:{})",
        world.rank, world.size, world.rendezvous.0, world.rendezvous.1
    ))
    .with_fix(
        "look at the other ranks' output for the first failure; the run resumes from its last checkpoint with --resume",
    )
    .into()
}

/// The peer a lost connection was to, as far as this rank can tell: the
/// collective numbers its nodes in the order they registered (`NodeId`),
/// not by rank, so only a world of two names the rank.
fn lost_peer(world: &World) -> String {
    match world.size {
        2 => format!("peer rank {}", 1 - world.rank),
        _ => "a peer rank".into(),
    }
}

/// Takes each parameter's gradient out of the map, flattened, in visit order.
struct Pack<B: Backend> {
    grads: GradientsParams,
    flat: Vec<Tensor<B, 1>>,
    /// (parameter, shape) of each flattened gradient, in order.
    layout: Vec<(ParamId, Vec<usize>)>,
}

impl<AB: AutodiffBackend<InnerBackend = B>, B: Backend> ModuleVisitor<AB> for Pack<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        // A parameter without a gradient (frozen) has none on any rank.
        if let Some(grad) = self.grads.remove::<B, D>(param.id) {
            let dims = grad.dims().to_vec();
            let n: usize = dims.iter().product();
            self.flat.push(grad.reshape([n]));
            self.layout.push((param.id, dims));
        }
    }
}

/// Puts the averaged slices of the bucket back, in the same order.
struct Unpack<B: Backend> {
    grads: GradientsParams,
    bucket: Tensor<B, 1>,
    layout: std::vec::IntoIter<(ParamId, Vec<usize>)>,
    offset: usize,
}

impl<AB: AutodiffBackend<InnerBackend = B>, B: Backend> ModuleVisitor<AB> for Unpack<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        let Some(next) = self.layout.as_slice().first() else {
            return;
        };
        if next.0 != param.id {
            return;
        }
        let (id, dims) = self.layout.next().expect("peeked above");
        let n: usize = dims.iter().product();
        let shape: [usize; D] = dims.try_into().expect("same rank as when packed");
        let slice = self.bucket.clone().slice(self.offset..self.offset + n);
        self.offset += n;
        self.grads.register::<B, D>(id, slice.reshape(shape));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_env<T>(vars: &[(&str, &str)], f: impl FnOnce() -> T) -> T {
        // Tests in this module run one at a time under this lock, as they
        // change the process environment.
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let names = [
            "ENVGEN_RENDEZVOUS",
            "ENVGEN_RANK",
            "ENVGEN_WORLD_SIZE",
            "ENVGEN_DATA_PORT",
            "ENVGEN_NODE_HOST",
            "ENVGEN_COLLECTIVE_TIMEOUT_S",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURMD_NODENAME",
        ];
        let saved: Vec<_> = names.iter().map(|n| (*n, std::env::var(n).ok())).collect();
        for n in names {
            std::env::remove_var(n);
        }
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
        let out = f();
        for (k, v) in saved {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
        out
    }

    #[test]
    fn the_world_comes_from_envgen_or_slurm_variables() {
        assert_eq!(with_env(&[], World::from_env).unwrap(), None);
        let w = with_env(
            &[
                ("ENVGEN_RENDEZVOUS", "node01:29500"),
                ("SLURM_PROCID", "3"),
                ("SLURM_NTASKS", "16"),
                ("SLURMD_NODENAME", "node02"),
            ],
            World::from_env,
        )
        .unwrap()
        .unwrap();
        assert_eq!((w.rank, w.size, w.data_port), (3, 16, 29504));
        assert_eq!(w.rendezvous, ("node01".into(), 29500));
        assert_eq!(w.node_host, "node02");
        assert_eq!(w.timeout, DEFAULT_TIMEOUT);
        let w = with_env(
            &[
                ("ENVGEN_RENDEZVOUS", "127.0.0.1:4000"),
                ("ENVGEN_RANK", "1"),
                ("ENVGEN_WORLD_SIZE", "2"),
                ("SLURM_PROCID", "7"),
                ("ENVGEN_DATA_PORT", "4100"),
                ("ENVGEN_COLLECTIVE_TIMEOUT_S", "2.5"),
            ],
            World::from_env,
        )
        .unwrap()
        .unwrap();
        assert_eq!((w.rank, w.size, w.data_port), (1, 2, 4100));
        assert_eq!(w.timeout, Duration::from_millis(2500));
        assert!(!w.is_leader());
    }

    #[test]
    fn a_bad_world_is_a_usage_error() {
        for vars in [
            &[("ENVGEN_RENDEZVOUS", "nohost")][..],
            &[
                ("ENVGEN_RENDEZVOUS", "h:1"),
                ("ENVGEN_RANK", "2"),
                ("ENVGEN_WORLD_SIZE", "2"),
            ],
            &[("ENVGEN_RENDEZVOUS", "h:1"), ("ENVGEN_RANK", "0")],
            &[
                ("ENVGEN_RENDEZVOUS", "h:1"),
                ("ENVGEN_RANK", "0"),
                ("ENVGEN_WORLD_SIZE", "1"),
                ("ENVGEN_COLLECTIVE_TIMEOUT_S", "-1"),
            ],
        ] {
            let err = with_env(vars, World::from_env).unwrap_err();
            assert!(
                err.downcast_ref::<UserError>().is_some(),
                "{vars:?}: {err:#}"
            );
        }
    }
}
