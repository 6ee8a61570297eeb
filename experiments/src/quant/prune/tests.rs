use burn::tensor::Int;

use super::*;
use crate::backend::Cpu;
use crate::gpt2::hf::tests::small;

fn tensor<'a>(weights: &'a mut Weights, name: &str) -> &'a mut Vec<f32> {
    &mut weights
        .iter_mut()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .2
}

fn logits(model: &Gpt2<Cpu>) -> Vec<f32> {
    let idx = Tensor::<Cpu, 2, Int>::from_ints([[1, 5, 7, 39, 2, 0, 11, 3]], &Default::default());
    model.forward(idx).into_data().to_vec::<f32>().unwrap()
}

/// Units whose weights are all zero contribute nothing and score lowest, so
/// pruning removes exactly them and the smaller model computes the same
/// logits as the full one.
#[test]
fn removing_zeroed_heads_and_neurons_leaves_the_outputs_unchanged() {
    let cfg = small(); // 2 layers, 2 heads of width 8, 64 MLP neurons
    let full = cfg.init::<Cpu>(&Default::default());
    let mut weights = hf::named_weights(&full);
    let (d, hd) = (16, 8);
    let dead_neurons: Vec<usize> = (0..32).filter(|j| j % 2 == 1).collect(); // 16 = 25 %
    for layer in 0..cfg.n_layer {
        let p = |s: &str| format!("h.{layer}.{s}");
        // Head 1: its q, k and v columns and biases, its c_proj input rows.
        let head_cols: Vec<usize> = (0..3)
            .flat_map(|block| (block * d + hd..block * d + 2 * hd).collect::<Vec<_>>())
            .collect();
        let qkv = tensor(&mut weights, &p("attn.c_attn.weight"));
        for r in 0..d {
            for &c in &head_cols {
                qkv[r * 3 * d + c] = 0.0;
            }
        }
        let bias = tensor(&mut weights, &p("attn.c_attn.bias"));
        for &c in &head_cols {
            bias[c] = 0.0;
        }
        let proj = tensor(&mut weights, &p("attn.c_proj.weight"));
        proj[hd * d..2 * hd * d].fill(0.0);
        let fc = tensor(&mut weights, &p("mlp.c_fc.weight"));
        for r in 0..d {
            for &j in &dead_neurons {
                fc[r * 4 * d + j] = 0.0;
            }
        }
        let fc_bias = tensor(&mut weights, &p("mlp.c_fc.bias"));
        for &j in &dead_neurons {
            fc_bias[j] = 0.0;
        }
        let down = tensor(&mut weights, &p("mlp.c_proj.weight"));
        for &j in &dead_neurons {
            down[j * d..(j + 1) * d].fill(0.0);
        }
    }
    let config = PruneConfig {
        mlp_fraction: 0.25,
        head_fraction: 0.5,
        recovery_steps: 0,
        recovery_lr: 1e-3,
        schemes: vec![],
    };
    let (heads, hidden) = config.shape(&cfg).unwrap();
    assert_eq!((heads, hidden), (1, 48));
    let pruned = prune_weights(&cfg, &weights, heads, hidden).unwrap();
    let shape = |n: &str| pruned[n].0.clone();
    assert_eq!(shape("h.1.attn.c_attn.weight"), vec![16, 24]);
    assert_eq!(shape("h.1.attn.c_attn.bias"), vec![24]);
    assert_eq!(shape("h.1.attn.c_proj.weight"), vec![8, 16]);
    assert_eq!(shape("h.1.mlp.c_fc.weight"), vec![16, 48]);
    assert_eq!(shape("h.1.mlp.c_fc.bias"), vec![48]);
    assert_eq!(shape("h.1.mlp.c_proj.weight"), vec![48, 16]);
    assert_eq!(shape("wte.weight"), vec![40, 16]);
    // Nothing that was kept is zero: the dead units are the ones gone.
    for name in ["h.0.attn.c_proj.weight", "h.0.mlp.c_proj.weight"] {
        let rows = pruned[name].1.chunks(d);
        assert!(rows.clone().all(|r| r.iter().any(|v| *v != 0.0)), "{name}");
    }

    let named = named(&weights);
    let zeroed = hf::load_tensors(cfg.init::<Cpu>(&Default::default()), &named, "zeroed").unwrap();
    let small_model = hf::load_tensors(
        cfg.init_shaped::<Cpu>(heads, hidden, &Default::default()),
        &pruned,
        "pruned",
    )
    .unwrap();
    assert_eq!(small_model.h[0].attn.head_dim(), 8);
    let (a, b) = (logits(&zeroed), logits(&small_model));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "logits differ by {worst}");
    // A live head removed instead changes them: the check above can fail.
    let other = prune_weights(&cfg, &hf::named_weights(&full), heads, hidden).unwrap();
    let other = hf::load_tensors(
        cfg.init_shaped::<Cpu>(heads, hidden, &Default::default()),
        &other,
        "pruned",
    )
    .unwrap();
    let c = logits(&other);
    assert!(a.iter().zip(&c).any(|(x, y)| (x - y).abs() > 1e-4));
}

#[test]
fn bad_prune_tables_are_usage_errors() {
    let base = PruneConfig {
        mlp_fraction: 0.5,
        head_fraction: 0.0,
        recovery_steps: 50,
        recovery_lr: 1e-3,
        schemes: default_schemes(),
    };
    base.validate().unwrap();
    let cases = [
        (
            PruneConfig {
                mlp_fraction: 1.0,
                ..base.clone()
            },
            "mlp_fraction = 1 is outside [0, 1)",
        ),
        (
            PruneConfig {
                head_fraction: -0.1,
                ..base.clone()
            },
            "head_fraction = -0.1",
        ),
        (
            PruneConfig {
                mlp_fraction: 0.0,
                ..base.clone()
            },
            "nothing to prune",
        ),
        (
            PruneConfig {
                recovery_lr: 0.0,
                ..base.clone()
            },
            "recovery_lr = 0",
        ),
        (
            PruneConfig {
                schemes: vec!["burn-q4-block32".into()],
                ..base.clone()
            },
            "`burn-q4-block32` is not a packed scheme",
        ),
    ];
    for (config, expected) in cases {
        let err = config.validate().unwrap_err();
        assert!(format!("{err:#}").contains(expected), "{err:#}");
        assert_eq!(crate::error::exit_code_of(&err), 2);
    }
    // 0.9 of 2 heads rounds to 2 removed: nothing would be left.
    let all = PruneConfig {
        head_fraction: 0.9,
        ..base
    };
    all.validate().unwrap();
    let err = all.shape(&small()).unwrap_err();
    assert!(format!("{err:#}").contains("leaves no unit"), "{err:#}");
    assert_eq!(crate::error::exit_code_of(&err), 2);
}
