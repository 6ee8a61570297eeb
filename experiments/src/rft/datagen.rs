//! Rejection sampling: sample several completions per training question,
//! keep the verified-correct ones (deduplicated), and turn them into the
//! fine-tuning set. The model is reached only through [`Sampler`].
//!
//! How many rows one sampler call takes (`gen_batch`) is a hardware knob
//! (`envgen run --gen-batch N`), not science: every row draws from its own
//! seed, made from (datagen seed, round, question, sample), so the same
//! seed gives the same samples at any generation batch.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

pub use super::datagen_config::{DatagenConfig, Distinct, BATCH_QUESTIONS_GONE};
use super::equations::equations_hold;
use super::task::{format_training_text, Question};
use super::verify::{is_correct, parse_answer, ANSWER_CLOSE};
use crate::error::UserError;
use crate::sampling::Sampling;

/// Rows per generation call when neither `--gen-batch` nor the preset's
/// `[hardware] gen_batch` says: small enough for a CPU's memory (each row
/// holds its own key/value cache).
pub const DEFAULT_GEN_BATCH: usize = 64;

/// One row to continue: a prompt and the seed of this row's own draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    pub prompt: &'a str,
    pub seed: u64,
}

/// One sampled continuation and how many tokens the model generated for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub tokens: usize,
}

