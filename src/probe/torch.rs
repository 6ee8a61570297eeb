//! The PyTorch a command will import, as doctor checks a wheel: its
//! version, the CUDA it bundles and the kernels it was compiled with.
//!
//! The Python is found from the command line (`python …`, `torchrun …`, or
//! any program whose `#!` line names a Python, such as `accelerate` or a
//! venv's console scripts) and asked once. The kernel list comes from
//! `torch._C._cuda_getArchFlags()`, the compile-time list that
//! `torch.cuda.get_arch_list()` returns only when a GPU is visible: so a
//! submit host or a CI machine without a GPU reads the same facts as the
//! node that will run it.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::command::{first_line, run_captured};
use crate::compat::WheelFacts;

/// Importing torch from a cold shared filesystem can take tens of seconds;
/// past this the check is skipped (it never blocks a run by being slow).
const TIMEOUT: Duration = Duration::from_secs(90);

/// What the command's Python has.
#[derive(Debug, Clone, PartialEq)]
pub enum InstalledTorch {
    /// The command does not start a Python envgen can see.
    NoPython,
    /// Python, without an importable torch.
    Absent { python: PathBuf, why: String },
    /// A torch built without CUDA.
    CpuOnly { python: PathBuf, version: String },
    /// A CUDA build: its facts, as a wheel of env/pytorch.toml would have them.
    Cuda { python: PathBuf, wheel: WheelFacts },
    /// The Python did not answer (timeout, crash): nothing is known.
    Unknown { python: PathBuf, why: String },
}

/// The Python `argv` starts, if any: resolved in `path` (a PATH value) from
/// `workdir`, the directory the command runs in.
pub fn python_of(argv: &[String], path: Option<&OsStr>, workdir: &Path) -> Option<PathBuf> {
    // `env VAR=… python train.py` (issue #39): the knob goes to the
    // command, the check to the Python behind `env` (with the PATH and
    // directory `env` gives it).
    if let Some(inner) = behind_env(argv) {
        let path = inner.path.map(OsStr::new).or(path);
        let workdir = match inner.chdir {
            Some(dir) => workdir.join(dir),
            None => workdir.to_path_buf(),
        };
        return python_of(inner.argv, path, &workdir);
    }
    let program = resolve(argv.first()?, path, workdir)?;
    if is_python_name(&program) {
        return Some(program);
    }
    // A script or console entry point (`torchrun`, `accelerate`): its `#!`.
    let interpreter = shebang(&program)?;
    let mut words = interpreter.split_whitespace();
    let first = words.next()?;
    let named = if Path::new(first).file_name() == Some(OsStr::new("env")) {
        // `#!/usr/bin/env python3` (or `env -S python3 -u`).
        resolve(words.find(|w| !w.starts_with('-'))?, path, workdir)?
    } else {
        PathBuf::from(first)
    };
    is_python_name(&named).then_some(named)
}

/// The command `env [OPTIONS] [VAR=VALUE…] CMD ARGS…` runs.
struct BehindEnv<'a> {
    argv: &'a [String],
    /// `PATH=…` among the assignments: where CMD is looked up.
    path: Option<&'a str>,
    /// `-C DIR` / `--chdir=DIR`.
    chdir: Option<&'a str>,
}

/// What `argv` runs when it starts with `env` (None: it does not, or `env`
/// runs nothing, or with `-S`, whose split string is not followed here).
fn behind_env(argv: &[String]) -> Option<BehindEnv<'_>> {
    if Path::new(argv.first()?).file_name() != Some(OsStr::new("env")) {
        return None;
    }
    let mut inner = BehindEnv {
        argv: &argv[1..],
        path: None,
        chdir: None,
    };
    let mut options = true;
    while let Some(word) = inner.argv.first() {
        let rest = &inner.argv[1..];
        if options && word == "--" {
            options = false;
        } else if options && ["-u", "--unset", "-C", "--chdir"].contains(&word.as_str()) {
            // An option with its value in the next word.
            if word.ends_with('C') || word == "--chdir" {
                inner.chdir = Some(rest.first()?);
            }
            inner.argv = rest;
        } else if options && (word.starts_with("-C") || word.starts_with("--chdir=")) {
            inner.chdir = Some(word.trim_start_matches("--chdir=").trim_start_matches("-C"));
        } else if options && (word.starts_with("-S") || word.starts_with("--split-string")) {
            return None;
        } else if options && word.starts_with('-') && word.len() > 1 {
            // -i, -0, -v, -uNAME, --unset=NAME, --ignore-environment …
        } else if let Some((name, value)) = word.split_once('=').filter(|(n, _)| !n.is_empty()) {
            options = false;
            if name == "PATH" {
                inner.path = Some(value);
            }
        } else {
            break;
        }
        inner.argv = &inner.argv[1..];
    }
    (!inner.argv.is_empty()).then_some(inner)
}

