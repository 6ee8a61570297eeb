//! Hostile checkpoint directories (issue #40): each file of a checkpoint
//! in turn made a link out of the directory or a FIFO, and every reader of
//! it (the model loader, the tokenizer, the chat template, rft's
//! fingerprint and its copy into a run directory) refuses it: exit 2,
//! naming the file, quoting nothing of the target, copying nothing, and
//! never blocking on the FIFO. Plus a tensor in two shards, and the
//! tokenizers crate's panics. One tiny random checkpoint, no training.

use std::path::Path;

use crate::backend::Cpu;
use crate::error::exit_code_of;
use crate::pretrained::{self, ChatTemplate, HfTokenizer};
use crate::rft::pretrained::{fingerprint, write_random};

/// Inside every outside file: if a message or a copy holds it, the file
/// was read.
const MARK: &str = "SECRET-OUTSIDE-MARK";

/// A tiny Llama checkpoint with every companion file rft copies.
fn checkpoint(dir: &Path) {
    write_random("tiny-llama", 5, dir).unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write("chat_template.jinja", "{{ messages[0]['content'] }}");
    write("tokenizer_config.json", r#"{"eos_token": "</s>"}"#);
    write("special_tokens_map.json", r#"{"eos_token": "</s>"}"#);
    write("generation_config.json", r#"{"eos_token_id": 256}"#);
}

/// Which readers read `name` (the others must go on working).
fn readers_of(name: &str) -> &'static [&'static str] {
    match name {
        "config.json" | "generation_config.json" => &["load", "fingerprint", "copy"],
        "model.safetensors" => &["load", "fingerprint"],
        "tokenizer.json" => &["tokenizer", "fingerprint", "copy"],
        "chat_template.jinja" | "tokenizer_config.json" => &["chat", "fingerprint", "copy"],
        "special_tokens_map.json" => &["copy"],
        _ => unreachable!("{name}"),
    }
}

fn read_all(dir: &Path, out: &Path) -> Vec<(&'static str, anyhow::Result<()>)> {
    let device = Default::default();
    vec![
        ("load", pretrained::load::<Cpu>(dir, &device).map(|_| ())),
        ("tokenizer", HfTokenizer::load(dir, false).map(|_| ())),
        ("chat", ChatTemplate::load(dir).map(|_| ())),
        ("fingerprint", fingerprint(dir).map(|_| ())),
        (
            "copy",
            crate::rft::family::llama_task::copy_companions(dir, out),
        ),
    ]
}

#[test]
fn every_checkpoint_file_linked_out_or_a_fifo_is_refused_by_each_reader() {
    let names = [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ];
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good");
    checkpoint(&good);
    for name in names {
        for kind in ["link out", "relative link out", "fifo"] {
            let case = tmp
                .path()
                .join(format!("case-{name}-{}", kind.replace(' ', "-")));
            let (dir, outside, out) = (case.join("ckpt"), case.join("elsewhere"), case.join("run"));
            for d in [&dir, &outside, &out] {
                std::fs::create_dir_all(d).unwrap();
            }
            for entry in std::fs::read_dir(&good).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
            // The outside file is the real one with the mark appended:
            // followed, it would be read (or quoted, or copied).
            let mut bytes = std::fs::read(dir.join(name)).unwrap();
            bytes.extend_from_slice(MARK.as_bytes());
            std::fs::write(outside.join(name), bytes).unwrap();
            std::fs::remove_file(dir.join(name)).unwrap();
            match kind {
                "link out" => {
                    std::os::unix::fs::symlink(outside.join(name), dir.join(name)).unwrap()
                }
                "relative link out" => {
                    std::os::unix::fs::symlink(format!("../elsewhere/{name}"), dir.join(name))
                        .unwrap()
                }
                _ => {
                    let path = std::ffi::CString::new(dir.join(name).to_str().unwrap()).unwrap();
                    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
                }
            }
            let why = if kind == "fifo" { "a FIFO" } else { "outside" };
            for (reader, result) in read_all(&dir, &out) {
                let expected = readers_of(name).contains(&reader);
                match result {
                    Ok(()) => assert!(!expected, "{name} ({kind}): {reader} read it"),
                    Err(err) => {
                        let text = format!("{err:#}");
                        assert!(expected, "{name} ({kind}): {reader} failed: {text}");
                        assert_eq!(exit_code_of(&err), 2, "{name} ({kind}) {reader}: {text}");
                        assert!(
                            text.contains(name) && text.contains(why),
                            "{name} ({kind}) {reader}: {text}"
                        );
                        assert!(!text.contains(MARK), "{name} ({kind}) {reader}: {text}");
                    }
                }
            }
            // Nothing of the outside file was copied into the run.
            for entry in std::fs::read_dir(&out).unwrap() {
                let bytes = std::fs::read(entry.unwrap().path()).unwrap();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(MARK),
                    "{name} ({kind}) copied"
                );
            }
            assert!(!out.join(name).exists(), "{name} ({kind}) copied");
        }
    }
}

/// A Hugging Face cache snapshot (files are links into `../../blobs`) is
/// read as before.
#[test]
fn a_hub_cache_snapshot_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("models--org--tiny");
    let snap = repo.join("snapshots/0123abcd");
    let blobs = repo.join("blobs");
    checkpoint(&blobs.join("staging"));
    std::fs::create_dir_all(&snap).unwrap();
    for entry in std::fs::read_dir(blobs.join("staging")).unwrap() {
        let entry = entry.unwrap();
        let blob = format!("blob-{}", entry.file_name().to_string_lossy());
        std::fs::rename(entry.path(), blobs.join(&blob)).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), snap.join(entry.file_name()))
            .unwrap();
    }
    let out = tmp.path().join("run");
    std::fs::create_dir_all(&out).unwrap();
    for (reader, result) in read_all(&snap, &out) {
        result.unwrap_or_else(|e| panic!("{reader}: {e:#}"));
    }
    assert!(out.join("config.json").is_file());
}

