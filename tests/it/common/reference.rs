//! The reference side of the format tests: the Python of the test venv
//! (torch, transformers, tokenizers; `scripts/services/pyref.sh` builds it
//! and `scripts/test.sh` exports its path as ENVGEN_TEST_PYTHON).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The test venv's python; a test that needs it fails, never skips,
/// without it.
pub fn python() -> PathBuf {
    match std::env::var_os("ENVGEN_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "ENVGEN_TEST_PYTHON is not set: this test compares with Hugging Face transformers. \
             Run it through scripts/test.sh (scripts/services/pyref.sh builds the venv), or set \
             ENVGEN_TEST_PYTHON to a python with torch, transformers and tokenizers"
        ),
    }
}

/// Run `script` with `args` (offline, 2 threads); its stdout parsed as JSON.
pub fn python_json(script: &str, args: &[&str]) -> Value {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .env("OMP_NUM_THREADS", "2")
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("run ENVGEN_TEST_PYTHON");
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("python printed JSON")
}
