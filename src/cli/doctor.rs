//! `envgen doctor`: probe (or assume) the host, check images / a PyTorch
//! wheel / a precision against every GPU, and print the verdicts.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::compat::summary::{summarize, FamilySummary, GpuSummary};
use crate::compat::{evaluate, CheckRequest, ImageFacts, KnowledgeBase, Reason, Status, Verdict};
use crate::error::Result;
use crate::host::{Host, HostSource};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Image to check (catalog reference, envgen profile, or local Docker image); repeatable.
    #[arg(long = "image", value_name = "REF")]
    pub images: Vec<String>,
    /// Check a PyTorch wheel build: release and CUDA variant, e.g. 2.6.0+cu124.
    #[arg(long, value_name = "VERSION+CUDA")]
    pub pytorch: Option<String>,
    /// Check that every GPU has the hardware for this precision; repeatable.
    #[arg(long = "precision", value_enum)]
    pub precisions: Vec<crate::compat::Precision>,
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

/// The image facts for `reference` (see [`crate::image::image_facts`]), else
/// a bare entry the verdict engine reports as `unknown-image`.
fn image_facts(kb: &KnowledgeBase, reference: &str) -> ImageFacts {
    crate::image::image_facts(kb, reference).unwrap_or_else(|| ImageFacts {
        reference: reference.to_string(),
        origin: "unknown".to_string(),
        ..ImageFacts::default()
    })
}

impl Args {
    /// Did the user ask about something (an image, a wheel, a precision)?
    /// Then the answer is about that, not the catalog.
    fn asks_something(&self) -> bool {
        !self.images.is_empty() || self.pytorch.is_some() || !self.precisions.is_empty()
    }
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
            images: args.images.iter().map(|r| image_facts(kb, r)).collect(),
            pytorch: args.pytorch.clone(),
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
        write_stdout(&format!("{}\n", serde_json::to_string_pretty(&document)?))?;
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
    let failed = verdicts
        .iter()
        .any(|verdict| verdict.status == Status::Fail);
    i32::from(args.asks_something() && !host.gpus.is_empty() && failed)
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

/// "GPU 0", "GPUs 0, 1", "GPUs 0–7".
fn gpu_label(indices: &[u32]) -> String {
    match indices {
        [] => "no GPU".to_string(),
        [one] => format!("GPU {one}"),
        [first, .., last] if indices.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("GPUs {first}–{last}")
        }
        _ => {
            let list: Vec<String> = indices.iter().map(u32::to_string).collect();
            format!("GPUs {}", list.join(", "))
        }
    }
}

fn write_reason(out: &mut String, indent: &str, reason: &Reason) {
    let _ = writeln!(
        out,
        "{indent}[{}] {}: {}",
        status_word(reason.status),
        reason.code,
        reason.message
    );
    if !reason.fix.is_empty() {
        let _ = writeln!(out, "{indent}    fix: {}", reason.fix);
    }
}

/// The answer to what was asked (`--image`, `--pytorch`, `--precision`):
/// one block per subject, GPUs with the same verdict merged, each reason
/// with its message and fix. `run --where docker` refuses an image with the
/// same text.
pub fn render_requested(host: &Host, verdicts: &[Verdict]) -> String {
    let mut out = String::from("\nVerdicts\n");
    if verdicts.is_empty() {
        let _ = writeln!(out, "  nothing to check");
        return out;
    }
    // (subject, status, reasons) → GPU indices, in first-seen order.
    let mut groups: Vec<(&Verdict, Vec<u32>)> = Vec::new();
    for verdict in verdicts {
        let same = groups.iter_mut().find(|(v, _)| {
            v.image == verdict.image && v.status == verdict.status && v.reasons == verdict.reasons
        });
        match same {
            Some((_, indices)) => indices.extend(verdict.gpu_index),
            None => groups.push((verdict, verdict.gpu_index.into_iter().collect())),
        }
    }
    for (verdict, indices) in groups {
        let on = if indices.is_empty() {
            "this host".to_string()
        } else {
            let names: BTreeSet<&str> = indices
                .iter()
                .filter_map(|i| host.gpus.iter().find(|g| g.index == *i))
                .map(|g| g.name.as_str())
                .collect();
            let names: Vec<&str> = names.into_iter().collect();
            format!("{} ({})", gpu_label(&indices), names.join(", "))
        };
        let _ = writeln!(
            out,
            "  {} on {on}: {}",
            verdict.image,
            status_word(verdict.status)
        );
        for reason in &verdict.reasons {
            write_reason(&mut out, "    ", reason);
        }
    }
    out
}

/// "What runs here", per GPU (identical GPUs once): per catalog family the
/// newest clean image, the newest with a caveat, and where it stops working.
pub fn render_summary(host: &Host, verdicts: &[Verdict]) -> String {
    let mut out = String::from("\nWhat runs here\n");
    if host.gpus.is_empty() {
        out += &no_gpu_line(verdicts);
        return out;
    }
    let summaries = summarize(verdicts);
    let driver = host.driver_version.as_deref().unwrap_or("unknown");
    for summary in &summaries {
        let names: BTreeSet<String> = summary
            .gpu_indices
            .iter()
            .filter_map(|i| host.gpus.iter().find(|g| g.index == *i))
            .map(|g| {
                format!(
                    "{}, CC {}",
                    g.name,
                    g.compute_capability.as_deref().unwrap_or("unknown")
                )
            })
            .collect();
        let names: Vec<String> = names.into_iter().collect();
        let _ = writeln!(
            out,
            "  {} ({}) on driver {driver}:",
            gpu_label(&summary.gpu_indices),
            names.join("; ")
        );
        for family in &summary.families {
            render_family(&mut out, family);
        }
    }
    let _ = writeln!(
        out,
        "\n  Ask about one image with --image REF (also a local Docker image), a wheel with\n  \
         --pytorch 2.7.1+cu128, a precision with --precision bf16; every verdict: --all."
    );
    out
}

