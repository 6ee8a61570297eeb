//! The first GPU source: NVML, through `nvml-wrapper`, which dlopens
//! `libnvidia-ml.so.1` at run time (so envgen builds and runs without it).
//! NVML answers without `CUDA_VISIBLE_DEVICES` filtering and without a CUDA
//! context, which makes it the cheapest and most exact source when present.

use nvml_wrapper::Nvml;

use super::GpuReport;
use crate::host::Gpu;

/// `ENVGEN_NO_NVML=1` skips NVML so tests can put a fake `nvidia-smi` first.
pub const SKIP_ENV: &str = "ENVGEN_NO_NVML";

/// `cuDriverGetVersion`-style integer → "major.minor" (12020 → "12.2").
pub fn format_cuda_driver_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

pub fn skipped() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|value| value == "1")
}

/// Read driver and GPUs through NVML; `None` (with a note) when the library
/// is absent or fails to initialise, which is normal on machines without a driver.
pub fn probe(notes: &mut Vec<String>) -> Option<GpuReport> {
    if skipped() {
        tracing::debug!("NVML skipped ({SKIP_ENV}=1)");
        return None;
    }
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(err) => {
            tracing::debug!("NVML unavailable: {err}");
            notes.push(format!("NVML: not available ({err})"));
            return None;
        }
    };
    let driver_version = nvml.sys_driver_version().ok();
    let cuda_driver_version = nvml
        .sys_cuda_driver_version()
        .ok()
        .map(format_cuda_driver_version);
    let count = match nvml.device_count() {
        Ok(count) => count,
        Err(err) => {
            notes.push(format!("NVML: cannot count GPUs ({err})"));
            0
        }
    };
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(err) => {
                notes.push(format!("NVML: GPU {index} unreadable ({err})"));
                continue;
            }
        };
        gpus.push(Gpu {
            index,
            name: device.name().unwrap_or_default(),
            compute_capability: device
                .cuda_compute_capability()
                .ok()
                .map(|cc| format!("{}.{}", cc.major, cc.minor)),
            memory_mib: device.memory_info().ok().map(|m| m.total / (1024 * 1024)),
            uuid: device.uuid().ok(),
            minor_number: device.minor_number().ok(),
            ..Gpu::default()
        });
    }
    Some(GpuReport {
        driver_version,
        cuda_driver_version,
        gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_driver_version_format() {
        assert_eq!(format_cuda_driver_version(12020), "12.2");
        assert_eq!(format_cuda_driver_version(13000), "13.0");
        assert_eq!(format_cuda_driver_version(11080), "11.8");
        assert_eq!(format_cuda_driver_version(12090), "12.9");
    }
}
