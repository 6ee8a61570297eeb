//! "What runs here": the catalog verdicts of one GPU boiled down to the few
//! lines a user wants first — the newest NGC PyTorch release and the newest
//! `nvidia/cuda` tag that run cleanly, the newest that run with a caveat (and
//! why), and from where on the catalog stops working (and how to fix that).
//!
//! Pure: it reads verdicts and catalog facts, never the host.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::Serialize;

use super::version::Version;
use super::{Reason, Verdict, VerdictStatus};

/// The two image families of the catalog, each ordered newest-last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// `nvcr.io/nvidia/pytorch:YY.MM-py3`, ordered by release month.
    NgcPytorch,
    /// `nvidia/cuda:X.Y.Z-FLAVOUR-ubuntuU`, ordered by CUDA, then Ubuntu.
    NvidiaCuda,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::NgcPytorch, Family::NvidiaCuda];

    pub fn of(reference: &str) -> Option<Family> {
        if reference.starts_with("nvcr.io/nvidia/pytorch:") {
            Some(Family::NgcPytorch)
        } else if reference.starts_with("nvidia/cuda:") {
            Some(Family::NvidiaCuda)
        } else {
            None
        }
    }

    /// How a boundary names an image: NGC releases by reference, `nvidia/cuda`
    /// tags by CUDA version (every flavour and Ubuntu of it shares the verdict's cause).
    fn boundary_name(self, reference: &str) -> String {
        match self {
            Family::NgcPytorch => reference.to_string(),
            Family::NvidiaCuda => {
                let tag = reference.rsplit(':').next().unwrap_or_default();
                let version = tag.split('-').next().unwrap_or(tag);
                format!("nvidia/cuda:{version}-*")
            }
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Family::NgcPytorch => "NGC PyTorch",
            Family::NvidiaCuda => "nvidia/cuda",
        }
    }
}

/// Sort key "newest last" within a family. For `nvidia/cuda` the plain
/// `runtime` flavour sorts above `devel`/`cudnn-*` of the same version, so
/// "the newest tag" names the smallest image of that version.
fn age_key(family: Family, reference: &str) -> (Version, Version, u8) {
    let tag = reference.rsplit(':').next().unwrap_or_default();
    match family {
        Family::NgcPytorch => {
            let release = tag.trim_end_matches("-py3");
            (
                Version::parse(release).unwrap_or_else(|| Version::parse("0").unwrap()),
                Version::parse("0").unwrap(),
                0,
            )
        }
        Family::NvidiaCuda => {
            let mut parts = tag.split('-');
            let cuda = parts.next().and_then(Version::parse);
            let rest: Vec<&str> = parts.collect();
            let ubuntu = rest
                .last()
                .and_then(|u| u.strip_prefix("ubuntu"))
                .and_then(Version::parse);
            let flavour_rank = match &rest[..rest.len().saturating_sub(1)] {
                ["runtime"] => 3,
                ["devel"] => 2,
                [_, "runtime"] => 1,
                _ => 0,
            };
            (
                cuda.unwrap_or_else(|| Version::parse("0").unwrap()),
                ubuntu.unwrap_or_else(|| Version::parse("0").unwrap()),
                flavour_rank,
            )
        }
    }
}

/// An image and the reasons behind its verdict (problems only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pick {
    pub image: String,
    pub reasons: Vec<Reason>,
}

/// Where a family stops working: `count` images from `first` to `last` fail
/// with `reason.code` (the reason as the oldest of them got it);
/// `to_newest` when no newer image of the family escapes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Boundary {
    pub first: String,
    pub last: String,
    pub to_newest: bool,
    pub count: usize,
    pub reason: Reason,
}

/// One family's answer for one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilySummary {
    pub family: Family,
    pub checked: usize,
    /// The newest image with an `ok` verdict.
    pub newest_clean: Option<Pick>,
    /// The newest image with a `warn` verdict, when it is newer than `newest_clean`.
    pub newest_with_caveat: Option<Pick>,
    /// One entry per distinct failure code, oldest first.
    pub stops: Vec<Boundary>,
}

/// The answer for a set of GPUs whose catalog verdicts are all the same.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSummary {
    pub gpu_indices: Vec<u32>,
    pub families: Vec<FamilySummary>,
}