fn render_family(out: &mut String, family: &FamilySummary) {
    let _ = writeln!(
        out,
        "    {} ({} checked)",
        family.family.label(),
        family.checked
    );
    match &family.newest_clean {
        Some(pick) => {
            let _ = writeln!(out, "      runs cleanly:     {}", pick.image);
        }
        None => {
            let _ = writeln!(out, "      runs cleanly:     none in the catalog");
        }
    }
    if let Some(pick) = &family.newest_with_caveat {
        let _ = writeln!(out, "      runs, with care:  {}", pick.image);
        for reason in &pick.reasons {
            write_reason(out, "        ", reason);
        }
    }
    for stop in &family.stops {
        let span = if stop.to_newest {
            format!("from {} on", stop.first)
        } else if stop.first == stop.last {
            stop.first.clone()
        } else {
            format!("{} … {}", stop.first, stop.last)
        };
        let _ = writeln!(
            out,
            "      fails {span} ({} image{}): {}",
            stop.count,
            if stop.count == 1 { "" } else { "s" },
            stop.reason.code
        );
        let _ = writeln!(out, "        {}", stop.reason.message);
        if !stop.reason.fix.is_empty() {
            let _ = writeln!(out, "        fix: {}", stop.reason.fix);
        }
    }
}

/// With no GPU every catalog image gets the same `no-gpu` verdict: one line
/// says it better than a row per image.
fn no_gpu_line(verdicts: &[Verdict]) -> String {
    let images = verdicts
        .iter()
        .map(|v| v.image.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    format!(
        "  no-gpu: none of the {images} catalog images can use a GPU on this host; they run here only on the CPU\n  \
         fix: check a GPU host you don't have with --assume-gpu NAME --assume-driver VERSION (e.g. --assume-gpu A30 --assume-driver 535.261.03)\n"
    )
}

/// The catalog table (image × GPU), then each distinct problem's message and
/// fix once. Unless `show_ok` (`--all`), only warn/fail rows are listed, with
/// a count of the ok ones.
pub fn render_catalog(host: &Host, verdicts: &[Verdict], show_ok: bool) -> String {
    let mut out = String::from("\nCatalog\n");
    if verdicts.is_empty() {
        let _ = writeln!(out, "  nothing to check");
        return out;
    }
    if !show_ok && host.gpus.is_empty() {
        out += &no_gpu_line(verdicts);
        return out;
    }
    let shown: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| show_ok || v.status != Status::Ok)
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
            "  … and {hidden_ok} ok verdict(s) not listed ({} image(s) × {gpus} GPU(s) checked; --all lists them)",
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
            write_reason(&mut out, "  ", reason);
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
        let text = render_catalog(&host, &verdicts, false);
        assert!(!text.contains("a:1"), "{text}");
        assert!(text.contains("b:1") && text.contains("c:1"), "{text}");
        assert!(text.contains("1 ok verdict"), "{text}");
        assert!(text.contains("--all lists them"), "{text}");
        assert_eq!(text.matches("driver-too-old message").count(), 1, "{text}");
        assert!(text.contains("fix: driver-too-old fix"), "{text}");

        let all = render_catalog(&host, &verdicts, true);
        assert!(all.contains("a:1"), "{all}");
    }

    #[test]
    fn no_gpu_catalog_view_is_one_line_with_the_way_out() {
        let verdicts = vec![
            verdict("a:1", Status::Warn, "no-gpu"),
            verdict("b:1", Status::Warn, "no-gpu"),
        ];
        let text = render_catalog(&Host::default(), &verdicts, false);
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
            precisions: vec![],
            assume_gpus: vec![],
            assume_driver: None,
            all: false,
            json: true,
        };
        let verdicts = vec![verdict("b:1", Status::Fail, "driver-too-old")];
        assert_eq!(exit_code(&args(&[]), &host, &verdicts), 0);
        assert_eq!(exit_code(&args(&["b:1"]), &host, &verdicts), 1);
        assert_eq!(exit_code(&args(&["b:1"]), &Host::default(), &verdicts), 0);
    }

    #[test]
    fn requested_verdicts_merge_identical_gpus_and_show_message_and_fix() {
        let mut host = Host::default();
        for index in 0..4 {
            host.gpus.push(crate::host::Gpu {
                index,
                name: "NVIDIA A100-SXM4-80GB".into(),
                ..Default::default()
            });
        }
        let verdicts: Vec<Verdict> = (0..4)
            .map(|gpu| Verdict {
                gpu_index: Some(gpu),
                ..verdict("precision:fp8", Status::Fail, "fp8-unsupported")
            })
            .collect();
        let text = render_requested(&host, &verdicts);
        assert_eq!(text.matches("precision:fp8").count(), 1, "{text}");
        assert!(
            text.contains("precision:fp8 on GPUs 0–3 (NVIDIA A100-SXM4-80GB): fail"),
            "{text}"
        );
        assert!(
            text.contains("[fail] fp8-unsupported: fp8-unsupported message"),
            "{text}"
        );
        assert!(text.contains("fix: fp8-unsupported fix"), "{text}");
        assert_eq!(gpu_label(&[0, 2, 5]), "GPUs 0, 2, 5");
        assert_eq!(gpu_label(&[3]), "GPU 3");
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
