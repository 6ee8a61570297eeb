//! envgen linked the release way (zig, for glibc 2.17: scripts/portable.sh)
//! starts on old Linux systems (issue #39: the binary needed glibc 2.34, so
//! it did not start on RHEL/Rocky 8 login nodes, glibc 2.28).
//!
//! scripts/services/portable.sh links the test build's envgen again with
//! zig (CI has no time for a release build, nor for a second build of every
//! crate) and unpacks Debian bullseye's glibc 2.31, the oldest
//! deb.debian.org serves. The binary must ask for no glibc symbol newer than
//! 2.17, and neither must the stand-in CUDA driver it carries (`envgen
//! warmup --target` loads it on the user's machine); then it runs under
//! bullseye's loader and libraries. Nothing older than 2.31 can be run here,
//! so the 2.17 floor itself rests on the symbol versions. scripts/release.sh
//! checks its own binaries the same way (`portable_check`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use envgen::image::elf::{required_glibc, GlibcVersion};

use crate::common::text;

/// The release binaries' floor (PORTABLE_GLIBC in scripts/portable.sh).
const FLOOR: GlibcVersion = (2, 17);

fn env_path(name: &str) -> PathBuf {
    let value = std::env::var_os(name).unwrap_or_else(|| {
        panic!("{name} is not set: scripts/test.sh sets it (scripts/services/portable.sh)")
    });
    PathBuf::from(value)
}

/// The binary scripts/services/portable.sh linked with zig.
fn portable_binary() -> PathBuf {
    let binary = env_path("ENVGEN_TEST_PORTABLE_BINARY");
    assert!(binary.is_file(), "{} is missing", binary.display());
    binary
}

/// The stand-in CUDA driver inside `binary`: of the ones build.rs compiled
/// into the test build's target directory (whose crates the portable
/// binary was linked from), the one whose bytes the binary holds.
fn carried_standin(binary: &Path) -> Vec<u8> {
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_envgen")).parent().unwrap();
    let carried = std::fs::read(binary).unwrap();
    let builds = std::fs::read_dir(profile_dir.join("build")).unwrap();
    builds
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("envgen-"))
        .filter_map(|e| std::fs::read(e.path().join("out/libcuda_standin.so")).ok())
        .filter(|lib| !lib.is_empty())
        .find(|lib| carried.windows(lib.len()).any(|w| w == lib.as_slice()))
        .unwrap_or_else(|| {
            panic!(
                "no libcuda_standin.so under {}/build/envgen-*/out is inside {}",
                profile_dir.display(),
                binary.display()
            )
        })
}

fn assert_within_floor(what: &str, data: &[u8]) {
    let needed = required_glibc(data).unwrap();
    assert!(
        needed.is_some_and(|v| v <= FLOOR),
        "{what} needs glibc {needed:?}, newer than the release floor {FLOOR:?} \
         (not linked through scripts/portable.sh?)"
    );
}

/// An ELF file's `e_machine` (bytes 18-19 of its header).
fn elf_machine(data: &[u8]) -> [u8; 2] {
    [data[18], data[19]]
}

#[test]
fn the_portable_build_and_its_standin_driver_need_no_glibc_newer_than_2_17() {
    let binary = portable_binary();
    let data = std::fs::read(&binary).unwrap();
    assert_within_floor(&binary.display().to_string(), &data);
    let standin = carried_standin(&binary);
    assert_within_floor("its stand-in CUDA driver", &standin);
    assert_eq!(
        elf_machine(&standin),
        elf_machine(&data),
        "the stand-in CUDA driver is for another machine than the binary"
    );
}

/// Runs programs with bullseye's glibc: its own dynamic loader, told to look
/// for libraries in bullseye's folder only (the host's /etc/ld.so.cache and
/// /lib are not consulted for what that folder has).
struct OldGlibc {
    loader: PathBuf,
    libs: PathBuf,
}

impl OldGlibc {
    fn from_env() -> OldGlibc {
        let root = env_path("ENVGEN_TEST_OLD_GLIBC_ROOT");
        let loader = std::fs::read_dir(root.join("lib"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|dir| dir.to_string_lossy().ends_with("-linux-gnu"))
            .flat_map(|dir| std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("ld-linux-")
            })
            .unwrap_or_else(|| panic!("no lib/*-linux-gnu/ld-linux-* under {}", root.display()));
        let libs = loader.parent().unwrap().to_path_buf();
        OldGlibc { loader, libs }
    }

    fn run(&self, program: &Path, args: &[&str]) -> Output {
        Command::new(&self.loader)
            .arg("--library-path")
            .arg(&self.libs)
            .arg(program)
            .args(args)
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .expect("spawn the old loader")
    }
}

#[test]
fn the_portable_build_runs_on_glibc_2_31() {
    let old = OldGlibc::from_env();
    // glibc's libc.so.6, run as a program, names its release.
    let libc = old.run(&old.libs.join("libc.so.6"), &[]);
    assert!(
        String::from_utf8_lossy(&libc.stdout).contains("release version 2.31."),
        "{} is not glibc 2.31: {}",
        old.libs.display(),
        text(&libc)
    );

    let binary = portable_binary();
    let version = old.run(&binary, &["--version"]);
    assert!(version.status.success(), "{}", text(&version));
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("envgen "),
        "{}",
        text(&version)
    );

    let doctor = old.run(
        &binary,
        &[
            "doctor",
            "--assume-gpu",
            "A30",
            "--assume-driver",
            "535.261.03",
        ],
    );
    assert!(doctor.status.success(), "{}", text(&doctor));
    assert!(
        String::from_utf8_lossy(&doctor.stdout).contains("NVIDIA A30"),
        "{}",
        text(&doctor)
    );
}
