//! envgen's CUDA backend on a machine without a GPU: NVIDIA's real NVRTC,
//! CUDA headers, CCCL and ptxas (PyPI wheels, pinned in
//! scripts/test-cuda-requirements.txt, exported by scripts/services/pyref.sh
//! as ENVGEN_TEST_CUDA_WHEELS) and a labelled STAND-IN for the driver
//! (src/warmup/libcuda_standin.c, built here): memory is host
//! memory and kernel launches do nothing, so these tests prove the host path
//! (readiness, device setup, allocation, kernel compilation for each GPU
//! architecture, module loading, autotune, fusion, launch order), never the
//! numbers a GPU would compute.
//!
//! Compiled kernels are kept between test runs (ENVGEN_TEST_CACHE, like the
//! Python venv): the first run on a machine compiles every kernel with NVRTC
//! for five architectures (about half an hour on 2 cores), later runs only
//! the kernels that changed. `warmup_compiles_the_cuda_host_path_once_and_runs_reuse_it`
//! always starts cold, so NVRTC itself runs in every CI run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use crate::common::experiment::manifest_of;
use crate::common::{expect_success, heavy_test, json_of};

/// `nvidia/cu13` of the CUDA wheels: bin/ptxas, include/, lib/libnvrtc.so.13.
fn cuda_wheels() -> PathBuf {
    let root = std::env::var_os("ENVGEN_TEST_CUDA_WHEELS").expect(
        "ENVGEN_TEST_CUDA_WHEELS is not set: run the tests through scripts/test.sh, which \
         installs NVIDIA's CUDA compiler wheels (scripts/services/pyref.sh)",
    );
    let cu13 = Path::new(&root).join("nvidia/cu13");
    assert!(
        cu13.join("lib/libnvrtc.so.13").is_file(),
        "{} has no lib/libnvrtc.so.13",
        cu13.display()
    );
    cu13
}

/// Persistent folder for compiled kernels and assembled-PTX records.
fn test_cache() -> PathBuf {
    let base = std::env::var_os("ENVGEN_TEST_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/envgen-test")))
        .expect("ENVGEN_TEST_CACHE or HOME");
    let dir = base.join("cuda-standin");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The stand-in libcuda.so.1, compiled once per test process.
fn standin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libcuda-standin");
        std::fs::create_dir_all(&dir).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/warmup/libcuda_standin.c");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(dir.join("libcuda.so.1"))
            .arg(&source)
            .status()
            .expect("cc (the C compiler) must be installed");
        assert!(status.success(), "building the stand-in driver failed");
        dir
    })
}

/// `envgen` with a clean CUDA environment: no CUDA_PATH, no loader path,
/// no Python environment, HOME in `home` (so nothing of this machine's own
/// is found by accident); `standin` puts the stand-in driver on the loader
/// path.
fn envgen(home: &Path, standin: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_envgen"));
    for var in [
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "XDG_CACHE_HOME",
        "ENVGEN_CACHE_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", home)
        .env("ENVGEN_CACHE_DIR", home.join("cache"));
    if standin {
        cmd.env("LD_LIBRARY_PATH", standin_dir());
    }
    cmd
}

fn gpt2_step(cmd: &mut Command, out: &Path) -> Output {
    cmd.args(["run", "gpt2", "--preset", "tiny", "--backend", "cuda"])
        .args(["--set", "train.steps=1", "--out"])
        .arg(out)
        .output()
        .expect("spawn envgen")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A readiness failure: exit 3, the message, no panic, no run directory.
fn assert_refused(out: &Output, runs: &Path, expected: &[&str]) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "exit code; stderr:\n{stderr}");
    for e in expected {
        assert!(stderr.contains(e), "stderr lacks {e:?}:\n{stderr}");
    }
    assert!(stderr.contains("fix: "), "no fix in:\n{stderr}");
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    assert!(
        !runs.exists() || std::fs::read_dir(runs).unwrap().next().is_none(),
        "a run directory was made in {}",
        runs.display()
    );
}

