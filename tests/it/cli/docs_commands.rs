//! Every `envgen …` command the docs print is valid: each one is taken out
//! of docs/benchmarks.md, bench/README.md, docs/running.md and
//! docs/experiments/*.md (fenced blocks and inline code), then
//! `run`/`probe` commands run with `--dry-run` (the run's own validation,
//! nothing trained) and cheap read-only commands run as written. Commands
//! that cannot run here are listed with the reason, in `skip_reason`.
//! Also: `--dry-run` itself (no directory made, exit 2 on bad input).
//! bench/gpu-check.sh's own tests are in `gpu_check`.

use std::path::{Path, PathBuf};

use crate::common::{envgen, heavy_test, text};

const DOCS: &[&str] = &[
    "docs/benchmarks.md",
    "bench/README.md",
    "docs/running.md",
    "docs/experiments/gpt2.md",
    "docs/experiments/hrm.md",
    "docs/experiments/quantize.md",
    "docs/experiments/rft.md",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A documented command: where it was found, its words after `envgen`,
/// and whether it sits in running prose (an inline code span).
#[derive(Debug, Clone)]
struct DocCommand {
    place: String,
    args: Vec<String>,
    inline: bool,
}

/// Code from a Markdown file: each line of a fenced block (with `\`
/// continuations joined) and each inline code span (which may wrap lines),
/// with its line number and whether it is inline.
fn code_snippets(markdown: &str) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    let mut pending = String::new();
    let mut prose = String::new();
    let mut prose_start = 0;
    let flush_prose = |prose: &mut String, start: usize, out: &mut Vec<(usize, String, bool)>| {
        let mut parts = prose.split('`');
        parts.next();
        // Odd pieces are inside backticks (single-backtick spans).
        while let Some(code) = parts.next() {
            out.push((start, code.replace('\n', " "), true));
            parts.next();
        }
        prose.clear();
    };
    for (index, line) in markdown.lines().enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with("```") {
            flush_prose(&mut prose, prose_start, &mut out);
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            let line = line.trim_end();
            match line.strip_suffix('\\') {
                Some(head) => {
                    pending.push_str(head);
                    pending.push(' ');
                }
                None => {
                    pending.push_str(line);
                    out.push((number, std::mem::take(&mut pending), false));
                }
            }
            continue;
        }
        if line.trim().is_empty() {
            flush_prose(&mut prose, prose_start, &mut out);
            continue;
        }
        if prose.is_empty() {
            prose_start = number;
        }
        prose.push_str(line);
        prose.push('\n');
    }
    flush_prose(&mut prose, prose_start, &mut out);
    out
}

/// Shell-like words: spaces split, quotes group (and are removed).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

fn is_envgen(word: &str) -> bool {
    word == "envgen" || word.ends_with("/envgen")
}

/// The envgen argument list of a snippet (after `envgen`, before a shell
/// operator or comment), looking inside quoted words (hyperfine '…').
fn envgen_args(snippet: &str) -> Option<Vec<String>> {
    let all = words(snippet);
    if let Some(at) = all.iter().position(|w| is_envgen(w)) {
        let first = all.get(at + 1)?;
        // Prose such as "envgen creates …" is no command.
        if !SUBCOMMANDS.contains(&first.as_str()) {
            return None;
        }
        let args = all[at + 1..]
            .iter()
            .take_while(|w| !matches!(w.as_str(), "|" | "&&" | ";" | ">" | "2>&1" | "#" | "→"))
            .take_while(|w| !w.starts_with('#'))
            .cloned()
            .collect();
        return Some(args);
    }
    all.iter()
        .find(|w| w.contains(' ') && w.contains("envgen "))
        .and_then(|inner| envgen_args(inner))
}

const SUBCOMMANDS: &[&str] = &[
    "run",
    "tune",
    "probe",
    "doctor",
    "runs",
    "rerun",
    "image",
    "experiments",
    "sudoku",
    "sample",
    "warmup",
];

fn documented_commands() -> Vec<DocCommand> {
    let mut out = Vec::new();
    for doc in DOCS {
        let path = repo().join(doc);
        let markdown =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (line, snippet, inline) in code_snippets(&markdown) {
            if let Some(args) = envgen_args(&snippet) {
                out.push(DocCommand {
                    place: format!("{doc}:{line}"),
                    args,
                    inline,
                });
            }
        }
    }
    out
}

