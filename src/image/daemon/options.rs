//! The knobs of a run's container (issue #39): network, IPC namespace,
//! `/dev/shm` size, the size of the scratch `HOME`, a writable workspace.
//! The defaults are the hardened container of [`super::container`] (no
//! network, private IPC, Docker's 64 MiB `/dev/shm`, a 1 GiB `HOME`, the
//! code read-only); each flag relaxes one thing, and every relaxation is
//! recorded in the manifest (`docker.options`) and named by `runs show`.

use serde::{Deserialize, Serialize};

/// The scratch tmpfs's default size (also `HOME`): it lives in the
/// container's memory; training writes its results into the run directory.
pub const DEFAULT_HOME_BYTES: i64 = 1 << 30;

/// `--network`: Docker's network mode for the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Network {
    /// No network at all (the default: training reads only its mounts).
    #[default]
    None,
    /// Docker's default bridge: outbound access (`wandb.init`, hub downloads).
    Bridge,
    /// The host's network stack (NCCL over the host's interfaces).
    Host,
    /// A user-defined Docker network, by name.
    Named(String),
}

impl Network {
    /// `none`, `bridge`, `host` or a network's name (Docker's alphabet:
    /// letters, digits, `_`, `.`, `-`, not starting with a punctuation mark).
    pub fn parse(text: &str) -> Result<Network, String> {
        Ok(match text {
            "none" => Network::None,
            "bridge" => Network::Bridge,
            "host" => Network::Host,
            name if is_network_name(name) => Network::Named(name.to_string()),
            other => {
                return Err(format!(
                    "{other:?} is not none, bridge, host or a Docker network's name (letters, digits, `_`, `.`, `-`): \
                     use --network bridge for outbound access, or a name from `docker network ls`"
                ))
            }
        })
    }

    /// What Docker's `HostConfig.network_mode` gets.
    pub fn mode(&self) -> &str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Host => "host",
            Network::Named(name) => name,
        }
    }
}

fn is_network_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && name.len() <= 128
}

impl From<Network> for String {
    fn from(network: Network) -> String {
        network.mode().to_string()
    }
}

impl TryFrom<String> for Network {
    type Error = String;
    fn try_from(text: String) -> Result<Network, String> {
        Network::parse(&text)
    }
}

/// `--ipc`: the container's IPC namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Ipc {
    /// Its own namespace, shared with no other container (the default).
    #[default]
    Private,
    /// The host's: the host's `/dev/shm` (what NGC's images ask for with
    /// `--ipc=host`, for DataLoader workers).
    Host,
    /// Its own, which other containers may join.
    Shareable,
}

impl Ipc {
    pub fn name(self) -> &'static str {
        match self {
            Ipc::Private => "private",
            Ipc::Host => "host",
            Ipc::Shareable => "shareable",
        }
    }
}

/// The container knobs of a Docker run, as the manifest records them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerOptions {
    pub network: Network,
    pub ipc: Ipc,
    /// `/dev/shm` in bytes; null: Docker's default (64 MiB).
    pub shm_size_bytes: Option<i64>,
    /// The scratch tmpfs that is `HOME`, in bytes.
    pub home_size_bytes: i64,
    /// The command's code mounted read-write instead of read-only.
    pub writable_workspace: bool,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        ContainerOptions {
            network: Network::None,
            ipc: Ipc::Private,
            shm_size_bytes: None,
            home_size_bytes: DEFAULT_HOME_BYTES,
            writable_workspace: false,
        }
    }
}

impl ContainerOptions {
    /// What these options relax of the hardened defaults, one phrase each
    /// (empty: none), e.g. `network bridge`, `/dev/shm 2 GiB`.
    pub fn relaxations(&self) -> Vec<String> {
        let hardened = ContainerOptions::default();
        let mut out = Vec::new();
        if self.network != hardened.network {
            out.push(format!("network {}", self.network.mode()));
        }
        if self.ipc != hardened.ipc {
            out.push(format!("ipc {}", self.ipc.name()));
        }
        if let Some(bytes) = self.shm_size_bytes {
            out.push(format!("/dev/shm {}", show_size(bytes)));
        }
        if self.home_size_bytes != hardened.home_size_bytes {
            out.push(format!("HOME tmpfs {}", show_size(self.home_size_bytes)));
        }
        if self.writable_workspace {
            out.push("workspace writable".into());
        }
        out
    }

