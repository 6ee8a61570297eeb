//! Each fused CPU kernel against the unfused composition of Burn ops that a
//! model would otherwise run, forward and gradients, to 1e-5; and
//! thread-count independence.

use burn::backend::{Autodiff, Flex};
use burn::module::Param;
use burn::nn::LayerNormConfig;
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::TensorData;

type B = Autodiff<Flex>;

/// A tensor of values uniform in [-√3, √3) (variance 1), the same for the
/// same seed. Not Burn's `Tensor::random`: its generator is global, and
/// tests run in parallel would draw from each other's seeds.
fn random<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
    let n: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let values: Vec<f32> = (0..n)
        .map(|_| {
            // splitmix64
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let unit = (z >> 40) as f32 / (1u64 << 24) as f32;
            (unit * 2.0 - 1.0) * 3f32.sqrt()
        })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// A leaf that collects gradients, made from `t`.
fn leaf<const D: usize>(t: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_inner(t.inner()).require_grad()
}

fn max_diff<const D: usize>(a: Tensor<Flex, D>, b: Tensor<Flex, D>) -> f32 {
    (a - b).abs().max().into_scalar()
}

/// Relative to the reference's largest magnitude (gradients can be large).
fn assert_close<const D: usize>(what: &str, got: Tensor<Flex, D>, want: Tensor<Flex, D>) {
    let scale: f32 = want.clone().abs().max().into_scalar();
    let diff = max_diff(got, want);
    assert!(
        diff <= 1e-5 * scale.max(1.0),
        "{what}: max difference {diff} (reference magnitude {scale})"
    );
}

/// Σ out ∘ r for a fixed random r: a scalar whose gradient is r, so every
/// element of the output's backward path is exercised.
fn probe<const D: usize>(out: Tensor<B, D>, seed: u64) -> Tensor<B, 1> {
    let r = random(out.dims(), seed).detach();
    (out * r).sum()
}

#[test]
fn gelu_matches_the_composed_formula() {
    let x = leaf(random([3, 50, 97], 1));
    let fused = crate::gelu_tanh(x.clone());
    let composed = {
        let cube = x.clone() * x.clone() * x.clone();
        let inner = (x.clone() + cube * 0.044715) * 0.797_884_560_802_865_4;
        x.clone() * (inner.tanh() + 1.0) * 0.5
    };
    assert_close(
        "gelu forward",
        fused.clone().inner(),
        composed.clone().inner(),
    );
    let g1 = probe(fused, 2).backward();
    let g2 = probe(composed, 2).backward();
    assert_close("gelu dx", x.grad(&g1).unwrap(), x.grad(&g2).unwrap());
}

#[test]
fn layer_norm_matches_burn_nn_layer_norm() {
    let device = Default::default();
    let mut ln = LayerNormConfig::new(96)
        .with_epsilon(1e-5)
        .init::<B>(&device);
    ln.gamma = Param::from_tensor(leaf(random([96], 3) + 1.0));
    ln.beta = Some(Param::from_tensor(leaf(random([96], 4))));
    // 3 × 70 = 210 rows: several blocks, the last one partial.
    let x = leaf(random([3, 70, 96], 5) * 3.0 + 0.5);
    let beta = ln.beta.as_ref().unwrap().val();
    let fused = crate::layer_norm(x.clone(), ln.gamma.val(), beta.clone(), 1e-5);
    let reference = ln.forward(x.clone());
    assert_close(
        "layer norm forward",
        fused.clone().inner(),
        reference.clone().inner(),
    );
    let g1 = probe(fused, 6).backward();
    let g2 = probe(reference, 6).backward();
    assert_close("layer norm dx", x.grad(&g1).unwrap(), x.grad(&g2).unwrap());
    let gamma = ln.gamma.val();
    assert_close(
        "layer norm dgamma",
        gamma.grad(&g1).unwrap(),
        gamma.grad(&g2).unwrap(),
    );
    assert_close(
        "layer norm dbeta",
        beta.grad(&g1).unwrap(),
        beta.grad(&g2).unwrap(),
    );
}

