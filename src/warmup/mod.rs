//! `envgen warmup`: compile a preset's CUDA kernels before the run needs them.
//!
//! On the GPU itself, a few training steps of the preset in a child
//! `envgen run` fill the kernel cache (PTX and autotune results). For GPUs
//! this machine does not have (`--target`), the child runs on envgen's
//! stand-in driver (standin.rs) reporting the target's exact properties
//! (env/gpu_devices.toml), so NVRTC compiles what that GPU will ask for;
//! the targets are compiled in parallel, one child per target at a time;
//! ptxas then assembles each kernel for the target (cubin.rs), and only the
//! compiled kernels are kept: the stand-in's autotune timings (of kernels
//! that compute nothing) never reach a cache.

mod cubin;
mod standin;

// Autotune results recorded on GPUs (env/autotune/, see its README),
// embedded by build.rs and installed into a GPU model's empty cache.
include!(concat!(env!("OUT_DIR"), "/autotune_records.rs"));

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use envgen_experiments::kernel_cache;
use serde::Serialize;

use crate::compat::devices::DeviceSpec;
use crate::error::{Result, UserError};
use crate::host::Gpu;
use crate::profiles::{Precision, Profiles};

/// What to warm, validated by `cli/warmup.rs`.
#[derive(Debug, Clone)]
pub struct WarmupRequest {
    pub experiment: String,
    pub preset: Option<String>,
    /// GPU models to compile for without them; empty: this machine's GPU.
    pub targets: Vec<&'static DeviceSpec>,
    /// Each precision the real runs will use; empty: the hardware profile's.
    pub precisions: Vec<Precision>,
    pub micro_batch: Option<usize>,
    pub length: Length,
    /// `--set KEY=VALUE` for the child runs (e.g. `data.source=generated`
    /// where the data is not on this machine: kernels depend on shapes only).
    pub sets: Vec<String>,
    /// Child runs at a time.
    pub jobs: usize,
    /// Assemble the PTX of `--target` caches into cubins with ptxas.
    pub cubin: bool,
}

impl WarmupRequest {
    /// One warming run per precision asked for; one at the profile's when none.
    fn precision_runs(&self) -> Vec<Option<Precision>> {
        if self.precisions.is_empty() {
            vec![None]
        } else {
            self.precisions.iter().copied().map(Some).collect()
        }
    }
}

/// How long a warming run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// A whole run of N training steps (`--set train.steps=N`): its end —
    /// the final evaluation, the samples — compiles its kernels too.
    Steps(u64),
    /// N steps of a run whose length is not in steps (HRM's epochs, rft's
    /// stages), then stopped (`--stop-after N`, exit 130).
    StopAfter(u64),
}

/// What warming one GPU model did (`envgen-warmup.json` in its cache folder).
#[derive(Debug, Clone, Serialize)]
pub struct Warmed {
    pub device: String,
    pub compute_capability: String,
    pub cache: PathBuf,
    pub experiment: String,
    pub preset: Option<String>,
    pub profile: Option<String>,
    pub precisions: Vec<String>,
    /// Kernels NVRTC compiled in this warmup (the rest were cached already).
    pub compiled: u64,
    /// PTX modules assembled to cubins for `arch`.
    pub cubins: usize,
    pub arch: Option<String>,
    /// Autotune results recorded on this GPU model installed (env/autotune/).
    pub autotune_records: usize,
    pub seconds: f64,
    pub envgen: String,
    pub date: String,
}

/// A child run's exit: 0, or 130 for a `--stop-after` end.
fn finished(code: Option<i32>) -> bool {
    matches!(code, Some(0) | Some(130))
}

/// Warm this machine's own GPU: the child runs with inherited output.
pub fn warm_local(req: &WarmupRequest) -> Result<i32> {
    let scratch = scratch_dir()?;
    for (i, precision) in req.precision_runs().into_iter().enumerate() {
        let mut child = run_command(req, precision, None, &scratch.path().join(i.to_string()))?;
        let status = child
            .status()
            .map_err(|e| UserError::environment(format!("cannot start envgen run: {e}")))?;
        if !finished(status.code()) {
            return Ok(status.code().unwrap_or(1));
        }
    }
    Ok(0)
}