/// Why a documented command is not run here, or None when it is.
fn skip_reason(command: &DocCommand) -> Option<&'static str> {
    let args = &command.args;
    let joined = args.join(" ");
    let sub = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    if command.inline && args.len() <= 2 && !args.iter().any(|w| w.starts_with('-')) {
        return Some("a command named in prose, without arguments: nothing to check");
    }
    if joined.contains('…') || joined.contains("...") {
        return Some("elided in the docs (…): a sketch, not a command");
    }
    if args.iter().any(|w| {
        (w.contains('|') && !w.starts_with('-'))
            || (w.contains('{') && w.contains(',') && !w.contains('='))
    }) {
        return Some("alternatives written as a|b or {a,b}: one of several commands");
    }
    if args.iter().any(|w| w == "EXP" || w == "P" || w == "N") {
        return Some("EXP / P / N stand for any experiment, preset or number");
    }
    if args.iter().any(|w| w == "--launched") {
        return Some("--launched is the launchers' entry point: it needs the run directory and rendezvous a launcher prepares (tests/it/train/distributed_cli.rs, tests/it/places/run_slurm.rs)");
    }
    if joined.contains("model.init=hf:") {
        return Some("needs a downloaded Hugging Face checkpoint (tests/it/rft/rft_llama.rs runs one that transformers made)");
    }
    match (sub(0), sub(1)) {
        ("image", _) => Some("builds or exports container images with Docker (tests/it/places/images/)"),
        ("rerun", _) => Some("trains a new run (tests/it/train/gpt2_cli.rs covers rerun)"),
        ("runs", "report") => {
            Some("writes a report directory (tests/it/runs/report_cli.rs opens one per experiment in Chromium)")
        }
        ("runs", "cancel") => Some("stops a live run (tests/it/runs/runs_cli.rs)"),
        ("sudoku", _) => Some("solves or generates hundreds of puzzles (tests/it/train/sudoku_cli.rs)"),
        ("sample", _) => Some("samples from a trained model (tests/it/train/gpt2_cli.rs)"),
        ("warmup", _) => Some("compiles every CUDA kernel of a run (a GPU or the stand-in driver)"),
        _ => None,
    }
}

/// Placeholders the docs use, replaced by real values made here.
fn substitute(args: &[String], run_dir: &Path, data_dir: &Path) -> Vec<String> {
    let run = run_dir.to_str().unwrap();
    let data = data_dir.to_str().unwrap();
    args.iter()
        .map(|w| {
            let whole = match w.as_str() {
                "RUN_DIR" | "DIR" | "RUN" | "RUN_A" | "RUN_B" => Some(run.to_string()),
                "$MB" => Some("16".into()),
                "$T" | "$R" => Some("2".into()),
                "$d" => Some("bf16".into()),
                // "your venv's python": the test venv's, with a real torch.
                ".venv/bin/python" => {
                    Some(crate::command::user_command::python().display().to_string())
                }
                _ => None,
            };
            whole.unwrap_or_else(|| {
                w.replace("=RUN_DIR", &format!("={run}"))
                    .replace("=DATA_DIR", &format!("={data}"))
                    .replace("data.dir=DIR", &format!("data.dir={data}"))
                    .replace("$USER", "user")
                    .replace("$MB", "16")
            })
        })
        .collect()
}

