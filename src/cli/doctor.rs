//! `envgen doctor`: probe (or assume) the host, check images / a PyTorch
//! wheel / a precision against every GPU, and print the verdicts. The flags,
//! the request and the printing live here; the text is rendered by
//! [`crate::compat::report`], the verdicts by [`crate::compat::evaluate`].

use crate::compat::report::{render_catalog, render_host, render_requested, render_summary};
use crate::compat::summary::{summarize, GpuSummary};
use crate::compat::{evaluate, CheckRequest, ImageFacts, KnowledgeBase, Verdict, VerdictStatus};
use crate::error::{Result, UserError};
use crate::host::{Host, HostSource};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Image to check (catalog reference, envgen profile, or local Docker image); repeatable.
    #[arg(long = "image", value_name = "REF")]
    pub images: Vec<String>,
    /// Check a PyTorch wheel build: release and CUDA variant, e.g. 2.6.0+cu124.
    #[arg(long, value_name = "VERSION+CUDA")]
    pub pytorch: Option<String>,
    /// Check the torch installed for this Python (its version, CUDA and compiled kernels), e.g. .venv/bin/python.
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<String>,
    /// Check that every GPU has the hardware for this precision; repeatable.
    #[arg(long = "precision", value_enum)]
    pub precisions: Vec<crate::compat::HardwarePrecision>,
    /// Describe a GPU instead of probing (marketing name or SM); repeatable.
    #[arg(long = "assume-gpu", value_name = "NAME|SM")]
    pub assume_gpus: Vec<String>,
    /// Describe the driver instead of probing: its version (535.261.03) or branch (535).
    #[arg(long, value_name = "VERSION")]
    pub assume_driver: Option<String>,
    /// Print every catalog verdict (ok rows too), not just the summary or the answer.
    #[arg(long)]
    pub all: bool,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document: the contract's `host` and `verdicts` (what was
/// asked; the whole catalog when nothing was), plus `summary` ("what runs
/// here" per GPU, when nothing was asked) or `catalog` (every catalog verdict,
/// when something was).
#[derive(serde::Serialize)]
struct Report<'a> {
    host: &'a Host,
    verdicts: &'a [Verdict],
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<Vec<GpuSummary>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    catalog: Option<&'a [Verdict]>,
    /// envgen's own CUDA backend on this host (probed hosts only).
    #[serde(skip_serializing_if = "Option::is_none")]
    cuda_backend: Option<crate::probe::cuda_backend::CudaBackendVerdict>,
}

/// The image facts for `reference` (see [`crate::image::image_facts`]). An
/// image envgen knows nothing about (not in the catalog, not a profile, not
/// in the local Docker daemon) is a usage error, exit 2, with the closest
/// known references: most often a typo such as `nvcr.io/nvidia/pytorch:25.06`
/// for `…:25.06-py3`, which a warning and exit 0 let scripts miss (issue #44).
fn image_facts(kb: &KnowledgeBase, reference: &str) -> Result<ImageFacts> {
    if let Some(facts) = crate::image::image_facts(kb, reference) {
        return Ok(facts);
    }
    let mut known: Vec<String> = kb.images().iter().map(|i| i.reference.clone()).collect();
    if let Ok(containers) = crate::image::Containers::locate(None) {
        known.extend(containers.names());
    }
    let hint = crate::suggest::did_you_mean(reference, known.iter().map(String::as_str))
        .map(|d| format!("{d} "))
        .unwrap_or_default();
    Err(UserError::usage(format!(
        "--image {reference}: envgen knows nothing about this image (not in its catalog, not an envgen profile, not in the local Docker daemon)"
    ))
    .with_fix(format!(
        "{hint}`envgen doctor --all` lists the catalog's images and `envgen image list` the profiles; pull or build the image first to check one of your own"
    ))
    .into())
}

impl Args {
    /// Did the user ask about something (an image, a wheel, a precision)?
    /// Then the answer is about that, not the catalog.
    fn asks_something(&self) -> bool {
        !self.images.is_empty()
            || self.pytorch.is_some()
            || self.python.is_some()
            || !self.precisions.is_empty()
    }
}

/// `--python PY`: the CUDA build of torch that Python imports, as a wheel.
fn installed_pytorch(python: &str) -> Result<crate::compat::WheelFacts> {
    use crate::probe::torch::{installed, python_of, InstalledTorch};
    let cwd = std::env::current_dir().unwrap_or_default();
    let path = std::env::var_os("PATH");
    let Some(found) = python_of(&[python.to_string()], path.as_deref(), &cwd) else {
        return Err(UserError::usage(format!(
            "--python {python}: not a Python interpreter (nor a script whose #! names one)"
        ))
        .with_fix("give the interpreter your code runs with, e.g. --python .venv/bin/python")
        .into());
    };
    let problem = match installed(Some(found)) {
        InstalledTorch::Cuda { wheel, .. } => return Ok(wheel),
        InstalledTorch::CpuOnly { python, version } => format!(
            "{} imports torch {version}, a CPU build: there is no GPU verdict to give",
            python.display()
        ),
        InstalledTorch::Absent { python, why } => {
            format!("{} cannot import torch ({why})", python.display())
        }
        InstalledTorch::Unknown { python, why } => {
            format!("cannot ask {} about torch: {why}", python.display())
        }
        InstalledTorch::NoPython => unreachable!("python_of found one"),
    };
    Err(UserError::usage(format!("--python {python}: {problem}"))
        .with_fix("install a CUDA build of torch in that environment, or name a build with --pytorch VERSION+cuXYZ")
        .into())
}

