//! The unit-conversion task (after UT Austin "Advances in Deep Learning" HW3):
//! seeded questions, their deterministic reasoning line, and the text
//! formats the GPT is trained on and prompted with.
//!
//! The conversion factors are data (`presets/rft/units.toml`, each with its
//! source); this module only decides how questions are drawn and written.

use std::collections::HashSet;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::UserError;

/// Put between the question and the reasoning, in training text and prompts
/// alike: the GPT learns that what follows it is the worked answer.
pub const SEPARATOR: &str = "\nA: ";
/// Ends every completion, so a sampler can stop at the first newline.
pub const END_OF_COMPLETION: &str = "\n";

/// The built-in unit table, compiled into the binary so that a seed means
/// the same questions wherever envgen runs.
const BUILTIN_UNITS: &str = include_str!("../../presets/rft/units.toml");
const BUILTIN_ORIGIN: &str = "experiments/presets/rft/units.toml (built in)";

/// Answers outside this range are redrawn: tiny answers round to 0 under the
/// grading rule's 3-decimal rounding (and then nothing counts as correct), and
/// huge ones are long digit strings that teach the GPT nothing extra.
const MIN_ANSWER: f64 = 0.01;
const MAX_ANSWER: f64 = 1e8;
/// Significant digits printed for factors and answers: far finer than the
/// 5 % tolerance, short enough to tokenize cheaply.
const SIGNIFICANT_DIGITS: usize = 6;

