use super::*;

fn spec() -> JobSpec {
    JobSpec {
        job_name: "gpt2 tiny".into(),
        workdir: "/work/my runs".into(),
        output: "slurm-%j.out".into(),
        partition: Some("gpu".into()),
        account: None,
        time: Some("01:00:00".into()),
        nodes: 1,
        cpus_per_task: 8,
        mem: Some("32G".into()),
        gpus_per_node: Some(1),
        tasks_per_node: 1,
        qos: None,
        constraint: None,
        gres: None,
        extra: vec![],
        runtime: Runtime::Native,
        binds: vec![],
        env: BTreeMap::from([("ENVGEN_LOG".to_string(), "info; rm -rf /".to_string())]),
        command: vec![
            "envgen".into(),
            "run".into(),
            "gpt2".into(),
            "--set".into(),
            "data.path=$(reboot)".into(),
        ],
        array_tasks: vec![],
    }
}

#[test]
fn renders_resources_and_quotes_every_user_word() {
    let script = render(&spec()).unwrap();
    assert!(script.contains("#SBATCH --partition=gpu"));
    assert!(script.contains("#SBATCH --gpus-per-node=1"));
    assert!(script.contains("#SBATCH --job-name=gpt2_tiny"));
    assert!(!script.contains("--account"));
    assert!(script.contains("cd '/work/my runs'"));
    assert!(script.contains("export ENVGEN_LOG='info; rm -rf /'"));
    assert!(script.contains("srun envgen run gpt2 --set 'data.path=$(reboot)'"));
    assert!(!script.contains("--array"));
}

/// 2 nodes × 8 GPUs: 16 srun tasks, a rendezvous on the first node,
/// and one failed task ends the job; a single task has none of it.
#[test]
fn a_data_parallel_job_runs_one_task_per_gpu_with_a_rendezvous() {
    let mut spec = spec();
    spec.nodes = 2;
    spec.tasks_per_node = 8;
    spec.gpus_per_node = Some(8);
    let script = render(&spec).unwrap();
    for line in [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "# Data-parallel: 16 ranks, 8 per node",
        r#"export ENVGEN_RENDEZVOUS="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1):$(( 20000 + SLURM_JOB_ID % 2352 * 17 ))""#,
        "srun --kill-on-bad-exit=1 envgen run gpt2",
    ] {
        assert!(script.contains(line), "{line}\n{script}");
    }
    let single = render(&super::tests::spec()).unwrap();
    assert!(single.contains("#SBATCH --ntasks-per-node=1"));
    assert!(!single.contains("ENVGEN_RENDEZVOUS"));
    assert!(!single.contains("--kill-on-bad-exit"));
    // The script is valid bash.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.sbatch");
    std::fs::write(&path, &script).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&path)
        .status()
        .unwrap();
    assert!(check.success());
}

#[test]
fn array_tasks_become_a_job_array_with_quoted_arguments_per_task() {
    let mut spec = spec();
    spec.array_tasks = ["1", "2", "3; reboot"]
        .iter()
        .map(|v| vec!["--set".to_string(), format!("train.seed={v}")])
        .collect();
    let script = render(&spec).unwrap();
    assert!(script.contains("#SBATCH --array=0-2"));
    assert!(
        script.contains("  0) task_args=(--set 'train.seed=1') ;;"),
        "{script}"
    );
    assert!(script.contains("  2) task_args=(--set 'train.seed=3; reboot') ;;"));
    assert!(script.contains("'data.path=$(reboot)' \"${task_args[@]}\""));
}

#[test]
fn container_runtimes_wrap_the_command() {
    let mut spec = spec();
    spec.binds = vec!["/data".into()];
    spec.runtime = Runtime::Charliecloud {
        image_dir: "/scratch/img".into(),
    };
    assert!(render(&spec)
        .unwrap()
        .contains("srun ch-run -b /data /scratch/img -- envgen run"));
    spec.runtime = Runtime::Apptainer {
        sif: "/scratch/envgen.sif".into(),
    };
    assert!(render(&spec)
        .unwrap()
        .contains("srun apptainer exec --nv --bind /data /scratch/envgen.sif envgen run"));
    spec.runtime = Runtime::Pyxis {
        image: "registry#envgen/cpu".into(),
    };
    assert!(render(&spec)
        .unwrap()
        .contains("--container-image='registry#envgen/cpu' --container-mounts=/data:/data envgen"));
}

/// Strings an attacker would try: shell syntax, quotes, newlines, NUL.
fn hostile() -> impl proptest::strategy::Strategy<Value = String> {
    proptest::string::string_regex(
        "[a-z0-9:_.,-]{0,6}([\\n\\r'\"$`;|&(){} \\x00-]|\\$\\(id\\)|`id`){0,3}[a-z0-9]{0,4}",
    )
    .unwrap()
}

