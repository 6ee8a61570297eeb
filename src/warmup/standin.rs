//! envgen's stand-in CUDA driver, carried inside the binary: a labelled fake
//! `libcuda.so.1` (source: `libcuda_standin.c` beside this file, compiled by
//! build.rs) whose kernels compute nothing. `envgen warmup --target` puts it
//! on the loader path of its child runs, reporting the target GPU's
//! properties, so that CubeCL compiles with the real NVRTC exactly the
//! kernels that GPU will ask for.

use std::path::{Path, PathBuf};

use crate::error::{Result, UserError};

static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libcuda_standin.so"));

/// Write the stand-in as `libcuda.so.1` into `dir` (a private scratch
/// folder) and return the folder to put first on `LD_LIBRARY_PATH`.
pub fn install(dir: &Path) -> Result<PathBuf> {
    if LIBRARY.is_empty() {
        return Err(UserError::environment(
            "this envgen was built without its stand-in CUDA driver (no C compiler at build time)",
        )
        .with_fix("rebuild envgen with a C compiler (`cc`) installed, or warm the cache on the GPU itself (`envgen warmup` without --target)")
        .into());
    }
    let lib_dir = dir.join("standin-driver");
    std::fs::create_dir_all(&lib_dir)
        .map_err(|e| UserError::environment(format!("cannot create {}: {e}", lib_dir.display())))?;
    let path = lib_dir.join("libcuda.so.1");
    std::fs::write(&path, LIBRARY)
        .map_err(|e| UserError::environment(format!("cannot write {}: {e}", path.display())))?;
    Ok(lib_dir)
}

/// `LD_LIBRARY_PATH` with `dir` first (the stand-in wins over a real driver).
pub fn loader_path(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(dirs).unwrap_or_else(|_| dir.as_os_str().to_owned())
}
