//! Unit tests of `runs compare`: what differs, in which group, and how
//! the text says it.

use super::*;
use serde_json::json;

fn run(id: &str, hash: &str, gpu: &str, micro_batch: u64, loss: f64) -> RunDir {
    let mut manifest = crate::runs::manifest::example();
    manifest.run_id = id.into();
    manifest.config_hash = hash.into();
    manifest.started_at = id.into();
    manifest.profile.micro_batch = micro_batch as usize;
    manifest.environment.host = crate::host::Host {
        driver_version: Some("535.261.03".into()),
        gpus: vec![crate::host::Gpu {
            name: gpu.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    RunDir {
        path: format!("runs/{id}").into(),
        manifest,
        summary: Some(
            json!({"status": "completed", "wall_s": 10.0, "metrics": {"final_val_loss": loss, "tokens_per_s": 1000.0}}),
        ),
    }
}

#[test]
fn flags_what_differs_between_two_machines() {
    let a = run("a", "sha256:1", "NVIDIA A30", 16, 2.5);
    let b = run("b", "sha256:1", "NVIDIA H100 80GB HBM3", 64, 2.5);
    let cmp = compare(&[a, b]);
    assert!(cmp.same_config);
    let fields: Vec<&str> = cmp.differences.iter().map(|d| d.field.as_str()).collect();
    assert_eq!(
        fields,
        ["profile.micro_batch", "host.gpus.0.name"],
        "hardware knobs before the host; started_at and run_id are not differences"
    );
    let loss = cmp
        .metrics
        .iter()
        .find(|m| m.name == "final_val_loss")
        .unwrap();
    assert!(loss.identical);
    let text = render_text(&cmp);
    assert!(
        text.contains("same science config: yes") && text.contains("NVIDIA H100 80GB HBM3"),
        "{text}"
    );
}

#[test]
fn different_science_configs_and_metric_deltas_are_reported() {
    let cmp = compare(&[
        run("a", "sha256:1", "g", 8, 2.0),
        run("b", "sha256:2", "g", 8, 2.5),
    ]);
    assert!(!cmp.same_config);
    let loss = cmp
        .metrics
        .iter()
        .find(|m| m.name == "final_val_loss")
        .unwrap();
    assert!(!loss.identical);
    assert!((loss.delta_pct[1].unwrap() - 25.0).abs() < 1e-9);
    assert!(render_text(&cmp).contains("NO (sha256:1 vs sha256:2)"));
}

#[test]
fn science_keys_come_first_then_hardware_then_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for (id, steps, micro_batch, gpu) in
        [("a", 300, 16, "NVIDIA A30"), ("b", 24, 64, "NVIDIA H100")]
    {
        let mut r = run(id, id, gpu, micro_batch, 2.0);
        r.path = tmp.path().join(id);
        std::fs::create_dir_all(&r.path).unwrap();
        std::fs::write(
            r.path.join("config.toml"),
            format!("[train]\nsteps = {steps}\nlr = 3e-4\n[model]\nn_layer = 2\n"),
        )
        .unwrap();
        runs.push(r);
    }
    let cmp = compare(&runs);
    let kinds: Vec<(DifferenceKind, &str)> = cmp
        .differences
        .iter()
        .map(|d| (d.kind, d.field.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (DifferenceKind::Science, "train.steps"),
            (DifferenceKind::Hardware, "profile.micro_batch"),
            (DifferenceKind::Environment, "host.gpus.0.name"),
        ]
    );
    let text = render_text(&cmp);
    let science = text
        .find("science config (config.toml) differs:\n  train.steps")
        .unwrap();
    let hardware = text.find("hardware knobs differ").unwrap();
    let host = text.find("environment differs:").unwrap();
    assert!(science < hardware && hardware < host, "{text}");
    assert!(text.contains("train.steps  300 → 24"), "{text}");
    assert!(text.contains("profile.micro_batch  16 → 64"), "{text}");
}

/// Issue #39: a knob passed through the environment is a difference of
/// its own, and "same science config: yes" says so.
#[test]
fn a_command_environment_change_is_listed_and_qualifies_same_config() {
    let with_env = |id: &str, batch: &str| {
        let mut r = run(id, "sha256:1", "g", 8, 2.0);
        r.manifest.environment.command = Some(crate::runs::command_record::CommandRecord {
            argv: vec!["python".into(), "train.py".into()],
            workdir: "/w".into(),
            git: None,
            env: [("MICRO_BATCH_SIZE", batch), ("HOME", "/root")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        });
        r
    };
    let cmp = compare(&[with_env("a", "4"), with_env("b", "16")]);
    assert!(cmp.same_config);
    let kinds: Vec<(DifferenceKind, &str)> = cmp
        .differences
        .iter()
        .map(|d| (d.kind, d.field.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [(DifferenceKind::CommandEnv, "command.env.MICRO_BATCH_SIZE")]
    );
    let text = render_text(&cmp);
    assert!(
        text.contains("same science config: yes (sha256:1), but the command's environment differs: MICRO_BATCH_SIZE"),
        "{text}"
    );
    assert!(
        text.contains("command environment differs (may change the result or the speed):\n  command.env.MICRO_BATCH_SIZE  4 → 16"),
        "{text}"
    );
    let json = serde_json::to_value(&cmp).unwrap();
    assert_eq!(json["differences"][0]["kind"], "command_env");
}

#[test]
fn relaxed_container_knobs_are_an_environment_difference() {
    let a = run("a", "sha256:1", "g", 8, 2.0);
    let mut b = run("b", "sha256:1", "g", 8, 2.0);
    let docker = b.manifest.environment.docker.as_mut().unwrap();
    docker.container = "envgen-other".into();
    docker.options.as_mut().unwrap().shm_size_bytes = Some(2 << 30);
    let cmp = compare(&[a, b]);
    let kinds: Vec<(DifferenceKind, &str)> = cmp
        .differences
        .iter()
        .map(|d| (d.kind, d.field.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [(DifferenceKind::Environment, "docker.options.shm_size_bytes")],
        "the container's name is no difference"
    );
}

#[test]
fn named_records_line_up_by_name_and_many_identical_metrics_collapse() {
    let schemes = |order: &[&str], int4: f64| {
        let rows: Vec<Value> = order
            .iter()
            .map(|s| {
                let v = if *s == "int4" { int4 } else { 1.0 };
                json!({"scheme": s, "metric_value": v, "bytes": 10, "compression": 2.0})
            })
            .collect();
        json!({"status": "completed", "wall_s": 1.0, "metrics": {"schemes": rows, "parameters": 5}})
    };
    let names = ["f32", "int8", "int4", "q1", "q2", "q3", "q4"];
    let mut a = run("a", "sha256:1", "g", 8, 0.0);
    a.summary = Some(schemes(&names, 3.0));
    let mut b = run("b", "sha256:1", "g", 8, 0.0);
    let mut reversed = names;
    reversed.reverse();
    b.summary = Some(schemes(&reversed, 3.3));
    let cmp = compare(&[a, b]);
    let int4 = cmp
        .metrics
        .iter()
        .find(|m| m.name == "schemes.int4.metric_value")
        .unwrap();
    assert!(
        (int4.delta_pct[1].unwrap() - 10.0).abs() < 1e-9,
        "keyed by name, not position"
    );
    assert!(cmp.metrics.iter().filter(|m| !m.identical).count() == 1);
    let text = render_text(&cmp);
    assert!(text.contains("schemes.int4.metric_value"), "{text}");
    assert!(text.contains("bit-identical in every run (22): "), "{text}");
    assert!(
        !text.contains("schemes.q1.bytes  "),
        "identical rows are collapsed: {text}"
    );
}
