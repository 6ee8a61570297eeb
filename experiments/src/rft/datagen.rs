//! Rejection sampling: sample several completions per training question,
//! keep the verified-correct ones (deduplicated), and turn them into the
//! fine-tuning set. The model is reached only through [`Sampler`].

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::task::{format_training_text, Question};
use super::verify::{is_correct, parse_answer, ANSWER_CLOSE};
use crate::error::UserError;

/// Anything that continues prompts: the GPT implements it.
pub trait Sampler {
    /// For each prompt, `n` sampled continuations at `temperature`
    /// (the returned outer vector has one entry per prompt, in order).
    fn sample(&mut self, prompts: &[String], n: usize, temperature: f32) -> Vec<Vec<String>>;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenConfig {
    /// Completions sampled per question (HW3 starter: 10; RFT paper: 100).
    pub oversample: usize,
    /// HW3 starter: 0.6; RFT paper: 0.7.
    pub temperature: f32,
    /// Questions whose prompts go to the sampler in one call.
    pub batch_questions: usize,
    /// Distinct correct completions kept per question (HW3 keeps 1; the RFT
    /// paper keeps every distinct one).
    pub max_kept_per_question: usize,
    /// Seed of the sampler's random draws.
    #[serde(default)]
    pub seed: u64,
    /// Also require the worked computation to be the question's (operand,
    /// operation and factor, e.g. "so 2.5 * 1000"): a right answer reached
    /// through a wrong line is then not kept. Off = HW3's answer-only rule.
    #[serde(default)]
    pub check_reasoning: bool,
}

impl Default for DatagenConfig {
    fn default() -> Self {
        Self {
            oversample: 16,
            temperature: 0.7,
            batch_questions: 16,
            max_kept_per_question: 1,
            seed: 0,
            check_reasoning: false,
        }
    }
}

impl DatagenConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        for (key, value) in [
            ("oversample", self.oversample),
            ("batch_questions", self.batch_questions),
            ("max_kept_per_question", self.max_kept_per_question),
        ] {
            if value == 0 {
                return Err(UserError::usage(format!("rft datagen: {key} = 0"))
                    .with_fix(format!("set {key} to 1 or more"))
                    .into());
            }
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(UserError::usage(format!(
                "rft datagen: temperature = {}",
                self.temperature
            ))
            .with_fix(
                "use a temperature >= 0 (0 = greedy; 0.6-0.7 is usual for rejection sampling)",
            )
            .into());
        }
        Ok(())
    }
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
    /// Correct completions dropped because an identical one was already kept.
    pub duplicates: usize,
    /// Correct, distinct completions dropped by `max_kept_per_question`.
    pub over_limit: usize,
    /// Examples in the fine-tuning set.
    pub kept: usize,
    /// Questions with at least one kept completion (HW3 drops the others).
    pub questions_kept: usize,
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

