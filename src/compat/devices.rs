//! The device properties of GPU models (`env/gpu_devices.toml`): what
//! envgen's stand-in driver reports so that `envgen warmup --target` compiles
//! the kernels a real GPU of that model will look up.

use serde::Deserialize;

use super::{parse_toml, GpuSpec, KnowledgeBase};
use crate::error::{Result, UserError};

const GPU_DEVICES_TOML: &str = include_str!("../../env/gpu_devices.toml");

/// One GPU model as its driver describes it (one row per reported name).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// The `env/gpus.toml` row this is.
    pub gpu: String,
    /// Exactly what the driver reports (cuDeviceGetName).
    pub name: String,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub shared_memory_per_block_optin: u32,
    pub shared_memory_per_multiprocessor: u32,
    pub threads_per_multiprocessor: u32,
    pub memory_mib: u64,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicesFile {
    device: Vec<DeviceSpec>,
}

impl DeviceSpec {
    /// (major, minor) of the compute capability.
    pub fn capability(&self) -> (u32, u32) {
        let (major, minor) = self
            .compute_capability
            .split_once('.')
            .expect("checked by the devices test");
        (
            major.parse().expect("checked by the devices test"),
            minor.parse().expect("checked by the devices test"),
        )
    }

    /// The environment that makes the stand-in driver report this device
    /// (src/warmup/libcuda_standin.c's knobs).
    pub fn standin_env(&self) -> Vec<(&'static str, String)> {
        let (major, minor) = self.capability();
        vec![
            ("ENVGEN_STANDIN_NAME", self.name.clone()),
            ("ENVGEN_STANDIN_CC", format!("{major}.{minor}")),
            ("ENVGEN_STANDIN_SMS", self.multiprocessors.to_string()),
            (
                "ENVGEN_STANDIN_SMEM_OPTIN",
                self.shared_memory_per_block_optin.to_string(),
            ),
            (
                "ENVGEN_STANDIN_SMEM_SM",
                self.shared_memory_per_multiprocessor.to_string(),
            ),
            (
                "ENVGEN_STANDIN_THREADS_SM",
                self.threads_per_multiprocessor.to_string(),
            ),
            ("ENVGEN_STANDIN_MEM_MIB", self.memory_mib.to_string()),
        ]
    }
}

/// Every device row.
pub fn all() -> &'static [DeviceSpec] {
    static DEVICES: std::sync::OnceLock<Vec<DeviceSpec>> = std::sync::OnceLock::new();
    DEVICES.get_or_init(|| {
        // Compiled in and parsed by a unit test: a failure is a build defect.
        parse_toml::<DevicesFile>("gpu_devices.toml", GPU_DEVICES_TOML)
            .expect("embedded env/gpu_devices.toml must parse (see compat tests)")
            .device
    })
}

/// The devices a `--target` names: a GPU model, family or SM as
/// `env/gpus.toml` knows it (`h100`, `A100`, `sm_90`), or a device's exact
/// reported name; every board variant of it that has device properties.
pub fn for_target(kb: &KnowledgeBase, query: &str) -> Result<Vec<&'static DeviceSpec>> {
    let exact: Vec<&DeviceSpec> = all()
        .iter()
        .filter(|d| d.name.eq_ignore_ascii_case(query.trim()))
        .collect();
    if !exact.is_empty() {
        return Ok(exact);
    }
    let found: Vec<&DeviceSpec> = match kb.lookup_gpu(query) {
        Some(spec) => all().iter().filter(|d| names(spec, d)).collect(),
        None => Vec::new(),
    };
    if found.is_empty() {
        let mut known: Vec<&str> = all().iter().map(|d| d.gpu.as_str()).collect();
        known.dedup();
        return Err(UserError::usage(format!(
            "--target `{query}`: envgen has no device properties for it"
        ))
        .with_fix(format!(
            "use one of: {} (or an SM such as sm_90); add a model to env/gpu_devices.toml, or \
             run `envgen warmup` without --target on the GPU itself",
            known.join(", ")
        ))
        .into());
    }
    Ok(found)
}

/// Whether device row `d` is (a variant of) what `spec` names.
fn names(spec: &GpuSpec, d: &DeviceSpec) -> bool {
    if spec.sm_only {
        return d.compute_capability == spec.compute_capability;
    }
    d.gpu == spec.id || spec.variants.contains(&d.gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_row_is_a_known_gpu_with_its_capability() {
        let kb = KnowledgeBase::embedded();
        assert!(all().len() >= 10);
        for d in all() {
            let spec = kb
                .lookup_gpu(&d.gpu)
                .unwrap_or_else(|| panic!("{}: no gpus.toml row {}", d.name, d.gpu));
            assert_eq!(spec.compute_capability, d.compute_capability, "{}", d.name);
            let (major, _) = d.capability();
            // The CUDA programming guide's per-capability limits (the file's header).
            let (smem_sm, threads) = match d.compute_capability.as_str() {
                "7.0" => (98304, 2048),
                "7.5" => (65536, 1024),
                "8.0" => (167936, 2048),
                "8.6" | "8.9" | "12.0" => (102400, 1536),
                "9.0" | "10.0" => (233472, 2048),
                other => panic!("{}: no limits known for {other}", d.name),
            };
            assert_eq!(d.shared_memory_per_multiprocessor, smem_sm, "{}", d.name);
            assert_eq!(d.threads_per_multiprocessor, threads, "{}", d.name);
            assert!(
                d.shared_memory_per_block_optin <= smem_sm && major >= 7,
                "{}",
                d.name
            );
            assert!(!d.source.is_empty(), "{}", d.name);
        }
    }

    #[test]
    fn targets_name_models_families_sms_and_exact_names() {
        let kb = KnowledgeBase::embedded();
        let names = |q: &str| -> Vec<String> {
            for_target(kb, q)
                .unwrap()
                .iter()
                .map(|d| d.name.clone())
                .collect()
        };
        assert_eq!(names("h100-sxm"), ["NVIDIA H100 80GB HBM3"]);
        assert_eq!(names("NVIDIA H100 PCIe"), ["NVIDIA H100 PCIe"]);
        assert_eq!(
            names("a100-80gb"),
            ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"]
        );
        assert_eq!(
            names("A100").len(),
            4,
            "the family: 40 and 80 GB, SXM and PCIe"
        );
        let sm90 = names("sm_90");
        assert!(sm90.contains(&"NVIDIA H200".to_string()) && sm90.len() == 3);
        let err = for_target(kb, "gtx 1080").unwrap_err().to_string();
        assert!(err.contains("no device properties"), "{err}");
    }
}
