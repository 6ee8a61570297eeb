//! The user's profile file (`envgen tune` writes it, `envgen run` reads it
//! first): where it is, and recording a measurement in it. The file says
//! "Edit freely", so a measurement is edited into the user's text with
//! `toml_edit` — their comments, order and formatting stay; only the
//! measured profile's `micro_batch` and `measured` entries change (issue
//! #44: the file was rewritten from the parsed values, comments lost).

use std::path::{Path, PathBuf};

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

use super::{HardwareProfile, Measurement, ProfilesFile};
use crate::error::{Result, UserError};

/// The user's profile file: `$ENVGEN_CONFIG_DIR/profiles.toml`, else
/// `$XDG_CONFIG_HOME/envgen/profiles.toml`, else
/// `~/.config/envgen/profiles.toml` (`None` without any of these).
pub fn user_file() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = var("ENVGEN_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| var("XDG_CONFIG_HOME").map(|d| PathBuf::from(d).join("envgen")))
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config").join("envgen")))?;
    Some(dir.join("profiles.toml"))
}

const USER_FILE_HEADER: &str = "\
# envgen hardware profiles of this user, read before the ones built into
# envgen (env/profiles.toml in its sources). `envgen tune` writes them:
# each micro_batch entry was measured on this machine, see `measured`.
# Edit freely; the format is env/profiles.toml's.
";

/// Record a measurement in the user profile file at `path`: in the
/// profile called `template.name` (created from `template` when the file
/// has none), set the micro-batch of `key` ("experiment/preset") and keep
/// the measurement next to it. Everything else in the file stays as written.
pub fn record_measurement(
    path: &Path,
    template: &HardwareProfile,
    key: &str,
    measurement: Measurement,
) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(
                UserError::environment(format!("cannot read {}: {e}", path.display())).into(),
            )
        }
    };
    let edited = with_measurement(
        &text,
        &path.display().to_string(),
        template,
        key,
        &measurement,
    )?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| UserError::environment(format!("cannot create {}: {e}", dir.display())))?;
    }
    envgen_experiments::fsutil::write_atomic(path, edited.as_bytes())?;
    Ok(())
}

/// `text` (a profile file, or empty for a new one) with the measurement
/// recorded; `origin` names the file in errors.
fn with_measurement(
    text: &str,
    origin: &str,
    template: &HardwareProfile,
    key: &str,
    measurement: &Measurement,
) -> Result<String> {
    let unreadable = |e: &dyn std::fmt::Display| {
        UserError::usage(format!("{origin}: {e}"))
            .with_fix("fix or delete the file, then run envgen tune again")
    };
    // A file `envgen run` could not read back is refused, not edited further.
    toml::from_str::<ProfilesFile>(text).map_err(|e| unreadable(&e))?;
    let mut doc: DocumentMut = text.parse().map_err(|e| unreadable(&e))?;
    let new_file = text.trim().is_empty();
    // Where new tables go in the text: a new profile after everything, a
    // new entry at the end of its profile's section (toml_edit prints
    // tables by position, then in the order they were added).
    let end_of_file = last_position(doc.as_table()) + 1;
    let profiles = doc
        .entry("profile")
        .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()))
        .as_array_of_tables_mut()
        .ok_or_else(|| unreadable(&"`profile` is not an array of [[profile]] tables"))?;
    let named = |t: &Table| t.get("name").and_then(Item::as_str) == Some(template.name.as_str());
    let found = profiles.iter().position(named);
    let index = match found {
        Some(i) => i,
        None => {
            let mut profile = table_of(template)?;
            place_at(&mut profile, end_of_file);
            if new_file {
                profile
                    .decor_mut()
                    .set_prefix(format!("{USER_FILE_HEADER}\n"));
            }
            profiles.push(profile);
            profiles.len() - 1
        }
    };
    let profile = profiles.get_mut(index).expect("found or just pushed");
    let section_end = last_position(profile);
    let micro_batch =
        sub_table(profile, "micro_batch", false, section_end).map_err(|e| unreadable(&e))?;
    set_keeping_comment(micro_batch, key, measurement.micro_batch as i64);
    let measured = sub_table(profile, "measured", true, section_end).map_err(|e| unreadable(&e))?;
    let mut entry = table_of(measurement)?;
    place_at(&mut entry, section_end);
    measured.insert(key, Item::Table(entry));
    Ok(doc.to_string())
}

/// The largest position of `table` and the tables under it.
fn last_position(table: &Table) -> usize {
    let mut last = table.position().unwrap_or(0);
    for (_, item) in table.iter() {
        match item {
            Item::Table(t) => last = last.max(last_position(t)),
            Item::ArrayOfTables(array) => {
                for t in array.iter() {
                    last = last.max(last_position(t));
                }
            }
            _ => {}
        }
    }
    last
}

/// Give `table` and every table under it the position `at`.
fn place_at(table: &mut Table, at: usize) {
    table.set_position(at);
    for (_, item) in table.iter_mut() {
        match item {
            Item::Table(t) => place_at(t, at),
            Item::ArrayOfTables(array) => {
                for t in array.iter_mut() {
                    place_at(t, at);
                }
            }
            _ => {}
        }
    }
}

/// `value` as a TOML table, through the same serde mapping `toml` reads.
fn table_of<T: serde::Serialize>(value: &T) -> Result<Table> {
    let text = toml::to_string(value).map_err(|e| anyhow::anyhow!("{e}"))?;
    let doc: DocumentMut = text.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(doc.as_table().clone())
}

