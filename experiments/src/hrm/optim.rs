//! HRM's optimizers: Adam-atan2 for the network, SignSGD for the puzzle
//! embedding. Burn 0.21 has neither, so both are written here as Burn
//! `SimpleOptimizer`s (the per-element math), driven by [`HrmOptimizer`],
//! which walks the model and keeps the moments by parameter for checkpoints.
//!
//! Adam-atan2, as implemented by the `adam-atan2` CUDA package HRM uses
//! (Everett et al. 2024, arXiv 2407.05872, with a = b = 1), per element:
//!
//! ```text
//! θ ← θ·(1 − lr·wd)                       decoupled weight decay first
//! m ← β1·m + (1−β1)·g ;  v ← β2·v + (1−β2)·g²
//! θ ← θ − (lr / (1−β1^t)) · atan2(m, √v / √(1−β2^t))
//! ```
//!
//! i.e. `atan2(m̂, √v̂)` up to where the first bias correction sits: it
//! scales the step outside the atan2 (as in that kernel), not `m` inside
//! it. atan2 replaces Adam's `m̂/(√v̂+ε)`: no ε, bounded by π/2 per step.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::optim::{GradientsParams, LearningRate, SimpleOptimizer};
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use super::model::HrmModel;
use crate::engine::optim::{moments_from_named, moments_to_named, Moments};
use crate::engine::safetensors_io::NamedTensors;

/// Adam-atan2 hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub struct AdamAtan2 {
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
}

/// Per-tensor Adam-atan2 state.
#[derive(Record, Clone)]
pub struct AdamAtan2State<B: Backend, const D: usize> {
    pub moment_1: Tensor<B, D>,
    pub moment_2: Tensor<B, D>,
    /// Steps taken (t in the bias corrections).
    pub time: usize,
}

impl<B: Backend> SimpleOptimizer<B> for AdamAtan2 {
    type State<const D: usize> = AdamAtan2State<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let (moment_1, moment_2, time) = match state {
            Some(s) => (s.moment_1, s.moment_2, s.time),
            None => (grad.zeros_like(), grad.zeros_like(), 0),
        };
        let time = time + 1;
        let moment_1 = moment_1.mul_scalar(self.beta1) + grad.clone().mul_scalar(1.0 - self.beta1);
        let moment_2 = moment_2.mul_scalar(self.beta2) + grad.square().mul_scalar(1.0 - self.beta2);
        let bias_correction1 = 1.0 - self.beta1.powi(time as i32);
        let bias_correction2 = 1.0 - self.beta2.powi(time as i32);
        let denom = moment_2.clone().sqrt().div_scalar(bias_correction2.sqrt());
        let direction = moment_1.clone().atan2(denom);
        let decayed = tensor.mul_scalar(1.0 - lr * self.weight_decay);
        let updated = decayed - direction.mul_scalar(lr / bias_correction1);
        let state = AdamAtan2State {
            moment_1,
            moment_2,
            time,
        };
        (updated, Some(state))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        AdamAtan2State {
            moment_1: state.moment_1.to_device(device),
            moment_2: state.moment_2.to_device(device),
            time: state.time,
        }
    }
}

/// SignSGD with decoupled weight decay (the reference's puzzle-embedding
/// optimizer): θ ← θ·(1 − lr·wd) − lr·sign(g). Stateless.
#[derive(Debug, Clone, Copy)]
pub struct SignSgd {
    pub weight_decay: f64,
}

impl<B: Backend> SimpleOptimizer<B> for SignSgd {
    type State<const D: usize> = ();

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        _state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let decayed = tensor.mul_scalar(1.0 - lr * self.weight_decay);
        (decayed - grad.sign().mul_scalar(lr), None)
    }

    fn to_device<const D: usize>(state: Self::State<D>, _device: &B::Device) -> Self::State<D> {
        state
    }
}

/// Adam-atan2 on every trainable parameter except the puzzle embedding,
/// SignSGD on the puzzle embedding.
///
/// The moments live in our own map keyed by `ParamId` (as the engine's
/// AdamW does) rather than in Burn's `OptimizerAdaptor` records, because a
/// checkpoint must name them by parameter path: a resumed run rebuilds the
/// model with fresh `ParamId`s, and only the path ties a moment to its
/// tensor. The per-element update is [`AdamAtan2`]'s `SimpleOptimizer::step`
/// on the flattened tensor (the update is elementwise, so flattening is exact).
pub struct HrmOptimizer<B: Backend> {
    network: AdamAtan2,
    puzzle: SignSgd,
    moments: Moments<B>,
}

impl<B: Backend> HrmOptimizer<B> {
    pub fn new(network: AdamAtan2, puzzle: SignSgd) -> Self {
        Self {
            network,
            puzzle,
            moments: HashMap::new(),
        }
    }

    /// Apply update number `t` (1-based) from (possibly accumulated) gradients.
    pub fn step<AB>(
        &mut self,
        model: HrmModel<AB>,
        mut grads: GradientsParams,
        t: usize,
        lr: f64,
        puzzle_emb_lr: f64,
    ) -> HrmModel<AB>
    where
        AB: AutodiffBackend<InnerBackend = B>,
    {
        let puzzle_id = model.puzzle_embedding.id;
        let mut mapper = HrmOptimizerMapper {
            optimizer: self,
            grads: &mut grads,
            puzzle_id,
            t,
            lr,
            puzzle_emb_lr,
        };
        model.map(&mut mapper)
    }

