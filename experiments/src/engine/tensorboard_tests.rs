use std::io::Write;

use super::*;
use serde_json::json;

#[test]
fn crc32c_and_the_record_framing_match_tfrecord() {
    // The check value of CRC-32C (RFC 3720's and every CRC catalogue's).
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(b""), 0);
    let data = b"hello";
    let framed = record(data);
    assert_eq!(framed.len(), 8 + 4 + data.len() + 4);
    assert_eq!(&framed[..8], &5u64.to_le_bytes());
    // Masked: rotate right by 15, add 0xa282ead8 (TFRecord's masked_crc32c).
    let crc = crc32c(&5u64.to_le_bytes());
    let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
    assert_eq!(&framed[8..12], &masked.to_le_bytes());
    assert_eq!(&framed[12..17], data);
    let crc = crc32c(data);
    let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
    assert_eq!(&framed[17..], &masked.to_le_bytes());
}

#[test]
fn the_protobuf_wire_format_is_byte_exact() {
    // Field 1 varint 300 = 08 ac 02; field 2 bytes "ab" = 12 02 61 62;
    // field 3 float 1.0 = 1d 00 00 80 3f; a nested message as bytes.
    let m = Proto::default()
        .varint(1, 300)
        .bytes(2, b"ab")
        .float(3, 1.0)
        .message(4, Proto::default().varint(1, 1));
    assert_eq!(
        m.0,
        [0x08, 0xac, 0x02, 0x12, 2, b'a', b'b', 0x1d, 0, 0, 0x80, 0x3f, 0x22, 2, 0x08, 1]
    );
}

#[test]
fn lines_become_tagged_scalars_and_gpu_lines_take_the_last_step() {
    let mut s = Scalars::default();
    let (step, mut values) = s
        .of_line(
            &json!({"step": 3, "time": 1.7e9, "loss": 2.5, "lr": 1e-3, "tokens_per_s": 100,
            "val_loss": 2.0, "skipped": true, "data": "text", "grad_norm": null,
            "extra": {"a": 1, "b": [2, 3]}}),
        )
        .unwrap();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(step, 3);
    let expected = [
        ("eval/val_loss", 2.0),
        ("optim/lr", 1e-3),
        ("optim/skipped", 1.0),
        ("throughput/tokens_per_s", 100.0),
        ("train/extra/a", 1.0),
        ("train/extra/b/0", 2.0),
        ("train/extra/b/1", 3.0),
        ("train/loss", 2.5),
    ];
    let got: Vec<(&str, f64)> = values.iter().map(|(t, v)| (t.as_str(), *v)).collect();
    assert_eq!(got, expected);
    let gpu =
        json!({"time_s": 1.5, "gpu": [{"index": 1, "util_percent": 97, "memory_used_gb": 3.0}]});
    let (step, values) = s.of_line(&gpu).unwrap();
    assert_eq!(step, 3, "at the last training step seen");
    assert_eq!(
        values,
        [
            ("gpu/1/memory_used_gb".to_string(), 3.0),
            ("gpu/1/util_percent".to_string(), 97.0)
        ]
    );
    // rft's stage lines: the stage names the section, a round the step.
    let (step, values) = s
        .of_line(&json!({"stage": "datagen", "round": 2, "kept": 5}))
        .unwrap();
    assert_eq!(
        (step, values),
        (
            2,
            vec![("datagen/kept".into(), 5.0), ("datagen/round".into(), 2.0)]
        )
    );
}

