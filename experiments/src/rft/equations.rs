//! The equations of a reasoning path: every `a op b (op c …) = r` it
//! writes, read out of the text, normalised, and checked by computing them.
//!
//! Yuan et al. 2023 ("Scaling Relationship on Learning Mathematical
//! Reasoning with Large Language Models", arXiv 2308.01825, §4 Rejection
//! sampling fine-tuning) compute every equation of a sampled path and drop
//! paths with a wrong calculation, and count two paths as the same
//! reasoning when their lists of equations are the same, whatever the
//! wording around them (their released `collect_rejection_sampling.py`,
//! OFA-Sys/gsm8k-ScRel: GSM8K's `<<a*b=c>>` annotations, `eval`ed, kept
//! within 1e-3). `super::datagen` does both with this module
//! (`datagen.check_equations = true`, `datagen.distinct = "equations"`).
//!
//! What counts as an equation: numbers joined by `+ - * / x × ÷`, then `=`,
//! then one number, with nothing but spaces between them ("so 2.5 * 1000
//! = 2500."). A number is written as [`super::verify::parse_answer`] reads
//! one inside the answer tag (digits, a decimal point, thousands commas in
//! groups of three); a `-` right before a digit where no number precedes
//! is its sign. "1 kilogram = 1000 grams" has no operator: it states a
//! factor and is not an equation.

use super::task::format_number;
use super::verify::parse_number;

/// One equation as read: the operands and operators of the left side (in
/// order, `*` and `/` for every way of writing them) and the written result.
#[derive(Debug, Clone, PartialEq)]
pub struct Equation {
    pub operands: Vec<f64>,
    pub operators: Vec<char>,
    pub result: f64,
    /// Decimal places the result is written with ("2500." → 0, "0.25" → 2).
    pub result_decimals: u32,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number {
        value: f64,
        decimals: u32,
    },
    Operator(char),
    Equals,
    /// Anything else (a word, a parenthesis, a tag): ends an equation.
    Other,
}

/// The tokens of `text`; spaces separate tokens and are dropped.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let after_number = matches!(out.last(), Some(Token::Number { .. }));
        let signed =
            c == '-' && !after_number && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if c.is_ascii_digit()
            || signed
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            let (token, end) = number_at(&chars, i);
            out.push(token);
            i = end;
            continue;
        }
        match c {
            c if c.is_whitespace() => {}
            '+' | '-' | '*' | '/' => out.push(Token::Operator(c)),
            '×' | 'x' if after_number && !chars.get(i + 1).is_some_and(|n| n.is_alphabetic()) => {
                out.push(Token::Operator('*'))
            }
            '÷' => out.push(Token::Operator('/')),
            '=' => out.push(Token::Equals),
            _ => out.push(Token::Other),
        }
        i += 1;
    }
    out
}

/// The number starting at `start`: sign, digits, thousands commas
/// followed by three digits, one decimal point followed by a digit. A
/// full stop or comma that ends a sentence is left out.
fn number_at(chars: &[char], start: usize) -> (Token, usize) {
    let mut end = start + usize::from(chars[start] == '-');
    let mut seen_point = false;
    while end < chars.len() {
        let c = chars[end];
        let next_is_digit = chars.get(end + 1).is_some_and(char::is_ascii_digit);
        if c.is_ascii_digit() || (c == ',' && !seen_point && next_is_digit) {
            end += 1;
        } else if c == '.' && !seen_point && next_is_digit {
            seen_point = true;
            end += 1;
        } else {
            break;
        }
    }
    let text: String = chars[start..end].iter().collect();
    let decimals = text
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len() as u32);
    match parse_number(&text) {
        Some(value) => (Token::Number { value, decimals }, end),
        None => (Token::Other, end),
    }
}

/// Every equation of `path`, in the order written.
pub fn equations(path: &str) -> Vec<Equation> {
    let tokens = tokens(path);
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match equation_at(&tokens, i) {
            Some((equation, end)) => {
                found.push(equation);
                i = end;
            }
            None => i += 1,
        }
    }
    found
}

/// The equation starting at token `start`, and the token after it: a
/// number, one or more (operator, number) pairs, `=`, a number.
fn equation_at(tokens: &[Token], start: usize) -> Option<(Equation, usize)> {
    let number = |i: usize| match tokens.get(i) {
        Some(Token::Number { value, decimals }) => Some((*value, *decimals)),
        _ => None,
    };
    let mut operands = vec![number(start)?.0];
    let mut operators = Vec::new();
    let mut i = start + 1;
    while let (Some(Token::Operator(op)), Some((value, _))) = (tokens.get(i), number(i + 1)) {
        operators.push(*op);
        operands.push(value);
        i += 2;
    }
    if operators.is_empty() || tokens.get(i) != Some(&Token::Equals) {
        return None;
    }
    let (result, result_decimals) = number(i + 1)?;
    Some((
        Equation {
            operands,
            operators,
            result,
            result_decimals,
        },
        i + 2,
    ))
}