heavy_test!(every_documented_envgen_command_is_valid, |tmp| {
    // RUN_DIR in the docs: a real (completed) tiny gpt2 run.
    let made = envgen()
        .args(["run", "gpt2", "--backend", "cpu", "--json"])
        .args(["--set", "train.steps=2", "--set", "train.eval_every=2"])
        .arg("--out")
        .arg(tmp.path().join("runs"))
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made));
    let run_dir: PathBuf = crate::common::run_dirs(&tmp.path().join("runs"))[0].clone();

    // DATA_DIR (llm.c shards): a dry run matches the shards and checks
    // their headers (issue #39); the tokens themselves are read by the run.
    let data_dir = tmp.path().join("fineweb10B");
    std::fs::create_dir(&data_dir).unwrap();
    crate::train::gpt2_data_cli::write_llmc(&data_dir.join("fineweb_train_000001.bin"), 0, 100);
    crate::train::gpt2_data_cli::write_llmc(&data_dir.join("fineweb_val_000000.bin"), 0, 100);
    // The 10B-token recipe of docs/experiments/gpt2.md: the user's shard
    // folder, HellaSwag file and config file, made as the page says (the
    // preset with [data] source/path set and an [eval] table appended).
    let edu = tmp.path().join("edu_fineweb10B");
    std::fs::create_dir(&edu).unwrap();
    crate::train::gpt2_data_cli::write_npy(&edu.join("edufineweb_train_000001.npy"), 0, 100);
    crate::train::gpt2_data_cli::write_npy(&edu.join("edufineweb_val_000000.npy"), 0, 100);
    let hellaswag = tmp.path().join("data/hellaswag/hellaswag_val.jsonl");
    std::fs::create_dir_all(hellaswag.parent().unwrap()).unwrap();
    std::fs::copy(
        repo().join("tests/fixtures/hellaswag/hellaswag_val_sample.jsonl"),
        &hellaswag,
    )
    .unwrap();
    // train.csv / test.csv ("your copy of Sudoku-Extreme", docs/experiments/
    // hrm.md): a dry run checks that they exist; the run reads them.
    for csv in ["train.csv", "test.csv"] {
        std::fs::write(tmp.path().join(csv), "source,q,a,rating\n").unwrap();
    }

    let commands = documented_commands();
    // The GPU commands that did not run (issue 28) must be among those checked.
    for must in [
        "run gpt2 --preset gpt2-124m",
        "run hrm-sudoku --preset sudoku-extreme-1k",
        "tune gpt2 --preset gpt2-124m",
    ] {
        assert!(
            commands
                .iter()
                .any(|c| c.args.join(" ").starts_with(must) && skip_reason(c).is_none()),
            "no checked command starts with `envgen {must}`; found:\n{commands:#?}"
        );
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut skipped = Vec::new();
    for command in &commands {
        if let Some(reason) = skip_reason(command) {
            skipped.push(format!(
                "{}: envgen {} ({reason})",
                command.place,
                command.args.join(" ")
            ));
            continue;
        }
        // `--resume RUN_DIR` needs a run of that very experiment.
        let resumed = command
            .args
            .windows(2)
            .any(|w| w[0] == "--resume" && w[1] == "RUN_DIR");
        let own_run = match command.args.get(1).map(String::as_str) {
            Some("quantize") if resumed => quantize_run(tmp.path(), &run_dir),
            Some("command") if resumed => command_run(tmp.path()),
            _ => run_dir.clone(),
        };
        let mut args = substitute(&command.args, &own_run, &data_dir);
        let dry = matches!(args[0].as_str(), "run" | "tune" | "probe");
        if dry && !args.iter().any(|a| a == "--dry-run") {
            // Before a user command's `--`: after it, it is the command's own word.
            let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
            args.insert(at, "--dry-run".into());
        }
        let out = envgen()
            .args(&args)
            .current_dir(tmp.path())
            .env("ENVGEN_CONFIG_DIR", tmp.path().join("config"))
            .output()
            .unwrap();
        ran += 1;
        // doctor answers "no" with exit 1 (e.g. fp8 on an A100): an answer,
        // not a bad command. Everything else must succeed.
        let ok = match args[0].as_str() {
            "doctor" => matches!(out.status.code(), Some(0 | 1)),
            _ => out.status.success(),
        };
        if !ok {
            failures.push(format!(
                "{}: envgen {}\n{}",
                command.place,
                args.join(" "),
                text(&out)
            ));
        }
    }
    eprintln!(
        "checked {ran} documented commands; skipped {}:\n{}",
        skipped.len(),
        skipped.join("\n")
    );
    assert!(
        ran >= 20,
        "only {ran} commands checked: is the extraction broken?"
    );
    assert!(
        failures.is_empty(),
        "{} documented command(s) fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert_eq!(
        crate::common::run_dirs(&tmp.path().join("runs")).len(),
        1,
        "a --dry-run made a run directory"
    );
});

/// A finished `quantize` run (one scheme) of the tiny gpt2 run `source`.
fn quantize_run(tmp: &Path, source: &Path) -> PathBuf {
    made_once(&tmp.join("quantize-runs"), |c, out| {
        c.args(["run", "quantize", "--backend", "cpu", "--json"])
            .arg("--set")
            .arg(format!("source={}", source.display()))
            .args(["--set", "schemes=[\"int8\"]", "--out"])
            .arg(out);
    })
}

/// A finished user-command run (`envgen run -- true`), made once.
fn command_run(tmp: &Path) -> PathBuf {
    made_once(&tmp.join("command-runs"), |c, out| {
        c.args(["run", "--json", "--out"])
            .arg(out)
            .args(["--", "true"]);
    })
}

