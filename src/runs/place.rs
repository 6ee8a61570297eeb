//! Where a run trains, as the manifest records it (`"where"`) and as the
//! launcher is chosen by: one enum, so a place is never compared as a
//! string. It lives here, below `launch`, because the manifest holds it;
//! `launch` matches on it (exhaustively: a new variant is a compile error
//! in every `match` that must learn it — see src/launch/mod.rs).

use serde::{Deserialize, Serialize};

/// A place a run can train in. Serialized as the word `--where` takes
/// (`"native"`, `"docker"`, `"slurm"`), which is also what manifests of
/// version 1 and 2 hold, so they read unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// In this process, or as ranks on this machine.
    #[default]
    Native,
    /// In a Docker container, through the daemon's API.
    Docker,
    /// As a Slurm job (or job array).
    Slurm,
}

impl Place {
    /// The word for it (`--where`, the manifest, `runs list`).
    pub fn name(self) -> &'static str {
        match self {
            Place::Native => "native",
            Place::Docker => "docker",
            Place::Slurm => "slurm",
        }
    }
}

/// What a place is, asked by exhaustive `match`es: a new place must say.
impl Place {
    /// Trains on this machine, in envgen's own process tree (no container,
    /// no job): the default of `--where`, the machine `--devices` picks on,
    /// the knobs chosen here rather than where the run is launched.
    pub fn is_this_machine(self) -> bool {
        match self {
            Place::Native => true,
            Place::Docker | Place::Slurm => false,
        }
    }

    /// Submitted to a cluster's scheduler: the runs may span `--nodes`,
    /// a `--sweep` is a job array, a dry run renders the job script.
    pub fn is_cluster_job(self) -> bool {
        match self {
            Place::Slurm => true,
            Place::Native | Place::Docker => false,
        }
    }

    /// A container on this machine: one rank, a command's code mounted at
    /// `/workspace`.
    pub fn is_local_container(self) -> bool {
        match self {
            Place::Docker => true,
            Place::Native | Place::Slurm => false,
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_written_as_its_word() {
        for place in [Place::Native, Place::Docker, Place::Slurm] {
            let json = serde_json::to_value(place).unwrap();
            assert_eq!(json, place.name());
            assert_eq!(serde_json::from_value::<Place>(json).unwrap(), place);
        }
        assert!(serde_json::from_value::<Place>("podman".into()).is_err());
    }
}