/// A folder shaped like a CUDA toolkit, made of links into the wheels.
fn toolkit(root: &Path, with_builtins: bool, include: Option<&Path>) -> PathBuf {
    let cu13 = cuda_wheels();
    let lib = root.join("lib64");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(cu13.join("lib/libnvrtc.so.13"), lib.join("libnvrtc.so.13"))
        .unwrap();
    if with_builtins {
        std::os::unix::fs::symlink(
            cu13.join("lib/libnvrtc-builtins.so.13.0"),
            lib.join("libnvrtc-builtins.so.13.0"),
        )
        .unwrap();
    }
    if let Some(include) = include {
        std::os::unix::fs::symlink(include, root.join("include")).unwrap();
    }
    root.to_path_buf()
}

heavy_test!(
    readiness_names_each_missing_piece_before_any_run_directory,
    |tmp| {
        let home = tmp.path();
        let cu13 = cuda_wheels();
        let case = |name: &str| home.join("runs").join(name);

        // No driver library at all.
        let runs = case("no-libcuda");
        let out = gpt2_step(&mut envgen(home, false), &runs);
        assert_refused(&out, &runs, &["libcuda.so.1 is not on the loader path"]);

        // The driver is there but cuInit fails.
        for (code, words) in [(100, "CUDA_ERROR_NO_DEVICE"), (999, "CUDA_ERROR_UNKNOWN")] {
            let runs = case(&format!("cuinit-{code}"));
            let mut cmd = envgen(home, true);
            cmd.env("ENVGEN_STANDIN_FAIL_INIT", code.to_string());
            let out = gpt2_step(&mut cmd, &runs);
            assert_refused(
                &out,
                &runs,
                &[&format!("cuInit failed with error {code}"), words],
            );
        }

        // No NVRTC anywhere (HOME has no Python environment, no CUDA_PATH).
        let runs = case("no-nvrtc");
        let out = gpt2_step(&mut envgen(home, true), &runs);
        assert_refused(
            &out,
            &runs,
            &["NVRTC (libnvrtc.so.13/.12)", "was found neither"],
        );

        // NVRTC without its builtins library beside it.
        let tk = toolkit(
            &home.join("tk-no-builtins"),
            false,
            Some(&cu13.join("include")),
        );
        let runs = case("no-builtins");
        let out = gpt2_step(envgen(home, true).env("CUDA_PATH", &tk), &runs);
        assert_refused(&out, &runs, &["has no libnvrtc-builtins.so.*"]);

        // NVRTC complete, but CUDA_PATH has no headers.
        let tk = toolkit(&home.join("tk-no-headers"), true, None);
        let runs = case("no-headers");
        let out = gpt2_step(envgen(home, true).env("CUDA_PATH", &tk), &runs);
        assert_refused(&out, &runs, &["has no include/cuda_bf16.h"]);

        // Headers without CCCL (the nvidia-cuda-cccl wheel brings include/cccl
        // and include/nv).
        let no_cccl = home.join("include-no-cccl");
        std::fs::create_dir_all(&no_cccl).unwrap();
        for entry in std::fs::read_dir(cu13.join("include")).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != "cccl" && entry.file_name() != "nv" {
                std::os::unix::fs::symlink(entry.path(), no_cccl.join(entry.file_name())).unwrap();
            }
        }
        let tk = toolkit(&home.join("tk-no-cccl"), true, Some(&no_cccl));
        let runs = case("no-cccl");
        let out = gpt2_step(envgen(home, true).env("CUDA_PATH", &tk), &runs);
        assert_refused(&out, &runs, &["have no CCCL (nv/target, cuda/barrier)"]);

        // NVRTC 13.0 with a driver of CUDA 12.8: error 222 waiting to happen.
        let runs = case("nvrtc-newer");
        let mut cmd = envgen(home, true);
        cmd.env("CUDA_PATH", &cu13)
            .env("ENVGEN_STANDIN_DRIVER_CUDA", "12080");
        let out = gpt2_step(&mut cmd, &runs);
        assert_refused(
            &out,
            &runs,
            &[
                "NVRTC 13.0",
                "newer than the driver, which supports CUDA 12.8",
            ],
        );

        // Headers that exist but break the compile: NVRTC's log is shown.
        let broken = home.join("broken-include");
        std::fs::create_dir_all(broken.join("crt")).unwrap();
        std::fs::create_dir_all(broken.join("nv")).unwrap();
        for h in [
            "cuda_bf16.h",
            "cuda_fp16.h",
            "mma.h",
            "cuda_runtime.h",
            "crt/host_config.h",
            "nv/target",
        ] {
            std::fs::write(broken.join(h), "#error envgen test: a broken header\n").unwrap();
        }
        let tk = toolkit(&home.join("tk-broken"), true, Some(&broken));
        let runs = case("broken-headers");
        let out = gpt2_step(envgen(home, true).env("CUDA_PATH", &tk), &runs);
        assert_refused(
            &out,
            &runs,
            &["NVRTC could not compile the test kernel", "a broken header"],
        );

        // Found in a Python environment (VIRTUAL_ENV): said which one; then the
        // driver refuses the PTX at load time (a driver that claims a newer CUDA
        // than it accepts): error 222 named.
        let site = home.join("venv/lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        std::os::unix::fs::symlink(cu13.parent().unwrap(), site.join("nvidia")).unwrap();
        let runs = case("ptx-refused");
        let mut cmd = envgen(home, true);
        cmd.env("VIRTUAL_ENV", home.join("venv"))
            .env("ENVGEN_STANDIN_REFUSE_PTX", "1");
        let out = gpt2_step(&mut cmd, &runs);
        assert_refused(
            &out,
            &runs,
            &[
                "venv/lib/python3.11/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
                "CUDA error 222",
            ],
        );
    }
);

