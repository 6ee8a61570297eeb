//! The command-line conventions of issue #44, against the real binary and
//! the real tools on the other side: bash loads the completion script and
//! completes with it, `man` renders the man page, a pseudo-terminal
//! (util-linux `script`) gets colour and a pipe none, `-q` drops the
//! informational lines and keeps the output. Each test is a few envgen
//! processes that neither train nor touch the network (well under a second).

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{envgen, run};

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether `tool` runs here (`--version` exits 0).
fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

#[test]
fn bash_loads_the_completion_script_and_completes_subcommands_and_flags() {
    if !have("bash") {
        eprintln!("skipped: no bash");
        return;
    }
    // `_envgen` is the function the script registers; bash calls it with
    // (command, word being completed, previous word) and COMP_WORDS set.
    let script = r#"
        source <("$ENVGEN" completions bash) || exit 9
        complete -p envgen || exit 8
        COMP_WORDS=(envgen ru); COMP_CWORD=1; COMPREPLY=()
        _envgen envgen ru envgen
        echo "subcommands: ${COMPREPLY[*]}"
        COMP_WORDS=(envgen run --part); COMP_CWORD=2; COMPREPLY=()
        _envgen envgen --part run
        echo "flags: ${COMPREPLY[*]}"
    "#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .env("ENVGEN", env!("CARGO_BIN_EXE_envgen"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("complete -o bashdefault -o default")
            && stdout.contains("-F _envgen envgen"),
        "{}",
        text(&out)
    );
    let line = |label: &str| -> Vec<String> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let mut subcommands = line("subcommands: ");
    subcommands.sort();
    assert_eq!(subcommands, ["run", "runs"], "{}", text(&out));
    assert_eq!(line("flags: "), ["--partition"], "{}", text(&out));

    // Every shell clap_complete knows gets a script naming a subcommand.
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["completions", shell]);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("warmup"),
            "{shell}: {}",
            text(&out)
        );
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tcsh"),
        "{}",
        text(&out)
    );
}

#[test]
fn man_renders_the_pages_and_a_wrong_name_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["man", "run"]);
    assert!(out.status.success(), "{}", text(&out));
    let page = tmp.path().join("envgen-run.1");
    std::fs::write(&page, &out.stdout).unwrap();
    // The real reader: man-db's `man -l` (groff when man is not installed).
    // (Ubuntu's minimized images put a stub that only says so in man's place.)
    let real_man = have("man")
        && !String::from_utf8_lossy(
            &Command::new("man")
                .arg("--version")
                .output()
                .unwrap()
                .stdout,
        )
        .contains("minimized");
    let rendered = if real_man {
        Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "200")
            .env("MAN_KEEP_FORMATTING", "")
            .output()
            .unwrap()
    } else if have("groff") {
        Command::new("groff")
            .args(["-man", "-Tutf8", "-P-cbou"])
            .arg(&page)
            .output()
            .unwrap()
    } else {
        eprintln!("skipped the rendering: neither man nor groff here");
        return;
    };
    let shown = String::from_utf8_lossy(&rendered.stdout);
    assert!(rendered.status.success(), "{}", text(&rendered));
    for expected in [
        "envgen-run - Run an experiment",
        "--partition",
        "Slurm partition to submit to",
        "--preset",
    ] {
        assert!(shown.contains(expected), "{expected:?} not in:\n{shown}");
    }

    let dir = tmp.path().join("man1");
    let out = run(&["man", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    for name in [
        "envgen.1",
        "envgen-run.1",
        "envgen-runs-list.1",
        "envgen-man.1",
    ] {
        assert!(
            dir.join(name).is_file(),
            "{name} not written: {}",
            text(&out)
        );
    }

    let out = run(&["man", "runs", "lst"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"lst\"") && stderr.contains("fix: name one of: list, show"),
        "{}",
        text(&out)
    );
}

#[test]
fn version_names_the_revision_date_target_backends_and_cuda() {
    let short = run(&["-V"]);
    let short_text = String::from_utf8_lossy(&short.stdout);
    assert!(short.status.success(), "{}", text(&short));
    assert_eq!(short_text.lines().count(), 1, "{short_text}");

    let long = run(&["--version"]);
    let long_text = String::from_utf8_lossy(&long.stdout).to_string();
    assert!(long.status.success(), "{}", text(&long));
    let field = |label: &str| -> String {
        long_text
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} in:\n{long_text}"))
            .trim()
            .to_string()
    };
    let revision = field("revision:");
    let hash = revision.trim_end_matches("-dirty");
    assert!(
        (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
            || revision == "unknown (built outside a git checkout)",
        "{long_text}"
    );
    // The revision build.rs recorded for this package (the test binary is
    // built with the same one), as --version shortens it.
    let expected = match option_env!("ENVGEN_GIT_REVISION") {
        Some(full) => {
            let (hash, dirty) = full
                .strip_suffix("-dirty")
                .map_or((full, ""), |hash| (hash, "-dirty"));
            format!("{}{dirty}", &hash[..hash.len().min(12)])
        }
        None => "unknown (built outside a git checkout)".to_string(),
    };
    assert_eq!(revision, expected, "{long_text}");
    let date = field("build date:");
    assert!(
        date.as_bytes().get(4) == Some(&b'-') || date.starts_with("unknown"),
        "{long_text}"
    );
    assert!(
        field("target:").contains("-linux-") || cfg!(not(target_os = "linux")),
        "{long_text}"
    );
    assert!(
        field("backends:").starts_with("cpu (flex), wgpu"),
        "{long_text}"
    );
    let cuda = field("CUDA here:");
    assert!(
        cuda.starts_with("usable: ")
            || cuda.starts_with("not usable: ")
            || cuda == "not compiled in",
        "{long_text}"
    );
    // The short line is the long text's first.
    assert!(long_text.starts_with(short_text.trim_end()), "{long_text}");
}

#[test]
fn quiet_drops_informational_lines_and_keeps_output_and_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = |extra: &[&str]| -> Output {
        envgen()
            .args(extra)
            .args(["run", "gpt2", "--where", "auto", "--dry-run"])
            .current_dir(tmp.path())
            .env_remove("ENVGEN_QUIET")
            .output()
            .unwrap()
    };
    let loud = plan(&[]);
    assert!(loud.status.success(), "{}", text(&loud));
    assert!(
        String::from_utf8_lossy(&loud.stderr).contains("envgen: --where auto:"),
        "{}",
        text(&loud)
    );
    for quiet in [&["-q"][..], &["--quiet"][..]] {
        let out = plan(quiet);
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "",
            "{quiet:?}: {}",
            text(&out)
        );
        // The plan (the output asked for) is the same; only the reason
        // line on stderr went. Where auto picks Slurm (the test cluster
        // answers), the job script also passes -q on to the job.
        let quiet_plan =
            String::from_utf8_lossy(&out.stdout).replace("export ENVGEN_QUIET=1\n", "");
        assert_eq!(
            quiet_plan,
            String::from_utf8_lossy(&loud.stdout),
            "{quiet:?}"
        );
        if String::from_utf8_lossy(&loud.stdout).contains("#SBATCH") {
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("export ENVGEN_QUIET=1\n"),
                "{quiet:?}: the job script does not pass -q on: {}",
                text(&out)
            );
        }
    }
    let from_env = envgen()
        .args(["run", "gpt2", "--where", "auto", "--dry-run"])
        .current_dir(tmp.path())
        .env("ENVGEN_QUIET", "1")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&from_env.stderr),
        "",
        "{}",
        text(&from_env)
    );

    let refused = envgen()
        .args([
            "-q",
            "run",
            "gpt2",
            "--preset",
            "no-such-preset",
            "--dry-run",
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("fix: "),
        "{}",
        text(&refused)
    );
}