/// The one run directory in `out`, made by the `envgen` command `args`
/// builds (given `out`) the first time it is asked for.
fn made_once(out: &Path, args: impl FnOnce(&mut std::process::Command, &Path)) -> PathBuf {
    if let Some(done) = crate::common::run_dirs(out).into_iter().next() {
        return done;
    }
    let mut cmd = envgen();
    args(&mut cmd, out);
    let made = cmd.current_dir(out.parent().unwrap()).output().unwrap();
    assert!(made.status.success(), "{}", text(&made));
    crate::common::run_dirs(out)[0].clone()
}

heavy_test!(
    the_extraction_finds_commands_inside_quotes_blocks_and_wrapped_spans,
    || {
        let md = "Run `envgen run gpt2 --preset tiny\n--set train.steps=2` or\n\n```sh\nenvgen probe gpt2 \\\n  --backend cpu   # comment\nhyperfine -N 'envgen doctor --json'\nRAYON_NUM_THREADS=1 envgen run gpt2 --json | tee x\n```\n";
        let found: Vec<String> = code_snippets(md)
            .iter()
            .filter_map(|(_, s, _)| envgen_args(s))
            .map(|a| a.join(" "))
            .collect();
        assert_eq!(
            found,
            [
                "run gpt2 --preset tiny --set train.steps=2",
                "probe gpt2 --backend cpu",
                "doctor --json",
                "run gpt2 --json",
            ]
        );
    }
);

heavy_test!(dry_run_creates_nothing_and_prints_the_plan, |tmp| {
    let out_dir = tmp.path().join("runs");
    let out = envgen()
        .args(["run", "gpt2", "--preset", "gpt2-124m", "--backend", "cpu"])
        .args(["--precision", "bf16", "--micro-batch", "8"])
        .args(["--set", "data.source=generated", "--set", "train.steps=6"])
        .args(["--dry-run", "--json", "--out"])
        .arg(&out_dir)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &plan["runs"][0];
    assert_eq!(plan["dry_run"], true);
    assert_eq!(run["preset"], "gpt2-124m");
    assert_eq!(run["global_batch"], 512);
    assert_eq!(run["parameters"], 124_475_904);
    assert_eq!(run["profile"]["micro_batch"], 8);
    assert_eq!(run["profile"]["grad_accum"], 64);
    assert_eq!(run["profile"]["precision"], "bf16");
    assert!(run["config_hash"].as_str().unwrap().starts_with("sha256:"));
    assert!(!out_dir.exists(), "a dry run made {}", out_dir.display());
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "a dry run wrote into the working directory"
    );

    // The same config hash as the run it describes would record.
    let human = envgen()
        .args(["run", "gpt2", "--preset", "gpt2-124m", "--backend", "cpu"])
        .args(["--set", "data.source=generated", "--set", "train.steps=6"])
        .arg("--dry-run")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&human.stdout);
    assert!(human.status.success(), "{}", text(&human));
    assert!(
        stdout.contains(run["config_hash"].as_str().unwrap()),
        "{stdout}"
    );
    assert!(stdout.contains("nothing was created"), "{stdout}");
});

heavy_test!(dry_run_refuses_what_the_run_would, |tmp| {
    let refused = |args: &[&str], needle: &str| {
        let mut command = envgen();
        command.args(args).arg("--dry-run");
        if args[0] == "run" {
            command.arg("--out").arg(tmp.path().join("runs"));
        }
        let out = command.current_dir(tmp.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    refused(
        &["run", "gpt2", "--set", "train.nope=1"],
        "unknown field `nope`",
    );
    refused(&["run", "gpt2", "--set", "train.steps=many"], "train.steps");
    refused(&["run", "gpt2", "--preset", "huge"], "no preset `huge`");
    refused(
        &["run", "gpt2", "--preset", "gpt2-124m", "--backend", "cpu"],
        "[data].path is missing",
    );
    refused(
        &[
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--set",
            "data.source=text",
            "--set",
            "data.path=/nonexistent/input.txt",
        ],
        "data.path = /nonexistent/input.txt does not exist",
    );
    refused(
        &["run", "gpt2", "--backend", "cpu", "--micro-batch", "7"],
        "",
    );
    refused(
        &["run", "gpt2", "--profile", "no-such-profile"],
        "no-such-profile",
    );
    refused(
        &["run", "hrm-sudoku", "--set", "train.steps=20"],
        "unknown field `steps`",
    );
    refused(
        &["probe", "gpt2", "--preset", "gpt2-124m", "--backend", "cpu"],
        "[data].path is missing",
    );
    refused(
        &["probe", "gpt2", "--backend", "cpu", "--micro-batches", "3"],
        "does not divide",
    );
    assert!(!tmp.path().join("runs").exists());
});