/// The PTX modules a run loaded (written by the stand-in), by file name.
fn ptx_files(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ptx"))
        .collect()
}

#[test]
fn warmup_refuses_what_it_cannot_warm_before_compiling_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    let run = |args: &[&str], cuda: bool| {
        let mut cmd = envgen(home, false);
        if cuda {
            cmd.env("CUDA_PATH", cuda_wheels());
        }
        let out = cmd.arg("warmup").args(args).output().unwrap();
        (out.status.code(), text(&out.stderr))
    };
    let (code, stderr) = run(&["gpt2", "--target", "gtx-9999"], true);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("no device properties") && stderr.contains("h100-sxm"),
        "{stderr}"
    );
    let (code, stderr) = run(&["gpt2", "--sm", "77"], true);
    assert_eq!(code, Some(2), "{stderr}");
    let (code, stderr) = run(&["gpt2", "--preset", "nope", "--target", "a30"], true);
    assert_eq!(code, Some(2), "{stderr}");
    // No NVRTC anywhere (no CUDA_PATH, a HOME without Python environments).
    let (code, stderr) = run(&["gpt2", "--target", "a30"], false);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("NVRTC") && stderr.contains("fix: "),
        "{stderr}"
    );
    assert!(!home.join("cache").exists(), "a cache folder was made");
}

/// The modules a run loaded, by kind (the stand-in keeps `NAME.ptx` and
/// `NAME.cubin` files).
fn loaded(dir: &Path, kind: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == kind)
        })
        .count()
}