/// How questions are worded; `{v}`, `{from}` and `{to}` are filled in.
const TEMPLATES: [&str; 4] = [
    "How many {to} are in {v} {from}?",
    "Convert {v} {from} to {to}.",
    "What is {v} {from} in {to}?",
    "{v} {from} is how many {to}?",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unit {
    /// Singular name, e.g. "kilogram".
    pub name: String,
    pub plural: String,
    /// Size of one of this unit in the family's base unit.
    pub factor: f64,
    /// Where the factor comes from.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitFamily {
    pub name: String,
    /// The unit whose factor is 1.
    pub base: String,
    #[serde(rename = "unit")]
    pub units: Vec<Unit>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitTable {
    #[serde(rename = "family")]
    pub families: Vec<UnitFamily>,
}

impl UnitTable {
    /// The table shipped with envgen.
    pub fn builtin() -> anyhow::Result<Self> {
        Self::from_toml(BUILTIN_UNITS, BUILTIN_ORIGIN)
    }

    /// A user-supplied table (same schema as the built-in one).
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            UserError::usage(format!("cannot read unit table {}: {err}", path.display())).with_fix(
                "pass the path of a TOML file shaped like experiments/presets/rft/units.toml",
            )
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parse and validate; `origin` names the file in error messages.
    pub fn from_toml(text: &str, origin: &str) -> anyhow::Result<Self> {
        let table: UnitTable = toml::from_str(text).map_err(|err| {
            UserError::usage(format!("{origin}: not a valid unit table: {err}"))
                .with_fix("see experiments/presets/rft/units.toml for the expected [[family]] / [[family.unit]] layout")
        })?;
        table.validate(origin)?;
        Ok(table)
    }

    /// Only the units named in `names` (singular names); families left with
    /// fewer than two units are dropped. Conversions use factor ratios only,
    /// so a family keeps working without its base unit. An empty list keeps
    /// everything.
    pub fn restricted(&self, names: &[String]) -> anyhow::Result<Self> {
        if names.is_empty() {
            return Ok(self.clone());
        }
        let known: HashSet<&str> = self
            .families
            .iter()
            .flat_map(|f| f.units.iter().map(|u| u.name.as_str()))
            .collect();
        if let Some(unknown) = names.iter().find(|n| !known.contains(n.as_str())) {
            let mut all: Vec<&str> = known.into_iter().collect();
            all.sort_unstable();
            return Err(
                UserError::usage(format!("task.units: unknown unit '{unknown}'"))
                    .with_fix(format!("use singular unit names from: {}", all.join(", ")))
                    .into(),
            );
        }
        let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
        let families: Vec<UnitFamily> = self
            .families
            .iter()
            .map(|family| UnitFamily {
                units: family
                    .units
                    .iter()
                    .filter(|u| wanted.contains(u.name.as_str()))
                    .cloned()
                    .collect(),
                ..family.clone()
            })
            .filter(|family| family.units.len() >= 2)
            .collect();
        if families.is_empty() {
            return Err(UserError::usage(
                "task.units: no family keeps two of the listed units, so no question can be asked",
            )
            .with_fix("list at least two units of one family (e.g. gram and kilogram)")
            .into());
        }
        Ok(Self { families })
    }

    fn validate(&self, origin: &str) -> anyhow::Result<()> {
        if self.families.is_empty() {
            return Err(UserError::usage(format!("{origin}: no [[family]] entries"))
                .with_fix("add at least one unit family with two or more units")
                .into());
        }
        for family in &self.families {
            let where_ = format!("{origin}: family '{}'", family.name);
            if family.units.len() < 2 {
                return Err(UserError::usage(format!(
                    "{where_} has {} unit(s); a conversion needs two",
                    family.units.len()
                ))
                .with_fix("add another [[family.unit]] to it or remove the family")
                .into());
            }
            let mut seen = HashSet::new();
            for unit in &family.units {
                if !seen.insert(unit.name.as_str()) {
                    return Err(UserError::usage(format!(
                        "{where_}: unit '{}' appears twice",
                        unit.name
                    ))
                    .with_fix("keep one entry per unit name")
                    .into());
                }
                if !(unit.factor.is_finite() && unit.factor > 0.0) {
                    return Err(UserError::usage(format!(
                        "{where_}: unit '{}' has factor = {}",
                        unit.name, unit.factor
                    ))
                    .with_fix("factor is the size of the unit in the base unit: a positive, finite number")
                    .into());
                }
            }
            match family.units.iter().find(|unit| unit.name == family.base) {
                Some(base) if base.factor == 1.0 => {}
                Some(base) => {
                    return Err(UserError::usage(format!(
                        "{where_}: base unit '{}' has factor = {}",
                        base.name, base.factor
                    ))
                    .with_fix("the base unit's factor must be 1.0")
                    .into())
                }
                None => {
                    return Err(UserError::usage(format!(
                        "{where_}: base = '{}' is not one of its units",
                        family.base
                    ))
                    .with_fix("name one of the family's [[family.unit]] entries as base")
                    .into())
                }
            }
        }
        Ok(())
    }
}

/// One generated question with its reference reasoning and answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub text: String,
    /// One deterministic reasoning line, e.g.
    /// "1 kilogram = 1000 grams, so 2.5 * 1000 = 2500."
    pub reasoning: String,
    /// The exact answer (the tag in the completion shows it to 6 digits).
    pub answer: f64,
    pub family: String,
}

impl Question {
    /// What the GPT is given at generation time.
    pub fn prompt(&self) -> String {
        format_prompt(&self.text)
    }

    /// The worked computation of the reasoning line, e.g. ", so 2.5 * 1000"
    /// (operand, operation and factor, without the result).
    pub fn computation(&self) -> &str {
        let start = self.reasoning.find(", so ").unwrap_or(0);
        let end = self.reasoning.rfind(" = ").unwrap_or(self.reasoning.len());
        &self.reasoning[start..end.max(start)]
    }

    /// The reference completion: reasoning, answer tag, end marker.
    pub fn completion(&self) -> String {
        format!(
            "{} {}{END_OF_COMPLETION}",
            self.reasoning,
            format_answer_tag(self.answer)
        )
    }

    /// Prompt and reference completion: one supervised training example.
    pub fn training_text(&self) -> String {
        format_training_text(&self.text, &self.completion())
    }
}

/// `question` followed by the separator; the GPT continues from here.
pub fn format_prompt(question: &str) -> String {
    format!("{question}{SEPARATOR}")
}

/// Prompt plus completion, ending with exactly one end marker (a completion
/// sampled by the model may or may not carry one already).
pub fn format_training_text(question: &str, completion: &str) -> String {
    format!(
        "{}{}{END_OF_COMPLETION}",
        format_prompt(question),
        completion.trim_end()
    )
}

/// `<answer>2500</answer>`.
pub fn format_answer_tag(answer: f64) -> String {
    format!("<answer>{}</answer>", format_number(answer))
}

/// `x` to 6 significant digits, in plain decimal notation without trailing
/// zeros ("2500", "0.0166667", "1.5").
pub fn format_number(x: f64) -> String {
    // `{:e}` with a precision rounds to significant digits; parsing back and
    // printing with `{}` gives the shortest plain-decimal form of that value.
    let rounded: f64 = format!("{:.*e}", SIGNIFICANT_DIGITS - 1, x)
        .parse()
        .unwrap_or(x);
    format!("{rounded}")
}

/// A train / held-out split. No (units, value) pair, hence no question text,
/// occurs in both halves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Split {
    pub train: Vec<Question>,
    pub validation: Vec<Question>,
}

