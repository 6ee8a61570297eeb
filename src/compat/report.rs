//! Plain-text rendering of a host and its verdicts: what `envgen doctor`
//! prints, and the answer `run --where docker` refuses an image with
//! ([`render_requested`]). Pure: strings in, strings out (no I/O).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::summary::{summarize, FamilySummary};
use super::{KnowledgeBase, Reason, Verdict, VerdictStatus};
use crate::host::{Host, HostSource};

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

fn status_word(status: VerdictStatus) -> &'static str {
    match status {
        VerdictStatus::Ok => "ok",
        VerdictStatus::Warn => "warn",
        VerdictStatus::Fail => "fail",
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
        .filter(|v| show_ok || v.status != VerdictStatus::Ok)
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
            .filter(|r| r.status != VerdictStatus::Ok || verdict.status == VerdictStatus::Ok)
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
        .filter(|r| r.status != VerdictStatus::Ok)
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

    use crate::compat::verdict::example as verdict;

    #[test]
    fn catalog_view_hides_ok_rows_and_prints_each_problem_once() {
        let host = Host {
            gpus: vec![crate::host::Gpu::default()],
            ..Host::default()
        };
        let verdicts = vec![
            verdict("a:1", VerdictStatus::Ok, "ok"),
            verdict("b:1", VerdictStatus::Fail, "driver-too-old"),
            verdict("c:1", VerdictStatus::Fail, "driver-too-old"),
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
        assert_eq!(all.matches("REASONS").count(), 1, "{all}");
        // Nothing to list (every verdict ok, not asked for all): no header.
        let quiet = render_catalog(&host, &verdicts[..1], false);
        assert!(!quiet.contains("REASONS"), "{quiet}");
    }

    /// What was not probed says "unknown"; an assumed host has no
    /// toolkit or runtimes to report, so those lines are left out.
    #[test]
    fn host_summary_of_probed_and_assumed_hosts() {
        let mut host = Host {
            source: HostSource::NvidiaSmi,
            gpus: vec![crate::host::Gpu {
                name: "NVIDIA A30".into(),
                ..Default::default()
            }],
            ..Host::default()
        };
        host.software.container_runtimes = vec![
            crate::host::ContainerRuntime {
                name: "docker".into(),
                version: Some("27.5".into()),
                notes: vec!["nvidia runtime".into(), "cdi".into()],
            },
            crate::host::ContainerRuntime {
                name: "ch-run".into(),
                version: None,
                notes: Vec::new(),
            },
        ];
        let probed = render_host(&host);
        assert!(probed.contains("NVIDIA A30  CC unknown"), "{probed}");
        assert!(
            probed.contains("docker 27.5 (nvidia runtime; cdi), ch-run ?\n"),
            "{probed}"
        );
        assert!(probed.contains("toolkit: CUDA none"), "{probed}");
        host.source = HostSource::Assumed;
        let assumed = render_host(&host);
        assert!(assumed.starts_with("Host (source: assumed"), "{assumed}");
        assert!(!assumed.contains("toolkit:"), "{assumed}");
    }

    /// GPUs merge only when their verdicts agree: same subject, status
    /// and reasons.
    #[test]
    fn requested_verdicts_keep_gpus_with_other_outcomes_apart() {
        let mut host = Host::default();
        for index in 0..2 {
            host.gpus.push(crate::host::Gpu {
                index,
                name: format!("GPU model {index}"),
                ..Default::default()
            });
        }
        let verdicts = vec![
            Verdict {
                gpu_index: Some(0),
                ..verdict("img:1", VerdictStatus::Ok, "ok")
            },
            Verdict {
                gpu_index: Some(1),
                ..verdict("img:1", VerdictStatus::Fail, "ok")
            },
        ];
        let text = render_requested(&host, &verdicts);
        assert!(text.contains("img:1 on GPU 0 (GPU model 0): ok"), "{text}");
        assert!(
            text.contains("img:1 on GPU 1 (GPU model 1): fail"),
            "{text}"
        );
        // Same status, other reasons: still apart.
        let verdicts = vec![
            Verdict {
                gpu_index: Some(0),
                ..verdict("img:1", VerdictStatus::Fail, "driver-too-old")
            },
            Verdict {
                gpu_index: Some(1),
                ..verdict("img:1", VerdictStatus::Fail, "no-kernel-image")
            },
        ];
        let text = render_requested(&host, &verdicts);
        assert!(
            text.contains("img:1 on GPU 0 (GPU model 0): fail"),
            "{text}"
        );
        assert!(
            text.contains("img:1 on GPU 1 (GPU model 1): fail"),
            "{text}"
        );
    }

    /// Each GPU group of the summary is named by its own GPUs.
    #[test]
    fn summary_names_each_groups_own_gpus() {
        let mut host = Host {
            driver_version: Some("570.124.06".into()),
            ..Host::default()
        };
        for (index, name) in ["Alpha", "Beta"].into_iter().enumerate() {
            host.gpus.push(crate::host::Gpu {
                index: index as u32,
                name: name.into(),
                compute_capability: Some("8.0".into()),
                ..Default::default()
            });
        }
        let image = "nvcr.io/nvidia/pytorch:25.01-py3";
        let verdicts = vec![
            Verdict {
                gpu_index: Some(0),
                ..verdict(image, VerdictStatus::Ok, "ok")
            },
            Verdict {
                gpu_index: Some(1),
                ..verdict(image, VerdictStatus::Fail, "driver-too-old")
            },
        ];
        let text = render_summary(&host, &verdicts);
        assert!(
            text.contains("GPU 0 (Alpha, CC 8.0) on driver 570.124.06:"),
            "{text}"
        );
        assert!(
            text.contains("GPU 1 (Beta, CC 8.0) on driver 570.124.06:"),
            "{text}"
        );
    }

    /// A failure that starts and ends at one image names it once.
    #[test]
    fn a_family_stop_of_one_image_names_it_once() {
        let stop = |first: &str, last: &str, count| crate::compat::summary::Boundary {
            first: first.into(),
            last: last.into(),
            to_newest: false,
            count,
            reason: verdict("x", VerdictStatus::Fail, "driver-too-old").reasons[0].clone(),
        };
        let family = FamilySummary {
            family: crate::compat::summary::Family::NvidiaCuda,
            checked: 3,
            newest_clean: None,
            newest_with_caveat: None,
            stops: vec![stop("a:1", "a:1", 1), stop("b:1", "b:2", 2)],
        };
        let mut out = String::new();
        render_family(&mut out, &family);
        assert!(out.contains("fails a:1 (1 image): driver-too-old"), "{out}");
        assert!(out.contains("fails b:1 … b:2 (2 images)"), "{out}");
        // Each stop's message, then its fix; a reason without a fix has no fix line.
        assert!(
            out.contains("driver-too-old message\n        fix: driver-too-old fix\n"),
            "{out}"
        );
        let mut silent = family.clone();
        silent.stops.truncate(1);
        silent.stops[0].reason.fix.clear();
        let mut out = String::new();
        render_family(&mut out, &silent);
        assert!(!out.contains("fix:"), "{out}");
    }

    /// The table lists a failing verdict's problems, not its passed checks;
    /// with every verdict shown there is no "not listed" line.
    #[test]
    fn catalog_table_lists_problem_codes_only() {
        let host = Host {
            gpus: vec![crate::host::Gpu::default()],
            ..Host::default()
        };
        let mut failing = verdict("b:1", VerdictStatus::Fail, "driver-too-old");
        failing.reasons.insert(
            0,
            verdict("b:1", VerdictStatus::Ok, "kernels-match").reasons[0].clone(),
        );
        let verdicts = vec![verdict("a:1", VerdictStatus::Ok, "kernels-match"), failing];
        let text = render_catalog(&host, &verdicts, true);
        let row = text.lines().find(|l| l.contains("b:1")).expect("b:1 row");
        assert!(row.ends_with("driver-too-old"), "{text}");
        let ok_row = text.lines().find(|l| l.contains("a:1")).expect("a:1 row");
        assert!(ok_row.ends_with("kernels-match"), "{text}");
        assert!(!text.contains("not listed"), "{text}");
    }

    #[test]
    fn no_gpu_catalog_view_is_one_line_with_the_way_out() {
        let verdicts = vec![
            verdict("a:1", VerdictStatus::Warn, "no-gpu"),
            verdict("b:1", VerdictStatus::Warn, "no-gpu"),
        ];
        let text = render_catalog(&Host::default(), &verdicts, false);
        assert!(
            text.contains("none of the 2 catalog images") && text.contains("--assume-gpu"),
            "{text}"
        );
        assert!(!text.contains("a:1"), "{text}");
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
                ..verdict("precision:fp8", VerdictStatus::Fail, "fp8-unsupported")
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
        assert_eq!(gpu_label(&[0, 1, 2]), "GPUs 0–2");
        // A verdict of a host without GPUs (an image checked for the CPU).
        assert_eq!(gpu_label(&[]), "no GPU");
    }
}
