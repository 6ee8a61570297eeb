//! Model-level tests on the tiny config (CPU, seconds each).

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::act::{act_train_step, halting_decision, ActState, HaltPolicy, PuzzleBatch};
use super::config::{HrmConfig, HrmPreset};
use super::loss::hrm_loss;
use super::model::{parameter_count, rms_norm, segment_autodiff, HrmModel, Rope};
use super::train::HrmTrainer;
use crate::backend::{Cpu, CpuTrain};

fn tiny() -> HrmConfig {
    HrmPreset::builtin("tiny").unwrap().model
}

fn grids(rows: usize, seed: u64) -> Vec<[u8; 81]> {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows)
        .map(|_| std::array::from_fn(|_| rng.random_range(1..=10u8)))
        .collect()
}

pub(crate) fn batch<B: Backend>(rows: usize, seed: u64) -> PuzzleBatch<B> {
    let g = grids(rows, seed);
    PuzzleBatch::from_grids(&g, &g, &Default::default())
}

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap()
}

#[test]
fn output_shapes() {
    let cfg = tiny();
    let model = HrmModel::<Cpu>::new(&cfg, 0, &Default::default());
    let b = batch::<Cpu>(3, 1);
    let out = model.segment(model.initial_carry(3), b.inputs, b.puzzle_ids);
    assert_eq!(out.logits.dims(), [3, 81, 11]);
    assert_eq!(out.q_halt.dims(), [3]);
    assert_eq!(out.q_continue.dims(), [3]);
    assert_eq!(out.carry.z_h.dims(), [3, 82, cfg.hidden]);
    // q_head starts with weight 0, bias −5.
    assert!(values(out.q_halt).iter().all(|&q| (q + 5.0).abs() < 1e-6));
}

#[test]
fn rms_norm_without_weight_normalizes() {
    let x = Tensor::<Cpu, 2>::from_floats([[3.0, -4.0, 12.0, 0.5]], &Default::default());
    let y = values(rms_norm(x, 1e-5));
    let mean_square: f32 = y.iter().map(|v| v * v).sum::<f32>() / 4.0;
    assert!((mean_square - 1.0).abs() < 1e-4, "{mean_square}");
}

