//! What Burn's CUDA backend needs from the host, looked up one piece at a
//! time so that each missing piece has its own message and fix:
//!
//! 1. the driver library `libcuda.so.1` (cudarc dlopens it by name), a
//!    successful `cuInit`, and at least one device;
//! 2. NVRTC (`libnvrtc.so.N`, which itself dlopens `libnvrtc-builtins.so.N.M`
//!    by name): CubeCL compiles every kernel with it at run time;
//! 3. the CUDA headers (`cuda_bf16.h`, `mma.h`, … and CCCL's `cuda/barrier`)
//!    that the kernels include, under `$CUDA_PATH/include`;
//! 4. an NVRTC no newer than the driver: PTX from a newer toolkit is
//!    refused at module load (CUDA error 222, `UNSUPPORTED_PTX_VERSION`).
//!
//! NVRTC and headers are also found where they usually live when they are
//! not on the loader path: `$CUDA_PATH`, `/usr/local/cuda*`, `/opt/cuda`,
//! and the `nvidia/cu13` (or `cu12`, `cuda_nvrtc`) folders that NVIDIA's
//! PyPI wheels install into Python environments. [`CudaStack::activate`]
//! then makes cudarc and CubeCL use what was found (see there).
//!
//! Written against the driver API by hand (a few `dlsym`s through
//! `libloading`) rather than through cudarc: cudarc panics when a library is
//! missing, and the point here is to say which one.

use std::ffi::{c_char, c_int, CStr};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::UserError;

mod failure;
mod search;

pub use failure::classify_failure;
use search::{join_paths, library_dirs, toolkit_roots};

/// The device-name suffix of envgen's stand-in driver
/// (`src/warmup/libcuda_standin.c`) in its default mode: kernels "run" there
/// without computing anything, so results are not compared.
pub const STANDIN_MARK: &str = "(envgen stand-in driver)";

/// The symbol the stand-in driver exports in every mode (also when it
/// reports a real GPU's exact name for `envgen warmup --target`).
const STANDIN_SYMBOL: &[u8] = b"envgen_standin_driver";

/// Everything found, or the first missing piece of each part.
#[derive(Debug, Clone, Serialize)]
pub struct CudaStack {
    pub driver: Result<Driver, Problem>,
    pub nvrtc: Result<Nvrtc, Problem>,
    pub headers: Result<Headers, Problem>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Driver {
    /// The CUDA version the driver supports (`cuDriverGetVersion`), e.g. (13, 0).
    pub cuda: (u32, u32),
    pub devices: Vec<Device>,
    /// envgen's stand-in driver (it exports `envgen_standin_driver`), not NVIDIA's.
    pub standin: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Device {
    pub name: String,
    pub compute_capability: (u32, u32),
}

#[derive(Debug, Clone, Serialize)]
pub struct Nvrtc {
    pub library: PathBuf,
    /// `nvrtcVersion`, e.g. (13, 0).
    pub version: (u32, u32),
    /// Whether it loads by name already; if not, [`CudaStack::activate`] preloads it.
    pub on_loader_path: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Headers {
    /// What `CUDA_PATH` must be for CubeCL: the folder holding `include/`.
    pub cuda_path: PathBuf,
    pub cccl: bool,
}

/// One missing or unusable piece: what, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Stable code for tests and JSON (`no-libcuda`, `cuinit-failed`, …).
    pub code: &'static str,
    pub message: String,
    pub fix: String,
}

impl Problem {
    fn new(code: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            fix: fix.into(),
        }
    }

    pub fn to_user_error(&self) -> UserError {
        UserError::environment(format!("--backend cuda: {}", self.message)).with_fix(&self.fix)
    }
}

impl CudaStack {
    /// Look at this host (loads libraries; runs no kernel).
    pub fn probe() -> Self {
        let driver = probe_driver();
        let nvrtc = probe_nvrtc();
        let headers = probe_headers(nvrtc.as_ref().ok());
        Self {
            driver,
            nvrtc,
            headers,
        }
    }

