//! The host's driver as the checks read it: its version as reported, and
//! the newest CUDA it runs (from NVML, or derived from the version).

use super::super::version::Version;
use super::super::KnowledgeBase;
use crate::host::Host;

/// The driver as the checks need it.
pub(super) struct DriverFacts {
    /// As the host reported it ("535.261.03": leading zeros kept for messages).
    pub(super) text: Option<String>,
    pub(super) version: Option<Version>,
    /// The newest CUDA the driver supports (major.minor).
    pub(super) max_cuda: Option<Version>,
    /// `max_cuda` is only the major's floor ("11.0" for R470).
    pub(super) floor_only: bool,
}

impl DriverFacts {
    pub(super) fn of(kb: &KnowledgeBase, host: &Host) -> DriverFacts {
        let version = host.driver_version.as_deref().and_then(Version::parse);
        let max_cuda = host
            .cuda_driver_version
            .as_deref()
            .and_then(Version::parse)
            .map(|v| v.major_minor())
            .or_else(|| version.as_ref().and_then(|v| kb.max_cuda_for_driver(v)));
        // Older than every release in env/cuda.toml (e.g. R470): all we know
        // is its CUDA major from the minor-compat table; X.0 is a safe floor.
        let (max_cuda, floor_only) = match max_cuda {
            Some(cuda) => (Some(cuda), false),
            None => {
                let floor = version
                    .as_ref()
                    .and_then(|v| kb.driver_cuda_major(v))
                    .and_then(|major| Version::parse(&format!("{major}.0")));
                (floor.clone(), floor.is_some())
            }
        };
        DriverFacts {
            text: host.driver_version.clone(),
            version,
            max_cuda,
            floor_only,
        }
    }

    pub(super) fn describe(&self) -> String {
        match (&self.text, &self.max_cuda) {
            (Some(v), Some(c)) if self.floor_only => format!("driver {v} (CUDA {}.x)", c.major()),
            (Some(v), Some(c)) => format!("driver {v} (CUDA {c})"),
            (Some(v), None) => format!("driver {v}"),
            (None, Some(c)) => format!("a driver for CUDA {c}"),
            (None, None) => "an unknown driver".into(),
        }
    }
}
