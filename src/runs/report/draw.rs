//! One chart view as SVG, written directly (the page's script re-smooths
//! its lines, so they carry classes a plotting library does not write):
//! one colour per run, a dash pattern per field, GPU or stage, each line
//! smoothed (TensorBoard's EMA) over its raw values drawn faint, round
//! ticks from [`scale`], and the legend in a box of its own below the
//! plot, so it never covers data.

use std::fmt::Write;

use super::charts::{Chart, Style, View};
use super::scale::{self, axis, tick_label, x_axis};
use super::tables::escape_html;

const WIDTH: f64 = 660.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const PLOT_HEIGHT: f64 = 210.0;
const LEGEND_LINE: f64 = 18.0;
/// An estimate of a 12 px sans-serif character's width, to wrap the legend.
const CHAR_WIDTH: f64 = 6.8;

/// Colour-blind-safe colours (Okabe and Ito), one per run.
const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];
/// Dash patterns: the first field (train) solid, the second (eval) dashed.
const DASHES: [&str; 4] = ["", "7 4", "2 3", "9 3 2 3"];

pub fn color(run: usize) -> &'static str {
    PALETTE[run % PALETTE.len()]
}

fn dash(index: usize) -> &'static str {
    DASHES[index % DASHES.len()]
}

/// The SVG of one view of `chart` (at least one line with a point);
/// `labels` names each run of the report.
pub fn view_svg(chart: &Chart, view: &View, labels: &[String], shown: bool) -> String {
    let points = || view.lines.iter().flat_map(|l| l.points.iter());
    let integral = |v: f64| v == v.trunc();
    let (x_min, x_max) = min_max(points().map(|p| p.0));
    let (y_min, y_max) = min_max(points().map(|p| p.1));
    let x_axis = x_axis(x_min, x_max, points().all(|p| integral(p.0)));
    let y_axis = axis(
        y_min,
        y_max,
        points().all(|p| integral(p.1)) && y_max - y_min >= 2.0,
    );
    let right = WIDTH - RIGHT;
    let bottom = TOP + PLOT_HEIGHT;
    let px = |x: f64| LEFT + (x - x_axis.lo) / (x_axis.hi - x_axis.lo) * (right - LEFT);
    let py = |y: f64| bottom - (y - y_axis.lo) / (y_axis.hi - y_axis.lo) * PLOT_HEIGHT;

    let legend = legend_items(chart, view, labels);
    let legend_rows = layout(&legend);
    let legend_top = bottom + 44.0;
    let height = legend_top + legend_rows.len() as f64 * LEGEND_LINE + 10.0;

    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"view\" data-x=\"{}\" \
         viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\"{} \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"18\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
        escape_html(&view.x),
        if shown { "" } else { " style=\"display:none\"" },
        escape_html(&chart.title)
    );
    // Grid and ticks.
    for &x in &x_axis.ticks {
        let at = px(x);
        let _ = write!(
            svg,
            "<line x1=\"{at:.1}\" y1=\"{TOP}\" x2=\"{at:.1}\" y2=\"{bottom}\" stroke=\"#e6e6e6\"/>\
             <text class=\"tick-x\" x=\"{at:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            bottom + 16.0,
            tick_label(x, x_axis.step)
        );
    }
    for &y in &y_axis.ticks {
        let at = py(y);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{at:.1}\" x2=\"{right}\" y2=\"{at:.1}\" stroke=\"#e6e6e6\"/>\
             <text class=\"tick-y\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            LEFT - 6.0,
            at + 4.0,
            tick_label(y, y_axis.step)
        );
    }
    let _ = write!(
        svg,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{PLOT_HEIGHT}\" fill=\"none\" stroke=\"#999\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
         <text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        right - LEFT,
        (LEFT + right) / 2.0,
        bottom + 32.0,
        escape_html(&view.x_label),
        TOP + PLOT_HEIGHT / 2.0,
        escape_html(&chart.y_label)
    );
    // The data.
    for line in &view.lines {
        let (stroke, pattern) = (color(line.run), dash(line.dash));
        let dashed = if pattern.is_empty() {
            String::new()
        } else {
            format!(" stroke-dasharray=\"{pattern}\"")
        };
        let xy: Vec<(f64, f64)> = line.points.iter().map(|p| (px(p.0), py(p.1))).collect();
        if chart.style == Style::Points || xy.len() == 1 {
            for ((x, y), point) in xy.iter().zip(&line.points) {
                let _ = write!(
                    svg,
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4.5\" fill=\"{stroke}\"/>"
                );
                if let Some(name) = &point.2 {
                    let _ = write!(
                        svg,
                        "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                        x + 7.0,
                        y - 8.0,
                        escape_html(name)
                    );
                }
            }
            svg.push('\n');
            continue;
        }
        let smoothed = scale::ema(
            &xy.iter().map(|p| p.1).collect::<Vec<f64>>(),
            scale::DEFAULT_SMOOTHING,
        );
        let raw: Vec<String> = xy.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let smooth: Vec<String> = xy
            .iter()
            .zip(&smoothed)
            .map(|((x, _), y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            svg,
            "<g class=\"series\"><polyline class=\"raw\" fill=\"none\" stroke=\"{stroke}\" \
             stroke-opacity=\"0.3\" stroke-width=\"1\"{dashed} points=\"{}\"/>\
             <polyline class=\"smooth\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"2\"{dashed} \
             points=\"{}\"/></g>",
            raw.join(" "),
            smooth.join(" ")
        );
    }
    // The legend, boxed below the plot.
    let _ = write!(
        svg,
        "<g class=\"legend\"><rect x=\"{LEFT}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
         fill=\"#fafafa\" stroke=\"#ddd\"/>",
        legend_top - 4.0,
        right - LEFT,
        legend_rows.len() as f64 * LEGEND_LINE + 6.0
    );
    for (row, items) in legend_rows.iter().enumerate() {
        let y = legend_top + row as f64 * LEGEND_LINE + 9.0;
        for (x, item) in items {
            let (stroke, pattern) = match item.swatch {
                Swatch::Run(run) => (color(run), ""),
                Swatch::Dash(index) => ("#555", dash(index)),
            };
            let _ = write!(
                svg,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{stroke}\" \
                 stroke-width=\"3\" stroke-dasharray=\"{pattern}\"/>\
                 <text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
                y - 4.0,
                x + 20.0,
                y - 4.0,
                x + 25.0,
                escape_html(&item.text)
            );
        }
    }
    svg += "</g>\n</svg>\n";
    svg
}