    /// The first problem, in the order a run would hit them, including a
    /// NVRTC newer than the driver.
    pub fn first_problem(&self) -> Option<Problem> {
        let driver = match &self.driver {
            Ok(d) => d,
            Err(p) => return Some(p.clone()),
        };
        let nvrtc = match &self.nvrtc {
            Ok(n) => n,
            Err(p) => return Some(p.clone()),
        };
        let headers = match &self.headers {
            Ok(h) => h,
            Err(p) => return Some(p.clone()),
        };
        if !headers.cccl {
            return Some(Problem::new(
                "no-cccl",
                format!(
                    "the CUDA headers in {}/include have no CCCL (nv/target, cuda/barrier), \
                     which cuda_fp16.h and the kernels include",
                    headers.cuda_path.display()
                ),
                "install CCCL of the same CUDA (apt: cuda-cccl-13-0; pip: nvidia-cuda-cccl)",
            ));
        }
        if nvrtc.version > driver.cuda {
            let (nm, nn) = nvrtc.version;
            let (dm, dn) = driver.cuda;
            return Some(Problem::new(
                "nvrtc-newer-than-driver",
                format!(
                    "NVRTC {nm}.{nn} ({}) is newer than the driver, which supports CUDA {dm}.{dn}: \
                     the driver would refuse every kernel it compiles (CUDA error 222, \
                     UNSUPPORTED_PTX_VERSION)",
                    nvrtc.library.display()
                ),
                format!(
                    "use an NVRTC of CUDA {dm}.{dn} or older (e.g. `pip install \
                     nvidia-cuda-nvrtc=={dm}.{dn}.*`, or CUDA_PATH=/usr/local/cuda-{dm}.{dn}), \
                     or upgrade the driver"
                ),
            ));
        }
        None
    }

    pub fn is_standin(&self) -> bool {
        self.driver
            .as_ref()
            .is_ok_and(|d| d.standin || d.devices.iter().any(|g| g.name.ends_with(STANDIN_MARK)))
    }

    /// Make cudarc and CubeCL use what was found: NVRTC and its builtins are
    /// loaded by absolute path first (the dynamic loader then hands cudarc's
    /// later load-by-name the same library: it matches their soname), and
    /// `CUDA_PATH` is set to the headers' folder when it was not set.
    ///
    /// Call before the first CUDA tensor is created, while the process has
    /// no other thread reading the environment.
    pub fn activate(&self) -> Result<(), Problem> {
        if let Some(p) = self.first_problem() {
            return Err(p);
        }
        let nvrtc = self.nvrtc.as_ref().expect("checked");
        if !nvrtc.on_loader_path {
            // Builtins first: NVRTC loads them by name when it compiles.
            if let Some(builtins) = builtins_next_to(&nvrtc.library) {
                keep_loaded(&builtins)?;
            }
            keep_loaded(&nvrtc.library)?;
        }
        let headers = self.headers.as_ref().expect("checked");
        if std::env::var_os("CUDA_PATH").is_none() {
            std::env::set_var("CUDA_PATH", &headers.cuda_path);
        }
        Ok(())
    }
}

impl CudaStack {
    /// One line: device, driver CUDA, NVRTC and headers used.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Ok(d) = &self.driver {
            for g in &d.devices {
                let (ma, mi) = g.compute_capability;
                parts.push(format!("{} (compute capability {ma}.{mi})", g.name));
            }
            parts.push(format!("driver CUDA {}.{}", d.cuda.0, d.cuda.1));
        }
        if let Ok(n) = &self.nvrtc {
            parts.push(format!(
                "NVRTC {}.{} ({})",
                n.version.0,
                n.version.1,
                n.library.display()
            ));
        }
        if let Ok(h) = &self.headers {
            parts.push(format!("headers {}/include", h.cuda_path.display()));
        }
        parts.join(", ")
    }
}

/// Load a library for the rest of the process (never unloaded: the loader
/// keeps serving it to later loads by name).
fn keep_loaded(path: &Path) -> Result<(), Problem> {
    // SAFETY: loading NVIDIA's NVRTC runs its initialisers, which have no
    // preconditions.
    match unsafe { libloading::Library::new(path) } {
        Ok(lib) => {
            std::mem::forget(lib);
            Ok(())
        }
        Err(e) => Err(Problem::new(
            "nvrtc-unloadable",
            format!("{} could not be loaded: {e}", path.display()),
            "reinstall the CUDA toolkit's NVRTC (or the nvidia-cuda-nvrtc wheel)",
        )),
    }
}

// --- 1. the driver ------------------------------------------------------------

type CuInit = unsafe extern "C" fn(u32) -> c_int;
type CuIntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