heavy_test!(
    warmup_for_a_gpu_this_machine_lacks_fills_the_cache_a_run_there_compiles_nothing_from,
    |tmp| {
        let home = tmp.path();
        let h100 = envgen::compat::devices::all()
            .iter()
            .find(|d| d.name == "NVIDIA H100 80GB HBM3")
            .expect("env/gpu_devices.toml has the H100 SXM");

        // Cold, on a machine without a driver: `warmup --target` brings its own
        // stand-in, compiles every kernel of two steps with NVRTC as an H100
        // would get them, and assembles them for sm_90a with ptxas.
        let started = Instant::now();
        let warmup = envgen(home, false)
            .env("CUDA_PATH", cuda_wheels())
            .args(["warmup", "gpt2", "--preset", "tiny", "--target", "h100-sxm"])
            .args(["--json", "--jobs", "2"])
            .output()
            .unwrap();
        let cold_s = started.elapsed().as_secs_f64();
        let stderr = text(&warmup.stderr);
        assert!(warmup.status.success(), "warmup failed:\n{stderr}");
        let warmed: serde_json::Value = serde_json::from_slice(&warmup.stdout).unwrap();
        let record = &warmed[0];
        assert_eq!(record["device"], "NVIDIA H100 80GB HBM3", "{warmed}");
        assert_eq!(record["profile"], "h100", "{warmed}");
        assert_eq!(record["arch"], "sm_90a", "{warmed}");
        let compiled = record["compiled"].as_u64().unwrap();
        assert!(
            compiled >= 100,
            "a gpt2 step compiles hundreds of kernels; {compiled}"
        );
        assert_eq!(
            record["cubins"].as_u64(),
            Some(compiled),
            "every kernel assembled: {warmed}"
        );
        let model = home.join("cache/cubecl/nvidia-h100-80gb-hbm3-sm90");
        assert!(model.join("envgen-warmup.json").is_file());
        assert!(
            !model.join("autotune").exists(),
            "the stand-in's autotune timings reached the cache"
        );

        // A run on "the H100" (the stand-in with its exact properties) whose
        // own cache is empty but seeded from the warmed one, as an image's or a
        // Slurm job's is: every kernel comes from the cache, as a cubin, except
        // the few that follow from its own autotune decisions (on the stand-in,
        // timings of kernels that do nothing decide: noise).
        let on_h100 = |node: &str, ptx: &Path, records: Option<&Path>| {
            std::fs::create_dir_all(ptx).unwrap();
            let mut cmd = envgen(home, true);
            cmd.env("CUDA_PATH", cuda_wheels())
                .envs(h100.standin_env())
                .env("ENVGEN_CACHE_DIR", home.join(node))
                .env("ENVGEN_KERNEL_SEED", home.join("cache"))
                .env("ENVGEN_STANDIN_PTX_DIR", ptx)
                .args(["run", "gpt2", "--preset", "tiny", "--backend", "cuda"])
                // On the H100 host its nvidia-smi picks this profile; here no
                // nvidia-smi answers, so it is named.
                .args([
                    "--profile",
                    "h100",
                    "--json",
                    "--set",
                    "train.steps=2",
                    "--out",
                ])
                .arg(home.join("runs"));
            if let Some(records) = records {
                cmd.env("ENVGEN_AUTOTUNE_RECORDS", records);
            }
            let started = Instant::now();
            let out = cmd.output().unwrap();
            let seconds = started.elapsed().as_secs_f64();
            let stderr = text(&out.stderr);
            assert!(stderr.contains("seeded from"), "no seeding said:\n{stderr}");
            let doc = json_of(&expect_success(out));
            assert_eq!(doc["summary"]["status"], "completed", "{doc}");
            let manifest = manifest_of(&doc);
            assert_eq!(manifest["profile"]["backend"], "cuda", "{manifest}");
            (
                doc["summary"]["metrics"]["kernel_cache"].clone(),
                stderr,
                seconds,
            )
        };
        let first_ptx = home.join("loaded-a");
        let (usage, stderr, _) = on_h100("node-a", &first_ptx, None);
        let compiled = usage["compiled"].as_u64().unwrap();
        assert!(
            compiled <= 5,
            "NVRTC compiled {compiled}: {usage}\n{stderr}"
        );
        assert!(usage["hits"].as_u64().unwrap() >= 100, "{usage}");
        assert!(usage["first_step_s"].as_f64().is_some(), "{usage}");
        assert_eq!(
            loaded(&first_ptx, "ptx") as u64,
            compiled,
            "PTX loads besides the compiled"
        );
        assert!(loaded(&first_ptx, "cubin") >= 100);

        // With autotune records (here that run's decisions, standing in for a
        // GPU's recorded ones: env/autotune/README.md), warmup compiles what
        // those decisions run and a run using them compiles nothing at all.
        let records = home.join("records");
        let slug = "nvidia-h100-80gb-hbm3-sm90";
        envgen_experiments::kernel_cache::copy_tree(
            &home.join("node-a/cubecl").join(slug).join("autotune"),
            &records.join(slug).join("autotune"),
        )
        .unwrap();
        let again = envgen(home, false)
            .env("CUDA_PATH", cuda_wheels())
            .env("ENVGEN_AUTOTUNE_RECORDS", &records)
            .args([
                "warmup", "gpt2", "--preset", "tiny", "--target", "h100-sxm", "--json",
            ])
            .output()
            .unwrap();
        assert!(again.status.success(), "{}", text(&again.stderr));
        let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert!(
            again[0]["autotune_records"].as_u64().unwrap() >= 1,
            "{again}"
        );
        let ptx = home.join("loaded-b");
        let (usage, stderr, warm_s) = on_h100("node-b", &ptx, Some(&records));
        assert_eq!(usage["compiled"], 0, "NVRTC ran: {usage}\n{stderr}");
        assert!(
            stderr.contains("first training step") && stderr.contains(" 0 compiled"),
            "{stderr}"
        );
        assert_eq!(loaded(&ptx, "ptx"), 0, "PTX left for the driver to compile");
        assert!(
            loaded(&ptx, "cubin") >= 100,
            "{} cubins",
            loaded(&ptx, "cubin")
        );
        assert!(
            warm_s * 3.0 < cold_s,
            "warm run {warm_s:.1} s vs cold warmup {cold_s:.1} s: the kernel cache did not help"
        );
    }
);

