//! MIG device names (issue #43). Inside a MIG job NVML, nvidia-smi's queries
//! and torch name the device as its board plus the profile ("NVIDIA
//! A100-SXM4-40GB MIG 1g.5gb"). A slice has its board's compute capability
//! and class, so it is resolved to the board's row and every verdict is the
//! board's; what MIG itself changes (a share of the memory, no peer access)
//! becomes a host note. Facts: `[mig]` in env/gpus.toml.

use super::gpus::GpuSpec;
use super::KnowledgeBase;
use crate::error::{Result, UserError};
use crate::host::Gpu;

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

impl KnowledgeBase {
    /// Is `spec` (a row, or a family whose every row) a MIG-capable board?
    fn splits_into_mig(&self, spec: &GpuSpec) -> bool {
        let boards = &self.mig.boards;
        if spec.variants.is_empty() {
            boards.contains(&spec.id)
        } else {
            spec.variants.iter().all(|id| boards.contains(id))
        }
    }

    /// The board spec of an `--assume-gpu` MIG name, or a usage error naming
    /// the value: an unknown or ambiguous board as for any GPU name, and a
    /// board the MIG user guide does not list.
    pub(super) fn resolve_mig_board(&self, query: &str, mig: MigName<'_>) -> Result<&GpuSpec> {
        let spec = self.resolve_gpu(mig.board)?;
        if spec.sm_only || !self.splits_into_mig(spec) {
            return Err(UserError::usage(format!(
                "--assume-gpu `{query}`: {} cannot be split into MIG slices (not among the GPUs of NVIDIA's MIG user guide)",
                spec.name
            ))
            .with_fix(format!(
                "name the whole GPU (`{}`), or a MIG-capable board such as \"A100-SXM4-40GB MIG 1g.5gb\" (add boards to [mig] in env/gpus.toml)",
                mig.board
            ))
            .into());
        }
        Ok(spec)
    }

    /// The board of a probed MIG device name, if envgen knows it.
    pub(super) fn mig_board<'n>(&self, name: &'n str) -> Option<(&GpuSpec, MigName<'n>)> {
        let mig = split_mig_name(name)?;
        let spec = self.lookup_gpu(mig.board).filter(|spec| !spec.sm_only)?;
        Some((spec, mig))
    }

    /// The host note for a MIG slice: what it is, and what MIG changes.
    pub(super) fn mig_note(&self, gpu: &Gpu, board: &GpuSpec, mig: MigName<'_>) -> String {
        let memory = profile_memory_gb(mig.profile)
            .map(|gb| format!(" with {gb} GB of its memory"))
            .unwrap_or_default();
        format!(
            "GPU {} is MIG slice {} of {}{memory}: every verdict is the board's (compute capability {}, {}); but {}",
            gpu.index,
            mig.profile,
            board.name,
            board.compute_capability,
            super::gpus::class_name(board.class),
            self.mig.limits
        )
    }

    /// "5 GB (MIG 1g.5gb)" for a slice whose memory was not reported.
    pub(super) fn mig_memory_text(&self, gpu: &Gpu) -> Option<String> {
        let mig = split_mig_name(&gpu.name)?;
        let gb = profile_memory_gb(mig.profile)?;
        Some(format!("{gb} GB (MIG {})", mig.profile))
    }
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
