//! Pure: (host, image | wheel | precision) → verdicts with stable reason codes.
//!
//! The decisions (which fact makes which reason, warn or fail) live here; the
//! facts come from the knowledge base. See docs/doctor.md for every code.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

mod driver;
mod driver_facts;
mod driver_range;
mod image;
mod precision;
mod reasons;
mod subjects;

use super::require::RequireRule;
use super::{ImageFacts, KnowledgeBase, WheelFacts};
use crate::host::{Gpu, Host};
use driver_facts::DriverFacts;
use driver_range::{driver_dropped_gpu, driver_predates_gpu};
use image::check_image;
use precision::check_precision;
pub use precision::HardwarePrecision;
use reasons::{is_envgen_cpu_image, knows_nothing_about, reason, unknown_gpu, unknown_image};
pub use reasons::{Reason, VerdictStatus};
use subjects::{check_wheel, check_wheel_facts};

/// The verdict for one GPU × one subject (image, wheel or precision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The image reference, or "pytorch:2.6.0+cu124", or "precision:fp8".
    pub image: String,
    pub gpu_index: Option<u32>,
    /// The worst of the reasons (`fail` > `warn` > `ok`).
    pub status: VerdictStatus,
    pub reasons: Vec<Reason>,
}

impl Verdict {
    fn new(image: String, gpu_index: Option<u32>, reasons: Vec<Reason>) -> Verdict {
        let status = reasons
            .iter()
            .map(|r| r.status)
            .max()
            .unwrap_or(VerdictStatus::Ok);
        Verdict {
            image,
            gpu_index,
            status,
            reasons,
        }
    }

    /// The reason codes, in order (handy for tests and terse output).
    pub fn codes(&self) -> Vec<&str> {
        self.reasons.iter().map(|r| r.code.as_str()).collect()
    }
}

/// What to check against the host.
#[derive(Debug, Clone, Default)]
pub struct CheckRequest {
    /// Images to check; empty means every catalog image, unless a wheel or a
    /// precision is the only thing asked for (see [`CheckRequest::only_images`]).
    pub images: Vec<ImageFacts>,
    pub pytorch: Option<String>,
    /// A PyTorch build read from an installed torch (its version, CUDA and
    /// compiled kernels), checked whether or not env/pytorch.toml lists it.
    pub installed_pytorch: Option<WheelFacts>,
    /// Precisions to check (`--precision`, repeatable).
    pub precisions: Vec<HardwarePrecision>,
}

impl CheckRequest {
    /// The images `evaluate` checks: the given ones; with none given, the
    /// whole catalog when nothing else was asked, else none.
    fn images_to_check<'a>(&'a self, kb: &'a KnowledgeBase) -> &'a [ImageFacts] {
        if !self.images.is_empty() {
            &self.images
        } else if self.pytorch.is_none()
            && self.installed_pytorch.is_none()
            && self.precisions.is_empty()
        {
            kb.images()
        } else {
            &[]
        }
    }

    /// A request for the given images only.
    pub fn only_images(images: Vec<ImageFacts>) -> CheckRequest {
        CheckRequest {
            images,
            ..CheckRequest::default()
        }
    }
}

