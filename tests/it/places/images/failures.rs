//! Failed and interrupted builds: the exit code, the message, nothing left behind.

use super::*;

fn containers_with_step(step: &str) -> tempfile::TempDir {
    let containers = containers_copy();
    let template = containers.path().join("templates/Dockerfile.hbs");
    let text = std::fs::read_to_string(&template).unwrap();
    let text = text.replacen("WORKDIR ", &format!("{step}\nWORKDIR "), 1);
    std::fs::write(&template, text).unwrap();
    containers
}

/// Short image/container IDs a classic-builder log names ("---> 3f2a…", "Running in 9c1b…").
fn ids_in(log: &str, prefix: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| line.trim().strip_prefix("---> "))
        .filter_map(|rest| match prefix {
            "" => Some(rest),
            prefix => rest.strip_prefix(prefix),
        })
        .map(str::trim)
        .filter(|id| id.len() >= 12 && id.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

fn container_exists(id: &str) -> bool {
    docker(&["container", "inspect", id]).status.success()
}

fn assert_nothing_left(log: &str, tag: &str) {
    assert!(!image_exists(tag), "{tag} must not be tagged");
    let base_id = inspect(BASE, "{{.Id}}");
    for id in ids_in(log, "") {
        if !base_id.trim_start_matches("sha256:").starts_with(&id) {
            assert!(
                !image_exists(&id),
                "intermediate image {id} left behind\n{log}"
            );
        }
    }
    let containers = ids_in(log, "Running in ");
    for id in &containers {
        assert!(!container_exists(id), "container {id} left behind\n{log}");
    }
}

heavy_test!(
    a_failing_run_exits_1_with_the_step_output_and_leaves_nothing,
    || {
        let _daemon = daemon();
        let containers = containers_with_step("RUN echo envgen-test-failing-step-output && exit 7");
        let output = envgen_image(
            containers.path(),
            "build",
            &[
                "cpu",
                "--unlocked",
                "--no-cache",
                "--tag",
                "envgen-test/fail:1",
            ],
        );
        assert_eq!(output.status.code(), Some(1), "{}", text(&output));
        let log = String::from_utf8_lossy(&output.stderr).to_string();
        let headline = log
            .lines()
            .find(|l| l.contains("failed at Step"))
            .unwrap_or_else(|| panic!("{log}"));
        assert!(
            headline.contains("RUN echo envgen-test-failing-step-output"),
            "{headline}"
        );
        assert!(log.contains("    envgen-test-failing-step-output"), "{log}");
        assert!(log.contains("returned a non-zero code: 7"), "{log}");
        assert!(
            !ids_in(&log, "").is_empty() && !ids_in(&log, "Running in ").is_empty(),
            "{log}"
        );
        assert_nothing_left(&log, "envgen-test/fail:1");
    }
);

heavy_test!(ctrl_c_stops_the_build_and_tags_nothing, || {
    let _daemon = daemon();
    let containers = containers_with_step("RUN echo envgen-test-slow-step && sleep 120");
    let mut child = Command::new(ENVGEN)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "image",
            "build",
            "cpu",
            "--unlocked",
            "--no-cache",
            "--tag",
            "envgen-test/interrupted:1",
        ])
        .arg("--containers")
        .arg(containers.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut log = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(|l| l.ok())
        {
            log.push_str(&line);
            log.push('\n');
            let _ = lines_tx.send(line);
        }
        log
    });
    // Wait until the slow step runs (its echo is printed), then Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = lines_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the slow step never started");
        if line.trim() == "envgen-test-slow-step" {
            break;
        }
    }
    let interrupted_at = Instant::now();
    ok(run("kill", &["-INT", &child.id().to_string()]));
    let status = child.wait().unwrap();
    let log = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(interrupted_at.elapsed() < Duration::from_secs(30), "{log}");
    assert!(log.contains("was interrupted"), "{log}");
    assert!(!ids_in(&log, "Running in ").is_empty(), "{log}");
    assert_nothing_left(&log, "envgen-test/interrupted:1");
});

heavy_test!(an_unreachable_daemon_exits_3_and_says_how_to_fix_it, || {
    let containers = containers_copy();
    let output = envgen_image_with(
        containers.path(),
        "build",
        &["cpu", "--unlocked"],
        |command| {
            command.env("DOCKER_HOST", "unix:///nonexistent/envgen-test.sock");
        },
    );
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    let message = text(&output);
    assert!(
        message.contains("unix:///nonexistent/envgen-test.sock"),
        "{message}"
    );
    assert!(
        message.contains("start dockerd") && message.contains("DOCKER_HOST"),
        "{message}"
    );
});