/// A tensor in two shards is refused naming both, rather than taking the
/// copy the index does not name.
#[test]
fn a_tensor_in_two_shards_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_random("tiny-llama", 5, dir).unwrap();
    let single = dir.join(crate::llama::hf::SINGLE);
    let tensors = crate::engine::safetensors_io::read(&single).unwrap();
    let mut all: Vec<(String, Vec<usize>, Vec<f32>)> = tensors
        .into_iter()
        .map(|(name, (shape, values))| (name, shape, values))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let twin = all[0].clone();
    let mut changed = twin.clone();
    changed.2.iter_mut().for_each(|v| *v += 1.0);
    let shard = |name: &str, tensors: &[(String, Vec<usize>, Vec<f32>)]| {
        let bytes = crate::engine::safetensors_io::to_bytes(tensors).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    shard("model-00001-of-00002.safetensors", &all);
    shard("model-00002-of-00002.safetensors", &[changed]);
    let mut map = serde_json::Map::new();
    for (name, ..) in &all {
        map.insert(name.clone(), "model-00001-of-00002.safetensors".into());
    }
    map.insert(twin.0.clone(), "model-00002-of-00002.safetensors".into());
    let index = serde_json::json!({"weight_map": map});
    std::fs::write(dir.join(crate::llama::hf::INDEX), index.to_string()).unwrap();
    std::fs::remove_file(&single).unwrap();
    let err = pretrained::load::<Cpu>(dir, &Default::default()).unwrap_err();
    let text = format!("{err:#}");
    assert_eq!(exit_code_of(&err), 2, "{text}");
    assert!(
        text.contains(&twin.0) && text.contains("00001") && text.contains("00002"),
        "{text}"
    );
}

/// tokenizer.json inputs that panic inside the tokenizers crate: exit 2
/// naming the file. A TemplateProcessing naming a special token the file
/// does not define panics when the post-processor runs.
#[test]
fn tokenizer_panics_are_usage_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    crate::rft::pretrained::write_byte_tokenizer(dir).unwrap();
    let path = dir.join(crate::pretrained::tokenizer::FILE);
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<undefined>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {}
    });
    std::fs::write(&path, doc.to_string()).unwrap();
    let result = HfTokenizer::load(dir, false).and_then(|t| t.encode("hello"));
    let err = result.expect_err("an undefined special token must not encode");
    let text = format!("{err:#}");
    assert_eq!(exit_code_of(&err), 2, "{text}");
    assert!(text.contains("tokenizer.json"), "{text}");

    // A catastrophic pre-tokenizer regex: onig gives up (its retry limit)
    // and the onig crate panics; the panic is caught the same way.
    doc["post_processor"] = serde_json::Value::Null;
    doc["pre_tokenizer"] = serde_json::json!({
        "type": "Split", "pattern": {"Regex": "(a|a)+$"},
        "behavior": "Isolated", "invert": false
    });
    std::fs::write(&path, doc.to_string()).unwrap();
    let tokenizer = HfTokenizer::load(dir, false).unwrap();
    let err = tokenizer
        .encode(&format!("{}!", "a".repeat(64)))
        .unwrap_err();
    let text = format!("{err:#}");
    assert_eq!(exit_code_of(&err), 2, "{text}");
    assert!(text.contains("tokenizer.json"), "{text}");
}

