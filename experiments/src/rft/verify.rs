//! Grading a completion: find its answer, apply the course's tolerance rule.
//!
//! The rule is HW3's grader: a parsed answer `a` is correct for the true
//! answer `c` when `|round(a,3) − round(c,3)| < 0.05·|round(c,3)|`, with
//! Python's `round` (round half to even on the exact binary value). A
//! completion without a parsable answer is *unanswered* (HW3 parses it to NaN).

use serde::{Deserialize, Serialize};

pub const ANSWER_OPEN: &str = "<answer>";
pub const ANSWER_CLOSE: &str = "</answer>";
/// The grader's relative tolerance.
pub const RELATIVE_TOLERANCE: f64 = 0.05;

/// The number inside the first `<answer>…</answer>` of `completion`.
///
/// Only the first opening tag counts, closed by the next closing tag; later
/// tags are ignored (a model that answers twice is graded on its first
/// answer). Inside, surrounding whitespace is ignored and the number is:
/// an optional sign, digits with an optional decimal point (".5" and "5."
/// are accepted), an optional exponent ("1e3", "2.5E-4"), and optionally
/// commas as thousands separators in the integer part — only in groups of
/// three ("2,500" and "1,234,567.5" parse; "2,5" and "25,00" do not, since a
/// decimal comma would be read wrongly). Anything else — an empty tag,
/// words, "inf"/"nan", an overflowing exponent, a missing closing tag —
/// gives `None` (unanswered).
pub fn parse_answer(completion: &str) -> Option<f64> {
    let start = completion.find(ANSWER_OPEN)? + ANSWER_OPEN.len();
    let len = completion[start..].find(ANSWER_CLOSE)?;
    parse_number(completion[start..start + len].trim())
}

/// A number written in plain decimal notation (see [`parse_answer`]).
pub(crate) fn parse_number(text: &str) -> Option<f64> {
    // Rust's float parser also takes "inf", "NaN" and "infinity": allow only
    // the characters of plain decimal notation before handing it over.
    if !text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | 'e' | 'E' | ','))
    {
        return None;
    }
    let value: f64 = strip_thousands_separators(text)?.parse().ok()?;
    value.is_finite().then_some(value)
}

/// `text` without its thousands separators, or `None` when a comma is
/// anywhere but between well-formed groups of three integer digits.
fn strip_thousands_separators(text: &str) -> Option<String> {
    if !text.contains(',') {
        return Some(text.to_string());
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    let sign = &text[..text.len() - unsigned.len()];
    let integer_end = unsigned.find(['.', 'e', 'E']).unwrap_or(unsigned.len());
    let (integer, rest) = unsigned.split_at(integer_end);
    if rest.contains(',') {
        return None;
    }
    let mut groups = integer.split(',');
    let first = groups.next()?;
    let first_ok = (1..=3).contains(&first.len()) && first.bytes().all(|b| b.is_ascii_digit());
    let mut digits = first.to_string();
    for group in groups {
        if !(first_ok && group.len() == 3 && group.bytes().all(|b| b.is_ascii_digit())) {
            return None;
        }
        digits.push_str(group);
    }
    Some(format!("{sign}{digits}{rest}"))
}

/// Python's `round(x, 3)`: the correctly rounded 3-decimal value of `x`'s
/// exact binary value, ties to even. Rust's `{:.3}` formatting rounds the
/// exact value the same way (0.125 → "0.12" at two places, as in Python).
pub fn round3(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.3}").parse().unwrap_or(x)
}

/// The HW3 rule. Edge cases, all consequences of the formula:
/// * when `round(correct, 3)` is 0 (|correct| < 0.0005) the tolerance is 0 and
///   the strict `<` makes *every* answer wrong, even an exact one — the task
///   generator therefore never asks for answers below 0.01;
/// * the tolerance is relative to the true answer only, so it is symmetric in
///   sign: for a negative true answer, a negative answer within 5 % is
///   correct and any answer of the other sign is wrong;
/// * NaN on either side is wrong.
pub fn is_correct(predicted: f64, correct: f64) -> bool {
    let (a, c) = (round3(predicted), round3(correct));
    (a - c).abs() < RELATIVE_TOLERANCE * c.abs()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Correct,
    Wrong,
    Unanswered,
}

/// Grade one completion against the true answer.
pub fn verify(completion: &str, correct: f64) -> Verdict {
    match parse_answer(completion) {
        None => Verdict::Unanswered,
        Some(answer) if is_correct(answer, correct) => Verdict::Correct,
        Some(_) => Verdict::Wrong,
    }
}

/// HW3's two numbers over a set of graded completions.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Metrics {
    pub total: usize,
    pub answered: usize,
    pub correct: usize,
    /// correct / total (0 for an empty set).
    pub accuracy: f64,
    /// answered / total (0 for an empty set).
    pub answer_rate: f64,
}