/// `python`, `python3`, `python3.11` (and the same with a `t`/`d` suffix).
fn is_python_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(OsStr::to_str) else {
        return false;
    };
    let Some(rest) = name.strip_prefix("python") else {
        return false;
    };
    let rest = rest.trim_end_matches(['t', 'd']);
    rest.chars().all(|c| c.is_ascii_digit() || c == '.')
}

fn resolve(program: &str, path: Option<&OsStr>, workdir: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let candidate = workdir.join(program);
        return candidate.is_file().then_some(candidate);
    }
    which::which_in(program, path, workdir).ok()
}

/// The interpreter line of a script (`#!` and at most 255 bytes more).
fn shebang(program: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let text = std::str::from_utf8(&head[..n]).ok()?;
    let line = text.strip_prefix("#!")?.lines().next()?;
    Some(line.trim().to_string())
}

/// Printed by the command's Python: one JSON object on the last line.
const QUERY: &str = r#"
import json
try:
    import torch
except BaseException as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
    raise SystemExit(0)
flags = ""
if torch.version.cuda:
    try:
        flags = torch._C._cuda_getArchFlags()
    except BaseException:
        flags = ""
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda, "arch": flags}))
"#;

#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    cuda: Option<String>,
    #[serde(default)]
    arch: Option<String>,
}

/// Ask `python` (with the command's environment) what torch it has.
pub fn installed(python: Option<PathBuf>) -> InstalledTorch {
    let Some(python) = python else {
        return InstalledTorch::NoPython;
    };
    let captured = match run_captured(&python, &["-c", QUERY], TIMEOUT) {
        Ok(captured) => captured,
        Err(e) => {
            return InstalledTorch::Unknown {
                python,
                why: e.to_string(),
            }
        }
    };
    let last = captured.stdout.lines().last().unwrap_or_default();
    match serde_json::from_str::<Answer>(last) {
        Ok(answer) => from_answer(python, answer),
        Err(_) => InstalledTorch::Unknown {
            why: format!(
                "it answered no torch facts ({})",
                first_line(&captured.all_output())
            ),
            python,
        },
    }
}

fn from_answer(python: PathBuf, answer: Answer) -> InstalledTorch {
    if let Some(why) = answer.error {
        return InstalledTorch::Absent { python, why };
    }
    let Some(version) = answer.version else {
        return InstalledTorch::Unknown {
            python,
            why: "it printed no torch version".into(),
        };
    };
    let Some(cuda) = answer.cuda.filter(|c| !c.is_empty()) else {
        return InstalledTorch::CpuOnly { python, version };
    };
    let (sass, ptx) = kernels(answer.arch.as_deref().unwrap_or_default());
    let wheel = WheelFacts {
        spec: wheel_spec(&version, &cuda),
        cuda,
        sass,
        ptx,
        unconfirmed: Vec::new(),
        source: format!(
            "the torch installed for {} (torch._C._cuda_getArchFlags)",
            python.display()
        ),
    };
    InstalledTorch::Cuda { python, wheel }
}

/// "2.7.1+cu128" from torch's version and CUDA: PyPI's default builds carry
/// no `+cuXYZ` of their own ("2.9.1" with CUDA 12.8 is 2.9.1+cu128).
fn wheel_spec(version: &str, cuda: &str) -> String {
    let release = version.split('+').next().unwrap_or(version);
    let digits: String = cuda.split('.').take(2).collect();
    format!("{release}+cu{digits}")
}

