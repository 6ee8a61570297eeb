//! Edges that read the host into a [`crate::host::Host`]. (Issue #2.)
//!
//! GPU facts come from the first source that answers, in the contract's
//! order: NVML → `nvidia-smi` → `/proc/driver/nvidia/version`. Software
//! facts (toolkit, runtimes, Slurm, OS) are gathered in parallel with it,
//! each external command under a timeout ([`command::run_captured`]).

pub mod command;
pub mod cuda_backend;
pub mod nvidia_smi;
pub mod nvml;
pub mod os;
pub mod proc;
pub mod runtimes;
pub mod slurm;
pub mod toolkit;
pub mod torch;

use crate::compat::KnowledgeBase;
use crate::host::{Gpu, Host, HostSource, Software};

/// What one GPU source found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReport {
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
}

/// Driver and GPUs from the first source that answers, with notes on the others.
pub fn probe_gpus(notes: &mut Vec<String>) -> (HostSource, GpuReport) {
    if let Some(report) = nvml::probe(notes) {
        return (HostSource::Nvml, report);
    }
    if let Some(report) = nvidia_smi::probe(notes) {
        return (HostSource::NvidiaSmi, report);
    }
    if let Some(driver) = proc::probe() {
        notes.push(format!(
            "{}: driver {driver} is loaded but neither NVML nor nvidia-smi answered, so the GPUs are unknown",
            proc::version_path().display()
        ));
        let report = GpuReport {
            driver_version: Some(driver),
            ..GpuReport::default()
        };
        return (HostSource::Proc, report);
    }
    (HostSource::None, GpuReport::default())
}

/// Everything but the GPUs.
pub fn probe_software(notes: &mut Vec<String>) -> Software {
    let (toolkit, container_runtimes, (os, kernel, cpu, cpu_count)) = std::thread::scope(|scope| {
        let toolkit = scope.spawn(toolkit::probe);
        let runtimes = scope.spawn(runtimes::probe);
        let os = os::probe();
        (
            toolkit.join().unwrap_or_default(),
            runtimes.join().unwrap_or_default(),
            os,
        )
    });
    Software {
        cuda_toolkit: toolkit.cuda,
        cudnn: toolkit.cudnn,
        nvrtc: toolkit.nvrtc,
        container_runtimes,
        slurm: slurm::probe(notes),
        os,
        kernel,
        cpu,
        cpu_count,
    }
}

/// Probe this machine and fill GPU facts from the knowledge base.
pub fn probe_host() -> Host {
    let (gpu_side, software_side) = std::thread::scope(|scope| {
        let software = scope.spawn(|| {
            let mut notes = Vec::new();
            (probe_software(&mut notes), notes)
        });
        let mut notes = Vec::new();
        let gpus = probe_gpus(&mut notes);
        (
            (gpus, notes),
            software.join().unwrap_or_else(|_| {
                (
                    Software::default(),
                    vec!["software probe crashed".to_string()],
                )
            }),
        )
    });
    let ((source, report), mut notes) = gpu_side;
    let (software, software_notes) = software_side;
    notes.extend(software_notes);
    let mut host = Host {
        driver_version: report.driver_version,
        cuda_driver_version: report.cuda_driver_version,
        gpus: report.gpus,
        source,
        notes,
        software,
    };
    KnowledgeBase::embedded().enrich(&mut host);
    host
}