/// Grade `(completion, true answer)` pairs.
pub fn score<'a>(graded: impl IntoIterator<Item = (&'a str, f64)>) -> Metrics {
    let mut metrics = Metrics::default();
    for (completion, correct) in graded {
        metrics.total += 1;
        match verify(completion, correct) {
            Verdict::Correct => {
                metrics.answered += 1;
                metrics.correct += 1;
            }
            Verdict::Wrong => metrics.answered += 1,
            Verdict::Unanswered => {}
        }
    }
    if metrics.total > 0 {
        metrics.accuracy = metrics.correct as f64 / metrics.total as f64;
        metrics.answer_rate = metrics.answered as f64 / metrics.total as f64;
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_scientific_numbers() {
        let cases = [
            ("so 2.5 * 1000 = 2500. <answer>2500</answer>", 2500.0),
            ("<answer>-3.25</answer>", -3.25),
            ("<answer>+7</answer>", 7.0),
            ("<answer> 0.5 </answer>", 0.5),
            ("<answer>.5</answer>", 0.5),
            ("<answer>2.5e3</answer>", 2500.0),
            ("<answer>2.5E-3</answer>", 0.0025),
            ("<answer>1e+2</answer>", 100.0),
            ("<answer>2,500</answer>", 2500.0),
            ("<answer>-1,234,567.5</answer>", -1_234_567.5),
            ("<answer>0</answer>", 0.0),
        ];
        for (completion, expected) in cases {
            assert_eq!(parse_answer(completion), Some(expected), "{completion}");
        }
    }

    #[test]
    fn first_answer_tag_wins() {
        assert_eq!(
            parse_answer("<answer>1</answer> no wait <answer>2</answer>"),
            Some(1.0)
        );
        // An unclosed first tag swallows the second one: unanswered.
        assert_eq!(parse_answer("<answer>1 <answer>2</answer>"), None);
    }

    #[test]
    fn malformed_answers_are_unanswered() {
        let cases = [
            "the answer is 2500",
            "<answer></answer>",
            "<answer>   </answer>",
            "<answer>2500",
            "2500</answer>",
            "<answer>about 2500</answer>",
            "<answer>2500 grams</answer>",
            "<answer>inf</answer>",
            "<answer>NaN</answer>",
            "<answer>1e999</answer>",
            "<answer>2,5</answer>",
            "<answer>25,00</answer>",
            "<answer>1,234.5,6</answer>",
            "<answer>1..2</answer>",
            "<answer>--2</answer>",
            "<answer>1e</answer>",
            "<answer>1 000</answer>",
        ];
        for completion in cases {
            assert_eq!(parse_answer(completion), None, "{completion}");
            assert_eq!(verify(completion, 2500.0), Verdict::Unanswered);
        }
    }

    #[test]
    fn tolerance_is_five_percent_of_the_rounded_truth() {
        assert!(is_correct(2500.0, 2500.0));
        assert!(is_correct(2624.0, 2500.0)); // 4.96 %
        assert!(!is_correct(2625.0, 2500.0)); // exactly 5 %: strict <
        assert!(is_correct(2376.0, 2500.0));
        assert!(!is_correct(2375.0, 2500.0));
        assert!(!is_correct(-2500.0, 2500.0));
        assert!(is_correct(-2450.0, -2500.0));
        assert!(!is_correct(2500.0, -2500.0));
        assert!(!is_correct(f64::NAN, 2500.0));
        assert!(!is_correct(2500.0, f64::NAN));
    }

    #[test]
    fn zero_or_tiny_truth_can_never_be_matched() {
        assert!(!is_correct(0.0, 0.0));
        // 0.0004 rounds to 0.000: tolerance 0.
        assert!(!is_correct(0.0004, 0.0004));
        // 0.0006 rounds to 0.001: tolerance 0.00005, and 0.0006 rounds the
        // same way, so it matches.
        assert!(is_correct(0.0006, 0.0006));
        // Rounding comes first: 0.0014 and 0.0006 both round to 0.001, so a
        // 2.3x-off answer still counts for such a tiny truth.
        assert!(is_correct(0.0014, 0.0006));
    }

    #[test]
    fn round3_matches_python_half_even_on_exact_values() {
        // Python: round(0.0625, 3) == 0.062 (exact tie, to even);
        // round(2.6755, 3) == 2.675 (binary value is below the tie);
        // round(-1.0005, 3) == -1.0 (binary value -1.000499999...).
        assert_eq!(round3(0.0625), 0.062);
        assert_eq!(round3(0.1875), 0.188);
        assert_eq!(round3(2.6755), 2.675);
        assert_eq!(round3(-1.0005), -1.0);
        assert_eq!(round3(1234.56789), 1234.568);
    }

    #[test]
    fn metrics_count_answers_and_correct_ones() {
        let graded = [
            ("<answer>100</answer>", 100.0),
            ("<answer>104</answer>", 100.0),
            ("<answer>200</answer>", 100.0),
            ("no tag", 100.0),
        ];
        let metrics = score(graded.iter().map(|(c, a)| (*c, *a)));
        assert_eq!(
            (metrics.total, metrics.answered, metrics.correct),
            (4, 3, 2)
        );
        assert_eq!(metrics.accuracy, 0.5);
        assert_eq!(metrics.answer_rate, 0.75);
        assert_eq!(score(std::iter::empty()), Metrics::default());
    }
}
