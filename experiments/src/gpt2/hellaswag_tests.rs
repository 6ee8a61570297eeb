use super::*;
use crate::backend::Cpu;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/hellaswag/hellaswag_val_sample.jsonl"
);

fn tiny(vocab: usize, block: usize) -> (ModelConfig, Gpt2<Cpu>) {
    let cfg = ModelConfig {
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
        block_size: block,
        vocab_size: vocab,
        dropout: 0.0,
    };
    let model = cfg.init::<Cpu>(&Default::default());
    (cfg, model)
}

#[test]
fn loads_the_public_jsonl_layout() {
    let items = load(Path::new(FIXTURE), None).unwrap();
    assert_eq!(items.len(), 5);
    assert_eq!(items[0].label, 1);
    assert_eq!(
        items[0].ctx,
        "A man lays two slices of bread on a wooden board. he"
    );
    assert_eq!(
        items[2].endings[3],
        "he scrubs each plate with a sponge and rinses it."
    );
    assert_eq!(load(Path::new(FIXTURE), Some(2)).unwrap().len(), 2);

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"ctx\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n",
    )
    .unwrap();
    let e = load(&bad, None).unwrap_err();
    assert_eq!(crate::error::exit_code_of(&e), 2);
    let text = e.to_string();
    assert!(
        text.contains("bad.jsonl line 1") && text.contains("1 endings"),
        "{text}"
    );
    std::fs::write(&bad, "\n{\"ctx\": 3}\n").unwrap();
    let text = load(&bad, None).unwrap_err().to_string();
    assert!(text.contains("line 2"), "{text}");
    let text = load(&dir.path().join("none.jsonl"), None)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("none.jsonl") && text.contains("hellaswag"),
        "{text}"
    );
}

#[test]
fn rows_are_context_then_space_ending_in_gpt2_bpe() {
    let items = load(Path::new(FIXTURE), None).unwrap();
    let gpt2 = Tokenizer::gpt2();
    let rows = render(&items[1], &gpt2);
    assert_eq!(rows.len(), 4);
    let ctx = gpt2.encode(&items[1].ctx);
    for ((row, at), ending) in rows.iter().zip(&items[1].endings) {
        assert_eq!(*at, ctx.len());
        assert_eq!(row[..*at], ctx[..]);
        // " opens" is one BPE token with its space, as build-nanogpt encodes it.
        assert_eq!(row[*at..], gpt2.encode(&format!(" {ending}"))[..]);
    }
    assert_eq!(gpt2.decode(&rows[0].0[rows[0].1..rows[0].1 + 1]), " opens");
}

/// The batched, padded, gathered losses equal a plain per-row computation
/// (log-softmax by hand in f64 over the unpadded row's logits).
#[test]
fn ending_losses_match_a_direct_computation() {
    let (cfg, model) = tiny(256, 64);
    let items = load(Path::new(FIXTURE), Some(2)).unwrap();
    let byte = Tokenizer::byte();
    let device = Default::default();
    for item in &items {
        let rows = render(item, &byte);
        let got = ending_losses(&model, &cfg, &rows, &device);
        for ((row, at), (sum, mean)) in rows.iter().zip(&got) {
            // Rows longer than the block keep their last 64 tokens.
            let cut = row.len().saturating_sub(64);
            let row = &row[cut..];
            let at = at - cut;
            let ids: Vec<i64> = row.iter().map(|&t| i64::from(t)).collect();
            let n = ids.len();
            let idx = Tensor::<Cpu, 2, Int>::from_data(TensorData::new(ids, [1, n]), &device);
            let logits: Vec<f32> = model.forward(idx).into_data().to_vec().unwrap();
            let mut want = 0.0f64;
            for j in at..n {
                let l = &logits[(j - 1) * 256..j * 256];
                let max = l.iter().copied().fold(f32::MIN, f32::max) as f64;
                let lse = max + l.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
                want += lse - l[row[j] as usize] as f64;
            }
            assert!((sum - want).abs() < 1e-3, "sum {sum} vs {want}");
            assert!((mean - want / (n - at) as f64).abs() < 1e-4);
        }
    }
}

#[test]
fn acc_uses_the_summed_loss_and_acc_norm_the_mean() {
    let mut score = Score {
        items: 0,
        correct: 0,
        correct_norm: 0,
    };
    // Ending 1 is long: highest total, lowest per token.
    let losses = [(10.0, 5.0), (12.0, 3.0), (11.0, 11.0), (20.0, 10.0)];
    score.tally(&losses, 1);
    assert_eq!((score.correct, score.correct_norm), (0, 1));
    score.tally(&losses, 0);
    assert_eq!((score.items, score.correct, score.correct_norm), (2, 1, 1));
    assert_eq!((score.acc(), score.acc_norm()), (0.5, 0.5));
    let mut m = Map::new();
    score.insert_into(&mut m);
    assert_eq!(m["hellaswag_acc_norm"], 0.5);
    assert_eq!(m["hellaswag_items"], 2);
}

#[test]
fn scores_the_fixture_with_a_gpt2_vocabulary_model() {
    let (cfg, model) = tiny(50304, 128);
    let items = load(Path::new(FIXTURE), None).unwrap();
    let device = Default::default();
    let tokenizer = Tokenizer::gpt2();
    let alone = score(
        &model,
        &cfg,
        &tokenizer,
        &items,
        &EvalShare::alone(),
        &device,
    )
    .unwrap();
    assert_eq!(alone.items, 5);
    assert!(alone.correct <= 5 && alone.correct_norm <= 5);

    // Two ranks, each scoring its groups; here `sum` keeps each rank's own
    // counts so the two halves can be seen apart and added by hand.
    let own = |counts: &[f64]| Ok(counts.to_vec());
    let halves: Vec<Score> = (0..2)
        .map(|rank| {
            let share = EvalShare::across(rank, 2, &own);
            score(&model, &cfg, &tokenizer, &items, &share, &device).unwrap()
        })
        .collect();
    // 5 items in groups of 4: rank 0 scores the first group, rank 1 the last item.
    assert_eq!((halves[0].items, halves[1].items), (4, 1));
    assert_eq!(
        (
            halves[0].correct + halves[1].correct,
            halves[0].correct_norm + halves[1].correct_norm
        ),
        (alone.correct, alone.correct_norm)
    );

    // Scoring a group in one forward pass (rows padded to the longest) gives
    // each item the losses it gets alone: padding sits after every scored
    // position, and attention is causal.
    let group: Vec<(Vec<u32>, usize)> = items[..4]
        .iter()
        .flat_map(|item| render(item, &tokenizer))
        .collect();
    let together = ending_losses(&model, &cfg, &group, &device);
    for (i, item) in items[..4].iter().enumerate() {
        let apart = ending_losses(&model, &cfg, &render(item, &tokenizer), &device);
        for (a, b) in apart.iter().zip(&together[4 * i..4 * i + 4]) {
            assert!(
                (a.0 - b.0).abs() < 1e-3 && (a.1 - b.1).abs() < 1e-4,
                "{a:?} vs {b:?}"
            );
        }
    }
}