/// Every verdict for `host` × `request`.
pub fn evaluate(kb: &KnowledgeBase, host: &Host, request: &CheckRequest) -> Vec<Verdict> {
    let driver = DriverFacts::of(kb, host);
    let mut subjects: Vec<Subject> = request
        .images_to_check(kb)
        .iter()
        .map(Subject::Image)
        .collect();
    if let Some(spec) = &request.pytorch {
        subjects.push(Subject::Wheel(spec));
    }
    if let Some(wheel) = &request.installed_pytorch {
        subjects.push(Subject::Installed(wheel));
    }
    for precision in &request.precisions {
        subjects.push(Subject::Precision(*precision));
    }
    // Catalog images share a handful of NVIDIA_REQUIRE_CUDA rules: parse each once.
    let mut rules: HashMap<&str, Result<RequireRule, String>> = HashMap::new();
    for subject in &subjects {
        if let Subject::Image(image) = subject {
            for rule in [&image.require_cuda, &image.forward_compat_rule]
                .into_iter()
                .flatten()
            {
                rules
                    .entry(rule.as_str())
                    .or_insert_with(|| RequireRule::parse(rule).map_err(|e| e.to_string()));
            }
        }
    }
    let mut verdicts = Vec::new();
    for subject in &subjects {
        let label = subject.label();
        if host.gpus.is_empty() {
            let mut reasons = vec![no_gpu(subject)];
            // Without a GPU nothing else is checked, but an image envgen
            // knows nothing about must not read as fine (issue #21).
            if let Subject::Image(image) = subject {
                if knows_nothing_about(image) && !is_envgen_cpu_image(image) {
                    reasons.push(unknown_image(image));
                }
            }
            verdicts.push(Verdict::new(label, None, reasons));
            continue;
        }
        for gpu in &host.gpus {
            // Whether the driver can drive this GPU at all comes first, for
            // every subject that uses the GPU: a branch older than its
            // architecture (issue #27) or newer than its last (issue #43).
            let gate = subject
                .uses_gpu()
                .then(|| {
                    driver_predates_gpu(kb, &driver, gpu)
                        .or_else(|| driver_dropped_gpu(kb, &driver, gpu))
                })
                .flatten();
            let reasons = match (gate, subject) {
                (Some(gate), _) => unknown_gpu(gpu).into_iter().chain([gate]).collect(),
                (None, subject) => match subject {
                    Subject::Image(image) => check_image(kb, &driver, gpu, image, &rules),
                    Subject::Wheel(spec) => check_wheel(kb, &driver, gpu, spec),
                    Subject::Installed(wheel) => check_wheel_facts(kb, &driver, gpu, wheel),
                    Subject::Precision(precision) => check_precision(kb, gpu, *precision),
                },
            };
            let mut reasons = reasons;
            annotate_gpu_facts(kb, gpu, &mut reasons);
            verdicts.push(Verdict::new(label.clone(), Some(gpu.index), reasons));
        }
    }
    verdicts
}

enum Subject<'a> {
    Image(&'a ImageFacts),
    Wheel(&'a str),
    Installed(&'a WheelFacts),
    Precision(HardwarePrecision),
}

impl Subject<'_> {
    /// Everything but an envgen CPU image (which never touches the GPU).
    fn uses_gpu(&self) -> bool {
        match self {
            Subject::Image(image) => !is_envgen_cpu_image(image),
            _ => true,
        }
    }

    fn label(&self) -> String {
        match self {
            Subject::Image(image) => image.reference.clone(),
            Subject::Wheel(spec) => format!("pytorch:{spec}"),
            Subject::Installed(wheel) => format!("pytorch:{}", wheel.spec),
            Subject::Precision(p) => format!("precision:{}", p.name()),
        }
    }
}

/// No GPU: a warning for anything that needs CUDA (doctor still exits 0 on
/// such a host); an image that declares no CUDA at all is fine.
fn no_gpu(subject: &Subject) -> Reason {
    let needs_cuda = match subject {
        Subject::Image(image) => image.cuda.is_some() || image.require_cuda.is_some(),
        _ => true,
    };
    reason(
        "no-gpu",
        if needs_cuda { VerdictStatus::Warn } else { VerdictStatus::Ok },
        format!("no NVIDIA GPU found on this host; {} can only run on the CPU here", subject.label()),
        "run on a machine with an NVIDIA GPU, or check a described one with --assume-gpu NAME --assume-driver VERSION".into(),
    )
}

/// Say so when a reason rests on a GPU fact env/gpus.toml marks UNCONFIRMED
/// (e.g. the RTX A4500's compute capability, or the class of an SM-only GPU).
fn annotate_gpu_facts(kb: &KnowledgeBase, gpu: &Gpu, reasons: &mut [Reason]) {
    let Some(spec) = gpu
        .catalog_id
        .as_deref()
        .and_then(|id| kb.lookup_gpu(id))
        .filter(|spec| !spec.unconfirmed.is_empty())
    else {
        return;
    };
    let note = format!(
        " ({} facts marked UNCONFIRMED: {})",
        spec.name,
        spec.unconfirmed.join("; ")
    );
    let depends_on_gpu = [
        "driver-predates-gpu",
        "driver-dropped-gpu",
        "no-kernel-image",
        "arch-dropped",
        "forward-compat-unsupported",
        "bf16-unsupported",
        "fp8-unsupported",
        "fp4-unsupported",
        "int8-unsupported",
        "int8-no-tensor-cores",
        "fp16-unsupported",
        "tf32-unsupported",
    ];
    for r in reasons
        .iter_mut()
        .filter(|r| depends_on_gpu.contains(&r.code.as_str()))
    {
        r.message.push_str(&note);
    }
}

#[cfg(test)]
mod tests;

/// A verdict on GPU 0 with one reason `code`, for tests of its readers.
#[cfg(test)]
pub(crate) fn example(image: &str, status: VerdictStatus, code: &str) -> Verdict {
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
