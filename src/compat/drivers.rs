//! Driver facts (`env/cuda.toml`): which CUDA a driver runs, which driver a
//! CUDA release or a GPU architecture needs.

use super::data::{self, Architecture, CudaFile, ForwardCompat, LegacyGpu, NgcRuntime, SmSupport};
use super::version::{parse_compute_capability, Version};
use super::KnowledgeBase;
use crate::error::{Result, UserError};

/// An `--assume-driver` value: the version nvidia-smi prints ("535.261.03",
/// "570.26") or a bare driver branch ("535", which counts as that branch's
/// newest release). A CUDA version ("12.8") or anything else is a usage error.
pub fn parse_assumed_driver(text: &str) -> Result<Version> {
    let trimmed = text.trim();
    let parts = trimmed.split('.').count();
    Version::parse(trimmed)
        .filter(|v| parts <= 3 && (100..1000).contains(&v.major()))
        .ok_or_else(|| {
            UserError::usage(format!(
                "--assume-driver `{text}` is not an NVIDIA driver version"
            ))
            .with_fix(
                "pass the driver version nvidia-smi prints (e.g. 535.261.03) or a driver branch (e.g. 570); not a CUDA version such as 12.8",
            )
            .into()
        })
}

impl KnowledgeBase {
    pub(super) fn cuda_file(&self) -> Option<&CudaFile> {
        self.cuda.as_ref()
    }

    /// The newest CUDA (major.minor) a driver supports, from the toolkit-driver
    /// table. A bare branch ("570") counts as that branch's newest release.
    pub fn max_cuda_for_driver(&self, driver: &Version) -> Option<Version> {
        let bare_branch = driver.to_string().split('.').count() == 1;
        self.cuda_file()?
            .release
            .iter()
            .filter(|release| {
                Version::parse(&release.driver_min_linux).is_some_and(|min| {
                    if bare_branch {
                        min.major() <= driver.major()
                    } else {
                        &min <= driver
                    }
                })
            })
            .filter_map(|release| Version::parse(&release.version))
            .max()
            .map(|v| v.major_minor())
    }

    /// The toolkit driver a CUDA version needs for its full feature set: the
    /// exact release's, else its GA's (x.y.0), else the first of that x.y.
    pub fn toolkit_driver_min(&self, cuda: &Version) -> Option<Version> {
        let releases = &self.cuda_file()?.release;
        let same_minor = |r: &&data::CudaRelease| {
            Version::parse(&r.version).is_some_and(|v| v.major_minor() == cuda.major_minor())
        };
        releases
            .iter()
            .find(|r| Version::parse(&r.version).as_ref() == Some(cuda))
            .or_else(|| releases.iter().find(same_minor))
            .and_then(|r| Version::parse(&r.driver_min_linux))
    }

    /// The minor-version-compatibility driver minimum for a CUDA major.
    pub fn minor_compat_min(&self, major: u32) -> Option<Version> {
        self.cuda_file()?
            .minor_compat
            .iter()
            .find(|row| row.major == major)
            .and_then(|row| Version::parse(&row.driver_min_linux))
    }

    /// The CUDA major a driver belongs to for minor-version compatibility.
    pub fn driver_cuda_major(&self, driver: &Version) -> Option<u32> {
        self.cuda_file()?
            .minor_compat
            .iter()
            .filter(|row| Version::parse(&row.driver_min_linux).is_some_and(|min| &min <= driver))
            .map(|row| row.major)
            .max()
    }

    /// First/last CUDA support for a compute capability.
    pub fn sm_support(&self, cc: &Version) -> Option<&SmSupport> {
        self.cuda_file()?
            .sm
            .iter()
            .find(|sm| parse_compute_capability(&sm.sm).is_some_and(|(v, _)| &v == cc))
    }

    pub fn forward_compat(&self) -> Option<&ForwardCompat> {
        self.cuda_file().map(|cuda| &cuda.forward_compat)
    }

    /// The architecture a compute capability belongs to, with the oldest
    /// driver that can drive it (`[[architecture]]` in env/cuda.toml).
    pub fn architecture(&self, cc: &Version) -> Option<&Architecture> {
        self.cuda_file()?.architecture.iter().find(|arch| {
            arch.compute_capabilities
                .iter()
                .filter_map(|c| parse_compute_capability(c))
                .any(|(v, _)| &v == cc)
        })
    }

    /// What a driver newer than a GPU's last branch logs before ignoring it.
    pub fn legacy_gpu(&self) -> Option<&LegacyGpu> {
        self.cuda_file().map(|cuda| &cuda.legacy_gpu)
    }

    /// What NGC framework images set and their entrypoint prints.
    pub fn ngc_runtime(&self) -> Option<&NgcRuntime> {
        self.ngc_runtime.as_ref()
    }
}