/// The kernel cache shared by the tests below and kept between test runs.
fn kept_kernels() -> PathBuf {
    test_cache().join("kernels")
}

/// One test at a time in [`kept_kernels`]: CubeCL appends to its cache files
/// and two processes appending to the same ones could interleave.
fn kept_kernels_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// One training step of `experiment` on a stand-in GPU of compute capability
/// `cc`, with every PTX module it loads written to `ptx_dir`.
fn step_on(experiment: &str, cc: &str, precision: Option<&str>, ptx_dir: &Path, home: &Path) {
    std::fs::create_dir_all(ptx_dir).unwrap();
    // Kept PTX, fresh autotuning: every candidate kernel is loaded again (from
    // the cache, not recompiled) instead of only the ones an earlier run
    // happened to time fastest on a driver whose kernels do nothing.
    for model in std::fs::read_dir(kept_kernels().join("cubecl"))
        .into_iter()
        .flatten()
    {
        let _ = std::fs::remove_dir_all(model.unwrap().path().join("autotune"));
    }
    let mut cmd = envgen(home, true);
    cmd.env("CUDA_PATH", cuda_wheels())
        .env("ENVGEN_CACHE_DIR", kept_kernels())
        .env("ENVGEN_STANDIN_CC", cc)
        .env("ENVGEN_STANDIN_PTX_DIR", ptx_dir)
        .args([
            "run",
            experiment,
            "--preset",
            "tiny",
            "--backend",
            "cuda",
            "--out",
        ])
        .arg(home.join("runs"));
    match experiment {
        // HRM's length is in epochs: stop after one step (exit 130, as Ctrl-C).
        "hrm-sudoku" => cmd.args(["--stop-after", "1"]),
        _ => cmd.args(["--set", "train.steps=1"]),
    };
    if let Some(p) = precision {
        cmd.args(["--precision", p]);
    }
    let out = cmd.output().unwrap();
    assert!(
        matches!(out.status.code(), Some(0) | Some(130)),
        "{experiment} on sm {cc} failed ({}):\n{}",
        out.status,
        text(&out.stderr)
    );
}

/// Assemble every PTX file with ptxas for `arch`, two at a time; the ones
/// assembled before (same text, same ptxas) are remembered in the test cache.
/// Returns the failures, with ptxas's first lines.
fn assemble_all(modules: &BTreeSet<PathBuf>, arch: &str) -> Vec<String> {
    let ptxas = cuda_wheels().join("bin/ptxas");
    let record = test_cache().join(format!("assembled-{arch}.txt"));
    let done: BTreeSet<String> = std::fs::read_to_string(&record)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    let todo: Vec<&PathBuf> = modules
        .iter()
        .filter(|p| !done.contains(p.file_name().unwrap().to_str().unwrap()))
        .collect();
    let results = std::sync::Mutex::new((Vec::new(), Vec::new()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(path) = todo.get(i) else { break };
                let out = Command::new(&ptxas)
                    .arg(format!("-arch={arch}"))
                    .args(["-o", "/dev/null"])
                    .arg(path)
                    .output()
                    .unwrap();
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                let mut r = results.lock().unwrap();
                if out.status.success() {
                    r.0.push(name);
                } else {
                    let log: String = text(&out.stderr)
                        .lines()
                        .take(5)
                        .collect::<Vec<_>>()
                        .join(" | ");
                    r.1.push(format!("{name}: {log}"));
                }
            });
        }
    });
    let (assembled, failed) = results.into_inner().unwrap();
    let mut all = done;
    all.extend(assembled);
    std::fs::write(&record, all.into_iter().collect::<Vec<_>>().join("\n")).unwrap();
    failed
}