/// `sm_86 sm_90a compute_120` → SASS ["8.6", "9.0"], PTX ["12.0"].
fn kernels(flags: &str) -> (Vec<String>, Vec<String>) {
    let mut sass = Vec::new();
    let mut ptx = Vec::new();
    for flag in flags.split_whitespace() {
        let (list, number) = if let Some(n) = flag.strip_prefix("sm_") {
            (&mut sass, n)
        } else if let Some(n) = flag.strip_prefix("compute_") {
            (&mut ptx, n)
        } else {
            continue;
        };
        // `sm_90a`/`sm_100f`: arch-specific variants of the same capability.
        let digits = number.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        if digits.len() < 2 || !digits.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        let cc = format!("{major}.{minor}");
        if !list.contains(&cc) {
            list.push(cc);
        }
    }
    (sass, ptx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn kernel_flags_become_compute_capabilities() {
        let (sass, ptx) = kernels("sm_75 sm_80 sm_86 sm_90a sm_90 sm_100 sm_120 compute_120 -x");
        assert_eq!(sass, ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]);
        assert_eq!(ptx, ["12.0"]);
        assert_eq!(kernels("sm_ compute_x sm_9"), (vec![], vec![]));
    }

    #[test]
    fn wheel_specs_name_the_cuda_variant() {
        assert_eq!(wheel_spec("2.7.1+cu128", "12.8"), "2.7.1+cu128");
        assert_eq!(wheel_spec("2.9.1", "12.8"), "2.9.1+cu128");
        assert_eq!(wheel_spec("2.15.0+cu132", "13.2"), "2.15.0+cu132");
    }

    #[test]
    fn answers_map_to_what_is_installed() {
        let py = PathBuf::from("/venv/bin/python");
        let answer = |text: &str| from_answer(py.clone(), serde_json::from_str(text).unwrap());
        assert!(matches!(
            answer(r#"{"error": "ModuleNotFoundError: No module named 'torch'"}"#),
            InstalledTorch::Absent { .. }
        ));
        assert_eq!(
            answer(r#"{"version": "2.6.0+cpu", "cuda": null, "arch": ""}"#),
            InstalledTorch::CpuOnly {
                python: py.clone(),
                version: "2.6.0+cpu".into()
            }
        );
        let InstalledTorch::Cuda { wheel, .. } = answer(
            r#"{"version": "2.6.0+cu124", "cuda": "12.4", "arch": "sm_50 sm_90 compute_90"}"#,
        ) else {
            panic!("a CUDA build")
        };
        assert_eq!(
            (wheel.spec.as_str(), wheel.cuda.as_str()),
            ("2.6.0+cu124", "12.4")
        );
        assert_eq!(
            (wheel.sass, wheel.ptx),
            (vec!["5.0".into(), "9.0".into()], vec!["9.0".into()])
        );
        assert!(matches!(
            answer(r#"{"cuda": "12.4"}"#),
            InstalledTorch::Unknown { .. }
        ));
    }

    #[test]
    fn the_python_is_found_by_name_or_by_shebang() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let python = bin.join("python3.11");
        executable(&python, "#!/bin/sh\n");
        executable(
            &bin.join("torchrun"),
            &format!("#!{}\nimport sys\n", python.display()),
        );
        executable(&bin.join("accelerate"), "#!/usr/bin/env python3.11\n");
        executable(&bin.join("train.sh"), "#!/bin/bash\necho\n");
        let path = Some(bin.as_os_str());
        let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let found = |words: &[&str]| python_of(&argv(words), path, dir.path());
        assert_eq!(found(&["python3.11", "train.py"]), Some(python.clone()));
        assert_eq!(
            found(&["torchrun", "--standalone", "t.py"]),
            Some(python.clone())
        );
        assert_eq!(found(&["accelerate", "launch"]), Some(python.clone()));
        assert_eq!(
            found(&["bin/python3.11"]),
            Some(dir.path().join("bin/python3.11"))
        );
        assert_eq!(found(&["train.sh"]), None);
        assert_eq!(found(&["no-such-program"]), None);
        assert_eq!(found(&[]), None);
        assert!(!is_python_name(Path::new("pythonic")));
        assert!(is_python_name(Path::new("/usr/bin/python3.13t")));
    }

    /// Issue #39: `env VAR=… python` keeps the preflight.
    #[test]
    fn the_python_behind_env_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let other = dir.path().join("other");
        std::fs::create_dir(&bin).unwrap();
        std::fs::create_dir(&other).unwrap();
        let python = bin.join("python3");
        executable(&python, "#!/bin/sh\n");
        executable(&other.join("python3"), "#!/bin/sh\n");
        let path = Some(bin.as_os_str());
        let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let found = |words: &[&str]| python_of(&argv(words), path, dir.path());
        assert_eq!(
            found(&["env", "MICRO_BATCH_SIZE=16", "python3", "t.py"]),
            Some(python.clone())
        );
        assert_eq!(
            found(&["/usr/bin/env", "-i", "-u", "HOME", "A=1", "B=2", "python3"]),
            Some(python.clone())
        );
        assert_eq!(
            found(&["env", "--", "A=1", "python3"]),
            Some(python.clone())
        );
        let other_path = format!("PATH={}", other.display());
        assert_eq!(
            found(&["env", &other_path, "python3", "t.py"]),
            Some(other.join("python3")),
            "a PATH given to env is where the program is looked up"
        );
        assert_eq!(
            found(&["env", "-C", "bin", "./python3"]),
            Some(dir.path().join("bin/./python3"))
        );
        assert_eq!(found(&["env", "A=1"]), None, "env alone runs nothing");
        assert_eq!(found(&["env", "A=1", "bash", "run.sh"]), None);
    }
}
