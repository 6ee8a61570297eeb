//! `envgen doctor`: probe (or assume) the host, check images / a PyTorch
//! wheel / a precision against every GPU, and print the verdicts.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::compat::{evaluate, CheckRequest, ImageFacts, KnowledgeBase, Status, Verdict};
use crate::error::{Result, UserError};
use crate::host::{Host, HostSource};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Image to check (catalog reference, envgen profile, or local Docker image); repeatable.
    #[arg(long = "image", value_name = "REF")]
    pub images: Vec<String>,
    /// Check a PyTorch wheel build, e.g. 2.6.0+cu124.
    #[arg(long, value_name = "VERSION")]
    pub pytorch: Option<String>,
    /// Check that every GPU has the hardware for this precision.
    #[arg(long, value_enum)]
    pub precision: Option<crate::compat::Precision>,
    /// Describe a GPU instead of probing (marketing name or SM); repeatable.
    #[arg(long = "assume-gpu", value_name = "NAME|SM")]
    pub assume_gpus: Vec<String>,
    /// Describe the driver version instead of probing, e.g. 535.261.03.
    #[arg(long, value_name = "VERSION")]
    pub assume_driver: Option<String>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document of the contract, fields in the contract's order.
#[derive(serde::Serialize)]
struct Report<'a> {
    host: &'a Host,
    verdicts: &'a [Verdict],
}

/// Facts about an envgen profile named by its bare name (`cpu`), else about
/// an image the local Docker daemon has (its `NVIDIA_REQUIRE_CUDA` /
/// `CUDA_VERSION` env and envgen labels: a built `envgen/cuda12.8:0.1.0` is
/// read from the daemon), else about the profile a default tag names. A
/// daemon that does not answer simply knows no image.
pub fn local_image_facts(reference: &str) -> Option<ImageFacts> {
    if let Some(facts) = crate::image::profile_facts(reference) {
        return Some(facts);
    }
    let profile = reference
        .strip_prefix("envgen/")
        .map(|rest| rest.split(':').next().unwrap_or(rest));
    crate::image::local_image_facts(reference)
        .or_else(|| profile.and_then(crate::image::profile_facts))
}

/// `--assume-driver` must look like a driver version ("535.261.03", "580.65").
fn validate_driver(value: &str) -> Result<()> {
    if crate::probe::proc::is_driver_version(value) {
        return Ok(());
    }
    Err(UserError::usage(format!(
        "--assume-driver {value:?} is not an NVIDIA driver version"
    ))
    .with_fix("give the version `nvidia-smi` prints, e.g. --assume-driver 535.261.03 or 580.65")
    .into())
}

/// The image facts for `reference`: catalog/profile first, then the local
/// daemon, else a bare entry the verdict engine reports as `unknown-image`.
fn image_facts(kb: &KnowledgeBase, reference: &str) -> ImageFacts {
    kb.image(reference)
        .or_else(|| local_image_facts(reference))
        .unwrap_or_else(|| ImageFacts {
            reference: reference.to_string(),
            origin: "unknown".to_string(),
            ..ImageFacts::default()
        })
}

pub fn execute(args: Args) -> Result<i32> {
    let kb = KnowledgeBase::embedded();
    if let Some(driver) = &args.assume_driver {
        validate_driver(driver)?;
    }
    let assumed = !args.assume_gpus.is_empty() || args.assume_driver.is_some();
    let host = if assumed {
        let mut host = kb.assumed_host(&args.assume_gpus, args.assume_driver.as_deref())?;
        host.source = HostSource::Assumed;
        host
    } else {
        crate::probe::probe_host()
    };

    let whole_catalog = args.images.is_empty();
    let request = CheckRequest {
        images: if whole_catalog {
            kb.images().to_vec()
        } else {
            args.images.iter().map(|r| image_facts(kb, r)).collect()
        },
        pytorch: args.pytorch.clone(),
        precision: args.precision,
    };
    let verdicts = evaluate(kb, &host, &request);

    if args.json {
        let document = Report {
            host: &host,
            verdicts: &verdicts,
        };
        write_stdout(&format!("{}\n", serde_json::to_string_pretty(&document)?))?;
    } else {
        let text = render_host(&host) + &render_verdicts(&host, &verdicts, whole_catalog);
        write_stdout(&text)?;
    }
    Ok(exit_code(&args, &host, &verdicts))
}

/// Print to stdout; a closed pipe (`envgen doctor | head`) is not an error.
fn write_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err(err.into()),
        _ => Ok(()),
    }
}