    /// The flags that give these options back (for `envgen rerun`).
    pub fn flags(&self) -> Vec<String> {
        let hardened = ContainerOptions::default();
        let mut words = Vec::new();
        if self.network != hardened.network {
            words.extend(["--network".into(), self.network.mode().to_string()]);
        }
        if self.ipc != hardened.ipc {
            words.extend(["--ipc".into(), self.ipc.name().to_string()]);
        }
        if let Some(bytes) = self.shm_size_bytes {
            words.extend(["--shm-size".into(), bytes.to_string()]);
        }
        if self.home_size_bytes != hardened.home_size_bytes {
            words.extend(["--home-size".into(), self.home_size_bytes.to_string()]);
        }
        if self.writable_workspace {
            words.push("--writable-workspace".into());
        }
        words
    }
}

/// A size as Docker's `--shm-size` takes it: a whole number of bytes with
/// an optional binary unit `b`, `k`, `m`, `g`, `t` (case-insensitive, `kb`,
/// `KiB`… too), e.g. `2g` = 2147483648. `flag` names the flag in the error.
pub fn parse_size(flag: &str, text: &str) -> Result<i64, String> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => u32::MAX,
    };
    let bytes = number
        .parse::<i64>()
        .ok()
        .filter(|_| shift != u32::MAX)
        .and_then(|n| n.checked_mul(1i64.checked_shl(shift)?));
    match bytes {
        Some(bytes) if bytes > 0 => Ok(bytes),
        _ => Err(format!(
            "{text:?} is not a size: write a whole number of bytes with k, m or g (binary units), e.g. {flag} 2g"
        )),
    }
}

/// `2 GiB`, `512 MiB`, `1000 B`: the largest unit the size is a whole number of.
pub fn show_size(bytes: i64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_docker_reads_them() {
        assert_eq!(parse_size("--shm-size", "2g"), Ok(2 << 30));
        assert_eq!(parse_size("--shm-size", "2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("--shm-size", "512m"), Ok(512 << 20));
        assert_eq!(parse_size("--shm-size", "64K"), Ok(64 << 10));
        assert_eq!(parse_size("--shm-size", "1000"), Ok(1000));
        for bad in ["", "g", "2x", "-1g", "0", "1.5g", "99999999999t", "2 g b"] {
            let err = parse_size("--shm-size", bad).unwrap_err();
            assert!(
                err.contains(&format!("{bad:?} is not a size"))
                    && err.contains("e.g. --shm-size 2g"),
                "{bad}: {err}"
            );
        }
        assert_eq!(show_size(2 << 30), "2 GiB");
        assert_eq!(show_size(1536 << 20), "1536 MiB");
        assert_eq!(show_size(1000), "1000 B");
    }

    #[test]
    fn networks_are_a_mode_or_a_name() {
        assert_eq!(Network::parse("none"), Ok(Network::None));
        assert_eq!(Network::parse("bridge"), Ok(Network::Bridge));
        assert_eq!(Network::parse("host"), Ok(Network::Host));
        assert_eq!(
            Network::parse("my_net-1.x"),
            Ok(Network::Named("my_net-1.x".into()))
        );
        for bad in ["", "container:abc", "-x", "a b", ".net"] {
            let err = Network::parse(bad).unwrap_err();
            assert!(err.contains("not none, bridge, host"), "{bad}: {err}");
        }
    }

    #[test]
    fn only_relaxations_are_named_and_they_round_trip() {
        let hardened = ContainerOptions::default();
        assert!(hardened.relaxations().is_empty());
        assert!(hardened.flags().is_empty());
        let relaxed = ContainerOptions {
            network: Network::Bridge,
            ipc: Ipc::Host,
            shm_size_bytes: Some(2 << 30),
            home_size_bytes: 8 << 30,
            writable_workspace: true,
        };
        assert_eq!(
            relaxed.relaxations(),
            [
                "network bridge",
                "ipc host",
                "/dev/shm 2 GiB",
                "HOME tmpfs 8 GiB",
                "workspace writable"
            ]
        );
        let json = serde_json::to_value(&relaxed).unwrap();
        assert_eq!(json["network"], "bridge");
        assert_eq!(json["ipc"], "host");
        let back: ContainerOptions = serde_json::from_value(json).unwrap();
        assert_eq!(back, relaxed);
        let bad = serde_json::json!({"network": "a b", "ipc": "private", "shm_size_bytes": null,
            "home_size_bytes": 1, "writable_workspace": false});
        assert!(serde_json::from_value::<ContainerOptions>(bad).is_err());
    }
}
