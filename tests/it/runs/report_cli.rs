//! `envgen runs report` of a real tiny run of each experiment, opened in
//! headless Chromium (Debian's `chromium`, installed by scripts/test.sh) at
//! a fixed 1400×900 window: every chart the experiment should have is
//! there and has drawn data (a data line of at least two points with a
//! length, or markers), its legend names the run by preset and short id in
//! a box that covers no data, its ticks are not degenerate, the page fits
//! 1400 px, the first chart is on top of the first screen and the screenshot
//! shows a run's colour there (issues #24, #44). Then issue #44's
//! comparison: three gpt2 runs (learning rate and precision differing),
//! the rft run and a user command's run in one report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common::{heavy_test, json_of, run_dir_of, run_ok};

/// The window every check renders in: what "the first screen" is.
const WINDOW: (u32, u32) = (1400, 900);

/// Runs as the page loads, after the report: what the browser laid out
/// and drew, for every shown `<svg>` of the page (a chart view, whatever
/// its markup), written as JSON into a `<pre>` that `--dump-dom` shows.
const PROBE: &str = r#"<pre id="envgen-probe"></pre><script>
const overlap = (a, b) =>
  a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
const shown = [...document.querySelectorAll('svg')].filter(s => s.getBoundingClientRect().width > 0);
const charts = shown.map(svg => {
  const boxes = [];
  for (const line of svg.querySelectorAll('polyline')) {
    const data = line.getAttribute('stroke-width') === '2';
    if (data && line.points.numberOfItems >= 2 && line.getTotalLength() > 0) boxes.push(line.getBBox());
  }
  for (const dot of svg.querySelectorAll('circle')) boxes.push(dot.getBBox());
  const texts = [...svg.querySelectorAll('text')];
  const legend = svg.querySelector('g.legend');
  const figure = svg.closest('figure');
  const ticks = axis => [...svg.querySelectorAll('text.tick-' + axis)].map(t => t.textContent);
  const smooth = [...svg.querySelectorAll('polyline.smooth')].map(l => l.getAttribute('points'));
  const raw = [...svg.querySelectorAll('polyline.raw')].map(l => l.getAttribute('points'));
  return {id: figure ? figure.id : null, drawn: boxes.length,
          top: svg.getBoundingClientRect().top,
          text: texts.map(t => t.textContent.trim()).join('|'),
          legend: legend ? [...legend.querySelectorAll('text')].map(t => t.textContent) : [],
          legend_over_data: legend ? boxes.some(b => overlap(legend.getBBox(), b)) : false,
          x: svg.dataset.x, x_ticks: ticks('x'), y_ticks: ticks('y'), smoothed: smooth.filter((p, i) => p !== raw[i]).length, lines: smooth.length,
          // Texts drawn over the data (a legend inside the plot would be).
          covering: texts.filter(t => boxes.some(b => overlap(t.getBBox(), b)))
                         .map(t => t.textContent.trim())};
});
// The controls, after the measuring: smoothing 0 must give the raw
// points back; choosing tokens must show each chart's tokens view.
const numbers = line => line.getAttribute('points').trim().split(/[\s,]+/).map(Number);
const slider = document.getElementById('smoothing');
slider.value = '0';
slider.dispatchEvent(new Event('input'));
const unsmoothed = [...document.querySelectorAll('g.series')].every(g => {
  const raw = numbers(g.querySelector('.raw')), line = numbers(g.querySelector('.smooth'));
  return raw.length === line.length && raw.every((v, i) => Math.abs(v - line[i]) < 0.051);
});
const choice = document.getElementById('x-axis');
if (choice) { choice.value = 'tokens'; choice.dispatchEvent(new Event('change')); }
const views = Object.fromEntries([...document.querySelectorAll('figure.chart')].map(f =>
  [f.id, [...f.querySelectorAll('svg.view')].filter(v => v.style.display !== 'none').map(v => v.dataset.x)]));
document.getElementById('envgen-probe').textContent = JSON.stringify(
  {width: document.documentElement.scrollWidth, height: window.innerHeight, charts,
   unsmoothed, views});
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
        ])
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
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

/// What a report looks like in Chromium: the probe's JSON, and the
/// screenshot of its first screen.
struct Rendered {
    probe: serde_json::Value,
    shot: PathBuf,
}

/// `runs report RUNS… -o OUT`, rendered in Chromium at [`WINDOW`].
fn render(runs: &[&Path], out: &Path) -> Rendered {
    let mut args = vec!["runs", "report"];
    args.extend(runs.iter().map(|r| r.to_str().unwrap()));
    args.extend(["-o", out.to_str().unwrap()]);
    run_ok(&args);
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
    let shot = out.join("report.png");
    headless(
        &out.join("report.html"),
        &profile,
        &[format!("--screenshot={}", shot.display())],
    );
    Rendered {
        probe: serde_json::from_str(&probe).unwrap(),
        shot,
    }
}

