//! Hostile inputs through the real `envgen` binary (issue #40), one cheap
//! call per class: secrets in a command's environment and escape
//! sequences in its metric keys (`run -- sh`, no training), a checkpoint
//! linked out of its directory and one with NaN weights (a tiny random
//! Llama, a few tokens), bad sampling and Slurm numbers (refused before
//! anything runs), and rft's first stage diverging (a few steps of the
//! tiny preset). Each asserts the exit code, the message, and that nothing
//! leaked. The generated variants of each class are the unit tests beside
//! the code (runs::redact, fsutil, pretrained::hostile_tests, sbatch_tests).

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::{envgen, heavy_test, json_of, run, run_dir_of, text};

const PASSWORD: &str = "pw-never-recorded-40";

/// `envgen run --json --out OUT -- sh -c SCRIPT` with `vars` set.
fn command_run(out: &Path, script: &str, vars: &[(&str, &str)]) -> Output {
    let mut command = envgen();
    command
        .args(["run", "--json", "--out"])
        .arg(out)
        .args(["--", "sh", "-c", script])
        .current_dir(out.parent().unwrap());
    for (k, v) in vars {
        command.env(k, v);
    }
    command.output().unwrap()
}

/// Secrets by pattern and URL userinfo never reach manifest.json, `runs
/// show`, `runs compare` or the report; a metric key holding an escape
/// sequence reaches no terminal and no report raw.
#[test]
fn secrets_and_escape_sequences_of_a_command_run_are_never_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("runs");
    // ESC [2J (clear screen) and a BEL inside a metric key (JSON escapes).
    let script = r#"printf '{"step": 1, "\\u001b[2Jloss\\u0007": 1.5}\n' >> "$ENVGEN_METRICS""#;
    let dirs: Vec<_> = ["alice@mirror-a", "bob@mirror-b"]
        .iter()
        .map(|who| {
            let (user, host) = who.split_once('@').unwrap();
            let endpoint = format!("https://{user}:{PASSWORD}@{host}.example/hf");
            let vars = [
                ("HF_ENDPOINT", endpoint.as_str()),
                ("HF_CREDENTIAL", PASSWORD),
                ("HF_HUB_AUTH", PASSWORD),
                ("TORCH_PASSWD", PASSWORD),
            ];
            let done = command_run(&out, script, &vars);
            assert_eq!(done.status.code(), Some(0), "{}", text(&done));
            run_dir_of(&json_of(&done))
        })
        .collect();
    let manifest = std::fs::read_to_string(dirs[0].join("manifest.json")).unwrap();
    let doc: Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(doc["command"]["env"]["HF_CREDENTIAL"], "<set>");
    assert_eq!(doc["command"]["env"]["TORCH_PASSWD"], "<set>");
    assert_eq!(
        doc["command"]["env"]["HF_ENDPOINT"],
        "https://<redacted>@mirror-a.example/hf"
    );
    let (a, b) = (dirs[0].to_str().unwrap(), dirs[1].to_str().unwrap());
    let report = tmp.path().join("report");
    let shown = [
        run(&["runs", "show", a]),
        run(&["runs", "compare", a, b]),
        run(&["runs", "report", a, b, "--out", report.to_str().unwrap()]),
    ];
    let mut everything = manifest;
    for out in &shown {
        assert_eq!(out.status.code(), Some(0), "{}", text(out));
        everything += &text(out);
    }
    for file in ["report.md", "report.html"] {
        everything += &std::fs::read_to_string(report.join(file)).unwrap();
    }
    for secret in [PASSWORD, "alice", "bob"] {
        assert!(!everything.contains(secret), "{secret} shown");
    }
    // The endpoints differ, so compare shows them, redacted.
    assert!(
        text(&shown[1]).contains("https://<redacted>@mirror-b.example/hf"),
        "{}",
        text(&shown[1])
    );
    // The metric key is shown, escaped: no ESC or BEL byte anywhere.
    assert!(!everything.contains('\u{1b}') && !everything.contains('\u{7}'));
    assert!(
        text(&shown[0]).contains("\\u{1b}[2Jloss"),
        "{}",
        text(&shown[0])
    );
}

/// A tiny random Llama checkpoint in `dir` (config.json, model.safetensors,
/// tokenizer.json).
fn tiny_llama(dir: &Path) {
    envgen_experiments::rft::pretrained::write_random("tiny-llama", 7, dir).unwrap();
}