/// The script of `spec` is refused (exit 2), or has `lines` lines and
/// parses in bash: then no value added a line, i.e. a command.
fn refused_or_contained(spec: &JobSpec, lines: usize) -> Result<bool, String> {
    let script = match render(spec) {
        Ok(script) => script,
        Err(err) if crate::error::exit_code_of(&err) == 2 => return Ok(false),
        Err(err) => return Err(format!("{err:#}")),
    };
    if script.lines().count() != lines {
        return Err(format!("a value added a line:\n{script}"));
    }
    let parsed = std::process::Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .unwrap();
    if !parsed.status.success() {
        return Err(String::from_utf8_lossy(&parsed.stderr).into_owned());
    }
    Ok(true)
}

/// Control characters, C1 ones too, reach bash as themselves: ASCII
/// ones as `\xNN` escapes, others as `\uNNNN` (a `\x80` would be the
/// raw byte, not the character).
#[test]
fn control_characters_are_escaped_by_code_point() {
    assert_eq!(quote("a\nb"), "$'a\\x0ab'");
    assert_eq!(quote("\u{80}"), "$'\\u0080'");
    for word in ["tab\there", "\u{7f}", "\u{80}x", "\u{9f}", "é\n'\\"] {
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("printf '%s' {}", quote(word))])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), word, "{word:?}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(96))]
    /// Any node and task counts (issue #40: `--nodes 4294967295` divided by
    /// zero): a script with the world size they multiply to, or exit 2
    /// naming --nodes; never a panic.
    #[test]
    fn any_world_size_renders_or_is_refused(
        nodes in proptest::prop_oneof![0u32..64, proptest::num::u32::ANY, proptest::strategy::Just(u32::MAX)],
        per_node in proptest::prop_oneof![0u32..16, proptest::num::u32::ANY],
    ) {
        let mut s = spec();
        s.nodes = nodes;
        s.tasks_per_node = per_node;
        let world = u64::from(nodes.max(1)) * u64::from(per_node.max(1));
        match render(&s) {
            Ok(script) => {
                proptest::prop_assert!(world < 40000, "{world} ranks rendered");
                if world > 1 {
                    let line = format!("Data-parallel: {world} ranks");
                    proptest::prop_assert!(script.contains(&line), "{script}");
                }
            }
            Err(err) => {
                proptest::prop_assert!(world >= 40000, "{world}: {err:#}");
                proptest::prop_assert_eq!(crate::error::exit_code_of(&err), 2);
                let text = format!("{err:#}");
                proptest::prop_assert!(text.contains("--nodes"), "{}", text);
            }
        }
    }

    /// Any string in an `#SBATCH` field, one field at a time.
    #[test]
    fn hostile_directive_values_are_refused_or_contained(
        value in hostile(), field in 0usize..7,
    ) {
        let mut plain = spec();
        plain.account = Some("proj".into());
        plain.qos = Some("normal".into());
        plain.constraint = Some("a100&ib".into());
        plain.gres = Some("gpu:a30:1".into());
        let lines = render(&plain).unwrap().lines().count();
        let mut hostile_spec = plain.clone();
        *[&mut hostile_spec.partition, &mut hostile_spec.account,
          &mut hostile_spec.time, &mut hostile_spec.mem, &mut hostile_spec.qos,
          &mut hostile_spec.constraint, &mut hostile_spec.gres][field] = Some(value);
        let result = refused_or_contained(&hostile_spec, lines);
        proptest::prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    /// Any string as a raw `--sbatch-arg`, whole or as an option's value:
    /// refused, or one `#SBATCH` line that sbatch's directive parser reads
    /// as that one option (no space, quote, `\\` or `#` to split, quote or
    /// end it) and bash reads as a comment.
    #[test]
    fn hostile_sbatch_args_are_refused_or_one_directive(
        value in hostile(), whole in proptest::bool::ANY,
    ) {
        let mut plain = spec();
        plain.extra = vec!["--mail-type=END".into()];
        let lines = render(&plain).unwrap().lines().count();
        let arg = if whole { value } else { format!("--comment={value}") };
        let mut hostile_spec = plain.clone();
        hostile_spec.extra = vec![arg.clone()];
        let result = refused_or_contained(&hostile_spec, lines);
        proptest::prop_assert!(result.is_ok(), "{}", result.unwrap_err());
        if result == Ok(true) {
            let script = render(&hostile_spec).unwrap();
            let line = format!("#SBATCH {arg}\n");
            proptest::prop_assert!(script.contains(&line), "{}", script);
            proptest::prop_assert!(
                !arg.chars().any(|c| c.is_whitespace() || "\"\\\\#".contains(c)),
                "{:?}", arg
            );
        }
    }

    /// A quoted word is that word to bash, byte for byte: nothing in it
    /// is expanded, substituted or run.
    #[test]
    fn bash_reads_a_quoted_word_back_unchanged(word in hostile()) {
        proptest::prop_assume!(!word.contains('\0'));
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("printf '%s' {}", quote(&word))])
            .output()
            .unwrap();
        proptest::prop_assert!(out.status.success());
        proptest::prop_assert_eq!(String::from_utf8_lossy(&out.stdout), word);
    }

    /// Any string as a word of the command, of an array task, as an
    /// environment value or in the run directory's path: quoted, so
    /// the script keeps its lines and parses; never refused.
    #[test]
    fn hostile_words_stay_inside_their_quotes(
        word in hostile(), env_value in hostile(), dir in hostile(),
    ) {
        let mut plain = spec();
        plain.array_tasks = vec![vec!["w".into()], vec!["--resume".into(), "d".into()]];
        plain.env.insert("ENVGEN_X".into(), "v".into());
        let lines = render(&plain).unwrap().lines().count();
        let mut hostile_spec = plain.clone();
        hostile_spec.command.push(word.clone());
        hostile_spec.env.insert("ENVGEN_X".into(), env_value);
        hostile_spec.workdir = PathBuf::from("/runs").join(&dir);
        hostile_spec.array_tasks = vec![vec![word], vec!["--resume".into(), dir]];
        let has_nul = [&hostile_spec.command, &hostile_spec.array_tasks[1]]
            .iter()
            .any(|words| words.iter().any(|w| w.contains('\0')))
            || hostile_spec.env.values().any(|v| v.contains('\0'));
        let result = refused_or_contained(&hostile_spec, lines);
        proptest::prop_assert_eq!(result, Ok(!has_nul));
    }
}

