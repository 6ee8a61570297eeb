//! The last GPU source: the kernel module's `/proc/driver/nvidia/version`.
//! It names the driver version only (no GPUs, no CUDA version), e.g.
//! `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul  9 …`
//! or `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build …`.

use std::path::PathBuf;

/// Environment variable that points the probe at another file (tests).
pub const PATH_ENV: &str = "ENVGEN_PROC_DRIVER_VERSION";
const DEFAULT_PATH: &str = "/proc/driver/nvidia/version";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcParseError {
    #[error("no `NVRM version:` line")]
    NoNvrmLine,
    #[error("the `NVRM version:` line names no driver version: {0:?}")]
    NoVersion(String),
}

/// The file the probe reads (`$ENVGEN_PROC_DRIVER_VERSION` or the real one).
pub fn version_path() -> PathBuf {
    std::env::var_os(PATH_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
}

/// The driver version in the contents of `/proc/driver/nvidia/version`.
pub fn parse_driver_version(text: &str) -> Result<String, ProcParseError> {
    let line = text
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("NVRM version:"))
        .ok_or(ProcParseError::NoNvrmLine)?;
    line.split_whitespace()
        .find(|token| is_driver_version(token))
        .map(str::to_string)
        .ok_or_else(|| ProcParseError::NoVersion(line.trim().to_string()))
}

/// "535.261.03", "580.65", "470.256.02": two or three dot-separated numbers.
pub fn is_driver_version(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts.iter().all(|part| {
            !part.is_empty() && part.len() <= 4 && part.bytes().all(|b| b.is_ascii_digit())
        })
}

/// Read the driver version from the kernel module, if it is loaded.
pub fn probe() -> Option<String> {
    let path = version_path();
    let text = std::fs::read_to_string(&path).ok()?;
    match parse_driver_version(&text) {
        Ok(version) => Some(version),
        Err(err) => {
            tracing::info!("{}: {err}", path.display());
            None
        }
    }
}

/// This process's peak resident memory in MiB (`VmHWM` of
/// /proc/self/status), when the kernel reports it.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proprietary_module() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul  9 20:50:42 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
        assert_eq!(parse_driver_version(text).as_deref(), Ok("535.261.03"));
    }

    #[test]
    fn open_module() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n";
        assert_eq!(parse_driver_version(text).as_deref(), Ok("580.65.06"));
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(parse_driver_version(""), Err(ProcParseError::NoNvrmLine));
        assert!(matches!(
            parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module"),
            Err(ProcParseError::NoVersion(_))
        ));
    }

    #[test]
    fn driver_version_shapes() {
        assert!(is_driver_version("535.261.03"));
        assert!(is_driver_version("580.65"));
        assert!(!is_driver_version("banana"));
        assert!(!is_driver_version("535"));
        assert!(!is_driver_version("5.3.5.1"));
        assert!(!is_driver_version("535..03"));
    }
}