fn check_attention(
    batch: usize,
    heads: usize,
    queries: usize,
    keys: usize,
    hd: usize,
    causal: bool,
) {
    // q/k/v as the strided views a model makes: [B, T, H·hd] → [B, H, T, hd];
    // gradients are checked on the [B, T, H·hd] leaves.
    let (xq, xk, xv) = (
        leaf(random([batch, queries, heads * hd], 11)),
        leaf(random([batch, keys, heads * hd], 12)),
        leaf(random([batch, keys, heads * hd], 13)),
    );
    let view = |x: &Tensor<B, 3>| -> Tensor<B, 4> {
        let rows = x.dims()[1];
        x.clone().reshape([batch, rows, heads, hd]).swap_dims(1, 2)
    };
    // Each path gets its own views: a backward pass frees the graph nodes
    // it walks, so two passes cannot share intermediate nodes.
    let fused = crate::attention(view(&xq), view(&xk), view(&xv), causal);
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: causal,
    };
    let reference = burn_attention(view(&xq), view(&xk), view(&xv), None, None, options);
    let what = format!("attention {batch}x{heads}x{queries}x{keys}x{hd} causal={causal}");
    assert_close(
        &format!("{what} forward"),
        fused.clone().inner(),
        reference.clone().inner(),
    );
    let g1 = probe(fused, 14).backward();
    let g2 = probe(reference, 14).backward();
    for (name, t) in [("dq", &xq), ("dk", &xk), ("dv", &xv)] {
        assert_close(
            &format!("{what} {name}"),
            t.grad(&g1).unwrap(),
            t.grad(&g2).unwrap(),
        );
    }
}

#[test]
fn causal_attention_matches_burn_attention() {
    // 150 queries: two full row blocks and a partial one.
    check_attention(2, 3, 150, 150, 16, true);
    check_attention(1, 2, 7, 7, 8, true);
}

#[test]
fn bidirectional_attention_matches_burn_attention() {
    check_attention(2, 2, 81, 81, 16, false);
    check_attention(1, 2, 5, 9, 8, false);
}

#[test]
fn cross_entropy_matches_log_softmax_and_gather() {
    let device = Default::default();
    let (rows, classes) = (203, 67);
    let logits = leaf(random([rows, classes], 21) * 4.0);
    let targets: Vec<i64> = (0..rows).map(|r| ((r * 37 + 5) % classes) as i64).collect();
    let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(targets, [rows]), &device);
    let fused = crate::cross_entropy(logits.clone(), targets.clone());
    let reference = log_softmax(logits.clone(), 1)
        .gather(1, targets.reshape([rows, 1]))
        .reshape([rows])
        .neg();
    assert_close(
        "cross entropy forward",
        fused.clone().inner(),
        reference.clone().inner(),
    );
    let g1 = probe(fused, 22).backward();
    let g2 = probe(reference, 22).backward();
    assert_close(
        "cross entropy dlogits",
        logits.grad(&g1).unwrap(),
        logits.grad(&g2).unwrap(),
    );
}

/// The Flex kernels give the composed module's results too (the path other
/// backends and other dtypes take), straight on the inner backend.
#[test]
fn flex_kernels_agree_with_the_composed_module() {
    use crate::{composed, FusedBackend};
    let p = |t: Tensor<B, 2>| t.inner().into_primitive().tensor();
    let t2 = |p| Tensor::<Flex, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(p));
    let t1 = |p| Tensor::<Flex, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(p));
    let x = p(random([40, 33], 31));
    let g = p(random([40, 33], 32));
    let gamma = random([33], 33).inner().into_primitive().tensor();
    let beta = random([33], 34).inner().into_primitive().tensor();
    assert_close(
        "gelu backward",
        t2(Flex::fused_gelu_tanh_backward(x.clone(), g.clone())),
        t2(composed::gelu_tanh_backward::<Flex>(x.clone(), g.clone())),
    );
    let fused = Flex::fused_layer_norm(x.clone(), gamma.clone(), beta.clone(), 1e-5);
    let reference = composed::layer_norm::<Flex>(x.clone(), gamma.clone(), beta, 1e-5);
    assert_close("layer norm", t2(fused.output), t2(reference.output));
    assert_close(
        "layer norm mean",
        t1(fused.mean.clone()),
        t1(reference.mean),
    );
    assert_close(
        "layer norm rstd",
        t1(fused.rstd.clone()),
        t1(reference.rstd),
    );
    let dfused = Flex::fused_layer_norm_backward(
        x.clone(),
        gamma.clone(),
        fused.mean.clone(),
        fused.rstd.clone(),
        g.clone(),
    );
    let dref = composed::layer_norm_backward::<Flex>(x, gamma, fused.mean, fused.rstd, g);
    for (i, (a, b)) in dfused.into_iter().zip(dref).enumerate() {
        if i == 0 {
            assert_close("layer norm backward dx", t2(a), t2(b));
        } else {
            assert_close("layer norm backward dgamma/dbeta", t1(a), t1(b));
        }
    }
}