/// `envgen man runs lst` (exit 2: `error:` and `fix:`) under util-linux
/// `script`, which gives it a pseudo-terminal; what the terminal got.
fn on_a_terminal(no_color: bool) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let typescript = dir.path().join("typescript");
    let command = format!("{} man runs lst", shlex_quote(env!("CARGO_BIN_EXE_envgen")));
    let mut script = Command::new("script");
    script
        .args(["-q", "-e", "-c", &command])
        .arg(&typescript)
        .env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR")
        .env("TERM", "xterm");
    if no_color {
        script.env("NO_COLOR", "1");
    } else {
        script.env_remove("NO_COLOR");
    }
    let out = script.output().ok()?;
    assert_eq!(out.status.code(), Some(2), "script: {}", text(&out));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn shlex_quote(path: &str) -> String {
    format!("'{}'", path.replace('\'', "'\\''"))
}

#[test]
fn error_labels_are_coloured_on_a_terminal_only() {
    let piped = run(&["man", "runs", "lst"]);
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(stderr.starts_with("error: "), "{}", text(&piped));
    assert!(
        !stderr.contains('\u{1b}'),
        "ESC in piped stderr: {stderr:?}"
    );

    if !have("script") || !Path::new("/dev/ptmx").exists() {
        eprintln!("skipped the terminal half: no util-linux script or no pseudo-terminals");
        return;
    }
    let Some(coloured) = on_a_terminal(false) else {
        eprintln!("skipped the terminal half: script did not start");
        return;
    };
    assert!(
        coloured.contains("\u{1b}[1m\u{1b}[31merror:\u{1b}[0m")
            && coloured.contains("\u{1b}[1m\u{1b}[32mfix:\u{1b}[0m"),
        "no coloured labels on a terminal: {coloured:?}"
    );
    let plain = on_a_terminal(true).unwrap();
    assert!(
        !plain.contains('\u{1b}'),
        "NO_COLOR=1 still coloured: {plain:?}"
    );
    assert!(
        plain.contains("error: ") && plain.contains("fix: "),
        "{plain:?}"
    );
}
