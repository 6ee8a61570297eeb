//! What a failure of Burn's CUDA backend means: CubeCL reports compile and
//! driver errors by panicking (often on its device thread) with nested
//! `Debug` output; these turn that text into a [`Problem`].

use super::Problem;

/// What a failure of Burn's CUDA backend (a panic message or error text)
/// means, in the terms of [`Problem`].
pub fn classify_failure(text: &str) -> Problem {
    let first_lines = summarize_failure(text);
    if text.contains("UNSUPPORTED_PTX_VERSION") || text.contains("error 222") {
        Problem::new(
            "ptx-refused",
            format!("the driver refused the compiled kernels (CUDA error 222, PTX newer than the driver): {first_lines}"),
            "use an NVRTC no newer than the driver's CUDA (`envgen doctor` shows both), or upgrade the driver",
        )
    } else if text.contains("builtins") {
        Problem::new(
            "no-nvrtc-builtins",
            format!("NVRTC could not load its builtins library: {first_lines}"),
            "install NVRTC completely (libnvrtc-builtins.so.* beside libnvrtc.so.*)",
        )
    } else if text.contains("nvrtc") && text.contains("dynamically load") {
        Problem::new(
            "no-nvrtc",
            format!("NVRTC could not be loaded: {first_lines}"),
            "install NVRTC (apt: cuda-nvrtc-13-0; pip: nvidia-cuda-nvrtc) and set CUDA_PATH",
        )
    } else if text.contains("Compilation Error") || text.contains("cannot open source file") {
        Problem::new(
            "kernel-compile-failed",
            format!("NVRTC could not compile the test kernel: {first_lines}"),
            "check that CUDA_PATH holds the headers of the same CUDA as NVRTC (include/ and include/cccl)",
        )
    } else if text.contains("OUT_OF_MEMORY") {
        Problem::new(
            "gpu-out-of-memory",
            "the GPU has no memory left for the test kernel",
            "free the GPU (`nvidia-smi` lists its processes) or choose another with CUDA_VISIBLE_DEVICES",
        )
    } else {
        Problem::new(
            "cuda-backend-failed",
            format!("the CUDA backend failed on its first kernel: {first_lines}"),
            "run `envgen doctor` and check its CUDA backend verdict",
        )
    }
}

/// The few lines of a CubeCL failure worth showing: NVRTC's log when a
/// compilation failed, else the message without the panic location. CubeCL
/// nests errors in `Debug` output (escaped newlines) and appends the whole
/// kernel source: megabytes nobody reads.
pub(super) fn summarize_failure(text: &str) -> String {
    let text = text.replace("\\n", "\n").replace("\\\"", "\"");
    let body = match text.find("[Compilation Error]") {
        Some(start) => {
            let log = &text[start + "[Compilation Error]".len()..];
            log.split("[Source]").next().unwrap_or(log).to_string()
        }
        None => text
            .lines()
            .skip_while(|l| l.starts_with("panicked at "))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let mut lines: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(6)
        .collect();
    if lines.is_empty() {
        lines.push("(no message)");
    }
    let mut summary = lines.join("\n    ");
    if summary.len() > 800 {
        let mut cut = 800;
        while !summary.is_char_boundary(cut) {
            cut -= 1;
        }
        summary.truncate(cut);
        summary.push_str(" …");
    }
    summary
}