pub fn execute(args: Args) -> Result<i32> {
    let kb = KnowledgeBase::embedded();
    // A wheel is a release *and* a CUDA variant: "2.8.0" alone names three
    // builds whose verdicts differ (cu126 still has sm_50 kernels, cu129 has
    // sm_120), and which one pip picks depends on the index. So a bare or
    // unknown build is a usage error listing the builds of that release
    // (exit 2), as the docs say, not a guess.
    if let Some(spec) = &args.pytorch {
        kb.wheel(spec)?;
    }
    // Before the host is probed: a mistyped image is refused at once.
    let images = args
        .images
        .iter()
        .map(|r| image_facts(kb, r))
        .collect::<Result<Vec<_>>>()?;
    let installed = args.python.as_deref().map(installed_pytorch).transpose()?;
    let assumed = !args.assume_gpus.is_empty() || args.assume_driver.is_some();
    let host = if assumed {
        let mut host = kb.assumed_host(&args.assume_gpus, args.assume_driver.as_deref())?;
        host.source = HostSource::Assumed;
        host
    } else {
        crate::probe::probe_host()
    };

    // envgen's own backend: only on a probed host (an assumed one has no
    // libraries to load).
    let cuda_backend = (!assumed).then(crate::probe::cuda_backend::check);

    let catalog_request = CheckRequest::only_images(kb.images().to_vec());
    let (verdicts, catalog) = if args.asks_something() {
        let request = CheckRequest {
            images,
            pytorch: args.pytorch.clone(),
            installed_pytorch: installed,
            // `--precision bf16 --precision bf16` asks one question.
            precisions: args
                .precisions
                .iter()
                .enumerate()
                .filter(|(i, p)| !args.precisions[..*i].contains(p))
                .map(|(_, p)| *p)
                .collect(),
        };
        let catalog = (args.json || args.all).then(|| evaluate(kb, &host, &catalog_request));
        (evaluate(kb, &host, &request), catalog)
    } else {
        (evaluate(kb, &host, &catalog_request), None)
    };

    if args.json {
        let document = Report {
            host: &host,
            verdicts: &verdicts,
            summary: (!args.asks_something()).then(|| summarize(&verdicts)),
            catalog: catalog.as_deref(),
            cuda_backend: cuda_backend.clone(),
        };
        crate::output::outln!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        let mut text = render_host(&host);
        if args.asks_something() {
            text += &render_requested(&host, &verdicts);
            if let Some(catalog) = &catalog {
                text += &render_catalog(&host, catalog, true);
            }
        } else if args.all {
            text += &render_catalog(&host, &verdicts, true);
        } else {
            text += &render_summary(&host, &verdicts);
        }
        // On a host without NVIDIA GPUs the block would only say so again.
        if let Some(backend) = cuda_backend.as_ref().filter(|_| !host.gpus.is_empty()) {
            text += &backend.render();
        }
        crate::output::out!("{text}");
    }
    Ok(exit_code(&args, &host, &verdicts))
}

/// 1 only when something the user asked for by name fails on a GPU that
/// exists; the catalog sweep and a GPU-less host are reports, not failures.
fn exit_code(args: &Args, host: &Host, verdicts: &[Verdict]) -> i32 {
    let failed = verdicts
        .iter()
        .any(|verdict| verdict.status == VerdictStatus::Fail);
    i32::from(args.asks_something() && !host.gpus.is_empty() && failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compat::verdict::example as verdict;

    #[test]
    fn exit_code_counts_only_requested_subjects() {
        let mut host = Host::default();
        host.gpus.push(crate::host::Gpu::default());
        let args = |images: &[&str]| Args {
            images: images.iter().map(|s| s.to_string()).collect(),
            pytorch: None,
            python: None,
            precisions: vec![],
            assume_gpus: vec![],
            assume_driver: None,
            all: false,
            json: true,
        };
        let verdicts = vec![verdict("b:1", VerdictStatus::Fail, "driver-too-old")];
        assert_eq!(exit_code(&args(&[]), &host, &verdicts), 0);
        assert_eq!(exit_code(&args(&["b:1"]), &host, &verdicts), 1);
        assert_eq!(exit_code(&args(&["b:1"]), &Host::default(), &verdicts), 0);
    }

    #[test]
    fn driver_validation_names_the_value_and_takes_a_bare_branch() {
        let kb = KnowledgeBase::embedded();
        let err = kb.assumed_host(&[], Some("banana")).unwrap_err();
        assert!(crate::error::render(&err).contains("banana"));
        for driver in ["535.261.03", "580.65", "535"] {
            assert!(kb.assumed_host(&[], Some(driver)).is_ok(), "{driver}");
        }
    }
}
