//! Hardware profiles (`env/profiles.toml`): the one place that maps a GPU
//! (or the CPU) to the hardware knobs of a run. A profile never touches the
//! science config; see the file's header for the rules.
//!
//! A user profile file (`envgen tune` writes it: [`user_file`]) is read
//! before the embedded one, so a measured micro-batch wins over the
//! estimates shipped with envgen.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::host::Gpu;

mod user_file;
pub use user_file::{record_measurement, user_file};

const PROFILES_TOML: &str = include_str!("../env/profiles.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileBackend {
    Cpu,
    Cuda,
}

/// fp32 | tf32 | bf16 | fp16: what the engine computes in
/// (`envgen_experiments::engine::precision` says what each means).
pub use envgen_experiments::engine::Precision;

/// Which machines a profile fits. All given conditions must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cpu: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_memory_gib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_memory_gib: Option<f64>,
}

/// What `envgen tune` measured for one "experiment/preset": the
/// micro-batch it chose and every trial it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    pub micro_batch: usize,
    pub steps_per_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_mib: Option<f64>,
    pub precision: Precision,
    /// Where and when: the GPU (or "cpu"), the memory cap if one was set, the date.
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    pub measured_at: String,
    #[serde(default)]
    pub trials: Vec<Trial>,
}

/// One micro-batch the tuner tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trial {
    pub micro_batch: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_mib: Option<f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out_of_memory: bool,
}

/// One `[[profile]]` of `env/profiles.toml` or the user's file: which
/// machines it fits and the hardware knobs of runs there. (Not the
/// container image profiles of `containers/profiles/`, [`crate::image::ImageProfile`],
/// nor a run's recorded knobs, `envgen_experiments::engine::Profile`.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    pub name: String,
    #[serde(rename = "match")]
    pub matches: Match,
    pub backend: ProfileBackend,
    pub precision: Precision,
    /// "experiment/preset" → micro-batch (sequences per forward pass).
    #[serde(default)]
    pub micro_batch: BTreeMap<String, usize>,
    /// "experiment/preset" → generation batch (rows per generation call of
    /// an experiment that samples, such as rft).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gen_batch: BTreeMap<String, usize>,
    /// Defaults for `envgen run --where slurm --profile NAME` (flags win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmDefaults>,
    /// "experiment/preset" → what `envgen tune` measured (user profiles).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub measured: BTreeMap<String, Measurement>,
}

/// What a Slurm job for this hardware asks for by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmDefaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// Memory per node as sbatch takes it, e.g. "64G".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem: Option<String>,
    /// Raw sbatch options, one `#SBATCH` line each, before any
    /// `--sbatch-arg` (e.g. `["--qos=gpu", "--mail-type=FAIL"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    #[serde(default)]
    profile: Vec<HardwareProfile>,
}

/// The hardware knobs chosen for one run, with the reasons for any fallback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HardwareChoice {
    pub profile: String,
    pub backend: ProfileBackend,
    pub precision: Precision,
    /// `None`: the preset's global batch fits in one pass.
    pub micro_batch: Option<usize>,
    /// `None`: the preset's hint or the experiment's default.
    pub gen_batch: Option<usize>,
    pub warnings: Vec<String>,
}

#[derive(Debug)]
pub struct Profiles {
    profiles: Vec<HardwareProfile>,
}

