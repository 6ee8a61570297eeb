//! AdamW as GPT-2 recipes use it, global-norm clipping, and the LR schedule.
//!
//! Why our own AdamW: Burn 0.21's `AdamW` applies weight decay to every
//! parameter and has no parameter groups; GPT-2 recipes decay only tensors
//! with ≥ 2 dimensions (matrices, embeddings), never biases or LayerNorm
//! gains. Keeping the moments in our own map (keyed by parameter path at
//! checkpoint time) also makes the optimizer state a plain safetensors file,
//! which is what bit-exact resume needs. Why our own clipping: Burn's
//! `GradientClipping::Norm` clips each tensor separately; nanoGPT clips the
//! norm of all gradients together.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, TensorData};

use super::config::OptimConfig;
use super::params;

/// Learning rate at `step` (0-based): linear warmup to `lr` over
/// `warmup_steps`, then cosine decay to `min_lr_frac * lr` at `total_steps`.
pub fn learning_rate(cfg: &OptimConfig, step: u64, total_steps: u64) -> f64 {
    let min_lr = cfg.lr * cfg.min_lr_frac;
    if step < cfg.warmup_steps {
        return cfg.lr * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    if step >= total_steps || total_steps <= cfg.warmup_steps {
        return min_lr;
    }
    let progress = (step - cfg.warmup_steps) as f64 / (total_steps - cfg.warmup_steps) as f64;
    let coeff = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
    min_lr + coeff * (cfg.lr - min_lr)
}

/// First and second moments of every parameter, flattened.
pub struct AdamW<B: Backend> {
    cfg: OptimConfig,
    moments: Moments<B>,
}

impl<B: Backend> AdamW<B> {
    pub fn new(cfg: OptimConfig) -> Self {
        Self {
            cfg,
            moments: HashMap::new(),
        }
    }

    /// One update at 1-based step `t`; gradients are multiplied by
    /// `grad_scale` (the clipping factor) first.
    pub fn step<AB, M>(
        &mut self,
        model: M,
        grads: &mut GradientsParams,
        lr: f64,
        t: u64,
        grad_scale: f64,
    ) -> M
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let mut mapper = AdamWMapper::<B> {
            cfg: &self.cfg,
            moments: &mut self.moments,
            grads,
            lr,
            t,
            grad_scale,
        };
        model.map(&mut mapper)
    }

    /// The moments as named tensors (`m.<path>`, `v.<path>`) for a checkpoint.
    pub fn state_tensors<AB, M>(&self, model: &M) -> Vec<(String, Vec<usize>, Vec<f32>)>
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        moments_to_named::<AB, M>(model, &self.moments)
    }

    /// Restore moments written by [`AdamW::state_tensors`].
    pub fn load_state<AB, M>(
        &mut self,
        model: &M,
        state: &super::safetensors_io::NamedTensors,
        device: &B::Device,
    ) where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        self.moments = moments_from_named::<AB, M>(model, state, device);
    }
}

/// First and second moments of each parameter, flattened, by parameter id.
pub type Moments<B> = HashMap<ParamId, (Tensor<B, 1>, Tensor<B, 1>)>;

/// Moments as named tensors `m.<path>` / `v.<path>`: ids change when a
/// model is rebuilt, paths do not, so checkpoints key them by path.
pub fn moments_to_named<AB, M>(
    model: &M,
    moments: &Moments<AB::InnerBackend>,
) -> Vec<(String, Vec<usize>, Vec<f32>)>
where
    AB: AutodiffBackend,
    M: AutodiffModule<AB>,
{
    let mut out = Vec::new();
    for param in params::collect::<AB, M>(model, false) {
        if let Some((m, v)) = moments.get(&param.id) {
            for (prefix, tensor) in [("m", m), ("v", v)] {
                let values = tensor
                    .to_data()
                    .convert::<f32>()
                    .to_vec::<f32>()
                    .unwrap_or_default();
                out.push((
                    format!("{prefix}.{}", param.name),
                    vec![values.len()],
                    values,
                ));
            }
        }
    }
    out
}

/// The inverse of [`moments_to_named`] for `model`'s current parameter ids.
pub fn moments_from_named<AB, M>(
    model: &M,
    state: &super::safetensors_io::NamedTensors,
    device: &burn::tensor::Device<AB::InnerBackend>,
) -> Moments<AB::InnerBackend>
where
    AB: AutodiffBackend,
    M: AutodiffModule<AB>,
{
    let mut moments = HashMap::new();
    for (name, id) in params::ids_by_name::<AB, M>(model) {
        let (Some((_, m)), Some((_, v))) = (
            state.get(&format!("m.{name}")),
            state.get(&format!("v.{name}")),
        ) else {
            continue;
        };
        let load = |values: &Vec<f32>| {
            Tensor::<AB::InnerBackend, 1>::from_data(
                TensorData::new(values.clone(), [values.len()]),
                device,
            )
        };
        moments.insert(id, (load(m), load(v)));
    }
    moments
}

struct AdamWMapper<'a, B: Backend> {
    cfg: &'a OptimConfig,
    moments: &'a mut HashMap<ParamId, (Tensor<B, 1>, Tensor<B, 1>)>,
    grads: &'a mut GradientsParams,
    lr: f64,
    t: u64,
    grad_scale: f64,
}