/// `train + validation` distinct questions from `seed`, split into the two
/// halves. The same seed gives the same questions on every machine.
pub fn generate_split(
    table: &UnitTable,
    seed: u64,
    train: usize,
    validation: usize,
) -> anyhow::Result<Split> {
    generate_split_with(table, seed, train, validation, MAX_DECIMALS)
}

/// [`generate_split`] with values of at most `max_decimals` decimal places
/// (0 gives whole numbers: an easier task for very small models).
pub fn generate_split_with(
    table: &UnitTable,
    seed: u64,
    train: usize,
    validation: usize,
    max_decimals: u32,
) -> anyhow::Result<Split> {
    let mut questions = generate_questions_with(table, seed, train + validation, max_decimals)?;
    let validation = questions.split_off(train);
    Ok(Split {
        train: questions,
        validation,
    })
}

/// `count` questions from `seed`, no two of them about the same conversion
/// (family, from-unit, to-unit, value) — so paraphrases never leak across a
/// split taken from this list.
pub fn generate_questions(
    table: &UnitTable,
    seed: u64,
    count: usize,
) -> anyhow::Result<Vec<Question>> {
    generate_questions_with(table, seed, count, MAX_DECIMALS)
}

/// Values are `m / 10^d`, m in 1..=999, d in 0..=`max_decimals`.
pub const MAX_DECIMALS: u32 = 2;

/// [`generate_questions`] with at most `max_decimals` decimal places.
pub fn generate_questions_with(
    table: &UnitTable,
    seed: u64,
    count: usize,
    max_decimals: u32,
) -> anyhow::Result<Vec<Question>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut seen = HashSet::new();
    let mut questions = Vec::with_capacity(count);
    // Redraws (duplicates, out-of-range answers) are rare; the cap only turns
    // an impossible request into an error instead of a hang.
    let max_draws = count.saturating_mul(50).saturating_add(1000);
    let mut draws = 0usize;
    while questions.len() < count {
        if draws == max_draws {
            return Err(UserError::usage(format!(
                "asked for {count} distinct unit-conversion questions; only {} could be drawn",
                questions.len()
            ))
            .with_fix("ask for fewer questions or add units to the unit table")
            .into());
        }
        draws += 1;
        let draw = draw_conversion(table, &mut rng, max_decimals);
        let answer = draw.value * draw.from.factor / draw.to.factor;
        if !(MIN_ANSWER..=MAX_ANSWER).contains(&answer) {
            continue;
        }
        let key = (
            draw.family.name.as_str(),
            draw.from.name.as_str(),
            draw.to.name.as_str(),
            draw.value.to_bits(),
        );
        if !seen.insert(key) {
            continue;
        }
        questions.push(write_question(&draw, answer));
    }
    Ok(questions)
}

struct Draw<'a> {
    family: &'a UnitFamily,
    from: &'a Unit,
    to: &'a Unit,
    value: f64,
    template: &'static str,
}