/// Chat templates that loop without end or write without end stop with
/// exit 2 naming the file (MiniJinja's fuel, a bounded output), instead of
/// hanging or eating memory.
#[test]
fn endless_or_huge_chat_templates_stop_with_exit_2() {
    let nested = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    let wide = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}";
    // A string that doubles per instruction reaches the machine's memory in
    // a few dozen instructions, long before fuel runs out: every way a
    // template can grow a string is bounded (vendor/PATCHES.md, M2).
    let doubling = |grow: &str| {
        let grow = grow.replace('S', "ns.s");
        format!(
            "{{% set ns = namespace(s='ab') %}}{{% for i in range(64) %}}\
             {{% set ns.s = {grow} %}}{{% endfor %}}{{{{ ns.s|length }}}}"
        )
    };
    let grown = [
        doubling("S ~ S"),
        doubling("S + S"),
        doubling("S|replace('a', S)"),
        doubling("S.replace('a', S)"),
        doubling("[S, S]|join"),
        doubling("S.join([S, S])"),
        doubling("S|indent(S|length, true)"),
        "{{ ([1] * 1000000000000000)|join }}".to_string(),
        "{{ ''.join([''] * 1000000000000000) }}".to_string(),
        "{{ '%999999999999s'|format('x') }}".to_string(),
        "{{ '{:>999999999999}'.format('x') }}".to_string(),
    ];
    let cases = [
        (nested.to_string(), "instructions"),
        (wide.to_string(), "bytes"),
    ]
    .into_iter()
    .chain(grown.into_iter().map(|source| (source, "too large")));
    for (source, why) in cases {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("chat_template.jinja"), &source).unwrap();
        let template = ChatTemplate::load(tmp.path()).unwrap().unwrap();
        let started = std::time::Instant::now();
        let err = template
            .render(&[pretrained::Message::new("user", "hi")], true)
            .unwrap_err();
        let text = format!("{err:#}");
        assert_eq!(exit_code_of(&err), 2, "{text}");
        assert!(
            text.contains(why) && text.contains("chat_template.jinja"),
            "{text}"
        );
        assert!(
            started.elapsed().as_secs() < 30,
            "{source}: {:?}",
            started.elapsed()
        );
    }
}

/// Shapes no machine holds are refused from config.json before a weight is
/// allocated (they panicked with "capacity overflow" or aborted), and an
/// epsilon that makes every norm NaN is refused by name.
#[test]
fn absurd_checkpoint_shapes_are_refused_before_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    let llama = tmp.path().join("llama");
    write_random("tiny-llama", 5, &llama).unwrap();
    let config = llama.join("config.json");
    let original: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let cases = [
        (
            "num_hidden_layers",
            serde_json::json!(1_000_000_000_000_000u64),
            "memory",
        ),
        ("hidden_size", serde_json::json!(1u64 << 40), "memory"),
        ("vocab_size", serde_json::json!(1u64 << 50), "memory"),
        ("rms_norm_eps", serde_json::json!(-1e-5), "positive"),
        ("rms_norm_eps", serde_json::json!(0.0), "positive"),
    ];
    for (field, value, why) in cases {
        let mut doc = original.clone();
        doc[field] = value.clone();
        std::fs::write(&config, doc.to_string()).unwrap();
        let err = pretrained::load::<Cpu>(&llama, &Default::default()).unwrap_err();
        let text = format!("{err:#}");
        assert_eq!(exit_code_of(&err), 2, "{field}={value}: {text}");
        assert!(
            text.contains(field) && text.contains(why),
            "{field}={value}: {text}"
        );
    }
    let gpt2 = tmp.path().join("gpt2");
    let cfg = crate::gpt2::hf::tests::small();
    let model = cfg.init::<Cpu>(&Default::default());
    crate::gpt2::hf::save_pretrained(&model, &cfg, &gpt2).unwrap();
    let config = gpt2.join("config.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    doc["n_embd"] = serde_json::json!(1u64 << 30);
    std::fs::write(&config, doc.to_string()).unwrap();
    let err = pretrained::load::<Cpu>(&gpt2, &Default::default()).unwrap_err();
    let text = format!("{err:#}");
    assert_eq!(exit_code_of(&err), 2, "{text}");
    assert!(text.contains("n_embd") && text.contains("memory"), "{text}");
}

/// rft's GPT-2 path checks the files it copies into RUN/hf/ before a run
/// directory exists, as the Llama path does.
#[test]
fn rft_refuses_a_gpt2_checkpoint_with_a_file_linked_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gpt2");
    let cfg = crate::gpt2::hf::tests::small();
    let model = cfg.init::<Cpu>(&Default::default());
    crate::gpt2::hf::save_pretrained(&model, &cfg, &dir).unwrap();
    let secret = tmp.path().join("elsewhere.txt");
    std::fs::write(&secret, MARK).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("merges.txt")).unwrap();
    let err = crate::rft::family::gpt2::check_dir(&dir).unwrap_err();
    let text = format!("{err:#}");
    assert_eq!(exit_code_of(&err), 2, "{text}");
    assert!(
        text.contains("merges.txt") && text.contains("outside"),
        "{text}"
    );
    assert!(!text.contains(MARK), "{text}");
}