/// The checks every report passes: no empty chart, `charts` (ids) among
/// those drawn, every legend in its box naming one of `labels` and over no
/// data, ticks that are not degenerate (at least three, distinct; whole
/// numbers against steps and rounds; none below 0, as no metric here is),
/// the page within 1400 px, the first chart on the first screen, and that
/// screen's screenshot showing the first run's colour (a chart drew there).
fn check(rendered: &Rendered, charts: &[&str], labels: &[String]) {
    let probe = &rendered.probe;
    let drawn = probe["charts"].as_array().unwrap();
    let name = |i: usize| {
        drawn[i]["id"]
            .as_str()
            .map_or(format!("svg #{i}"), str::to_owned)
    };
    let empty: Vec<String> = (0..drawn.len())
        .filter(|&i| drawn[i]["drawn"].as_u64() < Some(1))
        .map(name)
        .collect();
    assert!(empty.is_empty(), "empty charts: {empty:?}");
    for (i, chart) in drawn.iter().enumerate() {
        let legend: Vec<&str> = chart["legend"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        assert!(
            legend.iter().any(|t| labels.iter().any(|l| l == t)),
            "{}: the legend names none of {labels:?}: {legend:?}",
            name(i)
        );
        let covering = chart["covering"].to_string();
        assert!(
            !labels.iter().any(|l| covering.contains(l.as_str())),
            "{}: a label covers the data: {covering}",
            name(i)
        );
        assert_eq!(
            chart["legend_over_data"],
            false,
            "{}: legend over data",
            name(i)
        );
        let integral_x = ["step", "round"].contains(&chart["x"].as_str().unwrap_or(""));
        for (axis, integral) in [("x_ticks", integral_x), ("y_ticks", false)] {
            let ticks: Vec<&str> = chart[axis]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t.as_str())
                .collect();
            let mut distinct = ticks.clone();
            distinct.dedup();
            assert!(
                ticks.len() >= 3 && distinct.len() == ticks.len(),
                "{}: degenerate {axis}: {ticks:?}",
                name(i)
            );
            assert!(
                !ticks.iter().any(|t| t.starts_with('-')),
                "{}: {axis} below 0: {ticks:?}",
                name(i)
            );
            if integral {
                assert!(
                    ticks.iter().all(|t| t.parse::<i64>().is_ok()),
                    "{}: fractional {axis} against {}: {ticks:?}",
                    name(i),
                    chart["x"]
                );
            }
        }
    }
    let ids: Vec<&str> = drawn.iter().filter_map(|c| c["id"].as_str()).collect();
    for chart in charts {
        assert!(ids.contains(chart), "{chart} not drawn: {ids:?}");
    }
    let width = probe["width"].as_u64().unwrap();
    assert!(width <= 1400, "the page is {width} px wide");
    // Charts first: under the title, a line per run and the controls, the
    // first chart starts in the top third of the first screen (tables
    // first pushed it to 440-950 px with one run).
    let top = drawn[0]["top"].as_f64().unwrap();
    assert!(
        top < f64::from(WINDOW.1) / 3.0,
        "the first chart starts at {top} px, not on top of the first screen"
    );

    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&rendered.shot).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((frame.width, frame.height), WINDOW);
    let bytes = &pixels[..frame.buffer_size()];
    let channels = frame.color_type.samples();
    let inked = bytes
        .chunks(channels)
        .filter(|px| px.iter().take(3).any(|&c| c < 200))
        .count();
    let share = inked as f64 / (bytes.len() / channels) as f64;
    assert!(share > 0.01, "the screenshot is blank ({share:.4} inked)");
    // The first run's colour (#0072b2, draw.rs), drawn on the first screen.
    let first_run = bytes
        .chunks(channels)
        .filter(|px| px[0] < 30 && (100..130).contains(&px[1]) && (165..190).contains(&px[2]))
        .count();
    assert!(
        first_run > 50,
        "no chart line on the first screen ({first_run} px)"
    );
}