/// Every random choice is an integer drawn from a `u32` range: rand
/// documents those as portable, unlike `usize` ranges or float sampling.
fn draw_conversion<'a>(table: &'a UnitTable, rng: &mut ChaCha8Rng, max_decimals: u32) -> Draw<'a> {
    let family = &table.families[pick(rng, table.families.len())];
    let from = pick(rng, family.units.len());
    // Pick among the other units: shift indices at or past `from` by one.
    let mut to = pick(rng, family.units.len() - 1);
    if to >= from {
        to += 1;
    }
    let mantissa = rng.random_range(1u32..=999);
    let decimals = rng.random_range(0u32..=max_decimals);
    let value = f64::from(mantissa) / 10f64.powi(decimals as i32);
    let template = TEMPLATES[pick(rng, TEMPLATES.len())];
    Draw {
        family,
        from: &family.units[from],
        to: &family.units[to],
        value,
        template,
    }
}

fn pick(rng: &mut ChaCha8Rng, len: usize) -> usize {
    rng.random_range(0..len as u32) as usize
}

fn write_question(draw: &Draw<'_>, answer: f64) -> Question {
    let value = format_number(draw.value);
    let from_name = if draw.value == 1.0 {
        &draw.from.name
    } else {
        &draw.from.plural
    };
    let text = draw
        .template
        .replace("{v}", &value)
        .replace("{from}", from_name)
        .replace("{to}", &draw.to.plural);
    // State the factor that is at least 1, so the line never shows a long
    // fraction like 0.0166667: multiply by it or divide by it.
    let ratio = draw.from.factor / draw.to.factor;
    let reasoning = if ratio >= 1.0 {
        let factor = format_number(ratio);
        format!(
            "1 {} = {factor} {}, so {value} * {factor} = {}.",
            draw.from.name,
            draw.to.plural,
            format_number(answer)
        )
    } else {
        let factor = format_number(1.0 / ratio);
        format!(
            "1 {} = {factor} {}, so {value} / {factor} = {}.",
            draw.to.name,
            draw.from.plural,
            format_number(answer)
        )
    };
    Question {
        text,
        reasoning,
        answer,
        family: draw.family.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn kind_of(err: &anyhow::Error) -> Option<ErrorKind> {
        err.downcast_ref::<UserError>().map(|user| user.kind)
    }

    #[test]
    fn builtin_table_loads_with_every_family() {
        let table = UnitTable::builtin().unwrap();
        let names: Vec<_> = table.families.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["mass", "length", "volume", "time", "data"]);
        assert!(table.families.iter().all(|f| f.units.len() >= 5));
    }

    #[test]
    fn same_seed_same_questions_other_seed_differs() {
        let table = UnitTable::builtin().unwrap();
        let a = generate_questions(&table, 7, 200).unwrap();
        let b = generate_questions(&table, 7, 200).unwrap();
        let c = generate_questions(&table, 8, 200).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Pin the first question of seed 7 so that a change in the generator
        // or in the rand/ChaCha8 stream (which would silently change every
        // published split) fails here.
        let first = &a[0];
        assert_eq!(
            (first.text.as_str(), first.answer.to_bits()),
            (PINNED_SEED7_TEXT, PINNED_SEED7_ANSWER.to_bits()),
            "seed 7 now starts with {first:?}"
        );
    }

    const PINNED_SEED7_TEXT: &str = "What is 168 milligrams in grams?";
    const PINNED_SEED7_ANSWER: f64 = 0.168;

    #[test]
    fn split_halves_share_no_question_text() {
        let table = UnitTable::builtin().unwrap();
        let split = generate_split(&table, 3, 500, 100).unwrap();
        assert_eq!((split.train.len(), split.validation.len()), (500, 100));
        let train: HashSet<_> = split.train.iter().map(|q| &q.text).collect();
        assert_eq!(train.len(), 500, "train has duplicate texts");
        assert!(split.validation.iter().all(|q| !train.contains(&q.text)));
    }

    #[test]
    fn answers_follow_the_factors_and_reasoning_shows_them() {
        let table = UnitTable::builtin().unwrap();
        for q in generate_questions(&table, 11, 300).unwrap() {
            assert!((MIN_ANSWER..=MAX_ANSWER).contains(&q.answer), "{q:?}");
            assert!(q
                .reasoning
                .ends_with(&format!("= {}.", format_number(q.answer))));
            assert!(q.completion().contains(&format_answer_tag(q.answer)));
            assert!(q.computation().starts_with(", so ") && q.reasoning.contains(q.computation()));
            assert!(q.training_text().starts_with(&q.prompt()));
            assert!(q.training_text().ends_with("</answer>\n"));
        }
    }

    #[test]
    fn kilograms_to_grams_reads_naturally() {
        let text = r#"
            [[family]]
            name = "mass"
            base = "gram"
            [[family.unit]]
            name = "gram"
            plural = "grams"
            factor = 1.0
            source = "base"
            [[family.unit]]
            name = "kilogram"
            plural = "kilograms"
            factor = 1000.0
            source = "SI"
        "#;
        let table = UnitTable::from_toml(text, "t.toml").unwrap();
        let questions = generate_questions(&table, 1, 50).unwrap();
        let kg_to_g = questions
            .iter()
            .find(|q| q.reasoning.starts_with("1 kilogram = 1000 grams, so "))
            .expect("some kilogram -> gram question");
        assert!(kg_to_g.text.contains("kilogram"));
        let g_to_kg = questions
            .iter()
            .find(|q| q.reasoning.contains(" / 1000 = "))
            .expect("some gram -> kilogram question");
        assert!(g_to_kg.text.contains("grams"));
    }

    #[test]
    fn number_formatting() {
        assert_eq!(format_number(2500.0), "2500");
        assert_eq!(format_number(1.0 / 60.0), "0.0166667");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(453.59237 * 3.0), "1360.78");
        assert_eq!(format_answer_tag(2500.0), "<answer>2500</answer>");
    }

    #[test]
    fn bad_tables_are_usage_errors_naming_the_file() {
        let cases = [
            ("family = 3", "not a valid unit table"),
            (
                "[[family]]\nname='x'\nbase='a'\n[[family.unit]]\nname='a'\nplural='as'\nfactor=1.0\nsource='s'\n",
                "a conversion needs two",
            ),
            (
                "[[family]]\nname='x'\nbase='a'\n[[family.unit]]\nname='a'\nplural='as'\nfactor=1.0\nsource='s'\n[[family.unit]]\nname='b'\nplural='bs'\nfactor=-2.0\nsource='s'\n",
                "factor = -2",
            ),
            (
                "[[family]]\nname='x'\nbase='c'\n[[family.unit]]\nname='a'\nplural='as'\nfactor=1.0\nsource='s'\n[[family.unit]]\nname='b'\nplural='bs'\nfactor=2.0\nsource='s'\n",
                "base = 'c' is not one of its units",
            ),
            (
                "[[family]]\nname='x'\nbase='a'\ncolour='red'\n",
                "unknown field",
            ),
        ];
        for (text, expected) in cases {
            let err = UnitTable::from_toml(text, "my-units.toml").unwrap_err();
            let message = format!("{err:#}");
            assert!(message.contains("my-units.toml"), "{message}");
            assert!(message.contains(expected), "{message}");
            assert_eq!(kind_of(&err), Some(ErrorKind::Usage));
        }
    }

    #[test]
    fn impossible_request_is_an_error_not_a_hang() {
        let text = "[[family]]\nname='x'\nbase='a'\n[[family.unit]]\nname='a'\nplural='as'\nfactor=1.0\nsource='s'\n[[family.unit]]\nname='b'\nplural='bs'\nfactor=2.0\nsource='s'\n";
        let table = UnitTable::from_toml(text, "t").unwrap();
        // 2 directions x 999 mantissas x 3 decimal places < 10 000.
        let err = generate_questions(&table, 0, 10_000).unwrap_err();
        assert!(format!("{err}").contains("could be drawn"));
    }
}
