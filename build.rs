//! Records the git revision envgen is built from (with a `-dirty` suffix when
//! the tree has uncommitted changes) for run manifests and image labels.
//! Builds outside a git checkout (e.g. `nix build`, a crate tarball) record none.
//! `envgen --version` also shows the target triple and the build date
//! (the commit's, or `SOURCE_DATE_EPOCH`), set here.
//!
//! Also compiles envgen's stand-in CUDA driver (src/warmup/libcuda_standin.c)
//! into a shared library that the binary carries for `envgen warmup --target`
//! (see src/warmup/standin.rs). Without a C compiler the build goes on and
//! that one command says what is missing.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The C compiler for the target being built, looked up as the `cc` crate
/// (which compiles the other C dependencies) does: `CC_<target>` first, so
/// that a cross or old-glibc build (scripts/portable.sh sets it to `zig cc`)
/// gets a stand-in for the same machine and glibc as the binary carrying it.
fn target_c_compiler() -> String {
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let names = [
        format!("CC_{target}"),
        format!("CC_{}", target.replace('-', "_")),
        "TARGET_CC".to_string(),
        "CC".to_string(),
    ];
    for name in &names {
        println!("cargo:rerun-if-env-changed={name}");
    }
    names
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "cc".to_string())
}

/// `cc -shared` of the stand-in, from its own folder with a relative path and
/// stripped, so the library (and the binary that embeds it) is the same
/// bytes whatever directory the repository was cloned into.
fn build_standin() {
    println!("cargo:rerun-if-changed=src/warmup/libcuda_standin.c");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("libcuda_standin.so");
    let compiler = target_c_compiler();
    let built = Command::new(&compiler)
        .current_dir("src/warmup")
        .args(["-shared", "-fPIC", "-O1", "-s", "-o"])
        .arg(&out)
        .arg("libcuda_standin.c")
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        println!(
            "cargo:warning=no C compiler ({compiler}): `envgen warmup --target` is unavailable in this build"
        );
        std::fs::write(&out, b"").expect("write OUT_DIR");
    }
}

/// `autotune_records.rs`: every file under env/autotune/<gpu-model>-sm<cc>/
/// (autotune results recorded on a GPU, see env/autotune/README.md) as
/// (path below env/autotune, bytes), for src/warmup/autotune.rs.
fn embed_autotune_records() {
    println!("cargo:rerun-if-changed=env/autotune");
    let root = Path::new("env/autotune");
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.parent() != Some(root) {
                // Files directly in env/autotune (its README) are not records.
                files.push(path);
            }
        }
    }
    files.sort();
    let mut code = String::from("pub static AUTOTUNE_RECORDS: &[(&str, &[u8])] = &[\n");
    for file in &files {
        let relative = file.strip_prefix(root).expect("under env/autotune");
        let relative = relative.to_string_lossy().replace('\\', "/");
        code.push_str(&format!(
            "    ({relative:?}, include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), {:?}))),\n",
            format!("/env/autotune/{relative}")
        ));
    }
    code.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("autotune_records.rs");
    std::fs::write(out, code).expect("write OUT_DIR");
}

/// The date `envgen --version` gives as the build's: `SOURCE_DATE_EPOCH`
/// when set (the reproducible-builds convention), else the commit's date.
/// Not the wall clock: two builds of one commit must be the same bytes
/// (tests/it/places/fresh_clone.rs), so the date comes from the source.
fn build_date() -> Option<String> {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    if let Ok(epoch) = std::env::var("SOURCE_DATE_EPOCH") {
        let seconds: i64 = epoch.trim().parse().ok()?;
        return Some(civil_date(seconds.div_euclid(86_400)));
    }
    git(&["log", "-1", "--format=%cs"]).filter(|date| !date.is_empty())
}

/// Days since 1970-01-01 → "YYYY-MM-DD" (Howard Hinnant's civil_from_days).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn main() {
    build_standin();
    embed_autotune_records();
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    // For `envgen --version`: the target triple and the build's date.
    println!(
        "cargo:rustc-env=ENVGEN_TARGET={}",
        std::env::var("TARGET").expect("cargo sets TARGET")
    );
    if let Some(date) = build_date() {
        println!("cargo:rustc-env=ENVGEN_BUILD_DATE={date}");
    }
    println!("cargo:rerun-if-env-changed=ENVGEN_GIT_REVISION");
    if let Ok(given) = std::env::var("ENVGEN_GIT_REVISION") {
        println!("cargo:rustc-env=ENVGEN_GIT_REVISION={given}");
        return;
    }
    if let Some(revision) = git(&["rev-parse", "HEAD"]) {
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let suffix = if dirty { "-dirty" } else { "" };
        println!("cargo:rustc-env=ENVGEN_GIT_REVISION={revision}{suffix}");
    }
}