impl Profiles {
    /// The profiles compiled into this binary.
    pub fn embedded() -> &'static Profiles {
        static PROFILES: std::sync::OnceLock<Profiles> = std::sync::OnceLock::new();
        PROFILES.get_or_init(|| {
            Profiles::parse(PROFILES_TOML).expect("env/profiles.toml is checked by the test suite")
        })
    }

    pub fn parse(text: &str) -> Result<Profiles> {
        Self::parse_file(text, "env/profiles.toml")
    }

    fn parse_file(text: &str, origin: &str) -> Result<Profiles> {
        let file: ProfilesFile = toml::from_str(text).map_err(|e| {
            UserError::usage(format!("{origin}: {e}"))
                .with_fix("fix or delete the file (envgen tune writes it again)")
        })?;
        Ok(Profiles {
            profiles: file.profile,
        })
    }

    /// The user's profiles ([`user_file`], when it exists) before the
    /// embedded ones: what `envgen run` chooses from.
    pub fn load() -> Result<Profiles> {
        let mut profiles = match user_file().filter(|p| p.is_file()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    UserError::environment(format!("cannot read {}: {e}", path.display()))
                })?;
                Self::parse_file(&text, &path.display().to_string())?.profiles
            }
            None => Vec::new(),
        };
        profiles.extend(Self::embedded().profiles.iter().cloned());
        Ok(Profiles { profiles })
    }

    pub fn names(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.name.as_str()).collect()
    }

    pub fn get(&self, name: &str) -> Result<&HardwareProfile> {
        self.profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                UserError::usage(format!("unknown hardware profile {name:?}"))
                    .with_fix(format!("use one of: {}", self.names().join(", ")))
                    .into()
            })
    }

    /// The profile for a run on `gpu` (`None`: the CPU backend).
    pub fn select(&self, gpu: Option<&Gpu>) -> &HardwareProfile {
        self.profiles
            .iter()
            .find(|p| fits(&p.matches, gpu))
            .or_else(|| self.profiles.last())
            .expect("env/profiles.toml has at least one profile")
    }

    /// The knobs for `experiment`/`preset` on `gpu`: `forced` (`--profile`)
    /// or the selected profile; `requested` (`--precision`) or the profile's
    /// precision, lowered when the GPU lacks it (doctor's codes: bf16 and
    /// tf32 need compute capability 8.0, env/precision.toml).
    pub fn choose(
        &self,
        gpu: Option<&Gpu>,
        forced: Option<&str>,
        requested: Option<Precision>,
        experiment: &str,
        preset: &str,
    ) -> Result<HardwareChoice> {
        let profile = match forced {
            Some(name) => self.get(name)?,
            None => self.select(gpu),
        };
        let mut warnings = Vec::new();
        let mut precision = requested.unwrap_or(profile.precision);
        let capability = gpu
            .and_then(|g| g.compute_capability.as_deref())
            .and_then(parse_capability);
        if let (Some(cc), false) = (capability, profile.backend == ProfileBackend::Cpu) {
            let fallback = match precision {
                Precision::Bf16 => Some(("bf16-unsupported", Precision::Fp16)),
                Precision::Tf32 => Some(("tf32-unsupported", Precision::Fp32)),
                _ => None,
            };
            if let (Some((code, fallback)), true) = (fallback, cc < (8, 0)) {
                warnings.push(format!(
                    "{code}: compute capability {}.{} has no {} (needs >= 8.0); using {} instead",
                    cc.0,
                    cc.1,
                    precision.name(),
                    fallback.name()
                ));
                precision = fallback;
            }
        }
        Ok(HardwareChoice {
            profile: profile.name.clone(),
            backend: profile.backend,
            precision,
            micro_batch: profile
                .micro_batch
                .get(&format!("{experiment}/{preset}"))
                .copied(),
            gen_batch: profile
                .gen_batch
                .get(&format!("{experiment}/{preset}"))
                .copied(),
            warnings,
        })
    }
}

