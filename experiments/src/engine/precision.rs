//! Precision, a hardware knob: what the arithmetic of a run is done in. It
//! is recorded in the manifest and never part of `config_hash` (the same
//! science at another precision is the same experiment on other hardware).
//!
//! Every precision keeps f32 master weights and f32 optimizer moments:
//! - `fp32`: everything in f32.
//! - `tf32`: f32 storage, matrix products on TF32 tensor cores where the
//!   backend has them. Burn 0.21's CUDA backend does this for f32 matmuls on
//!   compute capability ≥ 8.0 on its own (cubek-matmul picks TF32 tiles when
//!   the device supports them, with no switch to turn it off), so on CUDA
//!   `fp32` and `tf32` compute the same (tests/it/gpu/cuda_standin.rs reads it in
//!   the PTX); on the CPU both are plain f32.
//! - `bf16`, `fp16`: autocast (`envgen_kernels::autocast`): projections,
//!   attention and activations in the half type; normalization, softmax
//!   statistics, losses and the residual stream in f32.
//! - `fp16` adds dynamic loss scaling ([`LossScaler`]), as PyTorch's
//!   GradScaler does: f16's range is too small for small gradients.

use burn::tensor::DType;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    Fp32,
    Tf32,
    Bf16,
    Fp16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }

    /// The precision a manifest records by name ("f32" is how manifests
    /// written before precision was a knob say fp32).
    pub fn from_name(name: &str) -> Option<Precision> {
        match name {
            "fp32" | "f32" => Some(Precision::Fp32),
            "tf32" => Some(Precision::Tf32),
            "bf16" => Some(Precision::Bf16),
            "fp16" => Some(Precision::Fp16),
            _ => None,
        }
    }

    /// The half type autocast computes in (`None`: plain f32).
    pub fn autocast_dtype(self) -> Option<DType> {
        match self {
            Precision::Fp32 | Precision::Tf32 => None,
            Precision::Bf16 => Some(DType::BF16),
            Precision::Fp16 => Some(DType::F16),
        }
    }

    /// A loss scaler for this precision (fp16 only).
    pub fn loss_scaler(self) -> Option<LossScaler> {
        (self == Precision::Fp16).then(LossScaler::default)
    }
}

/// Dynamic loss scaling for fp16: the loss is multiplied by `scale` before
/// the backward pass so small gradients survive f16; a step whose gradients
/// overflow (inf/NaN) is skipped and the scale halved; after
/// `growth_interval` clean steps in a row the scale doubles.
///
/// Defaults are PyTorch's `torch.amp.GradScaler` (init_scale 2^16,
/// growth_factor 2, backoff_factor 0.5, growth_interval 2000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    pub scale: f64,
    pub growth_interval: u32,
    /// Clean steps since the last overflow or growth.
    pub clean_steps: u32,
    /// Steps skipped because their gradients overflowed.
    pub skipped_steps: u64,
    /// Times the scale was raised.
    pub scale_raises: u64,
}

impl Default for LossScaler {
    fn default() -> Self {
        Self {
            scale: 65536.0,
            growth_interval: 2000,
            clean_steps: 0,
            skipped_steps: 0,
            scale_raises: 0,
        }
    }
}

/// What the scaler decided about one step's gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScaledStep {
    /// Apply the step with gradients multiplied by `unscale` (= 1/scale);
    /// `raised` when the scale doubled after it.
    Apply { unscale: f64, raised: bool },
    /// Gradients overflowed: skip the optimizer step (the scale was halved).
    Skip,
}

impl LossScaler {
    /// Decide on a step whose scaled gradients have global norm
    /// `scaled_norm` (inf or NaN when any gradient overflowed), and update
    /// the scale for the next step.
    pub fn update(&mut self, scaled_norm: f64) -> ScaledStep {
        if !scaled_norm.is_finite() {
            self.scale *= 0.5;
            self.clean_steps = 0;
            self.skipped_steps += 1;
            return ScaledStep::Skip;
        }
        let unscale = 1.0 / self.scale;
        self.clean_steps += 1;
        let raised = self.clean_steps >= self.growth_interval;
        if raised {
            self.scale *= 2.0;
            self.clean_steps = 0;
            self.scale_raises += 1;
        }
        ScaledStep::Apply { unscale, raised }
    }
}

impl LossScaler {
    /// The scaler's final state in summary.json's metrics.
    pub fn summarize(&self, metrics: &mut serde_json::Map<String, serde_json::Value>) {
        metrics.insert("loss_scale".into(), serde_json::json!(self.scale));
        metrics.insert(
            "skipped_steps".into(),
            serde_json::json!(self.skipped_steps),
        );
        metrics.insert("scale_raises".into(), serde_json::json!(self.scale_raises));
    }
}

/// Write what the scaler did in a step into that step's metrics.jsonl
/// record: the scale the step used, whether it was skipped or raised the
/// scale, and the running counts.
pub fn record_step(
    record: &mut serde_json::Value,
    scale_used: f64,
    decision: ScaledStep,
    scaler: &LossScaler,
) {
    record["loss_scale"] = serde_json::json!(scale_used);
    record["skipped"] = serde_json::json!(decision == ScaledStep::Skip);
    record["scale_raised"] =
        serde_json::json!(matches!(decision, ScaledStep::Apply { raised: true, .. }));
    record["skipped_steps"] = serde_json::json!(scaler.skipped_steps);
    record["scale_raises"] = serde_json::json!(scaler.scale_raises);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_skips_and_halves_clean_steps_double() {
        let mut s = LossScaler {
            growth_interval: 3,
            ..LossScaler::default()
        };
        assert_eq!(
            s.update(f64::INFINITY),
            ScaledStep::Skip,
            "an inf norm skips the step"
        );
        assert_eq!(s.scale, 32768.0);
        assert_eq!(s.update(f64::NAN), ScaledStep::Skip);
        assert_eq!(s.scale, 16384.0);
        assert_eq!(s.skipped_steps, 2);
        // Three clean steps: the third raises the scale after being applied
        // with the old one.
        for i in 0..3 {
            match s.update(1.0) {
                ScaledStep::Apply { unscale, raised } => {
                    assert_eq!(unscale, 1.0 / 16384.0);
                    assert_eq!(raised, i == 2);
                }
                ScaledStep::Skip => panic!("a finite norm must not skip"),
            }
        }
        assert_eq!(s.scale, 32768.0);
        assert_eq!(s.scale_raises, 1);
        // An overflow resets the clean streak.
        s.update(1.0);
        s.update(f64::INFINITY);
        assert_eq!(s.clean_steps, 0);
        assert_eq!(s.scale, 16384.0);
    }

    #[test]
    fn only_fp16_scales_and_only_halves_autocast() {
        assert!(Precision::Fp16.loss_scaler().is_some());
        assert!(Precision::Bf16.loss_scaler().is_none());
        assert_eq!(Precision::Tf32.autocast_dtype(), None);
        assert_eq!(Precision::Bf16.autocast_dtype(), Some(DType::BF16));
        let p: Precision = serde_json::from_str("\"bf16\"").unwrap();
        assert_eq!(p, Precision::Bf16);
        assert_eq!(p.name(), "bf16");
    }
}