fn probe_driver() -> Result<Driver, Problem> {
    // SAFETY: loading the driver library runs its initialisers only.
    let lib = ["libcuda.so.1", "libcuda.so"]
        .iter()
        .find_map(|name| unsafe { libloading::Library::new(*name) }.ok())
        .ok_or_else(|| {
            Problem::new(
                "no-libcuda",
                "the NVIDIA driver library libcuda.so.1 is not on the loader path",
                "install the NVIDIA driver (in a container: start it with GPUs, e.g. `envgen run \
                 --where docker`, which asks Docker for them, or `docker run --gpus all`)",
            )
        })?;
    // SAFETY: symbols of the CUDA driver API with their documented signatures.
    unsafe {
        let sym = |name: &str| -> Result<(), Problem> {
            lib.get::<*const ()>(name.as_bytes())
                .map(|_| ())
                .map_err(|_| {
                    Problem::new(
                        "libcuda-incomplete",
                        format!("libcuda.so.1 has no {name}: it is not an NVIDIA CUDA driver"),
                        "reinstall the NVIDIA driver",
                    )
                })
        };
        for name in [
            "cuInit",
            "cuDriverGetVersion",
            "cuDeviceGetCount",
            "cuDeviceGet",
            "cuDeviceGetName",
            "cuDeviceGetAttribute",
        ] {
            sym(name)?;
        }
        let cu_init = lib.get::<CuInit>(b"cuInit").expect("checked");
        let rc = cu_init(0);
        if rc != 0 {
            return Err(cuinit_problem(rc));
        }
        let mut version = 0;
        lib.get::<CuIntOut>(b"cuDriverGetVersion").expect("checked")(&mut version);
        let mut count = 0;
        lib.get::<CuIntOut>(b"cuDeviceGetCount").expect("checked")(&mut count);
        if count <= 0 {
            return Err(Problem::new(
                "no-device",
                "the NVIDIA driver sees no GPU",
                "check `nvidia-smi`; in a container, start it with GPUs",
            ));
        }
        let get = lib.get::<CuDeviceGet>(b"cuDeviceGet").expect("checked");
        let get_name = lib
            .get::<CuDeviceGetName>(b"cuDeviceGetName")
            .expect("checked");
        let attribute = lib
            .get::<CuDeviceGetAttribute>(b"cuDeviceGetAttribute")
            .expect("checked");
        let mut devices = Vec::new();
        for ordinal in 0..count {
            let mut dev = 0;
            if get(&mut dev, ordinal) != 0 {
                continue;
            }
            let mut buf = [0 as c_char; 256];
            get_name(buf.as_mut_ptr(), buf.len() as c_int, dev);
            let name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            let (mut major, mut minor) = (0, 0);
            attribute(
                &mut major,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                dev,
            );
            attribute(
                &mut minor,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                dev,
            );
            devices.push(Device {
                name,
                compute_capability: (major.max(0) as u32, minor.max(0) as u32),
            });
        }
        let standin = lib.get::<*const ()>(STANDIN_SYMBOL).is_ok();
        // Kept loaded for cudarc, which loads it next (unloading a driver
        // library after cuInit is not something NVIDIA supports).
        std::mem::forget(lib);
        Ok(Driver {
            standin,
            cuda: (
                version.max(0) as u32 / 1000,
                (version.max(0) as u32 % 1000) / 10,
            ),
            devices,
        })
    }
}

/// cuInit's error codes people meet (CUDA driver API, `CUresult`).
fn cuinit_problem(rc: c_int) -> Problem {
    let (what, fix) = match rc {
        100 => (
            "no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)",
            "check `nvidia-smi`; in a container, start it with GPUs; check CUDA_VISIBLE_DEVICES",
        ),
        35 => (
            "the driver is older than this CUDA runtime needs (CUDA_ERROR_INSUFFICIENT_DRIVER)",
            "upgrade the NVIDIA driver (`envgen doctor` names the minimum)",
        ),
        804 | 805 => (
            "forward compatibility is not supported on this GPU (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)",
            "remove the cuda-compat libraries from the loader path, or upgrade the driver",
        ),
        999 => (
            "the driver failed with an unknown error (CUDA_ERROR_UNKNOWN), often a driver/kernel module mismatch after an upgrade",
            "reboot, or reload the nvidia kernel module; `dmesg` tells more",
        ),
        _ => (
            "the driver refused to initialise",
            "check `nvidia-smi` and `dmesg`",
        ),
    };
    Problem::new(
        "cuinit-failed",
        format!("cuInit failed with error {rc}: {what}"),
        fix,
    )
}

// --- 2. NVRTC -------------------------------------------------------------------

type NvrtcVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

/// The NVRTC sonames cudarc tries, newest first.
const NVRTC_NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

