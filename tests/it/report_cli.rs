//! `envgen runs report` of a real tiny run of each experiment, opened in
//! headless Chromium (Debian's `chromium`, installed by scripts/test.sh):
//! every chart the experiment should have is there and has drawn data (a
//! data line of at least two points with a length, or markers), its legend
//! names the run by preset and short id and covers no data, the page fits
//! 1400 px, and the screenshot is not blank (issue #24: no empty chart
//! ships).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common::{json_of, run_dir_of, run_ok, turn};

/// Runs as the page loads, after the report: what the browser laid out
/// and drew, for every `<svg>` of the page (a chart, whatever its markup),
/// written as JSON into a `<pre>` that `--dump-dom` shows.
const PROBE: &str = r#"<pre id="envgen-probe"></pre><script>
const overlap = (a, b) =>
  a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
const charts = [...document.querySelectorAll('svg')].map(svg => {
  const boxes = [];
  for (const line of svg.querySelectorAll('polyline')) {
    const data = line.getAttribute('stroke-width') === '2';
    if (data && line.points.numberOfItems >= 2 && line.getTotalLength() > 0) boxes.push(line.getBBox());
  }
  for (const dot of svg.querySelectorAll('circle')) boxes.push(dot.getBBox());
  const texts = [...svg.querySelectorAll('text')];
  const figure = svg.closest('figure');
  return {id: figure ? figure.id : null, drawn: boxes.length,
          text: texts.map(t => t.textContent.trim()).join('|'),
          // Texts drawn over the data (a legend inside the plot would be).
          covering: texts.filter(t => boxes.some(b => overlap(t.getBBox(), b)))
                         .map(t => t.textContent.trim())};
});
document.getElementById('envgen-probe').textContent = JSON.stringify(
  {width: document.documentElement.scrollWidth, charts});
</script></body>"#;

fn chromium() -> PathBuf {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
    });
    found.unwrap_or_else(|| {
        panic!("no chromium on PATH: install Debian's `chromium` (scripts/test.sh does)")
    })
}

/// Chromium headless on `page` with `extra` flags; its stdout.
fn headless(page: &Path, profile: &Path, extra: &[String]) -> String {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("spawn chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `runs report` of `run` into `out`, checked in Chromium: `charts` (file
/// stems) are each drawn with data and a legend naming the run.
fn check_report(run: &Path, out: &Path, charts: &[&str]) {
    run_ok(&[
        "runs",
        "report",
        run.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let manifest = crate::common::read_json(&run.join("manifest.json"));
    let id = manifest["run_id"].as_str().unwrap();
    let label = format!(
        "{} {}",
        manifest["preset"].as_str().unwrap(),
        id.rsplit('-').next().unwrap()
    );
    // The probe goes into a copy beside the report (its SVG links resolve).
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let page = out.join("probe.html");
    std::fs::write(&page, html.replace("</body>", PROBE)).unwrap();
    let profile = out.join("chromium-profile");
    let dom = headless(&page, &profile, &["--dump-dom".into()]);
    let probe = dom
        .split("<pre id=\"envgen-probe\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .expect("the probe ran");
    let probe = probe
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let probe: serde_json::Value = serde_json::from_str(&probe).unwrap();
    let drawn = probe["charts"].as_array().unwrap();
    let name = |i: usize| {
        drawn[i]["id"]
            .as_str()
            .map_or(format!("svg #{i}"), str::to_owned)
    };
    // No empty chart ships; then: each names the run as preset + short id.
    let empty: Vec<String> = (0..drawn.len())
        .filter(|&i| drawn[i]["drawn"].as_u64() < Some(1))
        .map(name)
        .collect();
    assert!(empty.is_empty(), "empty charts: {empty:?}");
    for (i, chart) in drawn.iter().enumerate() {
        let text = chart["text"].as_str().unwrap();
        assert!(
            text.contains(&label),
            "{}: legend lacks {label}: {text}",
            name(i)
        );
        let covering = &chart["covering"];
        assert!(
            !covering.to_string().contains(&label),
            "{}: the legend covers the data: {covering}",
            name(i)
        );
    }
    let ids: Vec<&str> = drawn.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, charts, "{}: the charts drawn", run.display());
    let width = probe["width"].as_u64().unwrap();
    assert!(width <= 1400, "the page is {width} px wide");

    let shot = out.join("report.png");
    headless(
        &out.join("report.html"),
        &profile,
        &[format!("--screenshot={}", shot.display())],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(frame.width, 1400);
    let bytes = &pixels[..frame.buffer_size()];
    let channels = frame.color_type.samples();
    let inked = bytes
        .chunks(channels)
        .filter(|px| px.iter().take(3).any(|&c| c < 200))
        .count();
    let share = inked as f64 / (bytes.len() / channels) as f64;
    assert!(share > 0.01, "the screenshot is blank ({share:.4} inked)");
}

/// `envgen run EXPERIMENT --backend cpu --json --out OUT --set S…`: its dir.
fn tiny_run(out: &Path, experiment: &str, sets: &[&str]) -> PathBuf {
    let started = Instant::now();
    let mut args = vec![
        "run",
        experiment,
        "--backend",
        "cpu",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let dir = run_dir_of(&json_of(&run_ok(&args)));
    eprintln!("{experiment}: {:.1} s", started.elapsed().as_secs_f64());
    dir
}

#[test]
fn every_experiments_report_draws_each_of_its_charts_in_chromium() {
    let _turn = turn!();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let gpt2 = tiny_run(
        &runs,
        "gpt2",
        &[
            "train.steps=16",
            "train.eval_every=4",
            "train.checkpoint_every=16",
        ],
    );
    let hrm = tiny_run(
        &runs,
        "hrm-sudoku",
        &[
            "data.train_puzzles=128",
            "data.test_puzzles=16",
            "data.augmentations=1",
            "train.epochs=2",
            "train.eval_interval=1",
        ],
    );
    let rft = tiny_run(
        &runs,
        "rft",
        &[
            "task.train_questions=48",
            "task.worked_questions=48",
            "task.validation_questions=16",
            "pretrain.train.steps=200",
            "pretrain.train.checkpoint_every=200",
            "datagen.oversample=8",
            "finetune.train.steps=10",
            "finetune.train.checkpoint_every=10",
            "finetune.train.eval_every=5",
            "rounds=2",
        ],
    );
    let source = format!("source={}", gpt2.display());
    let quantize = tiny_run(
        &runs,
        "quantize",
        &[&source, "schemes=[\"int8\",\"int4-sym-g32\"]"],
    );

    let reports = tmp.path().join("reports");
    let started = Instant::now();
    let checks: [(&Path, &str, &[&str]); 4] = [
        (&gpt2, "gpt2", &["gpt2-loss", "gpt2-throughput", "gpt2-lr"]),
        (
            &hrm,
            "hrm-sudoku",
            &[
                "hrm-sudoku-loss",
                "hrm-sudoku-accuracy",
                "hrm-sudoku-act-steps",
                "hrm-sudoku-throughput",
            ],
        ),
        (&rft, "rft", &["rft-accuracy", "rft-kept"]),
        (&quantize, "quantize", &["quantize-quality-vs-bits"]),
    ];
    // Every experiment is checked, and all that fail are named together.
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(run, name, charts)| {
            std::panic::catch_unwind(|| check_report(run, &reports.join(name), charts)).is_err()
        })
        .map(|(_, name, _)| *name)
        .collect();
    assert!(
        failed.is_empty(),
        "reports that fail: {failed:?} (messages above)"
    );
    eprintln!(
        "four reports checked in Chromium: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