/// The verified, distinct completions of one question, at most `max_kept`,
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
        if !seen.insert(normalized.clone()) {
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

/// Run rejection sampling over `questions`, `batch_questions` prompts per
/// sampler call.
pub fn build_dataset(
    sampler: &mut dyn Sampler,
    questions: &[Question],
    config: &DatagenConfig,
) -> anyhow::Result<Dataset> {
    config.validate()?;
    let mut stats = DatagenStats::default();
    let mut examples = Vec::new();
    for batch in questions.chunks(config.batch_questions) {
        let prompts: Vec<String> = batch.iter().map(Question::prompt).collect();
        let sampled = sampler.sample(&prompts, config.oversample, config.temperature);
        // A sampler that loses or invents prompts would misattribute
        // completions to questions: refuse rather than grade garbage.
        if sampled.len() != prompts.len() {
            return Err(UserError::failed(format!(
                "rft datagen: the sampler returned completions for {} prompts, asked for {}",
                sampled.len(),
                prompts.len()
            ))
            .into());
        }
        for (question, completions) in batch.iter().zip(&sampled) {
            examples.extend(select_completions(
                question,
                completions,
                config,
                &mut stats,
            ));
        }
    }
    Ok(Dataset { examples, stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rft::task::{generate_questions, UnitTable};

    /// TEST DOUBLE for the GPT (not for the verifier): replays scripted
    /// completions per prompt and records how it was called.
    /// Completions for (prompt, n).
    type Script = Box<dyn Fn(&str, usize) -> Vec<String>>;

    struct ScriptedSampler {
        script: Script,
        calls: Vec<(usize, usize, f32)>,
    }

    impl Sampler for ScriptedSampler {
        fn sample(&mut self, prompts: &[String], n: usize, temperature: f32) -> Vec<Vec<String>> {
            self.calls.push((prompts.len(), n, temperature));
            prompts.iter().map(|p| (self.script)(p, n)).collect()
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
        let kept = select_completions(question, &completions, &keep(10, false), &mut stats);
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
                duplicates: 1,
                over_limit: 0,
                kept: 2,
                questions_kept: 1,
            }
        );
        let mut stats = DatagenStats::default();
        assert_eq!(
            select_completions(question, &completions, &keep(1, false), &mut stats).len(),
            1
        );
        assert_eq!(stats.over_limit, 1);
        // With the reasoning check, "Roughly <answer>…" (no worked line) goes.
        let mut stats = DatagenStats::default();
        let kept = select_completions(question, &completions, &keep(10, true), &mut stats);
        assert_eq!(kept.len(), 1);
        assert_eq!(stats.wrong_reasoning, 1);
    }

    #[test]
    fn builds_a_set_in_batches_and_drops_unsolved_questions() {
        let questions = questions(10);
        let answers: std::collections::HashMap<String, f64> =
            questions.iter().map(|q| (q.prompt(), q.answer)).collect();
        // Solves questions with an even index into `questions`, fails others.
        let solved: HashSet<String> = questions.iter().step_by(2).map(|q| q.prompt()).collect();
        let mut sampler = ScriptedSampler {
            script: Box::new(move |prompt, n| {
                (0..n)
                    .map(|i| {
                        if solved.contains(prompt) && i % 2 == 0 {
                            format!("try {} <answer>{}</answer>", i % 4, answers[prompt])
                        } else {
                            "<answer>0.000001</answer>".to_string()
                        }
                    })
                    .collect()
            }),
            calls: Vec::new(),
        };
        let config = DatagenConfig {
            oversample: 6,
            temperature: 0.7,
            batch_questions: 4,
            max_kept_per_question: 5,
            seed: 0,
            check_reasoning: false,
        };
        let dataset = build_dataset(&mut sampler, &questions, &config).unwrap();
        assert_eq!(sampler.calls, vec![(4, 6, 0.7), (4, 6, 0.7), (2, 6, 0.7)]);
        let stats = dataset.stats;
        assert_eq!((stats.questions, stats.generated), (10, 60));
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
        let mut sampler = ScriptedSampler {
            script: Box::new(|_, _| Vec::new()),
            calls: Vec::new(),
        };
        struct Short;
        impl Sampler for Short {
            fn sample(&mut self, _: &[String], _: usize, _: f32) -> Vec<Vec<String>> {
                vec![Vec::new()]
            }
        }
        let questions = questions(3);
        let config = DatagenConfig::default();
        assert!(build_dataset(&mut sampler, &questions, &config).is_ok());
        let err = build_dataset(&mut Short, &questions, &config).unwrap_err();
        assert!(format!("{err}").contains("returned completions for 1 prompts, asked for 3"));
        let bad = DatagenConfig {
            batch_questions: 0,
            ..DatagenConfig::default()
        };
        let err = build_dataset(&mut sampler, &questions, &bad).unwrap_err();
        assert!(format!("{err:#}").contains("batch_questions = 0"));
    }
}
