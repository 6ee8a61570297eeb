//! Unit tests of the rft config keys of issue #42: `finetune.epochs`,
//! `[pretrain] skip`, `finetune.train_on`, `datagen.check_equations` /
//! `distinct`, and LoRA's `"all-linear"`.

use crate::engine::config::{config_hash, to_canonical_toml};
use crate::error::exit_code_of;
use crate::lora::Target;
use crate::rft::config::{load_config, RftConfig, TrainOn, PRESETS};
use crate::rft::datagen::Distinct;

/// Preset `index`'s text with `edit` applied to its TOML tree.
fn edited(index: usize, edit: impl FnOnce(&mut toml::Table)) -> String {
    let mut table: toml::Table = toml::from_str(PRESETS[index].1).unwrap();
    edit(&mut table);
    toml::to_string(&table).unwrap()
}

fn table<'a>(t: &'a mut toml::Table, path: &[&str]) -> &'a mut toml::Table {
    path.iter()
        .fold(t, |t, key| t[*key].as_table_mut().unwrap())
}

fn load(text: &str, overrides: &[&str]) -> anyhow::Result<RftConfig> {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Ok(load_config(text, "test.toml", &overrides)?.science)
}

/// Its config.toml reads back to the same config and hash.
fn round_trips(config: &RftConfig) -> String {
    let text = to_canonical_toml(config).unwrap();
    let back = load(&text, &[]).unwrap();
    assert_eq!(&back, config, "{text}");
    assert_eq!(config_hash(&back).unwrap(), config_hash(config).unwrap());
    text
}

#[test]
fn epochs_derive_stage_c_steps_and_exclude_fixed_steps() {
    let text = edited(0, |t| {
        table(t, &["finetune", "train"]).remove("steps");
        table(t, &["finetune"]).insert("epochs".into(), 3.into());
    });
    let config = load(&text, &[]).unwrap();
    let batch = config.finetune.train.batch_size as u64;
    for examples in [1usize, 7, 100, 1001] {
        let steps = config.finetune.steps_for(examples);
        let rows = examples as u64 * 3;
        // Rounded up: every row of 3 epochs fits, one step fewer would not.
        assert!(
            steps * batch >= rows && (steps - 1) * batch < rows,
            "{examples}: {steps}"
        );
    }
    let written = round_trips(&config);
    assert!(written.contains("epochs = 3"), "{written}");
    // Fixed steps stay what they were.
    let fixed = load(PRESETS[0].1, &[]).unwrap();
    assert_eq!(fixed.finetune.steps_for(5), fixed.finetune.train.steps);

    let both = load(PRESETS[0].1, &["finetune.epochs=3"]).unwrap_err();
    let message = format!("{both:#}");
    assert!(
        message.contains("finetune.epochs = 3 and finetune.train.steps"),
        "{message}"
    );
    assert!(message.contains("fix:"), "{message}");
    assert_eq!(exit_code_of(&both), 2);
    let neither = load(&text, &["finetune.epochs=0"]).unwrap_err();
    assert!(
        format!("{neither:#}").contains("finetune.epochs = 0"),
        "{neither:#}"
    );
    let no_steps = edited(0, |t| {
        table(t, &["finetune", "train"]).remove("steps");
    });
    let err = load(&no_steps, &[]).unwrap_err();
    assert!(
        format!("{err:#}").contains("finetune.train.steps"),
        "{err:#}"
    );
}

#[test]
fn pretrain_skip_needs_a_checkpoint_and_reads_back() {
    let skip = |index| {
        edited(index, |t| {
            let mut pretrain = toml::Table::new();
            pretrain.insert("skip".into(), true.into());
            t.insert("pretrain".into(), pretrain.into());
        })
    };
    let config = load(&skip(1), &["finetune.train_on=\"kept\""]).unwrap();
    assert_eq!(config.pretrain, None);
    assert_eq!(config.finetune.train_on, Some(TrainOn::Kept));
    let written = round_trips(&config);
    assert!(written.contains("[pretrain]\nskip = true"), "{written}");
    // From scratch there is nothing to sample without stage (a).
    let err = load(&skip(0), &[]).unwrap_err();
    assert!(
        format!("{err:#}").contains("pretrain.skip = true"),
        "{err:#}"
    );
    assert_eq!(exit_code_of(&err), 2);
    // Skipping and configuring stage (a) at once is refused.
    let err = load(PRESETS[1].1, &["pretrain.skip=true"]).unwrap_err();
    assert!(
        format!("{err:#}").contains("pretrain.skip = true, but"),
        "{err:#}"
    );
    assert_eq!(exit_code_of(&err), 2);
    // Configs that say nothing keep their config.toml (and hash): no key.
    let plain = to_canonical_toml(&load(PRESETS[1].1, &[]).unwrap()).unwrap();
    assert!(
        !plain.contains("skip") && !plain.contains("train_on"),
        "{plain}"
    );
}

#[test]
fn check_equations_and_distinct_are_set_by_name_and_hash_as_before_when_off() {
    let config = load(PRESETS[0].1, &[]).unwrap();
    let written = to_canonical_toml(&config).unwrap();
    assert!(!written.contains("check_equations"), "{written}");
    let paper = load(
        PRESETS[0].1,
        &["datagen.check_equations=true", "datagen.distinct=equations"],
    )
    .unwrap();
    assert!(paper.datagen.check_equations);
    assert_eq!(paper.datagen.distinct, Distinct::Equations);
    assert!(round_trips(&paper).contains("check_equations = true"));
    // Unwritten, `distinct` is the paper's.
    let unwritten = edited(0, |t| {
        table(t, &["datagen"]).remove("distinct");
    });
    assert_eq!(
        load(&unwritten, &[]).unwrap().datagen.distinct,
        Distinct::Equations
    );
    let err = load(PRESETS[0].1, &["datagen.distinct=words"]).unwrap_err();
    assert_eq!(exit_code_of(&err), 2, "{err:#}");
}

#[test]
fn all_linear_names_every_linear_layer_of_the_family() {
    let config = load(
        PRESETS[1].1,
        &[
            "finetune.mode=lora",
            "finetune.lora={rank=4, alpha=16, targets=\"all-linear\"}",
        ],
    )
    .unwrap();
    let lora = config.finetune.adapters().unwrap();
    assert_eq!(lora.targets, Target::LLAMA.to_vec());
    assert_eq!(lora.scale(), 4.0);
    round_trips(&config);
    let err = load(
        PRESETS[1].1,
        &["finetune.mode=lora", "finetune.lora={targets=\"all\"}"],
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("all-linear"), "{err:#}");
    assert_eq!(exit_code_of(&err), 2);
}