/// The table `name` of `profile` (a `[profile.name]` section or an inline
/// `name = { … }`), made when absent; `implicit`: no header of its own
/// when it only holds tables (`[profile.measured."gpt2/tiny"]`).
fn sub_table<'a>(
    profile: &'a mut Table,
    name: &str,
    implicit: bool,
    at: usize,
) -> std::result::Result<&'a mut dyn toml_edit::TableLike, String> {
    profile
        .entry(name)
        .or_insert_with(|| {
            let mut table = Table::new();
            table.set_implicit(implicit);
            table.set_position(at);
            Item::Table(table)
        })
        .as_table_like_mut()
        .ok_or_else(|| format!("`{name}` of a [[profile]] is not a table"))
}

/// `table[key] = value`, keeping the comment after an existing value.
fn set_keeping_comment(table: &mut dyn toml_edit::TableLike, key: &str, value: i64) {
    match table.get_mut(key).and_then(Item::as_value_mut) {
        Some(old) => {
            let decor = old.decor().clone();
            *old = toml_edit::Value::from(value);
            *old.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::value(value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::{Match, Precision, ProfileBackend, Trial};

    fn cpu_template() -> HardwareProfile {
        HardwareProfile {
            name: "probed-cpu".into(),
            matches: Match {
                cpu: true,
                ..Match::default()
            },
            backend: ProfileBackend::Cpu,
            precision: Precision::Fp32,
            micro_batch: Default::default(),
            gen_batch: Default::default(),
            slurm: None,
            measured: Default::default(),
        }
    }

    fn measurement(micro_batch: usize) -> Measurement {
        Measurement {
            micro_batch,
            steps_per_s: 2.5,
            peak_memory_mib: None,
            precision: Precision::Fp32,
            device: "cpu".into(),
            memory_limit: None,
            measured_at: "2026-11-27T20:00:00Z".into(),
            trials: vec![Trial {
                micro_batch,
                steps_per_s: Some(2.5),
                peak_memory_mib: None,
                out_of_memory: false,
            }],
        }
    }

    const EDITED_BY_HAND: &str = r#"# my notes: the A100 box in room 3
# (keep this profile, ops asked)

[[profile]]
name = "probed-cpu"   # what tune measured
backend = "cpu"
precision = "fp32"
match = { cpu = true }

[profile.micro_batch]
"gpt2/tiny" = 4 # halved by hand: the box is shared
"hrm-sudoku/tiny" = 8

# a profile of my own, written by hand
[[profile]]
name = "mine"
backend = "cpu"
precision = "fp32"
[profile.match]
cpu = true
"#;

    #[test]
    fn a_measurement_keeps_the_users_comments_and_other_entries() {
        let text = with_measurement(
            EDITED_BY_HAND,
            "f",
            &cpu_template(),
            "gpt2/tiny",
            &measurement(16),
        )
        .unwrap();
        for kept in [
            "# my notes: the A100 box in room 3",
            "# (keep this profile, ops asked)",
            "name = \"probed-cpu\"   # what tune measured",
            "\"hrm-sudoku/tiny\" = 8",
            "# a profile of my own, written by hand",
            "match = { cpu = true }",
        ] {
            assert!(text.contains(kept), "lost {kept:?}:\n{text}");
        }
        assert!(
            text.contains("\"gpt2/tiny\" = 16 # halved by hand: the box is shared"),
            "{text}"
        );
        // What `envgen run` reads back: the new micro-batch, the measurement,
        // both profiles.
        let file: ProfilesFile = toml::from_str(&text).unwrap();
        assert_eq!(file.profile.len(), 2, "{text}");
        let probed = &file.profile[0];
        assert_eq!(probed.micro_batch["gpt2/tiny"], 16);
        assert_eq!(probed.micro_batch["hrm-sudoku/tiny"], 8);
        assert_eq!(probed.measured["gpt2/tiny"], measurement(16));
        assert_eq!(file.profile[1].name, "mine");
        // Measuring again replaces the entry, keeping the rest.
        let again =
            with_measurement(&text, "f", &cpu_template(), "gpt2/tiny", &measurement(8)).unwrap();
        let file: ProfilesFile = toml::from_str(&again).unwrap();
        assert_eq!(file.profile[0].measured["gpt2/tiny"].micro_batch, 8);
        assert!(
            again.contains("# my notes: the A100 box in room 3"),
            "{again}"
        );
    }

    #[test]
    fn a_new_file_gets_the_header_and_the_profile() {
        let text =
            with_measurement("", "f", &cpu_template(), "gpt2/tiny", &measurement(4)).unwrap();
        assert!(text.starts_with(USER_FILE_HEADER), "{text}");
        let file: ProfilesFile = toml::from_str(&text).unwrap();
        assert_eq!(file.profile[0], {
            let mut p = cpu_template();
            p.micro_batch.insert("gpt2/tiny".into(), 4);
            p.measured.insert("gpt2/tiny".into(), measurement(4));
            p
        });
    }

    #[test]
    fn a_file_envgen_cannot_read_is_refused_not_overwritten() {
        let err = with_measurement("profile = 3\n", "f", &cpu_template(), "k", &measurement(1))
            .unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2);
        assert!(crate::error::render(&err).contains("fix or delete the file"));
    }
}
