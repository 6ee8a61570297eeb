//! Unit tests of what a round trains on (`finetune.train_on`, issue #42)
//! and of the distinct kept samples across rounds (`datagen.distinct`).

use super::round_set;
use crate::rft::config::{load_config, RftConfig, PRESETS};
use crate::rft::datagen::{DatagenStats, Example};
use crate::rft::metrics::Rounds;
use crate::rft::stages::DatagenRecord;

fn llama(overrides: &[&str]) -> RftConfig {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    load_config(PRESETS[1].1, "preset tiny-llama", &overrides)
        .unwrap()
        .science
}

fn record(completions: &[&str]) -> DatagenRecord {
    let examples = completions
        .iter()
        .map(|c| Example {
            question: "How many grams are in 2.5 kilograms?".into(),
            answer: 2500.0,
            completion: c.to_string(),
            text: String::new(),
        })
        .collect();
    DatagenRecord {
        stats: DatagenStats::default(),
        seconds: 1.0,
        samples_per_s: 1.0,
        tokens_per_s: 1.0,
        examples,
    }
}

#[test]
fn train_on_decides_whether_the_worked_answers_come_first() {
    let config = llama(&["datagen.distinct=equations"]);
    let round1 = record(&["so 2.5 * 1000 = 2500. <answer>2500</answer>"]);
    // Round 2 rewords round 1's path: by equations it is not new.
    let round2 = record(&[
        "2.5 x 1000 = 2500 grams <answer>2500</answer>",
        "so 2.5 * 10 = 25, 25 * 100 = 2500 <answer>2500</answer>",
    ]);
    let mut rounds = Rounds::new(true, config.datagen.distinct);
    rounds.add_samples(&round1);
    rounds.add_samples(&round2);
    let kept: Vec<&str> = rounds
        .kept()
        .iter()
        .map(|e| e.completion.as_str())
        .collect();
    assert_eq!(
        kept,
        [
            round1.examples[0].completion.as_str(),
            round2.examples[1].completion.as_str()
        ]
    );

    // From a base: worked answers plus the union, unless `kept` alone.
    let (worked, set) = round_set(&config, &rounds, &round2, true, 2).unwrap();
    assert!(worked);
    assert_eq!(set.len(), 2);
    let kept_only = llama(&["finetune.train_on=kept"]);
    let (worked, set) = round_set(&kept_only, &rounds, &round2, true, 2).unwrap();
    assert!(!worked);
    assert_eq!(set.len(), 2);
    // From scratch: the round's own samples, the worked answers on request.
    let (worked, set) = round_set(&config, &rounds, &round2, false, 2).unwrap();
    assert!(!worked);
    assert_eq!(set.len(), 2);
    let both = llama(&["finetune.train_on=worked_and_kept"]);
    assert!(round_set(&both, &rounds, &round2, false, 2).unwrap().0);

    // Nothing kept and nothing else to train on: exit 1 with the fix.
    let empty = Rounds::new(true, config.datagen.distinct);
    let none = record(&[]);
    let err = round_set(&kept_only, &empty, &none, true, 1).unwrap_err();
    assert!(format!("{err:#}").contains("finetune.train_on"), "{err:#}");
    assert_eq!(crate::error::exit_code_of(&err), 1);
    assert!(round_set(&config, &empty, &none, true, 1).is_ok());
}