fn parse_capability(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn fits(rule: &Match, gpu: Option<&Gpu>) -> bool {
    let Some(gpu) = gpu else { return rule.cpu };
    if rule.cpu {
        return false;
    }
    if let Some(cc) = &rule.compute_capability {
        if gpu.compute_capability.as_deref() != Some(cc.as_str()) {
            return false;
        }
    }
    let memory_gib = gpu.memory_mib.map(|m| m as f64 / 1024.0);
    let within = |bound: Option<f64>, ok: fn(f64, f64) -> bool| match (bound, memory_gib) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(b), Some(m)) => ok(m, b),
    };
    within(rule.min_memory_gib, |m, b| m >= b) && within(rule.max_memory_gib, |m, b| m < b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(cc: &str, memory_mib: u64) -> Gpu {
        Gpu {
            compute_capability: Some(cc.into()),
            memory_mib: Some(memory_mib),
            ..Gpu::default()
        }
    }

    #[test]
    fn every_gpu_our_users_run_gets_its_own_profile() {
        // Memory sizes as nvidia-smi reports them (MiB).
        let cases = [
            (gpu("8.0", 81920), "a100-80gb"),
            (gpu("8.0", 40960), "a100-40gb"),
            (gpu("8.0", 24576), "a30"),
            (gpu("7.0", 32768), "v100"),
            (gpu("8.6", 49140), "rtx-a6000"),
            (gpu("8.6", 20470), "rtx-a4500"),
            (gpu("12.0", 16303), "rtx-5070-ti"),
            (gpu("9.0", 81559), "h100"),
            (gpu("7.5", 15360), "cuda-generic"),
        ];
        let profiles = Profiles::embedded();
        for (gpu, expected) in cases {
            assert_eq!(profiles.select(Some(&gpu)).name, expected, "{gpu:?}");
        }
        assert_eq!(profiles.select(None).name, "cpu");
    }

    #[test]
    fn bf16_falls_back_to_fp16_with_a_warning_on_old_gpus() {
        let t4 = gpu("7.5", 15360);
        let choice = Profiles::embedded()
            .choose(Some(&t4), None, None, "gpt2", "gpt2-124m")
            .unwrap();
        assert_eq!(choice.precision, Precision::Fp16);
        assert!(
            choice.warnings[0].starts_with("bf16-unsupported"),
            "{:?}",
            choice.warnings
        );
        let a30 = gpu("8.0", 24576);
        let choice = Profiles::embedded()
            .choose(Some(&a30), None, None, "gpt2", "gpt2-124m")
            .unwrap();
        assert_eq!(
            (choice.precision, choice.micro_batch),
            (Precision::Bf16, Some(16))
        );
        assert!(choice.warnings.is_empty());
    }

    #[test]
    fn a_requested_precision_wins_but_not_over_the_gpu() {
        let v100 = gpu("7.0", 32768);
        let choice = Profiles::embedded()
            .choose(Some(&v100), None, Some(Precision::Tf32), "gpt2", "tiny")
            .unwrap();
        assert_eq!(choice.precision, Precision::Fp32, "TF32 needs Ampere");
        assert!(choice.warnings[0].starts_with("tf32-unsupported"));
        let choice = Profiles::embedded()
            .choose(None, None, Some(Precision::Bf16), "gpt2", "tiny")
            .unwrap();
        assert_eq!(
            (choice.profile.as_str(), choice.precision),
            ("cpu", Precision::Bf16),
            "the CPU computes bf16 as asked (slowly: a numerics check)"
        );
    }

    #[test]
    fn forcing_a_profile_checks_its_name_and_keeps_the_gpu_limits() {
        let v100 = gpu("7.0", 32768);
        let choice = Profiles::embedded()
            .choose(Some(&v100), Some("a100-80gb"), None, "gpt2", "gpt2-124m")
            .unwrap();
        assert_eq!(choice.profile, "a100-80gb");
        assert_eq!(
            choice.precision,
            Precision::Fp16,
            "V100 has no bf16 whatever the profile says"
        );
        let err = Profiles::embedded()
            .choose(None, Some("a100-81gb"), None, "gpt2", "tiny")
            .unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2);
        assert!(err.to_string().contains("a100-81gb") && err.to_string().contains("a100-80gb"));
    }

    #[test]
    fn unlisted_presets_run_their_global_batch_in_one_pass() {
        let choice = Profiles::embedded()
            .choose(None, None, None, "gpt2", "tiny")
            .unwrap();
        assert_eq!((choice.profile.as_str(), choice.micro_batch), ("cpu", None));
    }

    #[test]
    fn profiles_file_rejects_unknown_keys() {
        let err = Profiles::parse(
            "[[profile]]\nname='x'\nmatch={}\nbackend='cpu'\nprecision='fp32'\nmicro_bach={}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("micro_bach"), "{err}");
    }

    #[test]
    fn a_profile_may_set_the_generation_batch_of_a_preset() {
        let profiles = Profiles::parse(
            "[[profile]]\nname='x'\nmatch={cpu=true}\nbackend='cpu'\nprecision='fp32'\ngen_batch={'rft/tiny'=96}\n",
        )
        .unwrap();
        let choose = |preset| {
            profiles
                .choose(None, Some("x"), None, "rft", preset)
                .unwrap()
        };
        assert_eq!(choose("tiny").gen_batch, Some(96));
        assert_eq!(choose("other").gen_batch, None);
    }
}