// A chat template linked to a file outside the checkpoint is refused
// (exit 2, named, not quoted); NaN weights fail sampling (exit 1,
// `diverged`) instead of printing NUL tokens; NaN and negative
// temperatures, a batch no memory holds and a zero `--cpus-per-task` are
// refused.
heavy_test!(
    hostile_checkpoints_and_numbers_are_refused_or_failed,
    |tmp| {
        let dir = tmp.path().join("ckpt");
        tiny_llama(&dir);
        let secret = tmp.path().join("shadow");
        std::fs::write(&secret, "root:$6$SHADOWHASH:19000::::::\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.join("chat_template.jinja")).unwrap();
        let spec = format!("hf:{}", dir.display());
        let sample = |extra: &[&str]| {
            let args = [&["sample", "--model", &spec, "--tokens", "3"][..], extra].concat();
            run(&args)
        };
        let out = sample(&["--chat", "--prompt", "hi"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let all = text(&out);
        assert!(
            all.contains("chat_template.jinja") && all.contains("outside"),
            "{all}"
        );
        assert!(all.contains("fix:") && !all.contains("SHADOWHASH"), "{all}");

        for bad in ["--temperature=NaN", "--temperature=-1", "--temperature=inf"] {
            let out = sample(&[bad, "--prompt", "hi"]);
            assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
            assert!(
                text(&out).contains("--temperature"),
                "{bad}: {}",
                text(&out)
            );
        }

        // A batch no memory holds: refused before a row is allocated.
        let out = sample(&["--prompt", "hi", "--batch", "1000000000"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("--batch") && text(&out).contains("memory"),
            "{}",
            text(&out)
        );

        // NaN weights: every tensor of the file.
        let weights = dir.join("model.safetensors");
        let tensors = envgen_experiments::engine::safetensors_io::read(&weights).unwrap();
        let nan: Vec<(String, Vec<usize>, Vec<f32>)> = tensors
            .into_iter()
            .map(|(name, (shape, values))| (name, shape, vec![f32::NAN; values.len()]))
            .collect();
        let bytes = envgen_experiments::engine::safetensors_io::to_bytes(&nan).unwrap();
        std::fs::write(&weights, bytes).unwrap();
        let out = sample(&["--prompt", "hi", "--temperature", "0"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains("diverged"), "{}", text(&out));
        assert!(out.stdout.is_empty(), "{}", text(&out));

        let out = run(&[
            "run",
            "gpt2",
            "--where",
            "slurm",
            "--cpus-per-task",
            "0",
            "--dry-run",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("--cpus-per-task"), "{}", text(&out));
    }
);

// rft's first stage diverging (lr 1e30) ends the run `failed` with the
// stage's reason, exit 1, as gpt2 and hrm-sudoku do: not `interrupted`
// with exit 130 and "resume with --resume".
heavy_test!(rft_whose_first_stage_diverges_fails, |tmp| {
    let out = run(&[
        "run",
        "rft",
        "--backend",
        "cpu",
        "--json",
        "--out",
        tmp.path().to_str().unwrap(),
        "--set",
        "pretrain.optim.lr=1e30",
        "--set",
        "pretrain.optim.warmup_steps=0",
        "--set",
        "pretrain.train.steps=6",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let summary = &json_of(&out)["summary"];
    assert_eq!(summary["status"], "failed", "{summary}");
    let error = summary["metrics"]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("diverged:"), "{summary}");
    assert!(!text(&out).contains("--resume"), "{}", text(&out));
});

/// A `datagen.oversample` no memory can list is refused before anything is
/// made (it aborted in the allocator, leaving a run directory without a
/// summary).
#[test]
fn rft_oversample_too_big_for_memory_is_refused_before_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let set = "datagen.oversample=1000000000000";
    let out = run(&[
        "run",
        "rft",
        "--backend",
        "cpu",
        "--out",
        tmp.path().to_str().unwrap(),
        "--set",
        set,
    ]);
    crate::common::experiment::assert_too_big(
        &out,
        set,
        "datagen.oversample = 1000000000000",
        tmp.path(),
    );
}

/// A command that leaves a process running in the background (holding its
/// stdout) ends its run when it exits, not when the orphan does.
#[test]
fn a_backgrounded_child_does_not_keep_the_run_open() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("runs");
    let pid = tmp.path().join("orphan.pid");
    let script = format!("sleep 60 & echo $! > {}; echo started", pid.display());
    let started = std::time::Instant::now();
    let done = command_run(&out, &script, &[]);
    let took = started.elapsed();
    // The orphan is ours: end it, whatever the assertions say.
    if let Ok(text) = std::fs::read_to_string(&pid) {
        let _ = std::process::Command::new("kill").arg(text.trim()).status();
    }
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    assert!(
        took.as_secs() < 20,
        "the run waited {took:?} for the orphan"
    );
    let summary = crate::common::read_json(&run_dir_of(&json_of(&done)).join("summary.json"));
    assert_eq!(summary["status"], "completed", "{summary}");
    assert!(
        text(&done).contains("still holds its output"),
        "{}",
        text(&done)
    );
}

/// A batch whose one step would take hours is said, with the estimate,
/// before the run starts (it was accepted silently: ~36 h a step).
#[test]
fn a_batch_too_slow_to_finish_a_step_is_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&[
        "run",
        "gpt2",
        "--backend",
        "cpu",
        "--dry-run",
        "--out",
        tmp.path().to_str().unwrap(),
        "--set",
        "train.batch_size=100000000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("train.batch_size = 100000000"),
        "{}",
        text(&out)
    );
    assert!(stderr.contains(" h on this machine"), "{}", text(&out));
}

/// rft refuses a checkpoint with a file linked out of it before a run
/// directory exists (exit 2 naming the file), rather than failing at the
/// run's start with a `failed` run directory left behind, or copying the
/// target into RUN/hf/.
#[test]
fn rft_refuses_a_linked_out_checkpoint_before_making_a_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    tiny_llama(&dir);
    let secret = tmp.path().join("passwd");
    std::fs::write(&secret, "root:x:0:0:PASSWDLINE\n").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("special_tokens_map.json")).unwrap();
    let out = tmp.path().join("runs");
    let init = format!("model.init=hf:{}", dir.display());
    let done = run(&[
        "run",
        "rft",
        "--preset",
        "tiny-llama",
        "--backend",
        "cpu",
        "--out",
        out.to_str().unwrap(),
        "--set",
        &init,
    ]);
    assert_eq!(done.status.code(), Some(2), "{}", text(&done));
    let all = text(&done);
    assert!(
        all.contains("special_tokens_map.json") && all.contains("outside"),
        "{all}"
    );
    assert!(!all.contains("PASSWDLINE"), "{all}");
    let made = crate::common::run_dirs(&out).len();
    assert_eq!(made, 0, "a run directory was made in {}", out.display());
}
