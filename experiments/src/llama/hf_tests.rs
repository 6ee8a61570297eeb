//! Checkpoints whose head contradicts `tie_word_embeddings` (issue #42),
//! made from the random tiny Llama: refused by name, exit 2.

use super::*;
use crate::backend::Cpu;
use crate::error::exit_code_of;

/// The tied random tiny Llama (no `lm_head.weight`) in a directory.
fn tied_checkpoint() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    crate::rft::pretrained::write_random("tiny-llama", 5, dir.path()).unwrap();
    dir
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(doc.as_object_mut().unwrap());
    std::fs::write(&path, doc.to_string()).unwrap();
}

fn refused(dir: &Path, says: &[&str]) {
    let e = load::<Cpu>(dir, &Default::default()).unwrap_err();
    assert_eq!(exit_code_of(&e), 2, "{e:#}");
    let text = format!("{e:#}");
    for part in says {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

/// Without the key, a head-less checkpoint is untied by transformers'
/// default and refused, naming the file, the key, its value and the fix.
#[test]
fn an_untied_config_without_lm_head_is_refused() {
    let dir = tied_checkpoint();
    load::<Cpu>(dir.path(), &Default::default()).unwrap();
    edit_config(dir.path(), |doc| {
        doc.remove("tie_word_embeddings");
    });
    refused(
        dir.path(),
        &[
            "config.json",
            "`tie_word_embeddings` is false",
            "lm_head.weight",
            "fix:",
        ],
    );
}

/// A tied config may carry the embedding's copy as `lm_head.weight`,
/// but not another matrix.
#[test]
fn a_tied_config_with_another_lm_head_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let weights = dir.join(SINGLE);
    let with_head = |scale: f32| {
        let base = tied_checkpoint();
        for name in ["config.json", "tokenizer.json"] {
            std::fs::copy(base.path().join(name), dir.join(name)).unwrap();
        }
        let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> =
            safetensors_io::read(&base.path().join(SINGLE))
                .unwrap()
                .into_iter()
                .map(|(name, (shape, values))| (name, shape, values))
                .collect();
        let (_, shape, values) = tensors.iter().find(|t| t.0 == EMBEDDING).unwrap().clone();
        let head = values.iter().map(|v| v * scale).collect();
        tensors.push((HEAD.into(), shape, head));
        std::fs::write(&weights, safetensors_io::to_bytes(&tensors).unwrap()).unwrap();
    };
    with_head(1.0);
    load::<Cpu>(dir, &Default::default()).unwrap();
    with_head(0.5);
    refused(
        dir,
        &[
            "config.json",
            "`tie_word_embeddings` is true",
            "lm_head.weight",
            "fix:",
        ],
    );
}
