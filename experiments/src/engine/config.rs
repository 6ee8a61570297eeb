//! Science configs: TOML in, typed struct out, `--set` overrides, hashing.
//!
//! A config file may carry a `[hardware]` table (hints such as the
//! micro-batch or the generation batch that fit a typical machine). It is split off before anything
//! else: the science config alone is what `config.toml` holds and
//! `config_hash` hashes, so the same science hashes the same on any machine.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::UserError;

/// The iteration-based training loop's knobs (shared by every experiment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Optimizer steps. May be left out only where an experiment derives
    /// them (rft's `finetune.epochs`); elsewhere a missing or 0 value is
    /// refused by [`TrainConfig::validate`]. Unwritten when 0, so that a
    /// derived stage's config.toml reads back the same.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps: u64,
    /// Global batch in rows (sequences/samples) per optimizer step, whatever
    /// the micro-batch: micro_batch × grad_accum = batch_size.
    pub batch_size: usize,
    /// Evaluate every N steps (and after the last step).
    pub eval_every: u64,
    /// Micro-batches of validation data per evaluation.
    pub eval_batches: usize,
    /// Write a checkpoint every N steps (and at the end); 0 = only at the end.
    #[serde(default)]
    pub checkpoint_every: u64,
    /// Seed of initialization and data order (a pure function of (seed, step)).
    pub seed: u64,
}

/// AdamW and the learning-rate schedule (GPT-2 recipe defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    pub lr: f64,
    /// Linear warmup steps, then cosine decay to `min_lr_frac * lr` at the last step.
    pub warmup_steps: u64,
    #[serde(default = "default_min_lr_frac")]
    pub min_lr_frac: f64,
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    #[serde(default = "default_beta2")]
    pub beta2: f64,
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// Applied to parameters with 2 or more dimensions only.
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f64,
    /// Global gradient-norm clipping threshold; 0 disables.
    #[serde(default = "default_grad_clip")]
    pub grad_clip: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TrainConfig {
    /// What serde cannot say: a run of zero steps or an empty batch trains
    /// nothing, and would still end "completed". `origin` is the config's file or preset, `key` the table's name.
    pub fn validate(&self, origin: &str, key: &str) -> Result<(), UserError> {
        for (field, value) in [
            ("steps", self.steps),
            ("batch_size", self.batch_size as u64),
            ("eval_every", self.eval_every),
            ("eval_batches", self.eval_batches as u64),
        ] {
            if value == 0 {
                // `steps` may be left out (serde's default 0): say so.
                let shown = if field == "steps" {
                    "0 (or not written)"
                } else {
                    "0"
                };
                return Err(invalid(
                    origin,
                    key,
                    field,
                    shown,
                    "use a value of at least 1",
                ));
            }
        }
        Ok(())
    }
}

impl OptimConfig {
    /// What serde cannot say: every number finite and in the range AdamW and
    /// the schedule are defined for. A NaN or negative learning rate trains
    /// garbage that would still end "completed". `origin` is the config's file or preset, `key` the table's name.
    pub fn validate(&self, origin: &str, key: &str) -> Result<(), UserError> {
        use Bound::*;
        check_ranges(
            origin,
            key,
            &[
                (
                    "lr",
                    self.lr,
                    Positive,
                    "a positive learning rate, e.g. 6e-4",
                ),
                (
                    "min_lr_frac",
                    self.min_lr_frac,
                    Fraction,
                    "a fraction of lr in [0, 1]",
                ),
                ("beta1", self.beta1, Beta, "a value in [0, 1), e.g. 0.9"),
                ("beta2", self.beta2, Beta, "a value in [0, 1), e.g. 0.95"),
                (
                    "eps",
                    self.eps,
                    Positive,
                    "a small positive value, e.g. 1e-8",
                ),
                (
                    "weight_decay",
                    self.weight_decay,
                    NonNegative,
                    "0 or a positive value, e.g. 0.1",
                ),
                (
                    "grad_clip",
                    self.grad_clip,
                    NonNegative,
                    "0 (off) or a positive norm, e.g. 1.0",
                ),
            ],
        )
    }
}

/// The range an optimizer or schedule number must be in (always finite
/// too: NaN and infinity are refused whatever the bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// > 0: learning rates, epsilons.
    Positive,
    /// >= 0: weight decay, clipping (0 = off).
    NonNegative,
    /// [0, 1]: fractions of a learning rate.
    Fraction,
    /// [0, 1): Adam's betas (1 never forgets, the moments never move).
    Beta,
}

impl Bound {
    pub fn holds(self, value: f64) -> bool {
        value.is_finite()
            && match self {
                Bound::Positive => value > 0.0,
                Bound::NonNegative => value >= 0.0,
                Bound::Fraction => (0.0..=1.0).contains(&value),
                Bound::Beta => (0.0..1.0).contains(&value),
            }
    }
}