/// 1 only when something the user asked for by name fails on a GPU that
/// exists; the catalog sweep and a GPU-less host are reports, not failures.
fn exit_code(args: &Args, host: &Host, verdicts: &[Verdict]) -> i32 {
    if host.gpus.is_empty() {
        return 0;
    }
    let requested = |verdict: &Verdict| {
        args.images.contains(&verdict.image)
            || (args.pytorch.is_some() && verdict.image.starts_with("pytorch:"))
            || (args.precision.is_some() && verdict.image.starts_with("precision:"))
    };
    let failed = verdicts
        .iter()
        .any(|verdict| verdict.status == Status::Fail && requested(verdict));
    i32::from(failed)
}

fn source_name(source: HostSource) -> &'static str {
    match source {
        HostSource::Nvml => "NVML",
        HostSource::NvidiaSmi => "nvidia-smi",
        HostSource::Proc => "/proc/driver/nvidia/version",
        HostSource::Assumed => "assumed (--assume-gpu/--assume-driver)",
        HostSource::None => "none",
    }
}

fn or_unknown(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("unknown")
}

/// The host summary: driver, GPUs, toolkit, runtimes, Slurm, OS, notes.
pub fn render_host(host: &Host) -> String {
    let mut out = String::new();
    let sw = &host.software;
    let _ = writeln!(out, "Host (source: {})", source_name(host.source));
    let _ = writeln!(
        out,
        "  driver {}, CUDA driver API {}",
        or_unknown(&host.driver_version),
        or_unknown(&host.cuda_driver_version)
    );
    if host.gpus.is_empty() {
        let _ = writeln!(
            out,
            "  no NVIDIA GPU found (no-gpu): images can only run on the CPU here"
        );
    }
    for gpu in &host.gpus {
        let class = gpu
            .class
            .and_then(|c| serde_json::to_value(c).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "class unknown".to_string());
        let memory = KnowledgeBase::embedded().memory_text(gpu);
        let _ = writeln!(
            out,
            "  GPU {}  {}  CC {}  {}  {}",
            gpu.index,
            gpu.name,
            or_unknown(&gpu.compute_capability),
            memory,
            class
        );
    }
    if !assumed(host) {
        let _ = writeln!(
            out,
            "  toolkit: CUDA {}, cuDNN {}, NVRTC {}",
            sw.cuda_toolkit.as_deref().unwrap_or("none"),
            sw.cudnn.as_deref().unwrap_or("none"),
            sw.nvrtc.as_deref().unwrap_or("none")
        );
        let runtimes: Vec<String> = sw
            .container_runtimes
            .iter()
            .map(|r| {
                let mut text = format!("{} {}", r.name, r.version.as_deref().unwrap_or("?"));
                if !r.notes.is_empty() {
                    let _ = write!(text, " ({})", r.notes.join("; "));
                }
                text
            })
            .collect();
        let _ = writeln!(
            out,
            "  container runtimes: {}",
            if runtimes.is_empty() {
                "none found".to_string()
            } else {
                runtimes.join(", ")
            }
        );
        let slurm = sw.slurm.as_ref().map_or("not installed".to_string(), |s| {
            format!(
                "{}, partitions [{}], GRES [{}]",
                or_unknown(&s.version),
                s.partitions.join(", "),
                s.gres.join(", ")
            )
        });
        let _ = writeln!(out, "  slurm: {slurm}");
        let _ = writeln!(
            out,
            "  os: {}, kernel {}, CPU {} × {}",
            or_unknown(&sw.os),
            or_unknown(&sw.kernel),
            or_unknown(&sw.cpu),
            sw.cpu_count.map_or("?".to_string(), |n| n.to_string())
        );
    }
    for note in &host.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}

fn assumed(host: &Host) -> bool {
    host.source == HostSource::Assumed
}

fn status_word(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Warn => "warn",
        Status::Fail => "fail",
    }
}