/// Warm every `--target`, `req.jobs` at a time; one result per target.
pub fn warm_targets(req: &WarmupRequest) -> Result<Vec<Result<Warmed>>> {
    let scratch = scratch_dir()?;
    let driver = standin::install(scratch.path())?;
    let cache_root = kernel_cache::cache_dir().ok_or_else(|| {
        UserError::environment("no cache folder: set ENVGEN_CACHE_DIR, XDG_CACHE_HOME or HOME")
    })?;
    // NVRTC and the headers are all a --target warmup needs of this
    // machine: missing, it is exit 3 here, with the readiness check's fix.
    let stack = envgen_experiments::cuda_stack::CudaStack::probe();
    if let Err(problem) = stack.nvrtc.as_ref().and(stack.headers.as_ref()) {
        return Err(problem.to_user_error().into());
    }
    let ptxas = req
        .cubin
        .then(|| cubin::find_ptxas(stack.headers.as_ref().ok().map(|h| h.cuda_path.as_path())))
        .flatten();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    let workers = req.jobs.clamp(1, req.targets.len().max(1));
    let ptxas_jobs = (req.jobs / req.targets.len().max(1)).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(device) = req.targets.get(i) else {
                    break;
                };
                let job = TargetJob {
                    req,
                    device,
                    driver: &driver,
                    scratch: scratch.path().join(format!("target-{i}")),
                    cache_root: &cache_root,
                    ptxas: ptxas.as_deref(),
                    ptxas_jobs,
                };
                let outcome = job.run();
                results.lock().unwrap().push((i, outcome));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}

fn scratch_dir() -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix("envgen-warmup-")
        .tempdir()
        .map_err(|e| UserError::environment(format!("cannot create a scratch directory: {e}")))?)
}

/// `envgen run EXP --backend cuda --stop-after N …` into `out`.
fn run_command(
    req: &WarmupRequest,
    precision: Option<Precision>,
    profile: Option<&str>,
    out: &Path,
) -> Result<Command> {
    let exe = std::env::current_exe()
        .map_err(|e| UserError::environment(format!("cannot find the envgen binary: {e}")))?;
    let mut child = Command::new(exe);
    child
        .args(["run", &req.experiment, "--backend", "cuda", "--out"])
        .arg(out);
    match req.length {
        Length::Steps(n) => child.args(["--set", &format!("train.steps={n}")]),
        Length::StopAfter(n) => child.args(["--stop-after", &n.to_string()]),
    };
    if let Some(preset) = &req.preset {
        child.args(["--preset", preset]);
    }
    if let Some(profile) = profile {
        child.args(["--profile", profile]);
    }
    if let Some(p) = precision {
        child.args(["--precision", p.name()]);
    }
    if let Some(n) = req.micro_batch {
        child.args(["--micro-batch", &n.to_string()]);
    }
    for set in &req.sets {
        child.args(["--set", set]);
    }
    Ok(child)
}

/// One `--target`: its child runs on the stand-in, then the cubins.
struct TargetJob<'a> {
    req: &'a WarmupRequest,
    device: &'static DeviceSpec,
    driver: &'a Path,
    scratch: PathBuf,
    cache_root: &'a Path,
    ptxas: Option<&'a Path>,
    ptxas_jobs: usize,
}