/// Summarise catalog `verdicts` (image × GPU) per GPU; GPUs whose verdicts
/// are identical (eight H100s) share one summary. Verdicts without a GPU
/// (a GPU-less host) and images outside the two families are left out.
pub fn summarize(verdicts: &[Verdict]) -> Vec<GpuSummary> {
    let mut per_gpu: BTreeMap<u32, Vec<&Verdict>> = BTreeMap::new();
    for verdict in verdicts {
        if let Some(index) = verdict.gpu_index {
            per_gpu.entry(index).or_default().push(verdict);
        }
    }
    let mut out: Vec<GpuSummary> = Vec::new();
    for (index, verdicts) in per_gpu {
        let families: Vec<FamilySummary> = Family::ALL
            .iter()
            .filter_map(|&family| summarize_family(family, &verdicts))
            .collect();
        let shape = without_wording(&families);
        match out
            .iter_mut()
            .find(|s| without_wording(&s.families) == shape)
        {
            Some(same) => same.gpu_indices.push(index),
            None => out.push(GpuSummary {
                gpu_indices: vec![index],
                families,
            }),
        }
    }
    out
}

/// The families with every reason's message and fix blanked: messages name
/// their GPU ("GPU 3 (…)"), so identical GPUs differ only in wording.
fn without_wording(families: &[FamilySummary]) -> Vec<FamilySummary> {
    let blank = |reason: &mut Reason| {
        reason.message.clear();
        reason.fix.clear();
    };
    let mut families = families.to_vec();
    for family in &mut families {
        for pick in [&mut family.newest_clean, &mut family.newest_with_caveat]
            .into_iter()
            .flatten()
        {
            pick.reasons.iter_mut().for_each(blank);
        }
        for stop in &mut family.stops {
            blank(&mut stop.reason);
        }
    }
    families
}

fn problems(verdict: &Verdict) -> Vec<Reason> {
    verdict
        .reasons
        .iter()
        .filter(|r| r.status != VerdictStatus::Ok)
        .cloned()
        .collect()
}

