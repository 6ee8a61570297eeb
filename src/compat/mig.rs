//! MIG device names (issue #43). Inside a MIG job NVML, nvidia-smi's queries
//! and torch name the device as its board plus the profile ("NVIDIA
//! A100-SXM4-40GB MIG 1g.5gb"). This splits such a name; gpus.rs resolves
//! the board (a slice has its board's compute capability and class, so every
//! verdict is the board's) and notes what MIG changes. Facts: `[mig]` in
//! env/gpus.toml.

/// A MIG device name split into its board and profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigName<'a> {
    /// "NVIDIA A100-SXM4-40GB"
    pub board: &'a str,
    /// "1g.5gb", "1c.3g.20gb", "1g.6gb+me"
    pub profile: &'a str,
}

/// `<C>c.`? `<G>g.<M>gb` (`+suffix`)?: the MIG user guide's device names.
fn is_profile(profile: &str) -> bool {
    let (core, suffix) = profile.split_once('+').unwrap_or((profile, ""));
    if !suffix.chars().all(|c| c.is_ascii_alphabetic()) || profile.ends_with('+') {
        return false;
    }
    let parts: Vec<&str> = core.split('.').collect();
    let numbered = |part: &str, unit: &str| {
        part.strip_suffix(unit)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    match parts.as_slice() {
        [g, m] => numbered(g, "g") && numbered(m, "gb"),
        [c, g, m] => numbered(c, "c") && numbered(g, "g") && numbered(m, "gb"),
        _ => false,
    }
}

/// "NVIDIA A100-SXM4-40GB MIG 1g.5gb" → board and profile; `None` for
/// anything that is not a board name followed by ` MIG ` and a profile.
pub fn split_mig_name(name: &str) -> Option<MigName<'_>> {
    let name = name.trim();
    let at = name.to_ascii_uppercase().rfind(" MIG ")?;
    let board = name[..at].trim();
    let profile = name[at + " MIG ".len()..].trim();
    (!board.is_empty() && is_profile(&profile.to_ascii_lowercase()))
        .then_some(MigName { board, profile })
}

/// The slice's memory in GB as its profile names it ("1g.5gb" → 5).
pub fn profile_memory_gb(profile: &str) -> Option<u64> {
    let core = profile.split('+').next()?;
    core.rsplit('.')
        .next()?
        .to_ascii_lowercase()
        .strip_suffix("gb")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_names_split_into_board_and_profile() {
        // The MIG user guide's device names and NVML's "<board> MIG <profile>".
        let cases = [
            (
                "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                "NVIDIA A100-SXM4-40GB",
                "1g.5gb",
            ),
            (
                "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                "NVIDIA A100-SXM4-40GB",
                "3g.20gb",
            ),
            (
                "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb",
                "NVIDIA A100-SXM4-40GB",
                "1c.3g.20gb",
            ),
            ("NVIDIA A30 MIG 1g.6gb+me", "NVIDIA A30", "1g.6gb+me"),
            ("H100 mig 7g.80gb", "H100", "7g.80gb"),
        ];
        for (name, board, profile) in cases {
            assert_eq!(
                split_mig_name(name),
                Some(MigName { board, profile }),
                "{name}"
            );
        }
        for name in [
            "NVIDIA A100-SXM4-40GB",
            "MIG 1g.5gb",
            "NVIDIA A100 MIG",
            "NVIDIA A100 MIG 1g",
            "NVIDIA A100 MIG 1g.5",
            "NVIDIA A100 MIG g.5gb",
            "NVIDIA A100 MIG 1g.5gb+",
            "NVIDIA A100 MIG 1g.5gb+m3",
            "NVIDIA A100 MIG 1x.1g.5gb",
        ] {
            assert_eq!(split_mig_name(name), None, "{name}");
        }
        assert_eq!(profile_memory_gb("1g.5gb"), Some(5));
        assert_eq!(profile_memory_gb("1c.3g.20gb"), Some(20));
        assert_eq!(profile_memory_gb("1g.6gb+me"), Some(6));
    }
}
