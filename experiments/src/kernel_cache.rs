//! The CUDA kernel cache: where CubeCL keeps this GPU model's compiled
//! kernels and autotune results, how an empty one is seeded from a cache
//! made elsewhere (`envgen warmup --target` on a login node, an image's
//! copy), and what a run found in it.
//!
//! Layout of one GPU model's folder, `<cache>/cubecl/<gpu-model>-sm<cc>`,
//! as CubeCL 0.10 writes it: `cuda/<cubecl version>/ptx/{toc,chunk0.cbor}`
//! (kernels by the stable hash of their id) and `autotune/<cubecl version>/…`
//! (JSON lines per device and operation).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use crate::cuda_stack::CudaStack;

/// envgen's cache folder: `$ENVGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/envgen`,
/// else `~/.cache/envgen`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ENVGEN_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("envgen"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("envgen"))
}

/// The folder name of a GPU model's kernels: its name as the driver reports
/// it, lower-cased, runs of other characters as one `-`, then `-sm<cc>`
/// (`NVIDIA H100 80GB HBM3`, 9.0 → `nvidia-h100-80gb-hbm3-sm90`).
pub fn model_slug(device_name: &str, (major, minor): (u32, u32)) -> String {
    let mut slug = String::new();
    for c in device_name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    format!("{}-sm{major}{minor}", slug.trim_matches('-'))
}

/// The folder CubeCL keeps this GPU model's compiled kernels and autotune
/// results in: `<cache>/cubecl/<slug>`. Kernels are compiled for one
/// architecture and autotune results hold for one model, so each model has
/// its own. None without a cache folder or a device.
pub fn kernel_cache_dir(stack: &CudaStack) -> Option<PathBuf> {
    let device = stack.driver.as_ref().ok()?.devices.first()?;
    Some(
        cache_dir()?
            .join("cubecl")
            .join(model_slug(&device.name, device.compute_capability)),
    )
}

/// Read-only caches to start from: `ENVGEN_KERNEL_SEED`, folders separated
/// by `:`, each laid out like [`cache_dir`] (an image sets it to the cache
/// it carries; a Slurm job to the shared folder `envgen warmup` filled).
pub const SEED_ENV: &str = "ENVGEN_KERNEL_SEED";

/// Whether a model folder holds compiled kernels already.
fn has_kernels(model_dir: &Path) -> bool {
    std::fs::read_dir(model_dir.join("cuda")).is_ok_and(|mut d| d.next().is_some())
}

/// Copy the first seed that has this model's kernels into `model_dir`, when
/// `model_dir` has none yet (a cache in use is never overwritten: CubeCL
/// appends to its files). Returns the seed copied from.
pub fn seed(model_dir: &Path) -> Option<PathBuf> {
    if has_kernels(model_dir) {
        return None;
    }
    let slug = model_dir.file_name()?;
    let seeds = std::env::var_os(SEED_ENV)?;
    for root in std::env::split_paths(&seeds) {
        let from = root.join("cubecl").join(slug);
        if !has_kernels(&from) {
            continue;
        }
        match copy_tree(&from, model_dir) {
            Ok(()) => return Some(from),
            Err(e) => eprintln!(
                "envgen: cannot copy the kernel cache {} into {}: {e}",
                from.display(),
                model_dir.display()
            ),
        }
    }
    None
}

/// Copy the regular files and folders under `from` into `to` (existing files
/// are replaced). Links and other special files are not followed.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Autotune results recorded on real GPUs, shipped with envgen: (path below
/// the records' root, bytes), the path starting with the model folder's name
/// (`nvidia-h100-80gb-hbm3-sm90/autotune/…`). The binary registers them
/// (env/autotune/, embedded by its build script) before any run.
pub type AutotuneRecords = &'static [(&'static str, &'static [u8])];

static RECORDS: OnceLock<AutotuneRecords> = OnceLock::new();

/// Register the shipped autotune records (once per process).
pub fn register_autotune_records(records: AutotuneRecords) {
    let _ = RECORDS.set(records);
}

/// Folders of autotune records of one's own (`ENVGEN_AUTOTUNE_RECORDS`,
/// separated by `:`, laid out as env/autotune: `<model>/autotune/…`), e.g.
/// the `autotune.tgz` of a GPU check unpacked: used before the shipped ones.
pub const RECORDS_ENV: &str = "ENVGEN_AUTOTUNE_RECORDS";

