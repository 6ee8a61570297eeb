//! The where-specific flags of `envgen run` (`--image`, `--partition`,
//! `--ranks`, Docker's container knobs…), as given: plain values the CLI
//! fills, typed in the manifest (`launch`, manifest_version 3) and turned
//! back into words by [`LaunchFlags::words`] for `envgen rerun` and the
//! printed `--resume` command. `words` takes the struct apart field by
//! field, so a flag added here and not there is a compile error rather
//! than a flag a rerun silently drops.

use serde::{Deserialize, Serialize};

use crate::image::daemon::options::ContainerOptions;

/// `--container` (Slurm): how the job runs envgen on the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Container {
    #[default]
    None,
    Charliecloud,
    Apptainer,
    Pyxis,
}

impl Container {
    pub fn name(self) -> &'static str {
        match self {
            Container::None => "none",
            Container::Charliecloud => "charliecloud",
            Container::Apptainer => "apptainer",
            Container::Pyxis => "pyxis",
        }
    }
}

/// The where-specific flags, as given; only those given are written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchFlags {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub container: Container,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// `--sbatch-arg`: raw `#SBATCH` options, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cdi: bool,
    /// `--network`, `--ipc`, `--shm-size`, `--home-size`,
    /// `--writable-workspace` (Docker; issue #39): hardened by default.
    #[serde(skip_serializing_if = "is_default")]
    pub docker: ContainerOptions,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl LaunchFlags {
    /// The flags as `envgen run` words (what `rerun` and `--resume` replay).
    pub fn words(&self) -> Vec<String> {
        // Every field named: a new flag must be given its words here.
        let LaunchFlags {
            image,
            container,
            partition,
            account,
            time,
            nodes,
            gpus_per_node,
            ranks,
            devices,
            cpus_per_task,
            mem,
            qos,
            gres,
            constraint,
            job_name,
            sbatch_args,
            gpus,
            cdi,
            docker,
        } = self;
        let number = |n: &Option<u32>| n.map(|n| n.to_string());
        let devices = (!devices.is_empty()).then(|| devices.join(","));
        let container = (*container != Container::None).then(|| container.name().to_string());
        let mut words = Vec::new();
        for (flag, value) in [
            ("--image", image.clone()),
            ("--container", container),
            ("--partition", partition.clone()),
            ("--account", account.clone()),
            ("--time", time.clone()),
            ("--nodes", number(nodes)),
            ("--ranks", number(ranks)),
            ("--devices", devices),
            ("--gpus-per-node", number(gpus_per_node)),
            ("--cpus-per-task", number(cpus_per_task)),
            ("--mem", mem.clone()),
            ("--qos", qos.clone()),
            ("--gres", gres.clone()),
            ("--constraint", constraint.clone()),
            ("--job-name", job_name.clone()),
            ("--gpus", gpus.clone()),
        ] {
            if let Some(value) = value {
                words.extend([flag.to_string(), value]);
            }
        }
        // One word each: a value starting with `--` must not read as a flag.
        words.extend(sbatch_args.iter().map(|a| format!("--sbatch-arg={a}")));
        if *cdi {
            words.push("--cdi".into());
        }
        words.extend(docker.flags());
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_flags_given_are_written_and_they_read_back() {
        assert_eq!(
            serde_json::to_value(LaunchFlags::default()).unwrap(),
            serde_json::json!({})
        );
        let flags = LaunchFlags {
            container: Container::Apptainer,
            image: Some("/img/cpu.sif".into()),
            ranks: Some(2),
            sbatch_args: vec!["--exclusive".into()],
            ..Default::default()
        };
        let value = serde_json::to_value(&flags).unwrap();
        assert_eq!(value["container"], "apptainer");
        assert_eq!(serde_json::from_value::<LaunchFlags>(value).unwrap(), flags);
        assert_eq!(
            flags.words(),
            [
                "--image",
                "/img/cpu.sif",
                "--container",
                "apptainer",
                "--ranks",
                "2",
                "--sbatch-arg=--exclusive"
            ]
        );
        let misspelt = serde_json::json!({"partiton": "debug"});
        assert!(serde_json::from_value::<LaunchFlags>(misspelt).is_err());
    }
}
