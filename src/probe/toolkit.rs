//! The host's CUDA toolkit, cuDNN and NVRTC. These describe what native
//! builds on this machine link against; pip wheels and containers bring
//! their own, so doctor reports them as facts, not requirements.

use std::path::PathBuf;
use std::time::Duration;

use super::command::run_captured;

const TIMEOUT: Duration = Duration::from_secs(5);

/// The CUDA install root: `$CUDA_PATH` (or `$CUDA_HOME`), else /usr/local/cuda.
fn cuda_root() -> PathBuf {
    ["CUDA_PATH", "CUDA_HOME"]
        .iter()
        .find_map(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"))
}

/// `nvcc --version` → "12.2.140" (from "Cuda compilation tools, release 12.2, V12.2.140").
pub fn parse_nvcc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|line| line.contains("release"))?;
    let full = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix('V'))
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()));
    let release = line
        .split("release")
        .nth(1)?
        .split(',')
        .next()
        .map(str::trim)
        .filter(|v| !v.is_empty());
    full.or(release).map(str::to_string)
}

/// `version.json` of a CUDA install → its `cuda.version` ("12.2.2").
pub fn parse_version_json(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value
        .get("cuda")?
        .get("version")?
        .as_str()
        .map(str::to_string)
}

/// `cudnn_version.h` → "9.1.0" from CUDNN_MAJOR / CUDNN_MINOR / CUDNN_PATCHLEVEL.
pub fn parse_cudnn_header(text: &str) -> Option<String> {
    let define = |name: &str| -> Option<String> {
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some(name))
                .then(|| words.next())
                .flatten()
                .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                .map(str::to_string)
        })
    };
    Some(format!(
        "{}.{}.{}",
        define("CUDNN_MAJOR")?,
        define("CUDNN_MINOR")?,
        define("CUDNN_PATCHLEVEL")?
    ))
}

/// "libcudnn.so.9.1.0" with stem "libcudnn" → "9.1.0"; the bare soname
/// "libcudnn.so.9" gives "9".
pub fn version_from_library_name(file_name: &str, stem: &str) -> Option<String> {
    let version = file_name.strip_prefix(stem)?.strip_prefix(".so.")?;
    (!version.is_empty()
        && version
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| version.to_string())
}

/// The most specific version among library files named `stem.so.*` in `dirs`
/// (the fully versioned real file beats the soname link).
pub fn library_version_in_dirs(stem: &str, dirs: &[PathBuf]) -> Option<String> {
    dirs.iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| version_from_library_name(&entry.file_name().to_string_lossy(), stem))
        .max_by_key(|version| version.split('.').count())
}

/// Libraries the dynamic linker knows (`ldconfig -p`), as paths.
fn ldconfig_paths() -> Vec<PathBuf> {
    // ldconfig usually lives in /sbin, which may not be on a user's PATH.
    let program = which::which("ldconfig").unwrap_or_else(|_| PathBuf::from("/sbin/ldconfig"));
    run_captured(&program, &["-p"], TIMEOUT)
        .ok()
        .and_then(|out| out.success_stdout())
        .map(|text| parse_ldconfig(&text))
        .unwrap_or_default()
}

/// "\tlibnvrtc.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libnvrtc.so.12" → the path.
pub fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| line.split_once("=>"))
        .map(|(_, path)| PathBuf::from(path.trim()))
        .collect()
}

/// A library's version from ldconfig's entries, following the soname link
/// to the real file so "libnvrtc.so.12" becomes "12.2.140".
fn library_version_from_ldconfig(stem: &str, paths: &[PathBuf]) -> Option<String> {
    paths
        .iter()
        .filter(|path| {
            path.file_name().is_some_and(|name| {
                version_from_library_name(&name.to_string_lossy(), stem).is_some()
            })
        })
        .filter_map(|path| {
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            let name = real.file_name()?.to_string_lossy().into_owned();
            version_from_library_name(&name, stem)
        })
        .max_by_key(|version| version.split('.').count())
}