/// Anything that continues prompts: the GPT implements it.
pub trait Sampler {
    /// One continuation per row, in order, chosen by `sampling`. A row's
    /// continuation must depend only on its prompt and seed, never on the
    /// other rows of the call: callers batch rows for speed alone.
    fn sample(&mut self, rows: &[Row<'_>], sampling: &Sampling) -> Vec<Completion>;
}

/// The seed of sample `sample` of question `question` in `round`: a
/// SplitMix64 chain, so neighbouring indices get unrelated streams.
pub fn sample_seed(seed: u64, round: u32, question: usize, sample: usize) -> u64 {
    [u64::from(round), question as u64, sample as u64]
        .into_iter()
        .fold(splitmix64(seed), |h, v| splitmix64(h ^ v))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One fine-tuning example: a question with a completion the verifier accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub question: String,
    pub answer: f64,
    /// The kept completion, normalized (see [`normalize_completion`]).
    pub completion: String,
    /// Prompt + completion, ready for the language-model loss.
    pub text: String,
}

/// Bookkeeping of one datagen pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DatagenStats {
    pub questions: usize,
    /// Completions sampled in all.
    pub generated: usize,
    /// Completions whose answer the verifier accepted.
    pub correct: usize,
    /// Correct answers dropped because their worked computation was not the
    /// question's (`check_reasoning`).
    #[serde(default)]
    pub wrong_reasoning: usize,
    /// Correct answers dropped because an equation of theirs does not
    /// compute (`check_equations`).
    #[serde(default)]
    pub wrong_equations: usize,
    /// Correct completions dropped because one the same by `distinct` was
    /// already kept.
    pub duplicates: usize,
    /// Correct, distinct completions dropped by `max_kept_per_question`.
    pub over_limit: usize,
    /// Examples in the fine-tuning set.
    pub kept: usize,
    /// Questions with at least one kept completion (HW3 drops the others).
    pub questions_kept: usize,
    /// Tokens the model generated in all (absent in records from before).
    #[serde(default)]
    pub tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub examples: Vec<Example>,
    pub stats: DatagenStats,
}

/// The form a completion is compared and stored in: cut after the first
/// `</answer>` (whatever the model rambled on with is not trained on),
/// whitespace runs collapsed to one space, ends trimmed.
pub fn normalize_completion(completion: &str) -> String {
    let answered = match completion.find(ANSWER_CLOSE) {
        Some(at) => &completion[..at + ANSWER_CLOSE.len()],
        None => completion,
    };
    answered.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The verified, distinct (by `config.distinct`) completions of one question, at most `max_kept`,
/// in sampling order; adds its counts to `stats`.
pub fn select_completions(
    question: &Question,
    completions: &[String],
    config: &DatagenConfig,
    stats: &mut DatagenStats,
) -> Vec<Example> {
    let max_kept = config.max_kept_per_question;
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    stats.questions += 1;
    stats.generated += completions.len();
    for completion in completions {
        let correct = parse_answer(completion).is_some_and(|a| is_correct(a, question.answer));
        if !correct {
            continue;
        }
        stats.correct += 1;
        let normalized = normalize_completion(completion);
        if config.check_reasoning && !normalized.contains(question.computation()) {
            stats.wrong_reasoning += 1;
            continue;
        }
        if config.check_equations && !equations_hold(&normalized) {
            stats.wrong_equations += 1;
            continue;
        }
        if !seen.insert(config.distinct.key(&normalized)) {
            stats.duplicates += 1;
        } else if kept.len() == max_kept {
            stats.over_limit += 1;
        } else {
            kept.push(Example {
                question: question.text.clone(),
                answer: question.answer,
                text: format_training_text(&question.text, &normalized),
                completion: normalized,
            });
        }
    }
    stats.kept += kept.len();
    stats.questions_kept += usize::from(!kept.is_empty());
    kept
}

/// Run rejection sampling over `questions`: `oversample` rows per question
/// (row seeds from `config.seed`, `round`, question and sample index),
/// `gen_batch` rows per sampler call. `on_batch` sees the counts after
/// each call (progress).
pub fn build_dataset(
    sampler: &mut dyn Sampler,
    questions: &[Question],
    config: &DatagenConfig,
    round: u32,
    gen_batch: usize,
    on_batch: &mut dyn FnMut(&DatagenStats),
) -> anyhow::Result<Dataset> {
    config.validate()?;
    check_gen_batch(gen_batch)?;
    let n = config.oversample;
    let prompts: Vec<String> = questions.iter().map(Question::prompt).collect();
    // Question-major: a question's samples are consecutive, so each is
    // graded as soon as its last sample is back.
    let rows: Vec<(usize, usize)> = (0..questions.len())
        .flat_map(|q| (0..n).map(move |s| (q, s)))
        .collect();
    let mut stats = DatagenStats::default();
    let mut examples = Vec::new();
    let mut pending: Vec<String> = Vec::with_capacity(n);
    let mut question = 0;
    for chunk in rows.chunks(gen_batch) {
        let batch: Vec<Row> = chunk
            .iter()
            .map(|&(q, s)| Row {
                prompt: &prompts[q],
                seed: sample_seed(config.seed, round, q, s),
            })
            .collect();
        let sampled = sampler.sample(&batch, &config.sampling());
        // A sampler that loses or invents rows would misattribute
        // completions to questions: refuse rather than grade garbage.
        if sampled.len() != batch.len() {
            return Err(UserError::failed(format!(
                "rft datagen: the sampler returned {} completions, asked for {}",
                sampled.len(),
                batch.len()
            ))
            .into());
        }
        for completion in sampled {
            stats.tokens += completion.tokens;
            pending.push(completion.text);
            if pending.len() == n {
                examples.extend(select_completions(
                    &questions[question],
                    &pending,
                    config,
                    &mut stats,
                ));
                pending.clear();
                question += 1;
            }
        }
        on_batch(&stats);
    }
    Ok(Dataset { examples, stats })
}

/// Greedy completions of `prompts`, `gen_batch` rows per sampler call
/// (0 is taken as 1); `on_batch` sees how many are done after each call.
/// A row the sampler did not return counts as an empty (unanswered)
/// completion, so the result always has one entry per prompt.
pub fn greedy_completions(
    sampler: &mut dyn Sampler,
    prompts: &[String],
    gen_batch: usize,
    on_batch: &mut dyn FnMut(usize),
) -> Vec<Completion> {
    let mut out = Vec::with_capacity(prompts.len());
    for chunk in prompts.chunks(gen_batch.max(1)) {
        let rows: Vec<Row> = chunk.iter().map(|p| Row { prompt: p, seed: 0 }).collect();
        let mut sampled = sampler.sample(&rows, &Sampling::greedy());
        sampled.resize(
            rows.len(),
            Completion {
                text: String::new(),
                tokens: 0,
            },
        );
        out.extend(sampled);
        on_batch(out.len());
    }
    out
}

/// A generation batch of 0 rows is refused (exit 2) before any stage runs.
pub fn check_gen_batch(gen_batch: usize) -> anyhow::Result<()> {
    if gen_batch == 0 {
        return Err(UserError::usage("rft: generation batch = 0 rows")
            .with_fix("pass --gen-batch 1 or more (rows per generation call)")
            .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rft::task::{generate_questions, UnitTable};

    /// TEST DOUBLE for the GPT (not for the verifier): replays scripted
    /// completions per prompt and records how it was called.
    /// The completion of (prompt, how many times it was asked before).
    type Script = Box<dyn Fn(&str, usize) -> String>;

    struct ScriptedSampler {
        script: Script,
        asked: std::collections::HashMap<String, usize>,
        calls: Vec<(usize, f32)>,
        /// Tokens (bytes) handed out in all.
        tokens: usize,
    }

    impl ScriptedSampler {
        fn new(script: Script) -> Self {
            Self {
                script,
                asked: Default::default(),
                calls: Vec::new(),
                tokens: 0,
            }
        }
    }

    impl Sampler for ScriptedSampler {
        fn sample(&mut self, rows: &[Row<'_>], sampling: &Sampling) -> Vec<Completion> {
            self.calls.push((rows.len(), sampling.temperature));
            rows.iter()
                .map(|row| {
                    let i = self.asked.entry(row.prompt.to_string()).or_default();
                    let text = (self.script)(row.prompt, *i);
                    *i += 1;
                    self.tokens += text.len();
                    Completion {
                        tokens: text.len(),
                        text,
                    }
                })
                .collect()
        }
    }

    fn questions(count: usize) -> Vec<Question> {
        generate_questions(&UnitTable::builtin().unwrap(), 5, count).unwrap()
    }

    #[test]
    fn keeps_only_verified_completions_and_dedups() {
        let question = &questions(1)[0];
        let right = format!(
            "{} <answer>{}</answer>",
            question.reasoning, question.answer
        );
        let completions = vec![
            format!("{right} and then some rambling"),
            "I think <answer>-1</answer>".to_string(),
            "no idea".to_string(),
            // Same as the first after normalization (spacing, tail).
            format!("  {}\n\n", right.replace(' ', "   ")),
            format!("Roughly <answer>{}</answer>", question.answer * 1.01),
        ];
        let mut stats = DatagenStats::default();
        let keep = |max_kept_per_question, check_reasoning| DatagenConfig {
            max_kept_per_question,
            check_reasoning,
            ..DatagenConfig::default()
        };
        let (off, computation) = (false, true);
        let kept = select_completions(question, &completions, &keep(10, off), &mut stats);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].completion, normalize_completion(&right));
        assert!(!kept[0].completion.contains("rambling"));
        assert!(kept[0].text.starts_with(&question.prompt()));
        assert!(kept[1].completion.starts_with("Roughly"));
        assert_eq!(
            stats,
            DatagenStats {
                questions: 1,
                generated: 5,
                correct: 3,
                wrong_reasoning: 0,
                wrong_equations: 0,
                duplicates: 1,
                over_limit: 0,
                kept: 2,
                questions_kept: 1,
                tokens: 0,
            }
        );
        let mut stats = DatagenStats::default();
        assert_eq!(
            select_completions(question, &completions, &keep(1, off), &mut stats).len(),
            1
        );
        assert_eq!(stats.over_limit, 1);
        // With the reasoning check, "Roughly <answer>…" (no worked line) goes.
        let mut stats = DatagenStats::default();
        let kept = select_completions(question, &completions, &keep(10, computation), &mut stats);
        assert_eq!(kept.len(), 1);
        assert_eq!(stats.wrong_reasoning, 1);
    }

    /// Yuan et al. 2023 §4's two rules on hand-written paths: a right
    /// answer reached through a wrong equation is dropped, and paths that
    /// differ in wording but not in equations are one path.
    #[test]
    fn equations_are_checked_and_decide_distinctness() {
        let question = Question {
            text: "How many grams are in 2.5 kilograms?".into(),
            reasoning: "1 kilogram = 1000 grams, so 2.5 * 1000 = 2500.".into(),
            answer: 2500.0,
            family: "mass".into(),
        };
        let completions = [
            "1 kilogram = 1000 grams, so 2.5 * 1000 = 2500. <answer>2500</answer>",
            // Other words, the same equation: not a new path.
            "A kilogram is 1,000 grams; 2.5 x 1000 = 2500.0 <answer>2500</answer>",
            // The right answer after a wrong intermediate step.
            "so 2.5 * 100 = 250, and 250 * 10 = 2600 <answer>2500</answer>",
            // A new, right path.
            "so 2.5 * 10 = 25, and 25 * 100 = 2500 <answer>2500</answer>",
        ]
        .map(String::from);
        let config = |check_equations, distinct| DatagenConfig {
            max_kept_per_question: 10,
            check_equations,
            distinct,
            ..DatagenConfig::default()
        };
        let mut stats = DatagenStats::default();
        let strict = config(true, Distinct::Equations);
        let kept = select_completions(&question, &completions, &strict, &mut stats);
        let kept: Vec<&str> = kept.iter().map(|e| e.completion.as_str()).collect();
        assert_eq!(kept, [completions[0].as_str(), completions[3].as_str()]);
        assert_eq!(
            (stats.correct, stats.wrong_equations, stats.duplicates),
            (4, 1, 1)
        );
        // By text, without the check, all four are kept.
        let mut stats = DatagenStats::default();
        let loose = config(false, Distinct::Text);
        assert_eq!(
            select_completions(&question, &completions, &loose, &mut stats).len(),
            4
        );
        assert_eq!((stats.wrong_equations, stats.duplicates), (0, 0));
    }

    #[test]
    fn builds_a_set_in_batches_and_drops_unsolved_questions() {
        let questions = questions(10);
        let answers: std::collections::HashMap<String, f64> =
            questions.iter().map(|q| (q.prompt(), q.answer)).collect();
        // Solves questions with an even index into `questions`, fails others.
        let solved: HashSet<String> = questions.iter().step_by(2).map(|q| q.prompt()).collect();
        let mut sampler = ScriptedSampler::new(Box::new(move |prompt, i| {
            if solved.contains(prompt) && i % 2 == 0 {
                format!("try {} <answer>{}</answer>", i % 4, answers[prompt])
            } else {
                "<answer>0.000001</answer>".to_string()
            }
        }));
        let config = DatagenConfig {
            oversample: 6,
            max_kept_per_question: 5,
            seed: 0,
            check_reasoning: false,
            check_equations: false,
            // "try 0" and "try 2" have no equations: told apart by text.
            distinct: Distinct::Text,
            ..DatagenConfig::default()
        };
        let mut progress = Vec::new();
        let dataset = build_dataset(&mut sampler, &questions, &config, 1, 25, &mut |s| {
            progress.push((s.questions, s.generated))
        })
        .unwrap();
        // 60 rows, 25 per call; a question split over two calls is graded
        // when its last row is back.
        assert_eq!(sampler.calls, vec![(25, 0.7), (25, 0.7), (10, 0.7)]);
        assert_eq!(progress, vec![(4, 24), (8, 48), (10, 60)]);
        let stats = dataset.stats;
        assert_eq!((stats.questions, stats.generated), (10, 60));
        assert_eq!(stats.tokens, sampler.tokens);
        // Solved: i = 0, 2, 4 correct; "try 0" and "try 2" distinct, i = 4
        // repeats "try 0".
        assert_eq!((stats.correct, stats.duplicates, stats.kept), (15, 5, 10));
        assert_eq!(stats.questions_kept, 5);
        assert!(dataset
            .examples
            .iter()
            .all(|e| parse_answer(&e.completion).is_some_and(|a| is_correct(a, e.answer))));
    }

    #[test]
    fn a_sampler_returning_the_wrong_shape_is_refused() {
        let mut sampler = ScriptedSampler::new(Box::new(|_, _| String::new()));
        struct Short;
        impl Sampler for Short {
            fn sample(&mut self, _: &[Row<'_>], _: &Sampling) -> Vec<Completion> {
                Vec::new()
            }
        }
        let questions = questions(3);
        let config = DatagenConfig::default();
        let build = |sampler: &mut dyn Sampler, gen_batch| {
            build_dataset(sampler, &questions, &config, 1, gen_batch, &mut |_| {})
        };
        assert!(build(&mut sampler, 5).is_ok());
        let err = build(&mut Short, 5).unwrap_err();
        assert!(format!("{err}").contains("returned 0 completions, asked for 5"));
        let err = build(&mut sampler, 0).unwrap_err();
        assert!(format!("{err:#}").contains("--gen-batch"), "{err:#}");
        assert_eq!(crate::error::exit_code_of(&err), 2);
    }

    #[test]
    fn row_seeds_differ_by_round_question_and_sample() {
        let seeds: HashSet<u64> = (1..=2)
            .flat_map(|round| {
                (0..20).flat_map(move |q| (0..20).map(move |s| sample_seed(1, round, q, s)))
            })
            .collect();
        assert_eq!(seeds.len(), 2 * 20 * 20);
        assert_ne!(sample_seed(1, 1, 0, 0), sample_seed(2, 1, 0, 0));
    }
}
