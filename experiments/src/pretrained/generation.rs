//! How `envgen sample --model hf:DIR` decodes, decided as transformers'
//! `generate` decides it: the checkpoint's `generation_config.json`
//! (`do_sample`, `temperature`, `top_k`, `top_p`, `eos_token_id`) over
//! transformers' defaults, and what the caller asks for over both
//! (`GenerationMixin._prepare_generation_config` in
//! transformers/generation/utils.py, 5.24: the model's generation config,
//! then `_get_default_generation_params` for what it leaves unset, then the
//! call's keywords). Each setting remembers where it came from, for the
//! output to say.

use std::path::Path;

use serde_json::{json, Value};

use crate::error::UserError;
use crate::llama::config::{read_json, token_ids};
use crate::sampling::{Sampling, TRANSFORMERS_TOP_K};

/// The file transformers' `save_pretrained` writes beside config.json.
pub const FILE: &str = "generation_config.json";

/// The sampling keys a checkpoint's generation_config.json sets (None:
/// absent or null, as when the file is missing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointGeneration {
    pub do_sample: Option<bool>,
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    /// One id or a list (Llama 3: `[128001, 128008, 128009]`).
    pub eos_token_ids: Option<Vec<u32>>,
    /// config.json's `eos_token_id`, which generation_config.json's
    /// replaces when it has one.
    pub config_eos_token_ids: Option<Vec<u32>>,
}

/// Where a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    GenerationConfig,
    ConfigJson,
    TransformersDefault,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::GenerationConfig => FILE,
            Source::ConfigJson => "config.json",
            Source::TransformersDefault => "transformers default",
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setting<T> {
    pub value: T,
    pub from: Source,
}

/// What the caller asked for (`--temperature`, `--top-k`, `--top-p`).
/// A temperature asks for sampling (above 0) or greedy (0), as a
/// `generate(do_sample=…, temperature=…)` call says both.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
}

/// The decoding settings, each with its source.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoding {
    pub do_sample: Setting<bool>,
    pub temperature: Setting<f32>,
    pub top_k: Setting<usize>,
    pub top_p: Setting<f32>,
    pub eos_token_ids: Setting<Vec<u32>>,
}

impl CheckpointGeneration {
    /// The keys of `dir`'s generation_config.json and config.json's eos;
    /// all None without the files. A wrong value is a usage error naming
    /// the file, the key and the value.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let mut out = Self::default();
        let config = dir.join("config.json");
        if config.exists() {
            out.config_eos_token_ids = token_ids(&read_json(&config)?, "eos_token_id", &config)?;
        }
        let path = dir.join(FILE);
        if !path.exists() {
            return Ok(out);
        }
        let doc = read_json(&path)?;
        let wrong = |key: &str, expected: &str| -> anyhow::Error {
            UserError::usage(format!(
                "{}: `{key}` is {}, expected {expected}",
                path.display(),
                doc[key]
            ))
            .with_fix(format!(
                "correct or delete `{key}` in {FILE} (transformers' default is used without it)"
            ))
            .into()
        };
        out.do_sample = match &doc["do_sample"] {
            Value::Null => None,
            v => Some(
                v.as_bool()
                    .ok_or_else(|| wrong("do_sample", "true or false"))?,
            ),
        };
        out.temperature = match &doc["temperature"] {
            Value::Null => None,
            v => match v.as_f64() {
                Some(t) if t.is_finite() && t >= 0.0 => Some(t as f32),
                _ => return Err(wrong("temperature", "a number >= 0")),
            },
        };
        out.top_k = match &doc["top_k"] {
            Value::Null => None,
            v => Some(
                v.as_u64()
                    .map(|k| k as usize)
                    .ok_or_else(|| wrong("top_k", "an integer >= 0"))?,
            ),
        };
        out.top_p = match &doc["top_p"] {
            Value::Null => None,
            v => match v.as_f64() {
                Some(p) if p > 0.0 && p <= 1.0 => Some(p as f32),
                _ => return Err(wrong("top_p", "a number in (0, 1]")),
            },
        };
        out.eos_token_ids = token_ids(&doc, "eos_token_id", &path)?;
        Ok(out)
    }

    /// The settings of a `generate` call asking for `asked` on this
    /// checkpoint.
    pub fn decoding(&self, asked: &Asked) -> Decoding {
        fn pick<T: Copy>(flag: Option<T>, file: Option<T>, default: T) -> Setting<T> {
            match (flag, file) {
                (Some(value), _) => Setting {
                    value,
                    from: Source::Flag,
                },
                (None, Some(value)) => Setting {
                    value,
                    from: Source::GenerationConfig,
                },
                (None, None) => Setting {
                    value: default,
                    from: Source::TransformersDefault,
                },
            }
        }
        let eos_token_ids = match (&self.eos_token_ids, &self.config_eos_token_ids) {
            (Some(ids), _) => Setting {
                value: ids.clone(),
                from: Source::GenerationConfig,
            },
            (None, Some(ids)) => Setting {
                value: ids.clone(),
                from: Source::ConfigJson,
            },
            (None, None) => Setting {
                value: Vec::new(),
                from: Source::TransformersDefault,
            },
        };
        Decoding {
            // transformers' default is greedy (`"do_sample": False`).
            do_sample: pick(asked.temperature.map(|t| t > 0.0), self.do_sample, false),
            temperature: pick(asked.temperature, self.temperature, 1.0),
            top_k: pick(asked.top_k, self.top_k, TRANSFORMERS_TOP_K),
            top_p: pick(asked.top_p, self.top_p, 1.0),
            eos_token_ids,
        }
    }
}