heavy_test!(
    every_gpt2_and_hrm_kernel_compiles_and_assembles_for_five_architectures,
    || {
        let _cache = kept_kernels_lock();
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        // (stand-in compute capability, the target CubeCL compiles for)
        for (cc, arch) in [
            ("9.0", "sm_90a"),
            ("8.0", "sm_80"),
            ("8.6", "sm_86"),
            ("8.9", "sm_89"),
            ("12.0", "sm_120a"),
        ] {
            let ptx_dir = home.join(format!("ptx-{arch}"));
            for experiment in ["gpt2", "hrm-sudoku"] {
                step_on(experiment, cc, None, &ptx_dir, home);
            }
            let modules = ptx_files(&ptx_dir);
            assert!(
                modules.len() >= 200,
                "a gpt2 and an HRM step load hundreds of kernels; {} for {arch}",
                modules.len()
            );
            for m in &modules {
                let ptx = std::fs::read_to_string(m).unwrap();
                assert!(
                    ptx.lines().any(|l| l.trim() == format!(".target {arch}")),
                    "{} is not for {arch}",
                    m.display()
                );
            }
            let failed = assemble_all(&modules, arch);
            assert!(
                failed.is_empty(),
                "ptxas {arch} refused:\n{}",
                failed.join("\n")
            );
        }
    }
);

/// The matrix-product instructions of a set of PTX modules.
fn mma_instructions(modules: &BTreeSet<PathBuf>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for m in modules {
        for line in std::fs::read_to_string(m).unwrap().lines() {
            let Some(word) = line.split_whitespace().next() else {
                continue;
            };
            if word.starts_with("mma.")
                || word.starts_with("wmma.mma")
                || word.starts_with("wgmma.")
            {
                found.insert(word.trim_end_matches(';').to_string());
            }
        }
    }
    found
}

// bf16 and fp16 runs multiply on their own tensor cores, tf32 on TF32 ones;
// and, as Burn 0.21 has no switch against it, so does fp32
// (docs/running.md, "Precision"): this test fails the day that changes.
heavy_test!(precisions_compile_to_their_tensor_core_instructions, || {
    let _cache = kept_kernels_lock();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    let modules = |precision: &str| {
        let dir = home.join(format!("ptx-{precision}"));
        step_on("gpt2", "9.0", Some(precision), &dir, home);
        ptx_files(&dir)
    };
    let fp32 = modules("fp32");
    let fp32_names: BTreeSet<String> = fp32
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // Modules a run has beyond the fp32 run's: its own matmuls, without the
    // readiness check's bf16 test kernel that every run loads.
    let beyond_fp32 = |set: BTreeSet<PathBuf>| -> BTreeSet<PathBuf> {
        set.into_iter()
            .filter(|p| !fp32_names.contains(&*p.file_name().unwrap().to_string_lossy()))
            .collect()
    };
    let has = |set: &BTreeSet<String>, part: &str| set.iter().any(|i| i.contains(part));

    let fp32_mma = mma_instructions(&fp32);
    assert!(
        has(&fp32_mma, ".tf32.tf32"),
        "fp32 no longer uses TF32 tensor cores (update docs/running.md): {fp32_mma:?}"
    );
    let tf32 = mma_instructions(&modules("tf32"));
    assert!(has(&tf32, ".tf32.tf32"), "tf32 without TF32 MMA: {tf32:?}");
    let bf16 = mma_instructions(&beyond_fp32(modules("bf16")));
    assert!(has(&bf16, ".bf16.bf16"), "bf16 without bf16 MMA: {bf16:?}");
    let fp16 = mma_instructions(&beyond_fp32(modules("fp16")));
    assert!(has(&fp16, ".f16.f16"), "fp16 without f16 MMA: {fp16:?}");
});