impl TargetJob<'_> {
    fn run(&self) -> Result<Warmed> {
        let started = Instant::now();
        let device = self.device;
        let slug = kernel_cache::model_slug(&device.name, device.capability());
        let cache = self.cache_root.join("cubecl").join(&slug);
        // The children fill a scratch cache that starts with the kernels
        // compiled before (not their autotune results: every candidate
        // kernel must be compiled, and the stand-in's timings kept nowhere).
        let scratch_cache = self.scratch.join("cache");
        let scratch_model = scratch_cache.join("cubecl").join(&slug);
        if cache.join("cuda").is_dir() {
            kernel_cache::copy_tree(&cache.join("cuda"), &scratch_model.join("cuda"))
                .map_err(|e| io_error("copy", &cache, e))?;
        }
        let profile = self.profile()?;
        let mut compiled = 0;
        let mut names = Vec::new();
        for (i, precision) in self.req.precision_runs().iter().enumerate() {
            let out = self.scratch.join(format!("runs-{i}"));
            let mut child = run_command(self.req, *precision, profile.as_deref(), &out)?;
            child
                .env("LD_LIBRARY_PATH", standin::loader_path(self.driver))
                .env("ENVGEN_CACHE_DIR", &scratch_cache)
                .env_remove(kernel_cache::SEED_ENV)
                .envs(device.standin_env());
            let output = child
                .output()
                .map_err(|e| UserError::environment(format!("cannot start envgen run: {e}")))?;
            if !finished(output.status.code()) {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(UserError::failed(format!(
                    "warming {} failed (envgen run exited {}):\n  {}",
                    device.name,
                    output.status,
                    tail.join("\n  ")
                ))
                .into());
            }
            compiled += compiled_in(&out);
            names.push(precision.map_or_else(|| "profile".to_string(), |p| p.name().into()));
        }
        let arch = cubin::arch(device.capability());
        let cubins = match self.ptxas {
            Some(ptxas) => {
                let done = cubin::convert(&scratch_model, ptxas, &arch, self.ptxas_jobs)?;
                for why in done.failed.iter().take(3) {
                    eprintln!("envgen warmup: {}: kept as PTX: {why}", device.name);
                }
                done.cubins
            }
            None => 0,
        };
        install(&scratch_model.join("cuda"), &cache.join("cuda"))?;
        let recorded = kernel_cache::install_autotune_records(&cache, AUTOTUNE_RECORDS);
        let warmed = Warmed {
            device: device.name.clone(),
            compute_capability: device.compute_capability.clone(),
            cache: cache.clone(),
            experiment: self.req.experiment.clone(),
            preset: self.req.preset.clone(),
            profile,
            precisions: names,
            compiled,
            cubins,
            arch: self.ptxas.map(|_| arch),
            autotune_records: recorded,
            seconds: started.elapsed().as_secs_f64(),
            envgen: format!(
                "{} {}",
                env!("CARGO_PKG_VERSION"),
                option_env!("ENVGEN_GIT_REVISION").unwrap_or("(no git revision)")
            ),
            date: envgen_experiments::engine::rundir::now_rfc3339(),
        };
        let record = serde_json::to_vec_pretty(&warmed).expect("plain data");
        envgen_experiments::fsutil::write_atomic(&cache.join("envgen-warmup.json"), &record)?;
        Ok(warmed)
    }

    /// The hardware profile a run on this GPU gets (its micro-batch and
    /// precision shape the kernels).
    fn profile(&self) -> Result<Option<String>> {
        let gpu = Gpu {
            name: self.device.name.clone(),
            compute_capability: Some(self.device.compute_capability.clone()),
            memory_mib: Some(self.device.memory_mib),
            ..Gpu::default()
        };
        Ok(Some(Profiles::load()?.select(Some(&gpu)).name.clone()))
    }
}

/// Kernels NVRTC compiled in the child runs under `out` (their summaries).
fn compiled_in(out: &Path) -> u64 {
    let pattern = format!("{}/*/summary.json", out.display());
    glob::glob(&pattern)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter_map(|s| s["metrics"]["kernel_cache"]["compiled"].as_u64())
        .sum()
}

/// Put the compiled kernels in place: the new folder next to the old one,
/// then swapped in by renames (a run reading the cache meanwhile sees the
/// old kernels or the new ones).
fn install(from: &Path, to: &Path) -> Result<()> {
    let parent = to.parent().expect("a model folder");
    std::fs::create_dir_all(parent).map_err(|e| io_error("create", parent, e))?;
    let staged = parent.join(".cuda.new");
    let old = parent.join(".cuda.old");
    let _ = std::fs::remove_dir_all(&staged);
    let _ = std::fs::remove_dir_all(&old);
    kernel_cache::copy_tree(from, &staged).map_err(|e| io_error("copy", from, e))?;
    if to.exists() {
        std::fs::rename(to, &old).map_err(|e| io_error("replace", to, e))?;
    }
    std::fs::rename(&staged, to).map_err(|e| io_error("replace", to, e))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> anyhow::Error {
    UserError::environment(format!("cannot {what} {}: {e}", path.display()))
        .with_fix("check the cache folder's permissions and free space (ENVGEN_CACHE_DIR)")
        .into()
}
