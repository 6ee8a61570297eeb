use super::failure::summarize_failure;
use super::*;

#[test]
fn cuinit_codes_have_their_own_sentences() {
    let no_device = cuinit_problem(100);
    assert!(no_device.message.contains("CUDA_ERROR_NO_DEVICE"));
    assert_ne!(cuinit_problem(35).fix, no_device.fix);
    assert!(cuinit_problem(12345).message.contains("12345"));
}

#[test]
fn backend_failures_are_told_apart() {
    let code = |t: &str| classify_failure(t).code;
    assert_eq!(
        code("Unable to load the PTX: DriverError(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)"),
        "ptx-refused"
    );
    assert_eq!(code("[Compilation Error] \n    kernel.cu(3): catastrophic error: cannot open source file \"cuda_bf16.h\""), "kernel-compile-failed");
    assert_eq!(
        code("Unable to dynamically load the \"nvrtc\" shared library"),
        "no-nvrtc"
    );
    assert_eq!(
        code("DriverError(CUDA_ERROR_OUT_OF_MEMORY)"),
        "gpu-out-of-memory"
    );
    assert_eq!(code("something else"), "cuda-backend-failed");
}

#[test]
fn failures_are_summarized_to_the_compiler_log() {
    let text = "panicked at tuner.rs:199:17:\nCan't execute the autotune plan: Err(\"[Compilation Error] \\n    \
                kernel.cu(1): catastrophic error: #error directive: broken\\n[Source]  \\n#include <x>\\n\
                huge source\")";
    let summary = summarize_failure(text);
    assert!(
        summary.contains("catastrophic error: #error directive: broken"),
        "{summary}"
    );
    assert!(
        !summary.contains("huge source") && !summary.contains("panicked"),
        "{summary}"
    );
    let plain = summarize_failure("panicked at x.rs:1:1:\nDriverError(CUDA_ERROR_OUT_OF_MEMORY)");
    assert_eq!(plain, "DriverError(CUDA_ERROR_OUT_OF_MEMORY)");
    assert!(summarize_failure(&"x".repeat(5000)).len() < 900);
}

#[test]
fn headers_need_the_kernel_includes() {
    let dir = tempfile::tempdir().unwrap();
    assert!(headers_at(dir.path()).is_none());
    let include = dir.path().join("include");
    std::fs::create_dir_all(include.join("cccl/nv")).unwrap();
    std::fs::create_dir_all(include.join("crt")).unwrap();
    for h in NEEDED_HEADERS {
        std::fs::write(include.join(h), "").unwrap();
    }
    assert!(!headers_at(dir.path()).unwrap().cccl);
    std::fs::write(include.join("cccl/nv/target"), "").unwrap();
    assert!(headers_at(dir.path()).unwrap().cccl);
}

#[test]
fn builtins_are_found_by_their_full_version() {
    let dir = tempfile::tempdir().unwrap();
    let nvrtc = dir.path().join("libnvrtc.so.13");
    std::fs::write(&nvrtc, "").unwrap();
    assert!(builtins_next_to(&nvrtc).is_none());
    std::fs::write(dir.path().join("libnvrtc-builtins.so.13"), "").unwrap();
    std::fs::write(dir.path().join("libnvrtc-builtins.so.13.0"), "").unwrap();
    assert_eq!(
        builtins_next_to(&nvrtc).unwrap(),
        dir.path().join("libnvrtc-builtins.so.13.0")
    );
}
