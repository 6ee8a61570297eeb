//! The numbers behind a chart's look: axis ranges with round ticks
//! (integer ticks for steps and rounds, a padded range for a single point
//! or a constant, never below 0 for data that is not), tick labels, and
//! TensorBoard's debiased EMA smoothing.

/// TensorBoard's default smoothing weight (its scalar dashboard's slider).
pub const DEFAULT_SMOOTHING: f64 = 0.6;

/// One axis: its drawn range and the ticks inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<f64>,
    /// The distance between ticks (it sets how many decimals a label gets).
    pub step: f64,
}

/// The axis for data spanning `min..=max`. `integer`: the data are whole
/// numbers (steps, rounds), so ticks are too. A single value gets a padded
/// range around it; data that is not negative never gets an axis below 0.
pub fn axis(min: f64, max: f64, integer: bool) -> Axis {
    let (min, max) = if min.is_finite() && max.is_finite() && min <= max {
        (min, max)
    } else {
        (0.0, 1.0)
    };
    let (mut lo, mut hi) = if max > min {
        let pad = (max - min) * 0.05;
        (min - pad, max + pad)
    } else if integer {
        (min - 1.0, max + 1.0)
    } else if min == 0.0 {
        (0.0, 1.0)
    } else {
        let pad = min.abs() * 0.1;
        (min - pad, max + pad)
    };
    if min >= 0.0 && lo < 0.0 {
        lo = 0.0;
    }
    let mut step = nice((hi - lo) / 5.0);
    if integer {
        step = step.max(1.0).round();
    }
    lo = (lo / step).floor() * step;
    hi = (hi / step).ceil() * step;
    if min >= 0.0 && lo < 0.0 {
        lo = 0.0;
    }
    // Two ticks say little (a lone step 0 would get 0 and 1): three at least.
    while ((hi - lo) / step).round() < 2.0 {
        hi += step;
    }
    let count = ((hi - lo) / step).round() as usize;
    let ticks = (0..=count)
        .map(|i| clean(lo + i as f64 * step, step))
        .collect();
    Axis {
        lo,
        hi,
        ticks,
        step,
    }
}

/// The x axis: like [`axis`], but ending where the data ends (a run of
/// 16 steps is not drawn to 20) when at least three ticks fall inside.
pub fn x_axis(min: f64, max: f64, integer: bool) -> Axis {
    let padded = axis(min, max, integer);
    let inside: Vec<f64> = padded
        .ticks
        .iter()
        .copied()
        .filter(|t| *t >= min && *t <= max)
        .collect();
    if max > min && inside.len() >= 3 {
        Axis {
            lo: min,
            hi: max,
            ticks: inside,
            step: padded.step,
        }
    } else {
        padded
    }
}

/// The round number (1, 2 or 5 times a power of ten) nearest above `raw`.
fn nice(raw: f64) -> f64 {
    if !(raw > 0.0) || !raw.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// `value` without the float noise of `lo + i * step` (0.30000000000000004).
fn clean(value: f64, step: f64) -> f64 {
    let decimals = decimals(step) as i32;
    let scale = 10f64.powi(decimals.min(15));
    (value * scale).round() / scale
}

/// The decimals a tick label needs to tell ticks `step` apart.
fn decimals(step: f64) -> usize {
    if step >= 1.0 || step <= 0.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    }
}

/// A tick's label: as many decimals as the step needs, thousands as `k`
/// and millions as `M` when round, scientific notation for tiny steps.
pub fn tick_label(value: f64, step: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let digits = decimals(step);
    if digits > 4 {
        let text = format!("{value:.1e}");
        return text.replace(".0e", "e");
    }
    let abs = value.abs();
    if step >= 1e6 && abs >= 1e6 {
        return format!("{}M", trim(format!("{:.2}", value / 1e6)));
    }
    if step >= 1e3 && abs >= 1e4 {
        return format!("{}k", trim(format!("{:.2}", value / 1e3)));
    }
    format!("{value:.digits$}")
}

fn trim(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// TensorBoard's smoothing: an exponential moving average with `weight`
/// on the past, debiased (divided by `1 - weight^n`) so the first points
/// are not pulled toward 0. `weight` 0 returns the values as they are.
/// The report's inline script does the same on the drawn points.
pub fn ema(values: &[f64], weight: f64) -> Vec<f64> {
    let weight = weight.clamp(0.0, 0.999);
    let mut last = 0.0;
    let mut count = 0;
    values
        .iter()
        .map(|&value| {
            count += 1;
            last = last * weight + (1.0 - weight) * value;
            last / (1.0 - weight.powi(count))
        })
        .collect()
}
