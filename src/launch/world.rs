//! How many data-parallel ranks a run trains on and how they sit on nodes,
//! from `--ranks`, `--nodes` and the GPUs per node (checked with the
//! request, before anything is made; the ranks launcher spawns them).

use crate::error::{Result, UserError};
use crate::runs::place::Place;

/// How many data-parallel ranks a run trains on, and how they sit on nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldPlan {
    pub size: usize,
    pub per_node: usize,
    pub nodes: usize,
}

/// `--ranks`, `--nodes` and (with a GPU backend) the GPUs per node, for a
/// run going to `place`. Under Slurm each GPU gets a rank: 2 nodes × 8 GPUs
/// is a world of 16, 8 tasks per node; on the CPU, `--ranks` spread evenly
/// over the nodes. On this machine, `--ranks` processes.
pub fn plan_world(
    place: Place,
    ranks: Option<u32>,
    nodes: Option<u32>,
    gpus_per_node: Option<u32>,
) -> Result<WorldPlan> {
    let ranks = ranks.map(|r| r as usize);
    let nodes = nodes.unwrap_or(1).max(1) as usize;
    let gpus = gpus_per_node.filter(|&g| g > 0).map(|g| g as usize);
    if !place.is_cluster_job() {
        if nodes > 1 {
            return Err(UserError::usage(format!(
                "--nodes {nodes} needs a cluster, but this run goes to {}",
                place.name()
            ))
            .with_fix("add --where slurm, or use --ranks N on this machine")
            .into());
        }
        let size = ranks.unwrap_or(1);
        if size > 1 && place.is_local_container() {
            return Err(
                UserError::usage("--ranks with --where docker is not supported")
                    .with_fix("run the ranks natively (--where native) or through Slurm")
                    .into(),
            );
        }
        return Ok(WorldPlan {
            size,
            per_node: size,
            nodes: 1,
        });
    }
    let per_node = match (ranks, gpus) {
        (Some(r), _) if r % nodes != 0 => {
            return Err(UserError::usage(format!(
                "--ranks {r} does not spread evenly over --nodes {nodes}"
            ))
            .with_fix("use a multiple of the node count")
            .into())
        }
        (Some(r), Some(g)) if r != nodes * g => {
            return Err(UserError::usage(format!(
            "--ranks {r}, but --nodes {nodes} × --gpus-per-node {g} is {} GPUs: one rank per GPU",
            nodes * g
        ))
            .with_fix("leave out --ranks (it follows from the GPUs), or match it")
            .into())
        }
        (Some(r), _) => r / nodes,
        (None, Some(g)) => g,
        (None, None) => 1,
    };
    Ok(WorldPlan {
        size: nodes * per_node,
        per_node,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_gives_each_gpu_a_rank() {
        let plan = plan_world(Place::Slurm, None, Some(2), Some(8)).unwrap();
        assert_eq!(
            plan,
            WorldPlan {
                size: 16,
                per_node: 8,
                nodes: 2
            }
        );
        let plan = plan_world(Place::Slurm, Some(16), Some(2), Some(8)).unwrap();
        assert_eq!(plan.size, 16);
        assert!(plan_world(Place::Slurm, Some(4), Some(2), Some(8)).is_err());
        assert!(plan_world(Place::Slurm, Some(3), Some(2), None).is_err());
        let cpu = plan_world(Place::Slurm, Some(2), None, None).unwrap();
        assert_eq!(
            cpu,
            WorldPlan {
                size: 2,
                per_node: 2,
                nodes: 1
            }
        );
        let one_per_node = plan_world(Place::Slurm, None, Some(3), None).unwrap();
        assert_eq!(
            one_per_node,
            WorldPlan {
                size: 3,
                per_node: 1,
                nodes: 3
            }
        );
    }

    #[test]
    fn this_machine_runs_ranks_as_processes() {
        let plan = plan_world(Place::Native, Some(4), None, None).unwrap();
        assert_eq!(
            plan,
            WorldPlan {
                size: 4,
                per_node: 4,
                nodes: 1
            }
        );
        assert_eq!(plan_world(Place::Native, None, None, None).unwrap().size, 1);
        assert!(plan_world(Place::Native, Some(2), Some(2), None).is_err());
        assert!(plan_world(Place::Docker, Some(2), None, None).is_err());
    }
}