/// One run's report: its charts drawn, the legend naming it by preset
/// and short id (nothing differs in a report of one run).
fn check_report(run: &Path, out: &Path, charts: &[&str]) {
    let manifest = crate::common::read_json(&run.join("manifest.json"));
    let id = manifest["run_id"].as_str().unwrap();
    let label = format!(
        "{} {}",
        manifest["preset"].as_str().unwrap(),
        id.rsplit('-').next().unwrap()
    );
    let rendered = render(&[run], out);
    check(&rendered, charts, &[label]);
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

heavy_test!(
    every_experiments_report_draws_each_of_its_charts_in_chromium,
    |tmp| {
        let runs = tmp.path().join("runs");
        let gpt2_sets = [
            "train.steps=16",
            "train.eval_every=4",
            "train.checkpoint_every=16",
        ];
        let gpt2 = tiny_run(&runs, "gpt2", &gpt2_sets);
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
            (
                &rft,
                "rft",
                &[
                    "rft-accuracy",
                    "rft-kept",
                    "metric-loss",
                    "metric-tokens-per-s-by-round",
                ],
            ),
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
        compare_report(&runs, &reports, &gpt2, &gpt2_sets, &rft);
    }
);

/// Issue #44's "done when": a report of three gpt2 runs (the learning
/// rate and the precision differing), the rft run and a user command's
/// run shows its charts on the first screen, legends naming what differs,
/// smoothed throughput, an rft loss curve per stage and its generation
/// rate, the command's `train/loss`, and no degenerate axis.
fn compare_report(runs: &Path, reports: &Path, gpt2: &Path, gpt2_sets: &[&str], rft: &Path) {
    let started = Instant::now();
    let mut slower = gpt2_sets.to_vec();
    slower.push("optim.lr=0.001");
    let gpt2_slower = tiny_run(runs, "gpt2", &slower);
    let gpt2_bf16 = {
        let mut args = vec!["run", "gpt2", "--backend", "cpu", "--precision", "bf16"];
        args.extend(["--json", "--out", runs.to_str().unwrap()]);
        for set in &slower {
            args.extend(["--set", set]);
        }
        run_dir_of(&json_of(&run_ok(&args)))
    };
    // A user command logging TensorBoard-style names, the throughput a
    // zig-zag.
    let script = r#"for s in 1 2 3 4 5 6; do
        echo "{\"step\": $s, \"train/loss\": $((12 - s)).5, \"throughput/samples_per_s\": $((100 + s % 2 * 40))}" >> "$ENVGEN_METRICS"
    done"#;
    let command = run_dir_of(&json_of(&run_ok(&[
        "run",
        "--json",
        "--out",
        runs.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ])));
    eprintln!(
        "two gpt2 runs and a command: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let labels: Vec<String> = [
        "gpt2 optim.lr=0.003 precision=fp32",
        "gpt2 optim.lr=0.001 precision=fp32",
        "gpt2 optim.lr=0.001 precision=bf16",
    ]
    .map(String::from)
    .into_iter()
    .chain(["rft ", "command "].map(String::from))
    .collect();
    let out = reports.join("compare");
    let rendered = render(&[gpt2, &gpt2_slower, &gpt2_bf16, rft, &command], &out);
    let drawn = rendered.probe["charts"].as_array().unwrap();
    // Legends: the gpt2 runs by what differs, rft and the command by name.
    let legends: Vec<String> = drawn
        .iter()
        .flat_map(|c| c["legend"].as_array().unwrap().iter())
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    let named: Vec<String> = labels
        .iter()
        .map(|l| {
            legends
                .iter()
                .find(|t| t.starts_with(l.as_str()))
                .cloned()
                .unwrap_or_else(|| panic!("no legend names {l}: {legends:?}"))
        })
        .collect();
    check(
        &rendered,
        &[
            "gpt2-loss",
            "gpt2-throughput",
            "gpt2-lr",
            "rft-accuracy",
            "rft-kept",
            "metric-loss",
            "metric-tokens-per-s-by-round",
            "metric-train-loss",
            "metric-throughput-samples-per-s",
        ],
        &named,
    );
    let chart = |id: &str| drawn.iter().find(|c| c["id"] == id).unwrap();
    let throughput = chart("gpt2-throughput");
    assert_eq!(throughput["lines"], 3, "{throughput}");
    assert_eq!(
        throughput["smoothed"], 3,
        "throughput is smoothed: {throughput}"
    );
    // The page's controls: smoothing 0 draws the raw values; the x axis
    // by tokens shows gpt2's tokens view (rft's rounds keep theirs).
    assert_eq!(
        rendered.probe["unsmoothed"], true,
        "the slider did not re-smooth"
    );
    let views = &rendered.probe["views"];
    assert_eq!(
        views["gpt2-throughput"],
        serde_json::json!(["tokens"]),
        "{views}"
    );
    assert_eq!(views["rft-kept"], serde_json::json!(["round"]), "{views}");
    let stages = chart("metric-loss")["legend"].to_string();
    assert!(
        stages.contains("pretrain") && stages.contains("finetune"),
        "{stages}"
    );
    eprintln!(
        "the comparison report: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
