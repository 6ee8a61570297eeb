//! One chart as SVG (plotters): the plot on the left, its legend in a
//! column of its own on the right, so the legend never covers a line.

use plotters::prelude::*;

use super::charts::{Series, Style};
use crate::error::Result;

const WIDTH: u32 = 1040;
const HEIGHT: u32 = 380;
/// The legend column: wide enough for "preset 1234abcd exact_accuracy".
const LEGEND_WIDTH: u32 = 270;
const LEGEND_LINE: i32 = 18;

pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub style: Style,
}

/// The SVG of `series` (at least one, each with at least one point).
pub fn chart(axes: &Axes, series: &[Series]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let points = || series.iter().flat_map(|s| s.points.iter());
        let (x_min, x_max) = span(points().map(|p| p.0));
        let (y_min, y_max) = span(points().map(|p| p.1));
        let mut chart = ChartBuilder::on(&plot)
            .caption(axes.title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_min..x_max, y_min..y_max)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(axes.x_label)
            .y_desc(axes.y_label)
            .draw()
            .map_err(plot_error)?;
        for (i, s) in series.iter().enumerate() {
            let color = color(i);
            match axes.style {
                Style::Line => {
                    chart
                        .draw_series(LineSeries::new(
                            s.points.iter().map(|p| (p.0, p.1)),
                            color.stroke_width(2),
                        ))
                        .map_err(plot_error)?;
                    // A lone point draws no line: mark it.
                    if s.points.len() == 1 {
                        let (x, y, _) = s.points[0];
                        chart
                            .draw_series([Circle::new((x, y), 4, color.filled())])
                            .map_err(plot_error)?;
                    }
                }
                Style::Points => {
                    chart
                        .draw_series(s.points.iter().map(|(x, y, name)| {
                            EmptyElement::at((*x, *y))
                                + Circle::new((0, 0), 5, color.filled())
                                + Text::new(
                                    name.clone().unwrap_or_default(),
                                    (7, -12),
                                    ("sans-serif", 12),
                                )
                        }))
                        .map_err(plot_error)?;
                }
            }
        }
        draw_legend(&legend, series)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// The legend column: a swatch and the label per series, top down; what
/// does not fit is counted.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
) -> Result<()> {
    let fits = ((HEIGHT as i32 - 50) / LEGEND_LINE).max(1) as usize;
    let shown = if series.len() > fits {
        fits - 1
    } else {
        series.len()
    };
    for (i, s) in series.iter().take(shown).enumerate() {
        let y = 40 + i as i32 * LEGEND_LINE;
        area.draw(&Rectangle::new(
            [(8, y - 5), (28, y - 1)],
            color(i).filled(),
        ))
        .map_err(plot_error)?;
        area.draw(&Text::new(s.label.clone(), (34, y - 9), ("sans-serif", 13)))
            .map_err(plot_error)?;
    }
    if shown < series.len() {
        let y = 40 + shown as i32 * LEGEND_LINE;
        let more = format!("… and {} more", series.len() - shown);
        area.draw(&Text::new(more, (34, y - 9), ("sans-serif", 13)))
            .map_err(plot_error)?;
    }
    Ok(())
}

fn color(i: usize) -> RGBAColor {
    Palette99::pick(i).to_rgba()
}

/// The padded range of `values` (never empty, never zero-width).
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(hi.abs().max(1.0) * 1e-3);
    (lo - pad, hi + pad)
}

fn plot_error<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the report plot: {err:?}")
}
