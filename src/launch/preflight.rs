//! Doctor before a user command (issue #25): the torch the command will
//! import (`probe::torch`) checked against the GPUs and driver of the
//! machine it is about to run on, as `envgen doctor --python PY` would.
//!
//! It runs where the command runs — natively, in the container, and on
//! the Slurm node as the job's first step — so the answer is the node's,
//! not the submit host's. A `fail` verdict stops the run before the
//! command starts (exit 3, doctor's reasons and fix); warnings are printed
//! and the command runs. What was checked is kept as `preflight.json` in
//! the run directory. `ENVGEN_PREFLIGHT=off` skips it (for a verdict
//! envgen's tables get wrong: please report it).

use std::path::Path;

use serde_json::{json, Value};

use crate::compat::report::render_requested;
use crate::compat::verdict::{evaluate, CheckRequest, Verdict, VerdictStatus};
use crate::compat::KnowledgeBase;
use crate::error::{Result, UserError};
use crate::host::Host;
use crate::probe::torch::{self, InstalledTorch};

/// The file the check leaves in the run directory.
pub const FILE: &str = "preflight.json";

/// Set to `off` to run the command without the check.
pub const SWITCH_ENV: &str = "ENVGEN_PREFLIGHT";

/// Check the command `argv` (run from `workdir`) before it starts; the
/// record goes to `record_file` (the run's [`FILE`], or a node's own).
pub fn check(argv: &[String], workdir: &Path, record_file: &Path) -> Result<()> {
    if std::env::var(SWITCH_ENV).is_ok_and(|v| v == "off") {
        crate::output::notice!("envgen: preflight: skipped ({SWITCH_ENV}=off)");
        return Ok(());
    }
    let path = std::env::var_os("PATH");
    let installed = torch::installed(torch::python_of(argv, path.as_deref(), workdir));
    let host = match &installed {
        InstalledTorch::Cuda { .. } | InstalledTorch::CpuOnly { .. } => crate::probe::probe_host(),
        _ => Host::default(),
    };
    let outcome = judge(KnowledgeBase::embedded(), &host, &installed);
    let record = json!({
        "python": python_of(&installed),
        "torch": torch_of(&installed),
        "gpus": host.gpus.iter().map(|g| &g.name).collect::<Vec<_>>(),
        "driver": host.driver_version,
        "said": outcome.line,
        "verdicts": outcome.verdicts,
    });
    if let Ok(text) = serde_json::to_vec_pretty(&record) {
        let _ = envgen_experiments::fsutil::write_atomic(record_file, &text);
    }
    crate::output::notice!("envgen: preflight: {}", outcome.line);
    let mut warned: Vec<&str> = Vec::new();
    for reason in outcome.verdicts.iter().flat_map(|v| &v.reasons) {
        if reason.status == VerdictStatus::Warn && !warned.contains(&reason.message.as_str()) {
            warned.push(&reason.message);
            eprintln!(
                "envgen: preflight: [warn] {}: {}",
                reason.code, reason.message
            );
        }
    }
    match outcome.refusal {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// Before a Slurm submission: the torch the command imports (read on this
/// submit host: a cluster's venvs live on the shared filesystem) against
/// the GPU types the partition advertises in its GRES (`gpu:a100:4`), with
/// no driver known. Refused (exit 3, no run directory, no job) only when no
/// GPU type of the partition can run it: a job may land on any of them.
/// The driver and the exact GPU are checked again by the job itself.
pub fn before_submit(argv: &[String], workdir: &Path, partition: Option<&str>) -> Result<()> {
    if std::env::var(SWITCH_ENV).is_ok_and(|v| v == "off") {
        return Ok(());
    }
    let path = std::env::var_os("PATH");
    let Some(python) = torch::python_of(argv, path.as_deref(), workdir) else {
        return Ok(());
    };
    let kb = KnowledgeBase::embedded();
    let types = gpu_types(&crate::probe::slurm::partition_gres(partition));
    let known: Vec<String> = types
        .iter()
        .filter_map(|t| kb.lookup_gpu(t).map(|spec| spec.name.clone()))
        .collect();
    if known.is_empty() {
        return Ok(());
    }
    let InstalledTorch::Cuda { wheel, .. } = torch::installed(Some(python)) else {
        return Ok(());
    };
    let request = CheckRequest {
        installed_pytorch: Some(wheel.clone()),
        ..CheckRequest::default()
    };
    let mut failing = Vec::new();
    for name in &known {
        let Ok(host) = kb.assumed_host(std::slice::from_ref(name), None) else {
            continue;
        };
        let verdicts = evaluate(kb, &host, &request);
        if verdicts.iter().any(|v| v.status == VerdictStatus::Fail) {
            failing.push((name, render_requested(&host, &verdicts)));
        }
    }
    let where_ = partition.map_or("the default partition".to_string(), |p| {
        format!("partition {p}")
    });
    if failing.len() < known.len() {
        for (name, _) in &failing {
            eprintln!("envgen: preflight: warning: torch {} cannot run on the {name} GPUs of {where_}; the job's own check refuses them if it lands there", wheel.spec);
        }
        return Ok(());
    }
    let reasons: String = failing
        .iter()
        .map(|(_, text)| text.trim_end().trim_start_matches("\nVerdicts").to_string())
        .collect();
    Err(UserError::environment(format!(
        "doctor says torch {} will not run on any GPU of {where_} (GRES {}):{reasons}",
        wheel.spec,
        types.join(", ")
    ))
    .with_fix(format!(
        "install a torch build with kernels for these GPUs, or pick another --partition; {SWITCH_ENV}=off submits anyway"
    ))
    .into())
}

/// GPU type names in sinfo's GRES column: `gpu:a100:4(S:0-1),shard:8` → a100.
fn gpu_types(gres: &[String]) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for entry in gres.iter().flat_map(|line| line.split(',')) {
        let entry = entry.split('(').next().unwrap_or_default().trim();
        let mut parts = entry.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        // `gpu:4` has no type; `gpu:a100:4` has one.
        let (Some(kind), Some(_count)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !types.iter().any(|t| t == kind) {
            types.push(kind.to_string());
        }
    }
    types
}

/// What the check says: one line, the verdicts, and the refusal on `fail`.
struct Outcome {
    line: String,
    verdicts: Vec<Verdict>,
    refusal: Option<anyhow::Error>,
}

fn judge(kb: &KnowledgeBase, host: &Host, installed: &InstalledTorch) -> Outcome {
    let said = |line: String| Outcome {
        line,
        verdicts: Vec::new(),
        refusal: None,
    };
    let wheel = match installed {
        InstalledTorch::NoPython => {
            return said("the command starts no Python envgen can see: nothing to check".into())
        }
        InstalledTorch::Absent { python, why } => {
            return said(format!(
                "{} has no torch ({why}): nothing to check",
                python.display()
            ))
        }
        InstalledTorch::Unknown { python, why } => {
            return said(format!(
                "cannot ask {} about torch ({why}): not checked",
                python.display()
            ))
        }
        InstalledTorch::CpuOnly { version, .. } if !host.gpus.is_empty() => {
            return said(format!(
                "warning: torch {version} is a CPU build: the {} GPU(s) here go unused",
                host.gpus.len()
            ))
        }
        InstalledTorch::CpuOnly { version, .. } => {
            return said(format!(
                "torch {version} (CPU build) on a host without a GPU: ok"
            ))
        }
        InstalledTorch::Cuda { wheel, .. } => wheel,
    };
    let request = CheckRequest {
        installed_pytorch: Some(wheel.clone()),
        ..CheckRequest::default()
    };
    let verdicts = evaluate(kb, host, &request);
    let worst = verdicts
        .iter()
        .map(|v| v.status)
        .max()
        .unwrap_or(VerdictStatus::Ok);
    let kernels = if wheel.sass.is_empty() {
        "kernels unknown".to_string()
    } else {
        format!("sm {}", wheel.sass.join(" "))
    };
    let subject = format!("torch {} ({kernels})", wheel.spec);
    let place = if host.gpus.is_empty() {
        "a host without an NVIDIA GPU (it runs on the CPU)".to_string()
    } else {
        format!(
            "{} GPU(s) ({}), driver {}",
            host.gpus.len(),
            gpu_names(host),
            host.driver_version.as_deref().unwrap_or("unknown")
        )
    };
    let word = match worst {
        VerdictStatus::Ok => "ok",
        VerdictStatus::Warn => "warn",
        VerdictStatus::Fail => "fail",
    };
    let line = format!("{subject} on {place}: {word}");
    let refusal = (worst == VerdictStatus::Fail && !host.gpus.is_empty()).then(|| {
        let answer = render_requested(host, &verdicts);
        UserError::environment(format!(
            "doctor says {subject} will not run on this machine:{}",
            answer.trim_end().trim_start_matches("\nVerdicts")
        ))
        .with_fix(format!(
            "install a torch build for this GPU and driver (see the fix above), or check with `envgen doctor --python {}`; {SWITCH_ENV}=off skips this check",
            python_of(installed).unwrap_or_default()
        ))
        .into()
    });
    Outcome {
        line,
        verdicts,
        refusal,
    }
}

fn gpu_names(host: &Host) -> String {
    let mut names: Vec<&str> = host.gpus.iter().map(|g| g.name.as_str()).collect();
    names.dedup();
    names.join(", ")
}

fn python_of(installed: &InstalledTorch) -> Option<String> {
    match installed {
        InstalledTorch::NoPython => None,
        InstalledTorch::Absent { python, .. }
        | InstalledTorch::CpuOnly { python, .. }
        | InstalledTorch::Cuda { python, .. }
        | InstalledTorch::Unknown { python, .. } => Some(python.display().to_string()),
    }
}

fn torch_of(installed: &InstalledTorch) -> Value {
    match installed {
        InstalledTorch::CpuOnly { version, .. } => json!({ "version": version, "cuda": null }),
        InstalledTorch::Cuda { wheel, .. } => json!({
            "version": wheel.spec,
            "cuda": wheel.cuda,
            "sass": wheel.sass,
            "ptx": wheel.ptx,
        }),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::WheelFacts;
    use std::path::PathBuf;

    fn cuda_torch(spec: &str, cuda: &str, sass: &[&str]) -> InstalledTorch {
        InstalledTorch::Cuda {
            python: PathBuf::from("/venv/bin/python"),
            wheel: WheelFacts {
                spec: spec.into(),
                cuda: cuda.into(),
                sass: sass.iter().map(|s| s.to_string()).collect(),
                ptx: vec![],
                unconfirmed: vec![],
                source: "test".into(),
            },
        }
    }

    fn host(gpu: &str, driver: &str) -> Host {
        KnowledgeBase::embedded()
            .assumed_host(&[gpu.into()], Some(driver))
            .unwrap()
    }

    #[test]
    fn a_torch_without_the_gpus_kernels_is_refused_naming_both() {
        let kb = KnowledgeBase::embedded();
        // A build without sm_120 on an RTX 5070 Ti (Blackwell, 12.0).
        let torch = cuda_torch("2.6.0+cu124", "12.4", &["5.0", "8.0", "9.0"]);
        let outcome = judge(kb, &host("RTX 5070 Ti", "575.51.02"), &torch);
        let text = crate::error::render(&outcome.refusal.expect("refused"));
        assert!(text.contains("torch 2.6.0+cu124"), "{text}");
        assert!(text.contains("no kernel image"), "{text}");
        assert!(
            text.contains("envgen doctor --python /venv/bin/python"),
            "{text}"
        );
        assert!(outcome.line.ends_with(": fail"), "{}", outcome.line);
    }

    #[test]
    fn a_driver_too_old_for_the_torch_cuda_is_refused() {
        let kb = KnowledgeBase::embedded();
        let torch = cuda_torch("2.15.0+cu132", "13.2", &["7.5", "8.0", "8.6", "9.0"]);
        let outcome = judge(kb, &host("A30", "535.261.03"), &torch);
        assert!(outcome.refusal.is_some(), "{}", outcome.line);
        // The same build on a CUDA 13 driver runs.
        let fine = judge(kb, &host("H100 SXM", "580.95.05"), &torch);
        assert!(fine.refusal.is_none(), "{}", fine.line);
        assert!(fine.line.contains("1 GPU(s)"), "{}", fine.line);
    }

    #[test]
    fn gres_lines_give_their_gpu_types() {
        let gres = [
            "gpu:a100:4(S:0-1),shard:8".to_string(),
            "gpu:4".into(),
            "(null)".into(),
            "gpu:tesla_v100:2,gpu:a100:2".into(),
        ];
        assert_eq!(gpu_types(&gres), ["a100", "tesla_v100"]);
        let kb = KnowledgeBase::embedded();
        assert_eq!(
            kb.lookup_gpu("a100").map(|g| g.compute_capability.as_str()),
            Some("8.0")
        );
        assert_eq!(
            kb.lookup_gpu("v100").map(|g| g.compute_capability.as_str()),
            Some("7.0")
        );
    }

    #[test]
    fn without_a_gpu_or_a_cuda_torch_nothing_is_refused() {
        let kb = KnowledgeBase::embedded();
        let torch = cuda_torch("2.6.0+cu124", "12.4", &["8.0"]);
        let outcome = judge(kb, &Host::default(), &torch);
        assert!(outcome.refusal.is_none());
        assert!(outcome.line.ends_with(": warn"), "{}", outcome.line);
        let cpu = InstalledTorch::CpuOnly {
            python: PathBuf::from("/p"),
            version: "2.6.0+cpu".into(),
        };
        let on_gpu = judge(kb, &host("A30", "535.261.03"), &cpu);
        assert!(on_gpu.refusal.is_none() && on_gpu.line.starts_with("warning: "));
        assert!(judge(kb, &Host::default(), &InstalledTorch::NoPython)
            .refusal
            .is_none());
    }
}
