//! Drawing helpers of `runs watch`: a sparkline of a series, and a line of
//! parts that fits a narrow terminal by dropping its least important parts
//! first (the ETA is never dropped: it is what people watch for).

/// Eight heights of block, lowest first.
const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` points of `values` as block characters scaled between
/// their own minimum and maximum (a flat series is drawn at mid height);
/// non-finite points are left out.
pub fn sparkline(values: impl IntoIterator<Item = f64>, width: usize) -> String {
    let finite: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    let shown = &finite[finite.len().saturating_sub(width)..];
    let (lo, hi) = shown
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    shown
        .iter()
        .map(|&v| {
            if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
                BLOCKS[3]
            } else {
                let level = ((v - lo) / (hi - lo) * (BLOCKS.len() - 1) as f64).round();
                BLOCKS[level as usize]
            }
        })
        .collect()
}

/// One piece of a line and how much it matters: parts of higher `rank` go
/// first when the line is too long; rank 0 is never dropped.
#[derive(Debug, Clone)]
pub struct Part {
    pub rank: u8,
    pub text: String,
}

impl Part {
    pub fn new(rank: u8, text: impl Into<String>) -> Part {
        Part {
            rank,
            text: text.into(),
        }
    }
}

const GAP: &str = "  ";

fn joined(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join(GAP)
}

/// `parts` joined, in at most `width` characters (none: no limit). Parts
/// are dropped, highest rank first (the later one among equals), until the
/// line fits; if the parts of rank 0 alone are too long, the first of them
/// is cut at its end so that the last (the ETA) stays whole.
pub fn fit(mut parts: Vec<Part>, width: Option<usize>) -> String {
    let Some(width) = width else {
        return joined(&parts);
    };
    while joined(&parts).chars().count() > width {
        let droppable = parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.rank > 0)
            .max_by_key(|(i, p)| (p.rank, *i))
            .map(|(i, _)| i);
        match droppable {
            Some(i) => {
                parts.remove(i);
            }
            None => break,
        }
    }
    let line = joined(&parts);
    let over = line.chars().count().saturating_sub(width);
    if over == 0 || parts.len() < 2 {
        return line.chars().take(width).collect();
    }
    let first = &parts[0].text;
    let keep = first.chars().count().saturating_sub(over);
    parts[0].text = first.chars().take(keep).collect();
    joined(&parts).chars().take(width).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_the_last_points_that_fit_between_min_and_max() {
        assert_eq!(
            sparkline([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 8),
            "▁▂▃▄▅▆▇█"
        );
        // Only the last 4 fit: 5..8 scaled on their own.
        assert_eq!(
            sparkline([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 4),
            "▁▃▆█"
        );
        assert_eq!(sparkline([2.5, 2.5, 2.5], 10), "▄▄▄");
        assert_eq!(sparkline([f64::NAN, 1.0, f64::INFINITY, 0.0], 10), "█▁");
        assert_eq!(sparkline([], 10), "");
        assert_eq!(sparkline([1.0, 2.0], 0), "");
    }

    #[test]
    fn a_narrow_line_drops_its_least_important_parts_and_keeps_the_eta() {
        let parts = || {
            vec![
                Part::new(0, "step    120/300 (40%)"),
                Part::new(1, "loss 2.1034"),
                Part::new(2, "15234 tokens/s"),
                Part::new(0, "ETA 12s"),
            ]
        };
        let full = "step    120/300 (40%)  loss 2.1034  15234 tokens/s  ETA 12s";
        assert_eq!(fit(parts(), None), full);
        assert_eq!(fit(parts(), Some(80)), full);
        assert_eq!(
            fit(parts(), Some(50)),
            "step    120/300 (40%)  loss 2.1034  ETA 12s"
        );
        assert_eq!(fit(parts(), Some(35)), "step    120/300 (40%)  ETA 12s");
        // Narrower than the step and the ETA: the step is cut, never the ETA.
        assert_eq!(fit(parts(), Some(20)), "step    120  ETA 12s");
        assert_eq!(fit(parts(), Some(5)), "  ETA");
    }
}