/// Give `model_dir` the autotune results recorded for its GPU model, when it
/// has none yet (results tuned on this GPU are never replaced): from the
/// first [`RECORDS_ENV`] folder that has the model, else from `shipped`.
/// Returns how many files were written.
pub fn install_autotune_records(model_dir: &Path, shipped: AutotuneRecords) -> usize {
    let Some(slug) = model_dir.file_name().and_then(|s| s.to_str()) else {
        return 0;
    };
    if model_dir.join("autotune").exists() {
        return 0;
    }
    if let Some(folders) = std::env::var_os(RECORDS_ENV) {
        for root in std::env::split_paths(&folders) {
            let from = root.join(slug).join("autotune");
            if from.is_dir() && copy_tree(&from, &model_dir.join("autotune")).is_ok() {
                return count_files(&model_dir.join("autotune"));
            }
        }
    }
    let prefix = format!("{slug}/");
    let mut written = 0;
    for (path, bytes) in shipped {
        let Some(rest) = path.strip_prefix(&prefix) else {
            continue;
        };
        // Only the autotune results: record.toml says where they came from.
        if !rest.starts_with("autotune/") || rest.split('/').any(|part| part == "..") {
            continue;
        }
        let target = model_dir.join(rest);
        let ok = target
            .parent()
            .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
            && std::fs::write(&target, bytes).is_ok();
        written += usize::from(ok);
    }
    written
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            if e.path().is_dir() {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// Compile once: point CubeCL's PTX cache and autotune cache at
/// [`kernel_cache_dir`], seeded first (CubeCL's default keeps autotune
/// results in the `target/` of the nearest Cargo project and compiles every
/// kernel anew in each process). CubeCL's environment overrides
/// (`CUBECL_DEBUG_LOG`, `CUBECL_AUTOTUNE_LEVEL`) still apply; a `cubecl.toml`
/// is not read. Does nothing when CubeCL was configured already in this
/// process.
#[cfg(feature = "cuda")]
pub fn configure(stack: &CudaStack) {
    use cubecl_runtime::config::{cache::CacheConfig, CubeClRuntimeConfig, RuntimeConfig};
    started();
    let Some(dir) = kernel_cache_dir(stack) else {
        return;
    };
    if std::fs::create_dir_all(&dir).is_err() {
        eprintln!(
            "envgen: cannot create the kernel cache {}: kernels are compiled anew in every run",
            dir.display()
        );
        return;
    }
    let mut storage = CubeClRuntimeConfig::storage().lock();
    if storage.is_some() {
        return;
    }
    if let Some(from) = seed(&dir) {
        crate::notice!(
            "envgen: kernel cache {} seeded from {}",
            dir.display(),
            from.display()
        );
    }
    let recorded = install_autotune_records(&dir, RECORDS.get().copied().unwrap_or(&[]));
    if recorded > 0 {
        crate::notice!(
            "envgen: kernel cache: {recorded} autotune records of this GPU model installed"
        );
    }
    let _ = USED.set(dir.clone());
    let mut config = CubeClRuntimeConfig::default().override_from_env();
    config.compilation.cache = Some(CacheConfig::File(dir.clone()));
    config.autotune.cache = CacheConfig::File(dir);
    *storage = Some(std::sync::Arc::new(config));
}

/// The `log` target of CubeCL's kernel loading (cubecl-cuda 0.10,
/// `compute/context.rs`): one trace record per kernel a process first
/// launches, "Using PTX cache" for a cache hit and "Compiling kernel" right
/// before NVRTC compiles it. envgen's logging counts them through
/// [`record`]; CubeCL has no counter of its own.
pub const CUBECL_LOAD_TARGET: &str = "cubecl_cuda::compute::context";

static HITS: AtomicU64 = AtomicU64::new(0);
static COMPILED: AtomicU64 = AtomicU64::new(0);
static USED: OnceLock<PathBuf> = OnceLock::new();
static STARTED: OnceLock<Instant> = OnceLock::new();
static FIRST_STEP_S: OnceLock<f64> = OnceLock::new();

/// Count one of CubeCL's kernel-loading records (see [`CUBECL_LOAD_TARGET`]).
pub fn record(message: &str) {
    if message.starts_with("Using PTX cache") {
        HITS.fetch_add(1, Ordering::Relaxed);
    } else if message.starts_with("Compiling kernel") {
        COMPILED.fetch_add(1, Ordering::Relaxed);
    }
}

/// When this process started using the CUDA backend (the readiness check).
fn started() -> Instant {
    *STARTED.get_or_init(Instant::now)
}

/// What this process found in its kernel cache so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub dir: Option<PathBuf>,
    /// Kernels loaded from the cache.
    pub hits: u64,
    /// Kernels compiled with NVRTC (and added to the cache).
    pub compiled: u64,
    /// Seconds since the CUDA backend started.
    pub since_start_s: f64,
}

/// Called by the training loops after each step: the first call of a CUDA
/// process says how long the first step took to come and what the kernel
/// cache gave (the number `envgen warmup` exists to make small).
pub fn step_done() {
    let Some(usage) = usage() else { return };
    if FIRST_STEP_S.set(usage.since_start_s).is_ok() {
        crate::notice!(
            "envgen: first training step {:.1} s after the CUDA backend started; {}",
            usage.since_start_s,
            usage.describe()
        );
    }
}

/// None unless this process configured the CUDA kernel cache.
pub fn usage() -> Option<Usage> {
    let since = STARTED.get()?.elapsed().as_secs_f64();
    Some(Usage {
        dir: USED.get().cloned(),
        hits: HITS.load(Ordering::Relaxed),
        compiled: COMPILED.load(Ordering::Relaxed),
        since_start_s: since,
    })
}

impl Usage {
    /// `412 kernels from the cache, 3 compiled`.
    pub fn describe(&self) -> String {
        format!(
            "{} kernels from the cache, {} compiled",
            self.hits, self.compiled
        )
    }

    /// The numbers for summary.json (`kernel_cache`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "dir": self.dir,
            "hits": self.hits,
            "compiled": self.compiled,
            "first_step_s": FIRST_STEP_S.get(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_name_the_model_and_its_architecture() {
        assert_eq!(
            model_slug("NVIDIA H100 80GB HBM3", (9, 0)),
            "nvidia-h100-80gb-hbm3-sm90"
        );
        assert_eq!(
            model_slug("NVIDIA A100-SXM4-80GB (envgen stand-in driver)", (8, 0)),
            "nvidia-a100-sxm4-80gb-envgen-stand-in-driver-sm80"
        );
    }

    #[test]
    fn autotune_records_fill_only_their_models_empty_autotune_folder() {
        static RECORDS: AutotuneRecords = &[
            ("gpu-a-sm90/autotune/0.10.0/cuda-0/matmul.json.log", b"a"),
            ("gpu-a-sm90/record.toml", b"gpu = 'a'"),
            ("gpu-a-sm90/autotune/../../escape", b"x"),
            ("gpu-b-sm80/autotune/0.10.0/cuda-0/matmul.json.log", b"b"),
        ];
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("gpu-a-sm90");
        assert_eq!(install_autotune_records(&a, RECORDS), 1);
        let file = a.join("autotune/0.10.0/cuda-0/matmul.json.log");
        assert_eq!(std::fs::read(&file).unwrap(), b"a");
        assert!(!a.join("record.toml").exists() && !tmp.path().join("escape").exists());
        std::fs::write(&file, b"tuned here").unwrap();
        assert_eq!(install_autotune_records(&a, RECORDS), 0);
        assert_eq!(std::fs::read(&file).unwrap(), b"tuned here");
        assert_eq!(
            install_autotune_records(&tmp.path().join("gpu-c-sm86"), RECORDS),
            0
        );
        // A folder of one's own records comes first (this test alone sets it).
        let own = tmp.path().join("own");
        let tuned = own.join("gpu-c-sm86/autotune/0.10.0/cuda-0");
        std::fs::create_dir_all(&tuned).unwrap();
        std::fs::write(tuned.join("reduce.json.log"), b"c").unwrap();
        std::env::set_var(RECORDS_ENV, &own);
        let c = tmp.path().join("gpu-c-sm86");
        let installed = install_autotune_records(&c, RECORDS);
        std::env::remove_var(RECORDS_ENV);
        assert_eq!(installed, 1);
        assert_eq!(
            std::fs::read(c.join("autotune/0.10.0/cuda-0/reduce.json.log")).unwrap(),
            b"c"
        );
    }

    #[test]
    fn an_empty_cache_is_seeded_and_a_used_one_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let seed_root = tmp.path().join("seed");
        let model = "nvidia-h100-80gb-hbm3-sm90";
        let ptx = seed_root.join("cubecl").join(model).join("cuda/0.10.0/ptx");
        std::fs::create_dir_all(&ptx).unwrap();
        std::fs::write(ptx.join("chunk0.cbor"), b"seeded").unwrap();
        let mine = tmp.path().join("mine/cubecl").join(model);
        // This test alone reads or writes ENVGEN_KERNEL_SEED; the first
        // seed has no kernels for the model and is passed over.
        let seeds = std::env::join_paths([tmp.path().join("none"), seed_root.clone()]).unwrap();
        std::env::set_var(SEED_ENV, seeds);
        let from = seed(&mine);
        assert_eq!(from, Some(seed_root.join("cubecl").join(model)));
        let copied = mine.join("cuda/0.10.0/ptx/chunk0.cbor");
        assert_eq!(std::fs::read(&copied).unwrap(), b"seeded");
        std::fs::write(&copied, b"mine").unwrap();
        assert_eq!(seed(&mine), None, "a cache with kernels was seeded again");
        assert_eq!(std::fs::read(&copied).unwrap(), b"mine");
        std::env::remove_var(SEED_ENV);
    }
}