/// The composed attention and cross-entropy backward (what CubeCL backends
/// and non-f32 dtypes run) against the Flex kernels.
#[test]
fn composed_attention_and_cross_entropy_backward_agree_with_flex() {
    use crate::{composed, FusedBackend};
    let t4 = |p| Tensor::<Flex, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(p));
    let t2 = |p| Tensor::<Flex, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(p));
    let prim = |t: Tensor<B, 4>| t.inner().into_primitive().tensor();
    for causal in [true, false] {
        let (q, k, v, g) = (
            prim(random([2, 3, 70, 16], 51)),
            prim(random([2, 3, 70, 16], 52)),
            prim(random([2, 3, 70, 16], 53)),
            prim(random([2, 3, 70, 16], 54)),
        );
        let fwd = Flex::fused_attention(q.clone(), k.clone(), v.clone(), causal);
        let fused = Flex::fused_attention_backward(
            q.clone(),
            k.clone(),
            v.clone(),
            fwd.output.clone(),
            fwd.lse.clone(),
            g.clone(),
            causal,
        );
        let reference = composed::attention_backward::<Flex>(q, k, v, fwd.output, None, g, causal);
        for (a, b) in fused.into_iter().zip(reference) {
            assert_close(&format!("attention backward causal={causal}"), t4(a), t4(b));
        }
    }
    let device = Default::default();
    let logits = random([50, 9], 55).inner().into_primitive().tensor();
    let targets: Vec<i64> = (0..50).map(|r| (r * 7 % 9) as i64).collect();
    let targets = Tensor::<Flex, 1, Int>::from_data(TensorData::new(targets, [50]), &device);
    let grad = random([50], 56).inner().into_primitive().tensor();
    let out = Flex::fused_cross_entropy(logits.clone(), targets.clone().into_primitive());
    let fused = Flex::fused_cross_entropy_backward(
        logits.clone(),
        targets.clone().into_primitive(),
        out.lse.clone(),
        grad.clone(),
    );
    let reference =
        composed::cross_entropy_backward::<Flex>(logits, targets.into_primitive(), out.lse, grad);
    assert_close("cross entropy backward", t2(fused), t2(reference));
}

/// The same inputs give the same bits on 1 and on 3 threads: work is split
/// into fixed pieces, partial sums added in a fixed order.
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let run = || {
        let x = leaf(random([4, 64, 128], 41));
        let qkv = leaf(random([2, 96, 3 * 64], 42));
        let heads = |i: usize| -> Tensor<B, 4> {
            qkv.clone()
                .narrow(2, i * 64, 64)
                .reshape([2, 96, 4, 16])
                .swap_dims(1, 2)
        };
        let gamma = leaf(random([128], 43));
        let beta = leaf(random([128], 44));
        let y = crate::layer_norm(
            crate::gelu_tanh(x.clone()),
            gamma.clone(),
            beta.clone(),
            1e-5,
        );
        let a = crate::attention(heads(0), heads(1), heads(2), true);
        let loss = probe(y, 45) + probe(a, 46);
        let grads = loss.backward();
        let mut bits: Vec<u32> = Vec::new();
        for t in [
            x.grad(&grads).unwrap(),
            gamma.grad(&grads).unwrap().reshape([1, 1, 128]),
        ] {
            bits.extend(
                t.into_data()
                    .to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits()),
            );
        }
        bits.extend(
            qkv.grad(&grads)
                .unwrap()
                .into_data()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits()),
        );
        bits
    };
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let one = pool(1).install(run);
    let three = pool(3).install(run);
    assert_eq!(one, three);
}