enum Swatch {
    Run(usize),
    Dash(usize),
}

struct LegendItem {
    swatch: Swatch,
    text: String,
}

/// The runs drawn in `view` (a colour each), then what each dash pattern
/// means when the chart has several.
fn legend_items(chart: &Chart, view: &View, labels: &[String]) -> Vec<LegendItem> {
    let mut runs: Vec<usize> = view.lines.iter().map(|l| l.run).collect();
    runs.sort();
    runs.dedup();
    let mut items: Vec<LegendItem> = runs
        .into_iter()
        .map(|run| LegendItem {
            swatch: Swatch::Run(run),
            text: labels.get(run).cloned().unwrap_or_default(),
        })
        .collect();
    items.extend(chart.dashes.iter().enumerate().map(|(i, name)| LegendItem {
        swatch: Swatch::Dash(i),
        text: name.clone(),
    }));
    items
}

/// The legend's rows: each item's x, wrapped to the plot's width.
fn layout(items: &[LegendItem]) -> Vec<Vec<(f64, &LegendItem)>> {
    let mut rows: Vec<Vec<(f64, &LegendItem)>> = vec![Vec::new()];
    let mut x = LEFT + 8.0;
    for item in items {
        let width = 25.0 + item.text.chars().count() as f64 * CHAR_WIDTH + 18.0;
        if x + width > WIDTH - RIGHT && !rows.last().is_some_and(Vec::is_empty) {
            rows.push(Vec::new());
            x = LEFT + 8.0;
        }
        if let Some(row) = rows.last_mut() {
            row.push((x, item));
        }
        x += width;
    }
    rows
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}