/// The verdict table (image × GPU), then each distinct problem's message and
/// fix once. For the whole catalog only warn/fail rows are listed, with a
/// count of the ok ones, so the screen stays readable.
pub fn render_verdicts(host: &Host, verdicts: &[Verdict], whole_catalog: bool) -> String {
    let mut out = String::from("\nVerdicts\n");
    if verdicts.is_empty() {
        let _ = writeln!(out, "  nothing to check");
        return out;
    }
    // With no GPU every catalog image gets the same `no-gpu` verdict: one
    // line says it better than a row per image.
    if whole_catalog && host.gpus.is_empty() {
        let images = verdicts
            .iter()
            .map(|v| v.image.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        let _ = writeln!(
            out,
            "  no-gpu: none of the {images} catalog images can use a GPU on this host; they run here only on the CPU\n  \
             fix: check a GPU host you don't have with --assume-gpu NAME --assume-driver VERSION (e.g. --assume-gpu A30 --assume-driver 535.261.03)"
        );
        return out;
    }
    let shown: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| !whole_catalog || v.status != Status::Ok)
        .collect();
    let hidden_ok = verdicts.len() - shown.len();
    let width = shown
        .iter()
        .map(|v| v.image.len())
        .max()
        .unwrap_or(5)
        .max(5);
    if !shown.is_empty() {
        let _ = writeln!(
            out,
            "  {:<width$}  {:<4}  {:<6}  REASONS",
            "IMAGE", "GPU", "STATUS"
        );
    }
    for verdict in &shown {
        let gpu = verdict.gpu_index.map_or("-".to_string(), |i| i.to_string());
        let codes: Vec<&str> = verdict
            .reasons
            .iter()
            .filter(|r| r.status != Status::Ok || verdict.status == Status::Ok)
            .map(|r| r.code.as_str())
            .collect();
        let _ = writeln!(
            out,
            "  {:<width$}  {:<4}  {:<6}  {}",
            verdict.image,
            gpu,
            status_word(verdict.status),
            codes.join(", ")
        );
    }
    if hidden_ok > 0 {
        let gpus = host.gpus.len().max(1);
        let _ = writeln!(
            out,
            "  … and {hidden_ok} ok verdict(s) not listed ({} image(s) × {gpus} GPU(s) checked; name one with --image to see it)",
            verdicts.iter().map(|v| v.image.as_str()).collect::<BTreeSet<_>>().len(),
        );
    }
    let mut seen = BTreeSet::new();
    let problems: Vec<_> = verdicts
        .iter()
        .flat_map(|v| &v.reasons)
        .filter(|r| r.status != Status::Ok)
        .filter(|r| seen.insert((r.code.clone(), r.message.clone(), r.fix.clone())))
        .collect();
    if !problems.is_empty() {
        let _ = writeln!(out, "\nProblems");
        for reason in problems {
            let _ = writeln!(
                out,
                "  [{}] {}: {}",
                status_word(reason.status),
                reason.code,
                reason.message
            );
            if !reason.fix.is_empty() {
                let _ = writeln!(out, "      fix: {}", reason.fix);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::Reason;

    fn verdict(image: &str, status: Status, code: &str) -> Verdict {
        Verdict {
            image: image.to_string(),
            gpu_index: Some(0),
            status,
            reasons: vec![Reason {
                code: code.to_string(),
                status,
                message: format!("{code} message"),
                fix: format!("{code} fix"),
            }],
        }
    }

    #[test]
    fn catalog_view_hides_ok_rows_and_prints_each_problem_once() {
        let host = Host {
            gpus: vec![crate::host::Gpu::default()],
            ..Host::default()
        };
        let verdicts = vec![
            verdict("a:1", Status::Ok, "ok"),
            verdict("b:1", Status::Fail, "driver-too-old"),
            verdict("c:1", Status::Fail, "driver-too-old"),
        ];
        let text = render_verdicts(&host, &verdicts, true);
        assert!(!text.contains("a:1"), "{text}");
        assert!(text.contains("b:1") && text.contains("c:1"), "{text}");
        assert!(text.contains("1 ok verdict"), "{text}");
        assert_eq!(text.matches("driver-too-old message").count(), 1, "{text}");
        assert!(text.contains("fix: driver-too-old fix"), "{text}");

        let explicit = render_verdicts(&host, &verdicts, false);
        assert!(explicit.contains("a:1"), "{explicit}");
    }

    #[test]
    fn no_gpu_catalog_view_is_one_line_with_the_way_out() {
        let verdicts = vec![
            verdict("a:1", Status::Warn, "no-gpu"),
            verdict("b:1", Status::Warn, "no-gpu"),
        ];
        let text = render_verdicts(&Host::default(), &verdicts, true);
        assert!(
            text.contains("none of the 2 catalog images") && text.contains("--assume-gpu"),
            "{text}"
        );
        assert!(!text.contains("a:1"), "{text}");
    }

    #[test]
    fn exit_code_counts_only_requested_subjects() {
        let mut host = Host::default();
        host.gpus.push(crate::host::Gpu::default());
        let args = |images: &[&str]| Args {
            images: images.iter().map(|s| s.to_string()).collect(),
            pytorch: None,
            precision: None,
            assume_gpus: vec![],
            assume_driver: None,
            json: true,
        };
        let verdicts = vec![verdict("b:1", Status::Fail, "driver-too-old")];
        assert_eq!(exit_code(&args(&[]), &host, &verdicts), 0);
        assert_eq!(exit_code(&args(&["b:1"]), &host, &verdicts), 1);
        assert_eq!(exit_code(&args(&["b:1"]), &Host::default(), &verdicts), 0);
    }

    #[test]
    fn driver_validation_names_the_value() {
        let err = validate_driver("banana").unwrap_err();
        assert!(err.to_string().contains("banana"));
        assert!(validate_driver("535.261.03").is_ok());
        assert!(validate_driver("580.65").is_ok());
    }
}
