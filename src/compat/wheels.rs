//! PyTorch wheel builds (`env/pytorch.toml`): one [`WheelFacts`] per release
//! × CUDA variant, and `--pytorch VERSION+cuXYZ` resolved against them.

use serde::{Deserialize, Serialize};

use super::data;
use super::KnowledgeBase;
use crate::error::{Result, UserError};

/// A PyTorch wheel build: one release × CUDA variant of `env/pytorch.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WheelFacts {
    /// "2.6.0+cu124"
    pub spec: String,
    /// The CUDA runtime the wheel bundles, e.g. "12.4".
    pub cuda: String,
    /// Compute capabilities with SASS ("8.6") and with PTX.
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
    pub unconfirmed: Vec<String>,
    pub source: String,
}

/// Every build `env/pytorch.toml` lists: each row's releases × its variant.
pub(super) fn wheel_facts(file: data::PytorchFile) -> Vec<WheelFacts> {
    file.wheel
        .into_iter()
        .flat_map(|row| {
            let cuda = wheel_variant_cuda(&row.variant).unwrap_or_default();
            row.releases
                .iter()
                .map(|release| WheelFacts {
                    spec: format!("{release}+{}", row.variant),
                    cuda: cuda.clone(),
                    sass: row.sass.clone(),
                    ptx: row.ptx.clone(),
                    unconfirmed: row.unconfirmed.clone(),
                    source: row.source.clone(),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

impl KnowledgeBase {
    /// Every PyTorch wheel build in `env/pytorch.toml`.
    pub fn wheels(&self) -> &[WheelFacts] {
        &self.wheels
    }

    /// A PyTorch wheel build such as "2.7.1+cu128"; unknown → usage error (exit 2)
    /// naming the value and listing the known builds.
    pub fn wheel(&self, spec: &str) -> Result<&WheelFacts> {
        let wanted = spec.trim().to_ascii_lowercase();
        if let Some(wheel) = self.wheels.iter().find(|w| w.spec == wanted) {
            return Ok(wheel);
        }
        let release = wanted.split('+').next().unwrap_or_default();
        let same_release: Vec<&str> = self
            .wheels
            .iter()
            .filter(|w| w.spec.starts_with(&format!("{release}+")))
            .map(|w| w.spec.as_str())
            .collect();
        let bare_release = !wanted.contains('+') && !same_release.is_empty();
        let known = if same_release.is_empty() {
            self.wheels
                .iter()
                .map(|w| w.spec.as_str())
                .collect::<Vec<_>>()
        } else {
            same_release
        };
        let problem = if bare_release {
            "names a PyTorch release but not its CUDA variant (each variant is a different build)"
        } else {
            "is not a PyTorch wheel build envgen knows"
        };
        Err(UserError::usage(format!("--pytorch `{spec}` {problem}"))
            .with_fix(format!(
                "name the release and CUDA variant, one of: {} (add builds to env/pytorch.toml)",
                known.join(", ")
            ))
            .into())
    }
}

/// "cu128" → "12.8", "cu130" → "13.0", "cu117" → "11.7".
fn wheel_variant_cuda(variant: &str) -> Option<String> {
    let digits = variant.strip_prefix("cu")?;
    if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(2);
    Some(format!("{major}.{minor}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheels_and_unknown_wheels() {
        let kb = KnowledgeBase::embedded();
        assert_eq!(kb.wheel("2.6.0+cu124").unwrap().cuda, "12.4");
        let err = kb.wheel("2.6.0+cu999").unwrap_err();
        let text = crate::error::render(&err);
        assert!(
            text.contains("2.6.0+cu999") && text.contains("2.6.0+cu126"),
            "{text}"
        );
        assert_eq!(crate::error::exit_code_of(&err), 2);
        assert!(
            text.contains("is not a PyTorch wheel build envgen knows"),
            "{text}"
        );
        // A bare release is a different mistake, said differently.
        let text = crate::error::render(&kb.wheel("2.6.0").unwrap_err());
        assert!(text.contains("but not its CUDA variant"), "{text}");
    }

    /// pytorch.org's "Previous PyTorch Versions" (pytorch/pytorch.github.io
    /// `_get_started/previous-versions.md` at e3f009bb, the newest stored copy):
    /// "### v2.0.1 … # CUDA 11.7 … # CUDA 11.8 … --index-url …/whl/cu118", and
    /// for v2.1.0 … v2.3.1 "# CUDA 11.8 … whl/cu118 # CUDA 12.1 … whl/cu121".
    /// Every one of those builds is in the catalog, and no other CUDA variant
    /// of those releases (issue #43: `2.0.1+cu117` was unknown).
    #[test]
    fn every_published_cuda_variant_from_2_0_is_a_known_build() {
        let kb = KnowledgeBase::embedded();
        let published: &[(&[&str], &[&str])] = &[
            (&["2.0.0", "2.0.1"], &["cu117", "cu118"]),
            (
                &[
                    "2.1.0", "2.1.1", "2.1.2", "2.2.0", "2.2.1", "2.2.2", "2.3.0", "2.3.1",
                ],
                &["cu118", "cu121"],
            ),
        ];
        for (releases, variants) in published {
            for release in *releases {
                let mut known: Vec<&str> = kb
                    .wheels()
                    .iter()
                    .filter_map(|w| w.spec.strip_prefix(&format!("{release}+")))
                    .collect();
                known.sort_unstable();
                assert_eq!(known, *variants, "{release}");
            }
        }
        assert_eq!(kb.wheel("2.0.1+cu117").unwrap().cuda, "11.7");
    }

    #[test]
    fn a_variant_is_cu_and_three_digits() {
        assert_eq!(wheel_variant_cuda("cu128").as_deref(), Some("12.8"));
        assert_eq!(wheel_variant_cuda("cu117").as_deref(), Some("11.7"));
        for bad in ["cu12", "cu1280", "cuabc", "cu12a", "rocm6.2", "cpu", "cu"] {
            assert_eq!(wheel_variant_cuda(bad), None, "{bad}");
        }
    }
}