impl Equation {
    /// The left side's value, `*` and `/` before `+` and `-`, each level
    /// left to right (as Python evaluates the paper's equations).
    pub fn value(&self) -> f64 {
        let mut sum = 0.0;
        let mut sign = 1.0;
        let mut term = self.operands[0];
        for (op, &x) in self.operators.iter().zip(&self.operands[1..]) {
            match op {
                '*' => term *= x,
                '/' => term /= x,
                _ => {
                    sum += sign * term;
                    sign = if *op == '-' { -1.0 } else { 1.0 };
                    term = x;
                }
            }
        }
        sum + sign * term
    }

    /// Whether the written result is the left side's value as far as it is
    /// written: rounded to the result's own decimal places (half a unit of
    /// its last digit, with a relative 1e-9 for binary noise), or equal at
    /// the task's 6 significant digits (`format_number`, how the reference
    /// answers write large results such as 12345700).
    pub fn holds(&self) -> bool {
        let value = self.value();
        if !value.is_finite() {
            return false;
        }
        let half_unit = 0.5 * 10f64.powi(-(self.result_decimals as i32));
        let slack = 1e-9 * value.abs().max(1.0);
        (value - self.result).abs() <= half_unit + slack
            || format_number(value) == format_number(self.result)
    }

    /// The equation in one canonical spelling: numbers in their shortest
    /// form ("2,500.0" → "2500"), no spaces, `*` and `/` for any sign.
    pub fn normalized(&self) -> String {
        let mut text = format!("{}", self.operands[0]);
        for (op, x) in self.operators.iter().zip(&self.operands[1..]) {
            text.push(*op);
            text.push_str(&format!("{x}"));
        }
        format!("{text}={}", self.result)
    }
}

/// The normalised equation list of `path`, one key for distinctness:
/// paths whose equations are the same, in the same order, get equal keys.
pub fn equation_key(path: &str) -> String {
    let list: Vec<String> = equations(path).iter().map(Equation::normalized).collect();
    list.join("; ")
}

/// Whether every equation of `path` holds (a path without any holds).
pub fn equations_hold(path: &str) -> bool {
    equations(path).iter().all(Equation::holds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_equations_of_a_worked_line() {
        let path = "1 kilogram = 1000 grams, so 2.5 * 1000 = 2500. <answer>2500</answer>";
        let found = equations(path);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].operands, vec![2.5, 1000.0]);
        assert_eq!(found[0].operators, vec!['*']);
        assert_eq!(found[0].result, 2500.0);
        assert_eq!(equation_key(path), "2.5*1000=2500");
        // Chains, signs, thousands commas, "x" and "÷" for the operators.
        let found = equations("first 3 + 4 x 2 = 11, then -6 ÷ 2 = -3; 1,000 - 1 = 999");
        let keys: Vec<String> = found.iter().map(Equation::normalized).collect();
        assert_eq!(keys, ["3+4*2=11", "-6/2=-3", "1000-1=999"]);
        assert!(found.iter().all(Equation::holds), "{found:?}");
        // A stated factor, a tag and words are no equations.
        assert!(equations("1 mile = 1.60934 kilometers <answer>3</answer>").is_empty());
    }

    #[test]
    fn an_equation_holds_to_the_digits_its_result_shows() {
        let holds = |path: &str| equations(path).iter().all(Equation::holds);
        assert!(holds("so 7 / 3 = 2.33"));
        assert!(holds("so 7 / 3 = 2.333333"));
        assert!(!holds("so 7 / 3 = 2.34"));
        assert!(!holds("so 2.5 * 1000 = 2400"));
        // Six significant digits, as the reference answers write results.
        assert!(holds("so 123456.7 * 100 = 12345700"));
        assert!(!holds("so 1 / 0 = 0"));
    }

    #[test]
    fn wording_and_number_format_do_not_change_the_key() {
        let a = "1 kilogram = 1000 grams, so 2.5 * 1000 = 2500. <answer>2500</answer>";
        let b = "There are 1000 grams in a kilogram. 2.50 x 1,000 = 2500.0 <answer>2,500</answer>";
        let c = "so 2.5 * 1000 = 2500, then 2500 + 0 = 2500 <answer>2500</answer>";
        assert_eq!(equation_key(a), equation_key(b));
        assert_ne!(equation_key(a), equation_key(c));
    }
}