/// What the toolkit probe found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Toolkit {
    pub cuda: Option<String>,
    pub cudnn: Option<String>,
    pub nvrtc: Option<String>,
}

pub fn probe() -> Toolkit {
    let root = cuda_root();
    let cuda = std::fs::read_to_string(root.join("version.json"))
        .ok()
        .and_then(|text| parse_version_json(&text))
        .or_else(|| {
            let nvcc = which::which("nvcc").unwrap_or_else(|_| root.join("bin/nvcc"));
            run_captured(&nvcc, &["--version"], TIMEOUT)
                .ok()
                .and_then(|out| out.success_stdout())
                .and_then(|text| parse_nvcc_version(&text))
        });

    let lib_dirs: Vec<PathBuf> = [
        root.join("lib64"),
        root.join("lib"),
        PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        PathBuf::from("/usr/lib/aarch64-linux-gnu"),
        PathBuf::from("/usr/lib64"),
    ]
    .into_iter()
    .collect();
    let header_dirs = [
        root.join("include"),
        PathBuf::from("/usr/include"),
        PathBuf::from("/usr/include/x86_64-linux-gnu"),
        PathBuf::from("/usr/include/aarch64-linux-gnu"),
    ];
    let cudnn_header = header_dirs
        .iter()
        .find_map(|dir| std::fs::read_to_string(dir.join("cudnn_version.h")).ok())
        .and_then(|text| parse_cudnn_header(&text));

    let mut ldconfig: Option<Vec<PathBuf>> = None;
    let mut library = |stem: &str| {
        library_version_in_dirs(stem, &lib_dirs).or_else(|| {
            library_version_from_ldconfig(stem, ldconfig.get_or_insert_with(ldconfig_paths))
        })
    };
    let cudnn = cudnn_header.or_else(|| library("libcudnn"));
    let nvrtc = library("libnvrtc");
    Toolkit { cuda, cudnn, nvrtc }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_output() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2023 NVIDIA Corporation\nBuilt on Tue_Aug_15_22:02:13_PDT_2023\nCuda compilation tools, release 12.2, V12.2.140\nBuild cuda_12.2.r12.2/compiler.33191640_0\n";
        assert_eq!(parse_nvcc_version(text).as_deref(), Some("12.2.140"));
        assert_eq!(parse_nvcc_version("garbage"), None);
    }

    #[test]
    fn version_json() {
        let text = r#"{"cuda": {"name": "CUDA SDK", "version": "12.2.2"}, "cuda_cudart": {"version": "12.2.140"}}"#;
        assert_eq!(parse_version_json(text).as_deref(), Some("12.2.2"));
        assert_eq!(parse_version_json("{"), None);
    }

    #[test]
    fn cudnn_header() {
        let text = "#ifndef CUDNN_VERSION_H_\n#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n";
        assert_eq!(parse_cudnn_header(text).as_deref(), Some("9.1.0"));
        assert_eq!(parse_cudnn_header("#define CUDNN_MAJOR 9\n"), None);
    }

    #[test]
    fn library_names_and_dirs() {
        assert_eq!(
            version_from_library_name("libcudnn.so.9.1.0", "libcudnn").as_deref(),
            Some("9.1.0")
        );
        assert_eq!(
            version_from_library_name("libcudnn_ops.so.9", "libcudnn"),
            None
        );
        assert_eq!(version_from_library_name("libnvrtc.so", "libnvrtc"), None);

        let dir = tempfile::tempdir().unwrap();
        for name in [
            "libnvrtc.so.12",
            "libnvrtc.so.12.2.140",
            "libnvrtc-builtins.so.12.2",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        assert_eq!(
            library_version_in_dirs("libnvrtc", &[dir.path().to_path_buf()]).as_deref(),
            Some("12.2.140")
        );
    }

    #[test]
    fn ldconfig_lines() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\tlibnvrtc.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libnvrtc.so.12\n";
        assert_eq!(
            parse_ldconfig(text),
            vec![PathBuf::from("/usr/local/cuda/lib64/libnvrtc.so.12")]
        );
    }
}