#[test]
fn rope_preserves_norms_and_position_zero() {
    let device = Default::default();
    let rope = Rope::<Cpu>::new(5, 8, 10000.0, &device);
    let x = Tensor::<Cpu, 4>::random(
        [1, 2, 5, 8],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let y = rope.apply(x.clone());
    let nx = values(x.clone().square().sum_dim(3));
    let ny = values(y.clone().square().sum_dim(3));
    for (a, b) in nx.iter().zip(&ny) {
        assert!((a - b).abs() < 1e-4 * a.max(1.0));
    }
    // Position 0 is not rotated; later positions are.
    let d0 = values((y.clone() - x.clone()).narrow(2, 0, 1).abs().max());
    let d3 = values((y - x).narrow(2, 3, 1).abs().max());
    assert!(d0[0] < 1e-6 && d3[0] > 1e-3);
}

#[test]
fn attention_is_not_causal() {
    let model = HrmModel::<Cpu>::new(&tiny(), 0, &Default::default());
    let mut g = grids(1, 2);
    let run = |g: &Vec<[u8; 81]>| {
        let b = PuzzleBatch::<Cpu>::from_grids(g, g, &Default::default());
        values(
            model
                .segment(model.initial_carry(1), b.inputs, b.puzzle_ids)
                .logits,
        )
    };
    let before = run(&g);
    g[0][80] = if g[0][80] == 5 { 6 } else { 5 };
    let after = run(&g);
    // The first cell's logits change when only the last cell changes.
    let diff: f32 = (0..11).map(|i| (before[i] - after[i]).abs()).sum();
    assert!(diff > 1e-5, "{diff}");
}

/// The 1-step gradient: gradients are identical whether the no-grad steps
/// ran on the inner backend (`segment_autodiff`) or on autodiff and were
/// detached (`segment`), and differ from backpropagating through all steps.
#[test]
fn only_last_l_and_h_steps_carry_gradient() {
    let cfg = tiny();
    let device = Default::default();
    let model = HrmModel::<CpuTrain>::new(&cfg, 3, &device);
    let b = batch::<CpuTrain>(2, 4);
    let loss_of = |logits: Tensor<CpuTrain, 3>| -> Tensor<CpuTrain, 1> {
        let q = Tensor::zeros([2], &device);
        hrm_loss(logits, b.labels.clone(), q.clone(), q, None).total
    };
    let grad_of = |loss: Tensor<CpuTrain, 1>| {
        let grads = loss.backward();
        values(model.token_embedding.val().grad(&grads).unwrap())
    };
    // Start from a non-trivial carry (after one segment) so z_L/z_H depend on x.
    let first = model.segment(
        model.initial_carry(2),
        b.inputs.clone(),
        b.puzzle_ids.clone(),
    );
    let carry = first.carry;
    let a = grad_of(loss_of(
        segment_autodiff(
            &model,
            carry.clone(),
            b.inputs.clone(),
            b.puzzle_ids.clone(),
        )
        .logits,
    ));
    let d = grad_of(loss_of(
        model
            .segment(carry.clone(), b.inputs.clone(), b.puzzle_ids.clone())
            .logits,
    ));
    let max_diff = a
        .iter()
        .zip(&d)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(max_diff < 1e-6, "{max_diff}");
    // Full backprop through every step gives a different gradient.
    let x = model.embed(b.inputs.clone(), b.puzzle_ids.clone());
    let full = model.final_step(model.steps_without_grad(carry, x.clone()), x);
    let f = grad_of(loss_of(model.readout(full).logits));
    let full_diff = a
        .iter()
        .zip(&f)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(full_diff > 1e-6, "{full_diff}");
}

#[test]
fn parameter_count_matches_module_tiny_and_paper() {
    let device = Default::default();
    for name in ["tiny", "sudoku-extreme-1k"] {
        let cfg = HrmPreset::builtin(name).unwrap().model;
        let model = HrmModel::<Cpu>::new(&cfg, 0, &device);
        assert_eq!(
            model.num_params(),
            parameter_count(&cfg) + 2 * cfg.hidden,
            "{name}"
        );
    }
    let paper = HrmPreset::builtin("sudoku-extreme-1k").unwrap().model;
    assert_eq!(
        parameter_count(&paper),
        8 * 3_407_872 + 5_632 + 512 + 5_632 + 1_026
    );
    assert_eq!(parameter_count(&paper), 27_275_778);
}

#[test]
fn halting_rule_and_forced_policies() {
    // max 4: halt on vote, at the limit, and never below the exploration floor.
    assert_eq!(
        halting_decision(&[1, 4, 2, 2], &[true, false, false, true], &[0, 0, 0, 3], 4),
        vec![true, true, false, false]
    );
    let mut cfg = tiny();
    cfg.halt_exploration_prob = 0.0;
    cfg.halt_max_steps = 3;
    let device = Default::default();
    let model = HrmModel::<CpuTrain>::new(&cfg, 0, &device);
    let mut rng = StdRng::seed_from_u64(0);
    let mut state = ActState::new(&model, batch(2, 5));
    state.replace_halted(&model, batch(2, 6));
    let out = act_train_step(&model, &mut state, HaltPolicy::Forced(true), &mut rng);
    assert_eq!(
        (out.steps.clone(), out.halted.clone()),
        (vec![1, 1], vec![true, true])
    );
    assert!(out.target_q_continue.is_some());
    // Forced continue: runs to halt_max_steps, then halts.
    state.replace_halted(&model, batch(2, 7));
    for expect in 1..=3 {
        let out = act_train_step(&model, &mut state, HaltPolicy::Forced(false), &mut rng);
        assert_eq!(out.steps, vec![expect; 2]);
        assert_eq!(out.halted, vec![expect == 3; 2]);
    }
    // Learned with a q_head bias that says "halt" (+10 halt, −10 continue).
    let mut halting = model.clone();
    halting.q_head.bias = Some(burn::module::Param::from_tensor(Tensor::from_floats(
        [10.0, -10.0],
        &device,
    )));
    let mut state = ActState::new(&halting, batch(2, 8));
    state.replace_halted(&halting, batch(2, 9));
    let out = act_train_step(&halting, &mut state, HaltPolicy::Learned, &mut rng);
    assert_eq!(out.halted, vec![true, true]);
    // The initial bias −5/−5 never votes halt.
    let mut state = ActState::new(&model, batch(2, 8));
    state.replace_halted(&model, batch(2, 9));
    let out = act_train_step(&model, &mut state, HaltPolicy::Learned, &mut rng);
    assert_eq!(out.halted, vec![false, false]);
}

#[test]
fn replace_halted_resets_only_halted_rows() {
    let cfg = tiny();
    let device = Default::default();
    let model = HrmModel::<Cpu>::new(&cfg, 0, &device);
    let mut state = ActState::new(&model, batch(2, 1));
    state.replace_halted(&model, batch(2, 2));
    let out = model.segment(
        state.carry.clone(),
        state.batch.inputs.clone(),
        state.batch.puzzle_ids.clone(),
    );
    state.carry = out.carry;
    state.steps = vec![3, 2];
    state.halted = vec![true, false];
    let kept_input = values(state.batch.inputs.clone().narrow(0, 1, 1).float());
    let fresh = batch::<Cpu>(2, 3);
    let fresh_row0 = values(fresh.inputs.clone().narrow(0, 0, 1).float());
    state.replace_halted(&model, fresh);
    assert_eq!(state.steps, vec![0, 2]);
    assert_eq!(
        values(state.batch.inputs.clone().narrow(0, 0, 1).float()),
        fresh_row0
    );
    assert_eq!(
        values(state.batch.inputs.clone().narrow(0, 1, 1).float()),
        kept_input
    );
    let init = model.initial_carry(1);
    assert_eq!(
        values(state.carry.z_h.clone().narrow(0, 0, 1)),
        values(init.z_h.clone())
    );
    assert_ne!(values(state.carry.z_h.narrow(0, 1, 1)), values(init.z_h));
}

/// ~100 steps on a copy task (label = input) lower the loss clearly.
#[test]
fn tiny_training_learns_copy_task() {
    let mut preset = HrmPreset::builtin("tiny").unwrap();
    preset.model.halt_max_steps = 2;
    preset.train.lr = 3e-3;
    preset.train.lr_warmup_steps = 10;
    let device = Default::default();
    let mut trainer = HrmTrainer::<CpuTrain>::new(&preset, 100, 8, batch(8, 0), &device);
    let mut losses = Vec::new();
    for step in 0..100u64 {
        losses.push(trainer.train_step(batch(8, 100 + step)).lm_loss);
    }
    let first: f64 = losses[..10].iter().sum::<f64>() / 10.0;
    let last: f64 = losses[90..].iter().sum::<f64>() / 10.0;
    assert!(last < 0.5 * first, "lm loss {first:.3} → {last:.3}");
}

/// Gradient accumulation is exact: 2 micro-batches of 4 rows give the model
/// (and ACT state) one batch of 8 gives, step after step.
#[test]
fn micro_batches_match_the_whole_batch() {
    let mut preset = HrmPreset::builtin("tiny").unwrap();
    preset.model.halt_max_steps = 2;
    let device = Default::default();
    let mut whole = HrmTrainer::<CpuTrain>::new(&preset, 10, 8, batch(8, 0), &device);
    let mut split = HrmTrainer::<CpuTrain>::new(&preset, 10, 4, batch(8, 0), &device);
    assert_eq!(split.chunks.len(), 2);
    for step in 0..3u64 {
        let a = whole.train_step(batch(8, 50 + step));
        let b = split.train_step(batch(8, 50 + step));
        assert!((a.loss - b.loss).abs() < 1e-5, "{} vs {}", a.loss, b.loss);
        assert_eq!(a.halted_steps, b.halted_steps);
    }
    let (wa, wb) = (
        values(whole.model.token_embedding.val()),
        values(split.model.token_embedding.val()),
    );
    let max_diff = wa
        .iter()
        .zip(&wb)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(max_diff < 1e-5, "{max_diff}");
    assert_eq!(whole.act_state().steps, split.act_state().steps);
}

/// `runs report` plots HRM throughput in puzzles/s (issue #24): each step's
/// metrics line carries it, the global batch over the step's seconds.
#[test]
fn a_step_line_records_puzzles_per_second() {
    let m = super::train::StepMetrics {
        step: 3,
        lr: 1e-3,
        loss: 1.0,
        lm_loss: 0.9,
        q_halt_loss: 0.05,
        q_continue_loss: 0.05,
        exact_accuracy: 0.0,
        cell_accuracy: 0.5,
        halted_steps: vec![2, 4],
        loss_scale: None,
    };
    let line = super::run::step_record(&m, 0.5, 32);
    assert_eq!(line["puzzles_per_s"], 64.0);
    assert_eq!(line["steps_per_s"], 2.0);
    assert_eq!(line["step"], 3);
}