impl<AB: AutodiffBackend, B: Backend> ModuleMapper<AB> for AdamWMapper<'_, B>
where
    AB: AutodiffBackend<InnerBackend = B>,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<AB, D>>) -> Param<Tensor<AB, D>> {
        let (id, tensor, mapper) = param.consume();
        // A parameter without a gradient is frozen (`Module::no_grad`, e.g.
        // the base weights of a LoRA model): no update, no weight decay, no
        // moments kept.
        let Some(grad) = self.grads.remove::<B, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let shape = tensor.dims();
        let numel: usize = shape.iter().product();
        let cfg = self.cfg;
        let grad = grad.reshape([numel]) * self.grad_scale;
        let (m, v) = match self.moments.remove(&id) {
            Some((m, v)) => (
                m * cfg.beta1 + grad.clone() * (1.0 - cfg.beta1),
                v * cfg.beta2 + grad.clone() * grad * (1.0 - cfg.beta2),
            ),
            None => (
                grad.clone() * (1.0 - cfg.beta1),
                grad.clone() * grad * (1.0 - cfg.beta2),
            ),
        };
        let bias1 = 1.0 - cfg.beta1.powi(self.t as i32);
        let bias2 = 1.0 - cfg.beta2.powi(self.t as i32);
        let mut value = tensor.inner().reshape([numel]);
        // Decoupled weight decay (PyTorch AdamW order: decay, then the Adam step),
        // only on matrices and embeddings.
        if D >= 2 && cfg.weight_decay > 0.0 {
            value = value * (1.0 - self.lr * cfg.weight_decay);
        }
        let denom = (v.clone() / bias2).sqrt() + cfg.eps;
        value = value - m.clone() / denom * (self.lr / bias1);
        self.moments.insert(id, (m, v));
        let updated = Tensor::<AB, D>::from_inner(value.reshape(shape)).require_grad();
        Param::from_mapped_value(id, updated, mapper)
    }
}

struct SquaredNorm<'a, B: Backend> {
    grads: &'a GradientsParams,
    total: Option<Tensor<B, 1>>,
}

impl<AB: AutodiffBackend<InnerBackend = B>, B: Backend> ModuleVisitor<AB> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if let Some(grad) = self.grads.get::<B, D>(param.id) {
            let sq = grad.clone().mul(grad).sum();
            self.total = Some(match self.total.take() {
                Some(total) => total + sq,
                None => sq,
            });
        }
    }
}

/// The L2 norm of all gradients together (in visiting order, so deterministic).
pub fn global_grad_norm<AB, M>(model: &M, grads: &GradientsParams) -> f64
where
    AB: AutodiffBackend,
    M: AutodiffModule<AB>,
{
    let mut visitor = SquaredNorm::<AB::InnerBackend> { grads, total: None };
    model.visit(&mut visitor);
    visitor
        .total
        .map(|t| t.into_scalar().elem::<f64>().sqrt())
        .unwrap_or(0.0)
}

/// Every gradient of `model` in `grads` multiplied by `factor`: fp16's
/// unscaling, for optimizers that take the gradients as they are.
pub fn scale_grads<AB, M>(model: &M, grads: GradientsParams, factor: f64) -> GradientsParams
where
    AB: AutodiffBackend,
    M: AutodiffModule<AB>,
{
    struct Scale<B: Backend> {
        grads: GradientsParams,
        factor: f64,
        _backend: std::marker::PhantomData<B>,
    }
    impl<AB: AutodiffBackend<InnerBackend = B>, B: Backend> ModuleVisitor<AB> for Scale<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
            if let Some(grad) = self.grads.remove::<B, D>(param.id) {
                self.grads.register::<B, D>(param.id, grad * self.factor);
            }
        }
    }
    let mut visitor = Scale::<AB::InnerBackend> {
        grads,
        factor,
        _backend: std::marker::PhantomData,
    };
    model.visit(&mut visitor);
    visitor.grads
}

/// The factor that brings the global norm down to `max_norm` (1 if under).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> OptimConfig {
        toml::from_str("lr = 1.0\nwarmup_steps = 10").unwrap()
    }

    #[test]
    fn schedule_warms_up_then_decays_to_ten_percent() {
        let c = cfg();
        assert!((learning_rate(&c, 0, 100) - 0.1).abs() < 1e-12);
        assert!((learning_rate(&c, 9, 100) - 1.0).abs() < 1e-12);
        assert!((learning_rate(&c, 10, 100) - 1.0).abs() < 1e-12);
        assert!((learning_rate(&c, 55, 100) - 0.55).abs() < 1e-12);
        assert!((learning_rate(&c, 100, 100) - 0.1).abs() < 1e-12);
        assert!(learning_rate(&c, 99, 100) > 0.1);
    }

    #[test]
    fn clip_scale_only_shrinks() {
        assert_eq!(clip_scale(0.5, 1.0), 1.0);
        assert!((clip_scale(4.0, 1.0) - 0.25).abs() < 1e-6);
        assert_eq!(clip_scale(4.0, 0.0), 1.0);
    }
}