/// The options a user adds (issue #39): after envgen's own lines, so a
/// repeated one is theirs; `--gres` replaces `--gpus-per-node` (whose
/// count still gives apptainer its `--nv`).
#[test]
fn user_directives_are_written_and_gres_replaces_gpus_per_node() {
    let mut spec = spec();
    spec.qos = Some("high".into());
    spec.constraint = Some("[rack1|rack2]&ib".into());
    spec.extra = vec!["--mail-type=END".into(), "--exclusive".into()];
    let script = render(&spec).unwrap();
    let directives: Vec<&str> = script
        .lines()
        .filter(|l| l.starts_with("#SBATCH"))
        .collect();
    assert_eq!(
        &directives[directives.len() - 5..],
        [
            "#SBATCH --qos=high",
            "#SBATCH --constraint=[rack1|rack2]&ib",
            "#SBATCH --gpus-per-node=1",
            "#SBATCH --mail-type=END",
            "#SBATCH --exclusive",
        ],
        "{script}"
    );
    spec.gres = Some("gpu:a30:1".into());
    spec.runtime = Runtime::Apptainer {
        sif: "/scratch/envgen.sif".into(),
    };
    let script = render(&spec).unwrap();
    assert!(script.contains("#SBATCH --gres=gpu:a30:1\n"), "{script}");
    assert!(!script.contains("--gpus-per-node"), "{script}");
    assert!(script.contains("apptainer exec --nv "), "{script}");
    // The renderer refuses a bad raw option, whatever built the spec.
    spec.extra = vec!["--output=/etc/x".into()];
    assert_eq!(crate::error::exit_code_of(&render(&spec).unwrap_err()), 2);
}

#[test]
fn directive_values_cannot_break_out_of_their_line() {
    for (flag, good) in [
        ("--qos", "high"),
        ("--gres", "gpu:a30:1,shard:2"),
        ("--constraint", "(a100|h100)&ib"),
        ("--job-name", "my-job_1.x"),
        ("--partition", "gpu,debug"),
        ("--account", "proj_01-a.b"),
        ("--time", "1-02:00:00"),
        ("--time", "UNLIMITED"),
        ("--mem", "32G"),
    ] {
        check_directive(flag, good).unwrap();
    }
    for (flag, bad) in [
        ("--partition", "debug\ntouch /tmp/x"),
        ("--account", "a b"),
        ("--account", "$(id)"),
        ("--time", "01:00:00\n#SBATCH --uid=0"),
        ("--mem", "32G;rm"),
        ("--partition", ""),
        ("--qos", "high\n#SBATCH --uid=0"),
        ("--gres", "gpu a30"),
        ("--constraint", "a100#ib"),
        ("--constraint", "a\"b"),
        ("--job-name", "my job"),
    ] {
        let err = check_directive(flag, bad).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2, "{flag} {bad:?}");
        assert!(format!("{err:#}").contains(flag));
        // The fix shows a value of that flag's own kind.
        let example = match flag {
            "--time" => "e.g. --time 01:30:00",
            "--mem" => "e.g. --mem 32G",
            "--gres" => "e.g. --gres gpu:a30:1",
            "--constraint" => "e.g. --constraint 'a100&ib'",
            _ => "a Slurm name: letters, digits",
        };
        let text = crate::error::render(&err);
        assert!(text.contains(example), "{text}");
    }
    // The renderer refuses them too, whatever built the spec.
    let mut spec = spec();
    spec.partition = Some("debug\nrm -rf /".into());
    assert!(render(&spec).is_err());
}

