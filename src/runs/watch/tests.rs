//! The watch loop on hand-written run directories, with a stand-in for the
//! place's answer: stages, the end by summary, the end by `lost`.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::runs::manifest;

fn run_dir(dir: &Path, config: &str) -> RunDir {
    let mut m = manifest::example();
    m.environment.place = crate::runs::place::Place::Native;
    std::fs::write(dir.join("config.toml"), config).unwrap();
    RunDir {
        path: dir.to_path_buf(),
        manifest: m,
        summary: None,
    }
}

fn append(path: &Path, rows: &[serde_json::Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for row in rows {
        writeln!(f, "{row}").unwrap();
    }
}

fn summary(dir: &Path, status: &str, steps: u64) {
    std::fs::write(
        dir.join("summary.json"),
        json!({"status": status, "wall_s": 12.3, "steps_done": steps,
            "metrics": {"error": "loss is NaN at step 3"}})
        .to_string(),
    )
    .unwrap();
}

fn opts() -> Options {
    Options {
        interval: Duration::from_millis(1),
        probe_every: Duration::ZERO,
        mode: Mode::Lines,
        width: None,
    }
}

#[test]
fn an_ended_run_is_shown_once_with_its_status_and_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "[train]\nsteps = 4\n");
    append(
        &tmp.path().join("metrics.jsonl"),
        &[
            json!({"step": 0, "val_loss": 5.0}),
            json!({"step": 3, "loss": 2.0, "tokens_per_s": 900.0, "step_ms": 10.0}),
        ],
    );
    summary(tmp.path(), "failed", 3);
    let mut out = Vec::new();
    let mut asked = 0;
    let outcome = watch(&run, &opts(), &mut out, &mut || {
        asked += 1;
        Probe::Running("x".into())
    })
    .unwrap();
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(outcome.exit_code(), 1);
    assert_eq!(asked, 0, "an ended run needs no question to its place");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "run     gpt2-tiny-x (native)\n\
         step    3/4 (75%)  loss 2.0000  900 tokens/s\n\
         eval    val_loss 5.0000  (step 0)\n\
         status  failed: 3 steps in 12s (loss is NaN at step 3)\n"
    );
}

#[test]
fn a_run_nothing_trains_ends_lost_after_a_second_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "");
    let mut asked = 0;
    let mut out = Vec::new();
    let outcome = watch(&run, &opts(), &mut out, &mut || {
        asked += 1;
        Probe::Lost("process 7 on host h is gone without a summary".into())
    })
    .unwrap();
    assert_eq!((outcome, asked), (Outcome::Lost, 2));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.ends_with("status  lost (process 7 on host h is gone without a summary)\n"),
        "{text}"
    );
}

#[test]
fn a_multi_stage_run_shows_the_stage_written_last_with_its_own_total() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(
        tmp.path(),
        "rounds = 1\n[pretrain.train]\nsteps = 40\n[finetune.train]\nsteps = 10\n",
    );
    let stages = tmp.path().join("stages");
    append(
        &stages.join("pretrain/metrics.jsonl"),
        &[json!({"step": 40, "loss": 1.5})],
    );
    let config = read_config(tmp.path());
    let mut sources = vec![Source {
        stage: None,
        tail: Tail::new(&tmp.path().join("metrics.jsonl")),
        total: None,
    }];
    let mut view = View::new("r", "native");
    read_sources(tmp.path(), &config, &mut sources, &mut view).unwrap();
    assert_eq!(view.stage.as_deref(), Some("pretrain"));
    assert_eq!(view.step_line(), "step    40/40 (100%)  loss 1.5000");
    // The run's own rows name the stages between trainings.
    append(
        &tmp.path().join("metrics.jsonl"),
        &[json!({"stage": "datagen", "round": 1, "generated": 64, "samples_per_s": 80.0})],
    );
    read_sources(tmp.path(), &config, &mut sources, &mut view).unwrap();
    assert_eq!(view.stage.as_deref(), Some("datagen (round 1)"));
    std::thread::sleep(Duration::from_millis(20));
    append(
        &stages.join("round-1/finetune/metrics.jsonl"),
        &[json!({"step": 3, "loss": 0.5})],
    );
    read_sources(tmp.path(), &config, &mut sources, &mut view).unwrap();
    assert_eq!(view.stage.as_deref(), Some("round-1/finetune"));
    assert_eq!(view.step_line(), "step    3/10 (30%)  loss 0.5000");
    drop(run);
}

#[test]
fn a_terminal_gets_one_block_redrawn_in_place_and_cut_to_its_width() {
    let mut screen = Screen::new(&Options {
        mode: Mode::Terminal,
        width: Some(20),
        ..opts()
    });
    let mut view = View::new("a-rather-long-run-id", "native");
    view.take(&json!({"step": 1, "loss": 3.0}));
    let first = screen.redraw(&view);
    assert_eq!(
        first, "\r\x1b[2Krun     a-rather-lo\n\r\x1b[2Kstep    1\n\r\x1b[2Kstatus  running\n\x1b[J",
        "a part that does not fit is dropped whole, not cut"
    );
    assert_eq!(screen.redraw(&view), "", "nothing new, nothing drawn");
    view.take(&json!({"step": 2, "loss": 2.0}));
    assert!(screen.redraw(&view).starts_with("\x1b[3A\r\x1b[2Krun"));
}

#[test]
fn a_closed_stdout_ends_watching_quietly() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "");
    let outcome = watch(&run, &opts(), &mut Closed, &mut || {
        Probe::Running("x".into())
    })
    .unwrap();
    assert_eq!(outcome, Outcome::StdoutClosed);
    summary(tmp.path(), "completed", 0);
    let outcome = watch(&run, &opts(), &mut Closed, &mut || {
        Probe::Running("x".into())
    })
    .unwrap();
    assert_eq!((outcome, outcome.exit_code()), (Outcome::StdoutClosed, 0));
}