#[test]
fn a_rebuild_keeps_the_file_name_and_drops_stale_files_and_half_lines() {
    let dir = tempfile::tempdir().unwrap();
    let tb = dir.path().join("tb");
    let (first, covered, _) = write_dir(&tb, "{\"step\":1,\"loss\":1}\n{\"step\":2", None).unwrap();
    assert_eq!(covered, "{\"step\":1,\"loss\":1}\n".len());
    let stale = tb.join("events.out.tfevents.9999999999.other.envgen");
    std::fs::write(&stale, b"").unwrap();
    let foreign = tb.join("events.out.tfevents.1.host");
    std::fs::write(&foreign, b"").unwrap();
    let (again, _, _) = write_dir(&tb, "{\"step\":1,\"loss\":1}\n", Some("a = 1")).unwrap();
    assert_eq!(first, again);
    assert!(
        !stale.exists(),
        "a stale envgen file would replay old steps"
    );
    assert!(foreign.exists(), "other writers' files are left alone");
}

#[test]
fn the_live_file_follows_metrics_jsonl_line_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    std::fs::write(&metrics, "{\"step\":1,\"loss\":1}\n").unwrap();
    let mut live = EventsFile::open(&metrics).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&metrics)
        .unwrap();
    f.write_all(b"{\"step\":2,\"loss\":0.5}\n{\"step\":3,")
        .unwrap();
    live.catch_up(&metrics).unwrap();
    f.write_all(b"\"loss\":0.25}\n").unwrap();
    live.catch_up(&metrics).unwrap();
    // Live and rebuilt files hold the same records but for wall times.
    let appended = std::fs::read(&live.path).unwrap();
    let text = std::fs::read_to_string(&metrics).unwrap();
    let rebuilt = dir.path().join("rebuilt");
    let (path, _, _) = write_dir(&rebuilt, &text, None).unwrap();
    let steps = |bytes: &[u8]| records(bytes).iter().map(|r| r.len()).collect::<Vec<_>>();
    assert_eq!(steps(&appended), steps(&std::fs::read(path).unwrap()));
    assert_eq!(records(&appended).len(), 4, "version + three steps");
}

/// The records of an event file (checking each frame's CRCs).
fn records(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(bytes[8..12], masked_crc(&bytes[..8]).to_le_bytes());
        let data = &bytes[12..12 + len];
        assert_eq!(bytes[12 + len..16 + len], masked_crc(data).to_le_bytes());
        out.push(data.to_vec());
        bytes = &bytes[16 + len..];
    }
    out
}

#[test]
fn config_keys_become_typed_hparams_with_dotted_names() {
    let config = "rounds = 3\nname = \"x\"\n[train]\nsteps = 300\nlr = 0.5\n\
        [model]\ntied = true\nlayers = [1, 2]\n";
    let got = hparams::of_config(config);
    use hparams::HParam::*;
    let want = [
        ("model.layers", Text("[1, 2]".into())),
        ("model.tied", Bool(true)),
        ("name", Text("x".into())),
        ("rounds", Number(3.0)),
        ("train.lr", Number(0.5)),
        ("train.steps", Number(300.0)),
    ];
    let got: Vec<(&str, hparams::HParam)> =
        got.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    assert_eq!(got, want);
    assert!(hparams::of_config("not = [toml").is_empty());
    // The run's file: the version, the config as text, its hparams.
    let dir = tempfile::tempdir().unwrap();
    let (path, _, _) = write_dir(dir.path(), "", Some(config)).unwrap();
    let records = records(&std::fs::read(path).unwrap());
    assert_eq!(records.len(), 3);
    let tag = hparams::SESSION_START_TAG.as_bytes();
    assert!(records[2].windows(tag.len()).any(|w| w == tag));
}

#[test]
fn a_resume_of_a_run_from_before_issue_44_removes_its_tb_folder() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("tb");
    std::fs::create_dir(&legacy).unwrap();
    std::fs::write(legacy.join("events.out.tfevents.1.h.envgen"), b"").unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    std::fs::write(&metrics, "{\"step\":1,\"loss\":1}\n").unwrap();
    let live = EventsFile::open(&metrics).unwrap();
    assert_eq!(live.path.parent(), Some(dir.path()));
    assert!(
        !legacy.exists(),
        "TensorBoard would list RUN_ID/tb beside RUN_ID"
    );
}