    /// The Adam-atan2 moments as named tensors (`m.<path>`, `v.<path>`).
    pub fn state_tensors<AB>(&self, model: &HrmModel<AB>) -> Vec<(String, Vec<usize>, Vec<f32>)>
    where
        AB: AutodiffBackend<InnerBackend = B>,
    {
        moments_to_named::<AB, HrmModel<AB>>(model, &self.moments)
    }

    /// Restore moments written by [`HrmOptimizer::state_tensors`].
    pub fn load_state<AB>(&mut self, model: &HrmModel<AB>, state: &NamedTensors, device: &B::Device)
    where
        AB: AutodiffBackend<InnerBackend = B>,
    {
        self.moments = moments_from_named::<AB, HrmModel<AB>>(model, state, device);
    }
}

struct HrmOptimizerMapper<'a, B: Backend> {
    optimizer: &'a mut HrmOptimizer<B>,
    grads: &'a mut GradientsParams,
    puzzle_id: ParamId,
    t: usize,
    lr: f64,
    puzzle_emb_lr: f64,
}

impl<AB, B> ModuleMapper<AB> for HrmOptimizerMapper<'_, B>
where
    AB: AutodiffBackend<InnerBackend = B>,
    B: Backend,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<AB, D>>) -> Param<Tensor<AB, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<B, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let shape = tensor.dims();
        let numel: usize = shape.iter().product();
        let value = tensor.inner().reshape([numel]);
        let grad = grad.reshape([numel]);
        let updated = if id == self.puzzle_id {
            SimpleOptimizer::<B>::step(
                &self.optimizer.puzzle,
                self.puzzle_emb_lr,
                value,
                grad,
                None,
            )
            .0
        } else {
            let state = self
                .optimizer
                .moments
                .remove(&id)
                .map(|(m, v)| AdamAtan2State {
                    moment_1: m,
                    moment_2: v,
                    time: self.t - 1,
                });
            let (updated, state) =
                SimpleOptimizer::<B>::step(&self.optimizer.network, self.lr, value, grad, state);
            if let Some(s) = state {
                self.optimizer.moments.insert(id, (s.moment_1, s.moment_2));
            }
            updated
        };
        let updated = Tensor::<AB, D>::from_inner(updated.reshape(shape)).require_grad();
        Param::from_mapped_value(id, updated, mapper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;

    fn close(a: f32, b: f64) -> bool {
        (a as f64 - b).abs() < 1e-6
    }

    #[test]
    fn adam_atan2_two_steps_match_hand_computation() {
        let device = Default::default();
        let opt = AdamAtan2 {
            beta1: 0.9,
            beta2: 0.95,
            weight_decay: 1.0,
        };
        let lr = 0.01;
        let param = Tensor::<Cpu, 1>::from_floats([1.0, -2.0], &device);
        let g1 = Tensor::<Cpu, 1>::from_floats([0.5, -4.0], &device);
        let (p1, s1) = SimpleOptimizer::<Cpu>::step(&opt, lr, param, g1, None);
        // Step 1: m = 0.1·g, v = 0.05·g², bias corrections 0.1 and 0.05:
        // θ ← θ·(1 − lr) − (lr/0.1)·atan2(0.1·g, √(0.05·g²)/√0.05 = |g|).
        let hand1 = |p: f64, g: f64| p * (1.0 - lr) - (lr / 0.1) * (0.1 * g).atan2(g.abs());
        let v1: Vec<f32> = p1.clone().into_data().to_vec().unwrap();
        assert!(
            close(v1[0], hand1(1.0, 0.5)) && close(v1[1], hand1(-2.0, -4.0)),
            "{v1:?}"
        );
        let g2 = Tensor::<Cpu, 1>::from_floats([1.0, 0.0], &device);
        let (p2, s2) = SimpleOptimizer::<Cpu>::step(&opt, lr, p1, g2, s1);
        assert_eq!(s2.as_ref().unwrap().time, 2);
        let hand2 = |p: f64, g_1: f64, g_2: f64| {
            let m = 0.9 * 0.1 * g_1 + 0.1 * g_2;
            let v = 0.95 * 0.05 * g_1 * g_1 + 0.05 * g_2 * g_2;
            let bc1 = 1.0 - 0.9f64.powi(2);
            let bc2 = 1.0 - 0.95f64.powi(2);
            p * (1.0 - lr) - lr / bc1 * m.atan2(v.sqrt() / bc2.sqrt())
        };
        let v2: Vec<f32> = p2.into_data().to_vec().unwrap();
        assert!(close(v2[0], hand2(v1[0] as f64, 0.5, 1.0)), "{v2:?}");
        assert!(close(v2[1], hand2(v1[1] as f64, -4.0, 0.0)), "{v2:?}");
    }

    #[test]
    fn sign_sgd_step_matches_hand_computation() {
        let device = Default::default();
        let opt = SignSgd { weight_decay: 0.5 };
        let param = Tensor::<Cpu, 1>::from_floats([1.0, 2.0, 3.0], &device);
        let grad = Tensor::<Cpu, 1>::from_floats([0.001, -7.0, 0.0], &device);
        let (p, _) = SimpleOptimizer::<Cpu>::step(&opt, 0.1, param, grad, None);
        let v: Vec<f32> = p.into_data().to_vec().unwrap();
        // θ·(1 − 0.05) − 0.1·sign(g)
        assert!(
            close(v[0], 0.95 - 0.1) && close(v[1], 1.9 + 0.1) && close(v[2], 2.85),
            "{v:?}"
        );
    }
}