/// sbatch's own parser reads `#SBATCH --output=`: only names envgen
/// makes fit there, relative to the job's directory.
#[test]
fn the_output_line_holds_only_envgen_made_relative_names() {
    for good in ["slurm.out", "../gpt2-tiny-1-s%a/slurm.out", "slurm-%j.out"] {
        check_output(good).unwrap();
    }
    for bad in [
        "/abs/slurm.out",
        "my runs/slurm.out",
        "a'b/slurm.out",
        "x\n#SBATCH --uid=0",
        "a/../../etc/x",
        "",
        "./slurm.out",
    ] {
        let err = check_output(bad).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2, "{bad:?}");
    }
    let script = render(&spec()).unwrap();
    assert!(
        script.contains("#SBATCH --output=slurm-%j.out\n"),
        "{script}"
    );
    assert!(
        script.contains("#   cd '/work/my runs' && sbatch SCRIPT\n"),
        "{script}"
    );
    for bad in ["/runs/100%", "/runs/a\\b"] {
        let err = check_job_dir(Path::new(bad)).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2, "{bad:?}");
    }
    check_job_dir(Path::new("/runs/a b'$(x)\n\t")).unwrap();
}

/// The written script names itself, quoted, for re-submission.
#[test]
fn a_written_script_names_its_own_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job dir").join("job.sbatch");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_script(&spec(), &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("#!/bin/bash"), "{text}");
    assert!(text.contains(&quote_path(&path)), "{text}");
    assert_eq!(
        text,
        render_with_path(&spec(), &path.display().to_string()).unwrap()
    );
}

#[test]
fn sbatch_parsable_output_gives_the_job_id() {
    assert_eq!(job_id_of("4242\n").unwrap(), "4242");
    assert_eq!(job_id_of("4242;cluster-a\n").unwrap(), "4242");
    for bad in ["", "\n", ";x", "42a", "Submitted batch job 42"] {
        assert!(job_id_of(bad).is_err(), "{bad:?}");
    }
}

/// The client commands run where asked; a failure or a missing tool is
/// an environment error naming the command.
#[test]
fn client_commands_run_in_their_directory_and_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let here = slurm_command_in(Some(dir.path()), "pwd", &[]).unwrap();
    assert_eq!(
        Path::new(here.trim()).canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
    let err = slurm_command_in(None, "false", &["x"]).unwrap_err();
    assert!(format!("{err:#}").contains("`false x` failed"), "{err:#}");
    let err = slurm_command("envgen-no-such-slurm-tool", &[]).unwrap_err();
    assert!(format!("{err:#}").contains("not found on PATH"), "{err:#}");
    // scancel refuses a job ID that is none (or is missing: an error too).
    assert!(cancel("not-a-job").is_err());
}

#[test]
fn parses_scontrol_and_squeue_lines() {
    let show = "JobId=13 ArrayJobId=12 ArrayTaskId=1 JobName=x JobState=COMPLETED Reason=None\n\
                JobId=12 ArrayJobId=12 ArrayTaskId=0 JobName=x JobState=FAILED Reason=NonZeroExitCode\n";
    assert_eq!(
        parse_scontrol(show),
        vec![
            ("12_1".into(), "COMPLETED".into()),
            ("12_0".into(), "FAILED".into())
        ]
    );
    assert_eq!(parse_pairs("12_0 RUNNING\n12_1 PENDING\n").len(), 2);
    let done = JobState {
        job_id: "1".into(),
        tasks: vec![("1".into(), "CANCELLED".into())],
    };
    assert!(done.finished() && !done.all_completed());
    // A job with nothing known, or with a task still going, is not over.
    let state = |tasks: &[&str]| JobState {
        job_id: "1".into(),
        tasks: tasks
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("1_{i}"), s.to_string()))
            .collect(),
    };
    assert!(!state(&[]).finished() && !state(&[]).all_completed());
    assert!(!state(&["COMPLETED", "RUNNING"]).finished());
    assert!(state(&["COMPLETED", "COMPLETED"]).all_completed());
    assert!(!state(&["COMPLETED", "FAILED"]).all_completed());
}