/// The issue's rft case: its first stage done is not the run's end; the
/// stage line says where the whole run is and the ETA covers what is left.
#[test]
fn an_rft_run_shows_its_stage_round_and_a_whole_run_eta() {
    let tmp = tempfile::tempdir().unwrap();
    let config = "rounds = 3\n[pretrain.train]\nsteps = 800\n[finetune.train]\nsteps = 100\n";
    let run = run_dir(tmp.path(), config);
    let stages = tmp.path().join("stages");
    append(
        &stages.join("pretrain/metrics.jsonl"),
        &[json!({"step": 800, "loss": 1.5, "tokens_per_s": 900.0, "step_ms": 10.0})],
    );
    append(
        &tmp.path().join("metrics.jsonl"),
        &[
            json!({"stage": "eval-before", "round": 0, "accuracy": 0.1, "seconds": 2.0}),
            json!({"stage": "datagen", "round": 1, "generated": 64, "samples_per_s": 80.0,
                "seconds": 5.0}),
        ],
    );
    let config = read_config(tmp.path());
    let mut sources = vec![Source {
        stage: None,
        tail: Tail::new(&tmp.path().join("metrics.jsonl")),
        total: None,
    }];
    let mut view = View::new("r", "native");
    view.progress = Plan::of_config(&config).map(RunProgress::new);
    read_sources(tmp.path(), &config, &mut sources, &mut view).unwrap();
    assert_eq!(
        view.stage_line().unwrap(),
        "stage   datagen · round 1/3 · run 800/1100 steps (73%)"
    );
    // 300 steps × 10 ms + 2 samplings × 5 s + 3 evaluations × 2 s, not `ETA 0s`.
    assert!(
        view.step_line().ends_with("ETA 19s"),
        "{}",
        view.step_line()
    );
    // Appended lines (a pipe) say so too, once per stage.
    let appended = Screen::new(&opts()).append(&view, false);
    assert!(
        appended.contains("\nstage   datagen · round 1/3 · run 800/1100 steps (73%)\n"),
        "{appended}"
    );
    let object = screen::json_of(&view);
    assert_eq!(object["stage"], "datagen");
    assert_eq!(object["round"], 1);
    assert_eq!(object["run_steps_done"], 800);
    assert_eq!(object["eta_s"], 19.0);
    drop(run);
}

#[test]
fn json_mode_prints_one_object_per_update_and_the_final_status() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "[train]\nsteps = 4\n");
    append(
        &tmp.path().join("metrics.jsonl"),
        &[json!({"step": 1, "loss": 2.5, "tokens_per_s": 900.0, "step_ms": 1000.0})],
    );
    let mut out = Vec::new();
    let mut looks = 0;
    let outcome = watch(
        &run,
        &Options {
            mode: Mode::Json,
            ..opts()
        },
        &mut out,
        &mut || {
            looks += 1;
            match looks {
                // A look with nothing new prints nothing.
                1 | 2 => {}
                3 => append(
                    &tmp.path().join("metrics.jsonl"),
                    &[json!({"step": 3, "loss": 2.0, "tokens_per_s": 950.0, "step_ms": 1000.0})],
                ),
                _ => summary(tmp.path(), "completed", 4),
            }
            Probe::Running("process 7".into())
        },
    )
    .unwrap();
    assert_eq!(outcome, Outcome::Completed);
    let objects: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<_> = objects
        .iter()
        .map(|o| (o["status"].clone(), o["step"].clone(), o["eta_s"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (json!("running"), json!(1), json!(3.0)),
            (json!("running"), json!(3), json!(1.0)),
            (json!("completed"), json!(3), json!(null)),
        ],
        "{objects:#?}"
    );
    let first = &objects[0];
    assert_eq!(first["run_id"], "gpt2-tiny-x");
    assert_eq!(first["total"], 4);
    assert_eq!(first["loss"], 2.5);
    assert_eq!(first["throughput"], 900.0);
    assert_eq!(first["throughput_unit"], "tokens/s");
    assert_eq!(
        objects[2]["detail"],
        "4 steps in 12s (loss is NaN at step 3)"
    );
}

#[test]
fn a_narrow_terminal_keeps_the_eta_and_draws_sparklines_that_fit() {
    let mut view = View::new("r", "native");
    view.enter_stage(None, Some(100));
    for step in 1..=60u64 {
        let loss = 3.0 - step as f64 * 0.01;
        view.take(
            &json!({"step": step, "loss": loss, "tokens_per_s": 1000.0 + step as f64,
            "step_ms": 100.0}),
        );
    }
    let wide = view.lines(Some(120));
    assert_eq!(
        wide[1],
        "step    60/100 (60%)  loss 2.4000  1060 tokens/s  ETA 4s"
    );
    // 119 columns: 8 for `loss    `, the last 60 points fit.
    assert_eq!(wide[2].chars().count(), 8 + 60);
    assert!(
        wide[2].starts_with("loss    █") && wide[2].ends_with('▁'),
        "{}",
        wide[2]
    );
    assert!(wide[3].starts_with("speed   ▁") && wide[3].ends_with("█ tokens/s"));
    let narrow = view.lines(Some(30));
    assert_eq!(narrow[1], "step    60/100 (60%)  ETA 4s");
    assert_eq!(narrow[2].chars().count(), 29, "the last 21 points");
    assert!(narrow.iter().all(|l| l.chars().count() <= 29), "{narrow:?}");
    assert_eq!(view.lines(Some(12))[1], "ste  ETA 4s");
}
