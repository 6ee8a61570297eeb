//! Where CUDA toolkits live: the usual install folders and the folders
//! NVIDIA's PyPI wheels put into Python environments.

use std::path::{Path, PathBuf};

/// Folders that may hold a CUDA toolkit (with `include/` and `lib64/` or `lib/`).
pub(super) fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/usr/local/cuda")];
    let mut versioned: Vec<PathBuf> = glob::glob("/usr/local/cuda-*")
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    versioned.sort();
    versioned.reverse();
    roots.extend(versioned);
    roots.push(PathBuf::from("/opt/cuda"));
    roots.extend(python_cuda_roots());
    roots
}

/// `nvidia/cu13`, `nvidia/cu12`, `nvidia/cuda_nvrtc` folders of NVIDIA's
/// wheels in the active and the usual Python environments.
fn python_cuda_roots() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    let mut roots = Vec::new();
    for prefix in prefixes {
        for pattern in [
            "lib/python3*/site-packages/nvidia",
            "lib/python3*/dist-packages/nvidia",
        ] {
            let pattern = format!("{}/{pattern}", prefix.display());
            for nvidia in glob::glob(&pattern).into_iter().flatten().flatten() {
                for sub in ["cu13", "cu12", "cuda_nvrtc", "cuda_runtime"] {
                    roots.push(nvidia.join(sub));
                }
            }
        }
    }
    roots
}

pub(super) fn library_dirs() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(p) = std::env::var_os("CUDA_PATH") {
        roots.push(PathBuf::from(p));
    }
    roots.extend(toolkit_roots());
    let mut dirs = Vec::new();
    for root in roots {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            let dir = root.join(sub);
            if dir.is_dir() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

pub(super) fn join_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "(no candidate folder exists)".into();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
