//! Shared by the doctor tests: the FAKE nvidia-smi fixtures and what each
//! one must be read as (see tests/fixtures/nvidia-smi/README.md).

use std::path::{Path, PathBuf};
use std::process::Output;

pub struct FixtureHost {
    pub dir: &'static str,
    pub driver: &'static str,
    pub cuda: &'static str,
    pub name: &'static str,
    pub count: usize,
    pub memory_mib: u64,
    /// `None` where the (old) driver rejects the `compute_cap` query field.
    pub compute_capability: Option<&'static str>,
}

pub const HOSTS: &[FixtureHost] = &[
    FixtureHost {
        dir: "a30-535",
        driver: "535.261.03",
        cuda: "12.2",
        name: "NVIDIA A30",
        count: 1,
        memory_mib: 24576,
        compute_capability: Some("8.0"),
    },
    FixtureHost {
        dir: "a100-pcie-40gb-550",
        driver: "550.127.05",
        cuda: "12.4",
        name: "NVIDIA A100-PCIE-40GB",
        count: 1,
        memory_mib: 40960,
        compute_capability: Some("8.0"),
    },
    FixtureHost {
        dir: "a100-sxm4-80gb-570",
        driver: "570.133.20",
        cuda: "12.8",
        name: "NVIDIA A100-SXM4-80GB",
        count: 1,
        memory_mib: 81920,
        compute_capability: Some("8.0"),
    },
    FixtureHost {
        dir: "rtx-a6000-550",
        driver: "550.54.15",
        cuda: "12.4",
        name: "NVIDIA RTX A6000",
        count: 1,
        memory_mib: 49140,
        compute_capability: Some("8.6"),
    },
    FixtureHost {
        dir: "rtx-a4500-535",
        driver: "535.183.01",
        cuda: "12.2",
        name: "NVIDIA RTX A4500",
        count: 1,
        memory_mib: 20470,
        compute_capability: Some("8.6"),
    },
    FixtureHost {
        dir: "rtx-5070-ti-575",
        driver: "575.64.03",
        cuda: "12.9",
        name: "NVIDIA GeForce RTX 5070 Ti",
        count: 1,
        memory_mib: 16303,
        compute_capability: Some("12.0"),
    },
    FixtureHost {
        dir: "t4-470",
        driver: "470.256.02",
        cuda: "11.4",
        name: "Tesla T4",
        count: 1,
        memory_mib: 15360,
        compute_capability: None,
    },
    FixtureHost {
        dir: "h100-580",
        driver: "580.65.06",
        cuda: "13.0",
        name: "NVIDIA H100 80GB HBM3",
        count: 1,
        memory_mib: 81559,
        compute_capability: Some("9.0"),
    },
    FixtureHost {
        dir: "multi-4xa100-535",
        driver: "535.261.03",
        cuda: "12.2",
        name: "NVIDIA A100-SXM4-80GB",
        count: 4,
        memory_mib: 81920,
        compute_capability: Some("8.0"),
    },
];

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi")
}

pub fn read_fixture(host: &str, file: &str) -> String {
    let path = fixtures_dir().join(host).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// A PATH directory that holds only the FAKE `nvidia-smi` (or nothing).
pub fn bin_dir(with_fake_smi: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    if with_fake_smi {
        let target = dir.path().join("nvidia-smi");
        std::fs::copy(fixtures_dir().join("fake-nvidia-smi"), &target)
            .expect("copy fake nvidia-smi");
    }
    dir
}

/// Run `envgen doctor ARGS` with PATH = `bin` only, NVML skipped, no /proc
/// driver file unless `proc_file` is given, and the fake reading `fixture`.
pub fn doctor(
    bin: &Path,
    fixture: Option<&str>,
    proc_file: Option<&Path>,
    args: &[&str],
) -> Output {
    doctor_with_env(bin, fixture, proc_file, &[], args)
}

/// [`doctor`] on a host without GPU: no nvidia-smi on PATH, no /proc driver
/// file (assumed hosts, the no-GPU path, usage errors).
pub fn doctor_no_gpu(args: &[&str]) -> Output {
    let bin = bin_dir(false);
    doctor(bin.path(), None, None, args)
}

/// [`doctor`] with extra environment variables (set after the defaults).
pub fn doctor_with_env(
    bin: &Path,
    fixture: Option<&str>,
    proc_file: Option<&Path>,
    envs: &[(&str, &Path)],
    args: &[&str],
) -> Output {
    let mut command = super::envgen();
    command
        .arg("doctor")
        .args(args)
        .env("PATH", bin)
        .env("ENVGEN_NO_NVML", "1")
        .env(
            "ENVGEN_PROC_DRIVER_VERSION",
            proc_file.map_or_else(|| bin.join("no-such-proc-file"), Path::to_path_buf),
        )
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME");
    if let Some(fixture) = fixture {
        command.env("FAKE_NVIDIA_SMI_DIR", fixtures_dir().join(fixture));
    }
    command.envs(envs.iter().copied());
    command.output().expect("run envgen")
}