/// The first of `checks` — (field, value, bound, what to give instead) —
/// whose value is out of its bound, as a usage error naming
/// `origin: key.field = value` and the `--set` that fixes it. Every
/// experiment's optimizer settings go through here (gpt2, rft, HRM).
pub fn check_ranges(
    origin: &str,
    key: &str,
    checks: &[(&str, f64, Bound, &str)],
) -> Result<(), UserError> {
    for (field, value, bound, fix) in checks {
        if !bound.holds(*value) {
            return Err(invalid(origin, key, field, &value.to_string(), fix));
        }
    }
    Ok(())
}

fn invalid(origin: &str, key: &str, field: &str, value: &str, fix: &str) -> UserError {
    UserError::usage(format!("{origin}: {key}.{field} = {value} is invalid"))
        .with_fix(format!("--set {key}.{field}=<{fix}>"))
}

fn default_min_lr_frac() -> f64 {
    0.1
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.95
}
fn default_eps() -> f64 {
    1e-8
}
fn default_weight_decay() -> f64 {
    0.1
}
fn default_grad_clip() -> f64 {
    1.0
}

/// Hardware hints a preset may carry; never part of the science config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareHint {
    #[serde(default)]
    pub micro_batch: Option<usize>,
    /// Rows per generation call, for experiments that sample (rft).
    #[serde(default)]
    pub gen_batch: Option<usize>,
}

/// A resolved science config plus the hardware hint that came with it.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    pub science: T,
    pub hardware: HardwareHint,
}

/// Parse `text` (from `origin`, a file name or `preset NAME`), apply `--set`
/// overrides, and deserialize into `T` with every default filled in.
pub fn load<T: Serialize + DeserializeOwned>(
    text: &str,
    origin: &str,
    overrides: &[String],
) -> anyhow::Result<Loaded<T>> {
    let mut tree: toml::Table = toml::from_str(text).map_err(|e| {
        UserError::usage(format!("{origin}: not valid TOML: {e}"))
            .with_fix("fix the TOML syntax at the position shown")
    })?;
    let hardware: HardwareHint = match tree.remove("hardware") {
        Some(value) => value.try_into().map_err(|e| {
            UserError::usage(format!("{origin}: [hardware]: {e}"))
                .with_fix("the [hardware] table only knows `micro_batch` and `gen_batch`")
        })?,
        None => HardwareHint::default(),
    };
    // Round-trip through T first so defaults appear in the tree: then an
    // override of a defaulted key is type-checked like any other.
    let typed: T = toml::Value::Table(tree).try_into().map_err(|e| {
        schema_error(
            origin,
            &e,
            "compare with `envgen experiments describe EXP --json`",
        )
    })?;
    let mut value = toml::Value::try_from(&typed)?;
    for item in overrides {
        apply_override(&mut value, item)?;
    }
    let science: T = value.try_into().map_err(|e| {
        schema_error(
            &format!("{origin} with --set {}", overrides.join(" --set ")),
            &e,
            "check the overridden keys against `envgen experiments describe EXP --json`",
        )
    })?;
    Ok(Loaded { science, hardware })
}

/// Marks the fix inside a config type's own deserialization error (e.g. a
/// removed key refused with its replacement): `"WHAT Fix: FIX"`.
pub const FIX_MARKER: &str = " Fix: ";

/// A config that does not fit its schema (exit 2); a message that carries
/// its own fix ([`FIX_MARKER`]) gets that fix instead of `generic_fix`.
fn schema_error(origin: &str, e: &toml::de::Error, generic_fix: &str) -> anyhow::Error {
    match e.message().split_once(FIX_MARKER) {
        Some((what, fix)) => UserError::usage(format!("{origin}: {what}")).with_fix(fix.trim()),
        None => UserError::usage(format!("{origin}: {e}")).with_fix(generic_fix),
    }
    .into()
}

/// Apply one `a.b.c=value` override to a TOML tree. An existing key keeps its
/// type (an integer is accepted where a float is expected); a key the tree
/// lacks (an optional field left unset) is inserted and the typed
/// deserialization afterwards rejects it if the schema does not know it.
pub fn apply_override(tree: &mut toml::Value, item: &str) -> anyhow::Result<()> {
    let Some((key, raw)) = item.split_once('=') else {
        return Err(
            UserError::usage(format!("--set {item}: expected KEY=VALUE"))
                .with_fix("write e.g. --set optim.lr=3e-4")
                .into(),
        );
    };
    let (key, raw) = (key.trim(), raw.trim());
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(
            UserError::usage(format!("--set {item}: empty key segment in `{key}`"))
                .with_fix("write dotted keys such as train.steps")
                .into(),
        );
    }
    let mut node = tree;
    for (depth, part) in parts.iter().enumerate() {
        let last = depth + 1 == parts.len();
        let table = node.as_table_mut().ok_or_else(|| {
            UserError::usage(format!(
                "--set {item}: `{}` is not a table",
                parts[..depth].join(".")
            ))
            .with_fix("override a leaf key")
        })?;
        if last {
            let new = match table.get(*part) {
                Some(old) => typed_like(old, raw).ok_or_else(|| {
                    UserError::usage(format!(
                        "--set {key}={raw}: expected {}, got `{raw}`",
                        type_name(old)
                    ))
                    .with_fix(format!("give `{key}` a value of type {}", type_name(old)))
                })?,
                // Absent: an optional field left unset, or a typo; the typed
                // deserialization afterwards rejects unknown keys by name.
                None => guess_value(raw),
            };
            table.insert((*part).to_string(), new);
            return Ok(());
        }
        // A table the config leaves out (an optional one such as gpt2's
        // `[eval]`) is made; a misspelt one is refused by name, with the
        // keys, by the typed deserialization afterwards.
        node = table
            .entry((*part).to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    }
    Ok(())
}

fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

fn typed_like(old: &toml::Value, raw: &str) -> Option<toml::Value> {
    use toml::Value as V;
    match old {
        V::String(_) => Some(V::String(raw.to_string())),
        V::Integer(_) => raw.replace('_', "").parse().ok().map(V::Integer),
        V::Float(_) => raw.replace('_', "").parse().ok().map(V::Float),
        V::Boolean(_) => raw.parse().ok().map(V::Boolean),
        V::Array(_) | V::Table(_) | V::Datetime(_) => {
            let wrapped: toml::Table = toml::from_str(&format!("v = {raw}")).ok()?;
            let value = wrapped.get("v")?.clone();
            (std::mem::discriminant(&value) == std::mem::discriminant(old)).then_some(value)
        }
    }
}

fn guess_value(raw: &str) -> toml::Value {
    let parsed: Option<toml::Table> = toml::from_str(&format!("v = {raw}")).ok();
    parsed
        .and_then(|t| t.get("v").cloned())
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// The canonical text of a science config (what `config.toml` holds).
pub fn to_canonical_toml<T: Serialize>(science: &T) -> anyhow::Result<String> {
    Ok(toml::to_string(science)?)
}

/// `sha256:<hex>` over the canonical TOML of the resolved science config.
pub fn config_hash<T: Serialize>(science: &T) -> anyhow::Result<String> {
    let text = to_canonical_toml(science)?;
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(text.as_bytes()))
    ))
}

/// Global batch → (micro_batch, grad_accum). The micro-batch must divide the
/// global batch so every step sees exactly the same rows.
pub fn split_batch(
    batch_size: usize,
    micro_batch: Option<usize>,
) -> anyhow::Result<(usize, usize)> {
    let micro = micro_batch.unwrap_or(batch_size).min(batch_size).max(1);
    if batch_size % micro != 0 {
        return Err(UserError::usage(format!(
            "micro-batch {micro} does not divide train.batch_size {batch_size}"
        ))
        .with_fix("pick a micro-batch that divides the global batch (e.g. a power of two)")
        .into());
    }
    Ok((micro, batch_size / micro))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Demo {
        train: TrainConfig,
        #[serde(default)]
        init_from: Option<String>,
    }

    const TEXT: &str = "[train]\nsteps = 10\nbatch_size = 4\neval_every = 5\neval_batches = 1\nseed = 1\n[hardware]\nmicro_batch = 2\n";

    #[test]
    fn overrides_are_type_checked() {
        let ok: Loaded<Demo> = load(TEXT, "demo", &["train.steps=20".into()]).unwrap();
        assert_eq!(ok.science.train.steps, 20);
        assert_eq!(ok.hardware.micro_batch, Some(2));
        let err = load::<Demo>(TEXT, "demo", &["train.steps=abc".into()]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("train.steps") && text.contains("an integer"),
            "{text}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
        let err = load::<Demo>(TEXT, "demo", &["train.nope=1".into()]).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let err = load::<Demo>(TEXT, "demo", &["nope.x=1".into()]).unwrap_err();
        assert!(err.to_string().contains("nope.x"), "{err}");
        let ok: Loaded<Demo> = load(TEXT, "demo", &["init_from=a.safetensors".into()]).unwrap();
        assert_eq!(ok.science.init_from.as_deref(), Some("a.safetensors"));
    }

    #[test]
    fn hash_ignores_hardware_and_tracks_science() {
        let a: Loaded<Demo> = load(TEXT, "demo", &[]).unwrap();
        let b: Loaded<Demo> = load(
            &TEXT.replace("micro_batch = 2", "micro_batch = 4"),
            "demo",
            &[],
        )
        .unwrap();
        let c: Loaded<Demo> = load(TEXT, "demo", &["train.seed=2".into()]).unwrap();
        let hash = config_hash(&a.science).unwrap();
        assert!(hash.starts_with("sha256:") && hash.len() == 7 + 64);
        assert_eq!(hash, config_hash(&b.science).unwrap());
        assert_ne!(hash, config_hash(&c.science).unwrap());
    }

    #[test]
    fn micro_batch_must_divide() {
        assert_eq!(split_batch(16, Some(4)).unwrap(), (4, 4));
        assert_eq!(split_batch(16, None).unwrap(), (16, 1));
        assert!(split_batch(16, Some(3)).is_err());
    }
}
