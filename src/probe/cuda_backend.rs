//! Doctor's verdict on envgen's *own* CUDA backend here (Burn → CubeCL →
//! NVRTC), as opposed to the images and wheels it judges for other code:
//! the driver and a device, NVRTC and its version against the driver's
//! CUDA (the error-222 trap), the headers, the compute capability. No
//! kernel is run (`envgen run --backend cuda` compiles and runs one before
//! training); see `envgen_experiments::cuda_stack`.

use serde::Serialize;

use envgen_experiments::backend::cuda_compiled;
use envgen_experiments::cuda_stack::{CudaStack, Problem};

#[derive(Debug, Clone, Serialize)]
pub struct CudaBackendVerdict {
    /// `ok`, `fail`, or `not-built` (an envgen without the `cuda` feature).
    pub status: &'static str,
    /// The pieces found, one line.
    pub found: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
    /// Each piece on its own: `ok` or the problem's code (driver, nvrtc,
    /// headers), so one missing piece does not hide the others.
    pub parts: std::collections::BTreeMap<&'static str, &'static str>,
    /// Whether the device is envgen's labelled stand-in driver (tests).
    pub standin: bool,
}

pub fn check() -> CudaBackendVerdict {
    if !cuda_compiled() {
        return CudaBackendVerdict {
            status: "not-built",
            found: String::new(),
            problem: None,
            parts: Default::default(),
            standin: false,
        };
    }
    let stack = CudaStack::probe();
    let problem = stack.first_problem();
    let part = |r: Result<(), &Problem>| r.map_or_else(|p| p.code, |_| "ok");
    let parts = [
        ("driver", part(stack.driver.as_ref().map(|_| ()))),
        ("nvrtc", part(stack.nvrtc.as_ref().map(|_| ()))),
        ("headers", part(stack.headers.as_ref().map(|_| ()))),
    ]
    .into_iter()
    .collect();
    CudaBackendVerdict {
        status: if problem.is_none() { "ok" } else { "fail" },
        found: stack.describe(),
        problem,
        parts,
        standin: stack.is_standin(),
    }
}

impl CudaBackendVerdict {
    /// The doctor's text block.
    pub fn render(&self) -> String {
        let mut out = String::from("\nenvgen's CUDA backend here (`envgen run --backend cuda`): ");
        match (self.status, &self.problem) {
            ("not-built", _) => out.push_str("not built into this envgen\n"),
            (_, None) => out.push_str(&format!("ok — {}\n", self.found)),
            (_, Some(p)) => {
                out.push_str(&format!("no — {} [{}]\n", p.message, p.code));
                if !self.found.is_empty() {
                    out.push_str(&format!("  found: {}\n", self.found));
                }
                out.push_str(&format!("  fix: {}\n", p.fix));
            }
        }
        out
    }
}