fn summarize_family(family: Family, verdicts: &[&Verdict]) -> Option<FamilySummary> {
    let mut members: Vec<&Verdict> = verdicts
        .iter()
        .copied()
        .filter(|v| Family::of(&v.image) == Some(family))
        .collect();
    if members.is_empty() {
        return None;
    }
    members.sort_by(|a, b| {
        age_key(family, &a.image)
            .cmp(&age_key(family, &b.image))
            .then_with(|| a.image.cmp(&b.image))
    });
    let newest_with = |status: VerdictStatus| members.iter().rev().find(|v| v.status == status);
    let clean = newest_with(VerdictStatus::Ok);
    let caveat = newest_with(VerdictStatus::Warn).filter(|warn| {
        clean.is_none_or(|ok| {
            age_key(family, &warn.image).cmp(&age_key(family, &ok.image)) == Ordering::Greater
        })
    });
    let pick = |v: &&Verdict| Pick {
        image: v.image.clone(),
        reasons: problems(v),
    };
    // Each failure code once, from the oldest image that has it to the newest.
    let mut stops: Vec<Boundary> = Vec::new();
    let newest = members.last().map(|v| family.boundary_name(&v.image));
    for verdict in members.iter().filter(|v| v.status == VerdictStatus::Fail) {
        let name = family.boundary_name(&verdict.image);
        for reason in verdict
            .reasons
            .iter()
            .filter(|r| r.status == VerdictStatus::Fail)
        {
            match stops.iter_mut().find(|b| b.reason.code == reason.code) {
                Some(boundary) => {
                    boundary.count += 1;
                    boundary.last = name.clone();
                }
                None => stops.push(Boundary {
                    first: name.clone(),
                    last: name.clone(),
                    to_newest: false,
                    count: 1,
                    reason: reason.clone(),
                }),
            }
        }
    }
    for boundary in &mut stops {
        boundary.to_newest = newest.as_ref() == Some(&boundary.last);
    }
    Some(FamilySummary {
        family,
        checked: members.len(),
        newest_clean: clean.map(pick),
        newest_with_caveat: caveat.map(pick),
        stops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(image: &str, gpu: u32, status: VerdictStatus, code: &str) -> Verdict {
        let reasons = if status == VerdictStatus::Ok {
            vec![]
        } else {
            vec![Reason {
                code: code.to_string(),
                status,
                message: format!("{image} on GPU {gpu}: {code}"),
                fix: format!("fix {code}"),
            }]
        };
        Verdict {
            image: image.to_string(),
            gpu_index: Some(gpu),
            status,
            reasons,
        }
    }

    #[test]
    fn families_order_by_release_and_prefer_the_runtime_flavour() {
        let ngc = |t: &str| {
            age_key(
                Family::NgcPytorch,
                &format!("nvcr.io/nvidia/pytorch:{t}-py3"),
            )
        };
        assert!(ngc("24.12") < ngc("25.01"));
        assert!(ngc("25.09") < ngc("25.10"));
        let cuda = |t: &str| age_key(Family::NvidiaCuda, &format!("nvidia/cuda:{t}"));
        assert!(cuda("12.9.1-runtime-ubuntu24.04") < cuda("12.10.0-runtime-ubuntu20.04"));
        assert!(cuda("12.8.1-runtime-ubuntu22.04") < cuda("12.8.1-runtime-ubuntu24.04"));
        assert!(cuda("12.8.1-cudnn-devel-ubuntu24.04") < cuda("12.8.1-runtime-ubuntu24.04"));
        assert!(cuda("12.8.1-devel-ubuntu24.04") < cuda("12.8.1-runtime-ubuntu24.04"));
        // Of one version: runtime, devel, cudnn-runtime, cudnn-devel.
        assert!(cuda("12.8.1-cudnn-runtime-ubuntu24.04") < cuda("12.8.1-devel-ubuntu24.04"));
        assert!(cuda("12.8.1-cudnn-devel-ubuntu24.04") < cuda("12.8.1-cudnn-runtime-ubuntu24.04"));
        assert_eq!(Family::of("debian:bookworm-slim"), None);
        assert_eq!(Family::NgcPytorch.label(), "NGC PyTorch");
        assert_eq!(Family::NvidiaCuda.label(), "nvidia/cuda");
    }

    #[test]
    fn newest_clean_newest_caveat_and_where_it_stops() {
        let n = |t: &str| format!("nvcr.io/nvidia/pytorch:{t}-py3");
        let verdicts = vec![
            verdict(&n("25.03"), 0, VerdictStatus::Ok, ""),
            verdict(&n("24.01"), 0, VerdictStatus::Ok, ""),
            verdict(&n("25.09"), 0, VerdictStatus::Fail, "driver-too-old"),
            verdict(&n("25.05"), 0, VerdictStatus::Warn, "minor-version-compat"),
            verdict(&n("25.10"), 0, VerdictStatus::Fail, "driver-too-old"),
            verdict(&n("25.06"), 0, VerdictStatus::Warn, "minor-version-compat"),
        ];
        let summary = summarize(&verdicts);
        assert_eq!(summary.len(), 1);
        // A failure followed by a newer image that works does not reach the newest.
        let gap = summarize(&[
            verdict(&n("24.01"), 0, VerdictStatus::Fail, "no-kernel-image"),
            verdict(&n("24.02"), 0, VerdictStatus::Ok, ""),
        ]);
        assert!(!gap[0].families[0].stops[0].to_newest);
        let ngc = &summary[0].families[0];
        assert_eq!(ngc.family, Family::NgcPytorch);
        assert_eq!(ngc.checked, 6);
        assert_eq!(ngc.newest_clean.as_ref().unwrap().image, n("25.03"));
        let caveat = ngc.newest_with_caveat.as_ref().unwrap();
        assert_eq!(caveat.image, n("25.06"));
        assert_eq!(caveat.reasons[0].code, "minor-version-compat");
        assert_eq!(ngc.stops.len(), 1);
        assert_eq!(ngc.stops[0].first, n("25.09"));
        assert_eq!(ngc.stops[0].last, n("25.10"));
        assert!(ngc.stops[0].to_newest);
        assert_eq!(ngc.stops[0].count, 2);
        assert_eq!(
            ngc.stops[0].reason.message,
            format!("{} on GPU 0: driver-too-old", n("25.09"))
        );
    }

    #[test]
    fn an_older_warning_is_no_caveat_and_identical_gpus_share_a_summary() {
        let c = |t: &str| format!("nvidia/cuda:{t}-runtime-ubuntu24.04");
        let mut verdicts = Vec::new();
        for gpu in 0..3 {
            let newest = if gpu == 2 {
                VerdictStatus::Fail
            } else {
                VerdictStatus::Ok
            };
            verdicts.push(verdict(
                &c("12.2.2"),
                gpu,
                VerdictStatus::Warn,
                "minor-version-compat",
            ));
            verdicts.push(verdict(&c("12.8.1"), gpu, newest, "no-kernel-image"));
        }
        let summary = summarize(&verdicts);
        assert_eq!(summary.len(), 2, "{summary:#?}");
        assert_eq!(summary[0].gpu_indices, vec![0, 1]);
        let cuda = &summary[0].families[0];
        assert_eq!(cuda.family, Family::NvidiaCuda);
        assert_eq!(cuda.newest_clean.as_ref().unwrap().image, c("12.8.1"));
        assert!(cuda.newest_with_caveat.is_none());
        assert_eq!(summary[1].gpu_indices, vec![2]);
        let cuda = &summary[1].families[0];
        assert!(cuda.newest_clean.is_none());
        assert_eq!(cuda.newest_with_caveat.as_ref().unwrap().image, c("12.2.2"));
        assert_eq!(cuda.stops[0].reason.code, "no-kernel-image");
        assert_eq!(cuda.stops[0].first, "nvidia/cuda:12.8.1-*");
        assert!(cuda.stops[0].to_newest);
    }
}