impl Decoding {
    /// How the next token is chosen: greedy unless `do_sample` (a sampled
    /// temperature of 0 is greedy too).
    pub fn sampling(&self) -> Sampling {
        if !self.do_sample.value {
            return Sampling::greedy();
        }
        Sampling {
            temperature: self.temperature.value,
            top_k: self.top_k.value,
            top_p: self.top_p.value,
        }
    }

    /// `{"do_sample": {"value": true, "from": "generation_config.json"}, …}`.
    pub fn to_json(&self) -> Value {
        fn entry<T: serde::Serialize>(s: &Setting<T>) -> Value {
            json!({"value": s.value, "from": s.from.name()})
        }
        json!({
            "do_sample": entry(&self.do_sample),
            "temperature": entry(&self.temperature),
            "top_k": entry(&self.top_k),
            "top_p": entry(&self.top_p),
            "eos_token_ids": entry(&self.eos_token_ids),
        })
    }

    /// One line: `greedy (do_sample false: transformers default); eos [2]
    /// (generation_config.json)` or the sampling settings and theirs.
    pub fn describe(&self) -> String {
        let eos = format!(
            "eos {:?} ({})",
            self.eos_token_ids.value,
            self.eos_token_ids.from.name()
        );
        if !self.do_sample.value {
            return format!(
                "greedy (do_sample false: {}); {eos}",
                self.do_sample.from.name()
            );
        }
        format!(
            "sampling (do_sample true: {}), temperature {} ({}), top_k {} ({}), top_p {} ({}); {eos}",
            self.do_sample.from.name(),
            self.temperature.value,
            self.temperature.from.name(),
            self.top_k.value,
            self.top_k.from.name(),
            self.top_p.value,
            self.top_p.from.name(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_fills_what_the_flags_leave_and_defaults_are_greedy() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"eos_token_id": 7}"#).unwrap();
        let none = CheckpointGeneration::read(dir.path()).unwrap();
        let d = none.decoding(&Asked::default());
        assert_eq!(d.sampling(), Sampling::greedy());
        assert_eq!(d.do_sample.from, Source::TransformersDefault);
        assert_eq!(
            (d.eos_token_ids.value.as_slice(), d.eos_token_ids.from),
            (&[7u32][..], Source::ConfigJson)
        );
        std::fs::write(
            dir.path().join(FILE),
            r#"{"do_sample": true, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [2, 5]}"#,
        )
        .unwrap();
        let file = CheckpointGeneration::read(dir.path()).unwrap();
        let d = file.decoding(&Asked::default());
        assert_eq!(
            d.sampling(),
            Sampling {
                temperature: 0.6,
                top_k: 50,
                top_p: 0.9
            }
        );
        assert_eq!(d.top_k.from, Source::TransformersDefault);
        assert_eq!(d.top_p.from, Source::GenerationConfig);
        assert_eq!(d.eos_token_ids.value, vec![2, 5]);
        // A flag wins: temperature 0 is greedy whatever the file says.
        let asked = Asked {
            temperature: Some(0.0),
            ..Default::default()
        };
        assert_eq!(file.decoding(&asked).sampling(), Sampling::greedy());
        let asked = Asked {
            top_k: Some(3),
            ..Default::default()
        };
        let d = file.decoding(&asked);
        assert_eq!((d.top_k.value, d.top_k.from), (3, Source::Flag));
        assert!(d.describe().contains("top_k 3 (flag)"), "{}", d.describe());
        assert_eq!(d.to_json()["top_p"]["from"], FILE);
    }

    #[test]
    fn a_wrong_value_names_the_file_key_and_value() {
        let dir = tempfile::tempdir().unwrap();
        for (text, key) in [
            (r#"{"top_p": 1.5}"#, "top_p"),
            (r#"{"temperature": -1}"#, "temperature"),
            (r#"{"do_sample": "yes"}"#, "do_sample"),
            (r#"{"top_k": 2.5}"#, "top_k"),
        ] {
            std::fs::write(dir.path().join(FILE), text).unwrap();
            let e = CheckpointGeneration::read(dir.path()).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&e), 2);
            let message = format!("{e:#}");
            assert!(message.contains(FILE) && message.contains(key), "{message}");
        }
    }
}