fn probe_nvrtc() -> Result<Nvrtc, Problem> {
    for name in NVRTC_NAMES {
        // SAFETY: NVRTC's initialisers have no preconditions.
        if let Ok(lib) = unsafe { libloading::Library::new(name) } {
            let version = nvrtc_version(&lib, Path::new(name))?;
            // Never unloaded: NVRTC does not survive being unloaded and
            // loaded again in one process (its next compile crashes).
            std::mem::forget(lib);
            return Ok(Nvrtc {
                library: PathBuf::from(name),
                version,
                on_loader_path: true,
            });
        }
    }
    let searched = library_dirs();
    for dir in &searched {
        for name in NVRTC_NAMES {
            let path = dir.join(name);
            if !path.is_file() {
                continue;
            }
            if builtins_next_to(&path).is_none() {
                return Err(Problem::new(
                    "no-nvrtc-builtins",
                    format!(
                        "{} has no libnvrtc-builtins.so.* beside it: NVRTC loads it to compile",
                        path.display()
                    ),
                    "install NVRTC completely (the toolkit's cuda-nvrtc package, or the \
                     nvidia-cuda-nvrtc wheel)",
                ));
            }
            // SAFETY: as above.
            let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
                Problem::new(
                    "nvrtc-unloadable",
                    format!("{} could not be loaded: {e}", path.display()),
                    "reinstall NVRTC",
                )
            })?;
            let version = nvrtc_version(&lib, &path)?;
            std::mem::forget(lib);
            return Ok(Nvrtc {
                library: path,
                version,
                on_loader_path: false,
            });
        }
    }
    Err(Problem::new(
        "no-nvrtc",
        format!(
            "NVRTC (libnvrtc.so.13/.12), which compiles the backend's kernels, was found neither \
             on the loader path nor in {}",
            join_paths(&searched)
        ),
        "install the CUDA toolkit's NVRTC (apt: cuda-nvrtc-13-0; pip: nvidia-cuda-nvrtc) and \
         set CUDA_PATH to its folder, or use an envgen CUDA image",
    ))
}

fn nvrtc_version(lib: &libloading::Library, path: &Path) -> Result<(u32, u32), Problem> {
    // SAFETY: nvrtcVersion(int*, int*) as documented by NVIDIA.
    unsafe {
        let f = lib.get::<NvrtcVersion>(b"nvrtcVersion").map_err(|_| {
            Problem::new(
                "nvrtc-unloadable",
                format!("{} has no nvrtcVersion: not NVIDIA's NVRTC", path.display()),
                "reinstall NVRTC",
            )
        })?;
        let (mut major, mut minor) = (0, 0);
        f(&mut major, &mut minor);
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }
}

fn builtins_next_to(nvrtc: &Path) -> Option<PathBuf> {
    let dir = nvrtc.parent()?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so."))
        })
        .collect();
    // The longest name is the fully versioned one (…so.13.0), the soname.
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.into_iter().next()
}

// --- 3. headers -------------------------------------------------------------------

/// Headers CubeCL's generated kernels include (directly, or through
/// cuda_runtime.h: `crt/host_config.h`).
const NEEDED_HEADERS: [&str; 4] = ["cuda_bf16.h", "cuda_fp16.h", "mma.h", "crt/host_config.h"];

fn probe_headers(nvrtc: Option<&Nvrtc>) -> Result<Headers, Problem> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("CUDA_PATH") {
        // An explicit CUDA_PATH is what CubeCL uses: judge only that one.
        return headers_at(Path::new(&p)).ok_or_else(|| {
            Problem::new(
                "no-cuda-headers",
                format!(
                    "CUDA_PATH={} has no include/{} (the CUDA headers the kernels include)",
                    Path::new(&p).display(),
                    NEEDED_HEADERS.join(", include/")
                ),
                "point CUDA_PATH at a CUDA toolkit (the folder holding include/), or unset it",
            )
        });
    }
    // Beside the NVRTC that was found first (a wheel's folder holds both).
    if let Some(dir) = nvrtc
        .and_then(|n| n.library.parent())
        .and_then(Path::parent)
    {
        roots.push(dir.to_path_buf());
    }
    roots.extend(toolkit_roots());
    for root in &roots {
        if let Some(h) = headers_at(root) {
            return Ok(h);
        }
    }
    Err(Problem::new(
        "no-cuda-headers",
        format!(
            "the CUDA headers ({}) were found in none of {}",
            NEEDED_HEADERS.join(", "),
            join_paths(&roots)
        ),
        "install the CUDA toolkit headers (apt: cuda-cudart-dev-13-0 cuda-crt-13-0 \
         cuda-cccl-13-0; pip: nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl) and set \
         CUDA_PATH, or use an envgen CUDA image",
    ))
}

fn headers_at(root: &Path) -> Option<Headers> {
    let include = root.join("include");
    if !NEEDED_HEADERS.iter().all(|h| include.join(h).is_file()) {
        return None;
    }
    // CCCL: in include/ up to CUDA 12; from CUDA 13 in include/cccl/, with
    // include/nv/ still beside the other headers.
    let cccl = include.join("cccl/nv/target").is_file() || include.join("nv/target").is_file();
    Some(Headers {
        cuda_path: root.to_path_buf(),
        cccl,
    })
}

#[cfg(test)]
mod tests;
