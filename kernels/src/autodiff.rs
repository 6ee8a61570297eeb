//! The fused operations under autodiff: one graph node each, whose backward
//! calls the inner backend's fused backward (Burn's "custom backend
//! operation with its own backward" pattern).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{unary, Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::{AttentionOutput, CrossEntropyOutput, FusedBackend, LayerNormOutput};

/// Give each parent that needs a gradient its gradient, in order.
macro_rules! register_parents {
    ($B:ty, $ops:expr, $grads:expr, $values:expr) => {
        for (parent, value) in $ops.parents.iter().zip($values) {
            if let Some(node) = parent {
                $grads.register::<$B>(node.id, value);
            }
        }
    };
}

#[derive(Debug)]
struct GeluTanh;

impl<B: FusedBackend> Backward<B, 1> for GeluTanh {
    /// The input.
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let x = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::fused_gelu_tanh_backward(x, grad)
        });
    }
}

#[derive(Debug)]
struct LayerNorm;

impl<B: FusedBackend> Backward<B, 3> for LayerNorm {
    /// Input, gamma, mean, 1/std.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (x, gamma, mean, rstd) = ops.state;
        let grad = grads.consume::<B>(&ops.node);
        let values = B::fused_layer_norm_backward(x, gamma, mean, rstd, grad);
        register_parents!(B, ops, grads, values);
    }
}

#[derive(Debug)]
struct Attention {
    causal: bool,
}

impl<B: FusedBackend> Backward<B, 3> for Attention {
    /// q, k, v, output, log-sum-exp.
    #[allow(clippy::type_complexity)]
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (q, k, v, output, lse) = ops.state;
        let grad = grads.consume::<B>(&ops.node);
        let values = B::fused_attention_backward(q, k, v, output, lse, grad, self.causal);
        register_parents!(B, ops, grads, values);
    }
}

#[derive(Debug)]
struct CrossEntropy;

impl<B: FusedBackend> Backward<B, 1> for CrossEntropy {
    /// Logits, targets, log-sum-exp.
    type State = (FloatTensor<B>, IntTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (logits, targets, lse) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::fused_cross_entropy_backward(logits, targets, lse, grad)
        });
    }
}

/// A stand-in for statistics that only the backward reads: under autodiff
/// the forward's callers get the output, never `mean`/`rstd`/`lse`.
fn untracked<B: FusedBackend, C: CheckpointStrategy>(
    x: FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    <Autodiff<B, C> as burn::tensor::backend::AutodiffBackend>::from_inner(x)
}

impl<B: FusedBackend, C: CheckpointStrategy> FusedBackend for Autodiff<B, C> {
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match GeluTanh
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::fused_gelu_tanh(x.primitive.clone());
                prep.finish(x.primitive, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::fused_gelu_tanh(x.primitive)),
        }
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        let nodes = [x.node.clone(), gamma.node.clone(), beta.node.clone()];
        let out = B::fused_layer_norm(
            x.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive,
            eps,
        );
        let (mean, rstd) = (out.mean.clone(), out.rstd.clone());
        let output = match LayerNorm.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(
                (x.primitive, gamma.primitive, out.mean, out.rstd),
                out.output,
            ),
            OpsKind::UnTracked(prep) => prep.finish(out.output),
        };
        LayerNormOutput {
            output,
            mean: untracked::<B, C>(mean),
            rstd: untracked::<B, C>(rstd),
        }
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> AttentionOutput<Self> {
        let nodes = [q.node.clone(), k.node.clone(), v.node.clone()];
        let out = B::fused_attention(
            q.primitive.clone(),
            k.primitive.clone(),
            v.primitive.clone(),
            causal,
        );
        let lse = out.lse.clone();
        let output = match (Attention { causal })
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(
                (
                    q.primitive,
                    k.primitive,
                    v.primitive,
                    out.output.clone(),
                    out.lse,
                ),
                out.output,
            ),
            OpsKind::UnTracked(prep) => prep.finish(out.output),
        };
        AttentionOutput {
            output,
            lse: lse.map(untracked::<B, C>),
        }
    }

    fn fused_cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> CrossEntropyOutput<Self> {
        let out = B::fused_cross_entropy(logits.primitive.clone(), targets.clone());
        let lse = out.lse.clone();
        let loss = match CrossEntropy
            .prepare::<C>([logits.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((logits.primitive, targets, out.lse), out.loss),
            OpsKind::UnTracked(prep) => prep.finish(out.loss),
        };
        CrossEntropyOutput {
            loss,
            lse: untracked::<B, C>(lse),
        }
    }

    // The backward methods are only called on the inner backend (by the
    // nodes above); on Autodiff itself they keep the composed defaults.
}
