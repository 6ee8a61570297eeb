//! GPT-2 on token shards through the real `envgen` binary: memory that does
//! not grow with the data set, llm.c's order (epochs recorded, `.bin` and
//! `.npy` read alike), exact resume, corrupt shards, and `envgen sample`
//! without the training data.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::experiment::*;
use crate::common::{envgen, expect_success, heavy_test, json_of, run, run_dir_of, run_ok};

/// The `tiny` model on GPT-2-tokenized shards: 16 rows of 64 tokens a step.
fn shard_config(dir: &Path, source: &str, steps: u64, extra: &str) -> PathBuf {
    shard_config_with(dir, source, steps, extra, "")
}

/// [`shard_config`] with `tail` appended (more tables).
fn shard_config_with(dir: &Path, source: &str, steps: u64, extra: &str, tail: &str) -> PathBuf {
    let text = format!(
        r#"[model]
n_layer = 2
n_head = 2
n_embd = 64
block_size = 64
vocab_size = 50304

[data]
source = "{source}"
path = "{path}"
tokenizer = "gpt2"
{extra}

[train]
steps = {steps}
batch_size = 16
eval_every = {steps}
eval_batches = 1
checkpoint_every = 4
seed = 1337

[optim]
lr = 1e-3
warmup_steps = 2
{tail}
"#,
        path = dir.display()
    );
    let path = dir.join(format!(
        "{source}-{steps}-{}.toml",
        extra.len() + tail.len()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// Token `i` of a synthetic stream: spread over the GPT-2 vocabulary.
fn token(i: u64) -> u16 {
    ((i.wrapping_mul(2_654_435_761) >> 7) % 50_257) as u16
}

/// `count` tokens of the stream from index `from`, as u16 little-endian.
/// One 1 MiB block of tokens, repeated: writing 512 MiB token by token
/// would dominate the test in a debug build.
fn write_tokens(out: &mut impl Write, from: u64, count: u64) {
    let block: Vec<u8> = (0..(1u64 << 19))
        .flat_map(|i| token(from + i).to_le_bytes())
        .collect();
    let mut left = count as usize * 2;
    while left > 0 {
        let n = left.min(block.len());
        out.write_all(&block[..n]).unwrap();
        left -= n;
    }
}

/// An llm.c GPT-2 shard of `count` tokens starting at stream index `from`
/// (the big test's shards are 256 MiB each).
pub(crate) fn write_llmc(path: &Path, from: u64, count: u64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut header = [0i32; 256];
    header[0] = 20240520;
    header[1] = 1;
    header[2] = count as i32;
    for v in header {
        out.write_all(&v.to_le_bytes()).unwrap();
    }
    write_tokens(&mut out, from, count);
    out.flush().unwrap();
}

/// The same tokens as a build-nanogpt `.npy` shard (np.save format 1.0).
pub(crate) fn write_npy(path: &Path, from: u64, count: u64) {
    let mut header = format!("{{'descr': '<u2', 'fortran_order': False, 'shape': ({count},), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    out.write_all(b"\x93NUMPY\x01\x00").unwrap();
    out.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
    out.write_all(header.as_bytes()).unwrap();
    write_tokens(&mut out, from, count);
    out.flush().unwrap();
}

/// Run `envgen ARGS` and return its output with the child's own peak
/// resident set (getrusage of exactly that child, through wait4), in bytes.
#[cfg(target_os = "linux")]
// The child is reaped by wait4 below, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (std::process::Output, u64) {
    use std::io::Read;
    let mut child = envgen()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Drain the pipes on threads so the child never blocks on a full pipe.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        out_pipe.read_to_end(&mut v).unwrap();
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        err_pipe.read_to_end(&mut v).unwrap();
        v
    });
    let mut status = 0i32;
    // SAFETY: rusage is plain data; wait4 reaps our own child by pid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    assert!(code >= 0, "envgen died of a signal (wait status {status})");
    let output = std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: out_thread.join().unwrap(),
        stderr: err_thread.join().unwrap(),
    };
    // ru_maxrss is in KiB on Linux.
    (output, usage.ru_maxrss as u64 * 1024)
}

// ≥ 512 MiB of shards train with the same peak memory as 4 MiB of them:
// the loader maps the shards and copies out only the windows it uses.
#[cfg(target_os = "linux")]
heavy_test!(peak_memory_does_not_grow_with_the_data_set, || {
    const MIB: u64 = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for (name, tokens_per_shard) in [("small", MIB), ("big", 130 * MIB)] {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        // Two train shards and one val shard, as llm.c's scripts name them.
        write_llmc(&dir.join("synth_train_000001.bin"), 0, tokens_per_shard);
        write_llmc(&dir.join("synth_train_000002.bin"), 7, tokens_per_shard);
        write_llmc(&dir.join("synth_val_000000.bin"), 3, MIB);
        let bytes: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        let config = shard_config(&dir, "llmc", 3, "");
        let out_dir = tmp.path().join(format!("runs-{name}"));
        let (out, peak) = run_measured(&[
            "run",
            "gpt2",
            "--backend",
            "cpu",
            "--json",
            "--config",
            config.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        let doc = json_of(&expect_success(out));
        assert_eq!(doc["summary"]["status"], "completed");
        eprintln!(
            "{name}: {} MiB of shards, peak RSS {} MiB",
            bytes / MIB,
            peak / MIB
        );
        peaks.push((bytes, peak));
    }
    let ((small_bytes, small_peak), (big_bytes, big_peak)) = (peaks[0], peaks[1]);
    assert!(big_bytes >= 512 * MIB && big_bytes > 50 * small_bytes);
    // Reading the tokens into memory (the old loader's Vec<u32>) would add
    // 1 GiB to the peak.
    assert!(
        big_peak < small_peak + 48 * MIB,
        "peak RSS grew with the data: {} MiB with {} MiB of shards vs {} MiB with {} MiB",
        big_peak / MIB,
        big_bytes / MIB,
        small_peak / MIB,
        small_bytes / MIB
    );
});

fn metrics_of(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn run_config(config: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "gpt2",
        "--backend",
        "cpu",
        "--json",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    run(&args)
}

// Shards of 3,000 tokens hold 2 global batches of 1,024 tokens each
// ((3000 − 1) / 1024): two shards make a 4-step epoch. `.bin` and `.npy`
// holding the same tokens train to the same bits; a resumed run ends
// exactly where an uninterrupted one does; epochs are logged.
heavy_test!(
    bin_and_npy_shards_train_in_llmc_order_and_resume_exactly,
    |tmp| {
        let (bin, npy) = (tmp.path().join("bin"), tmp.path().join("npy"));
        for dir in [&bin, &npy] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for (i, from) in [(1, 0u64), (2, 5_000)] {
            write_llmc(&bin.join(format!("fw_train_00000{i}.bin")), from, 3_000);
            write_npy(
                &npy.join(format!("edufineweb_train_00000{i}.npy")),
                from,
                3_000,
            );
        }
        write_llmc(&bin.join("fw_val_000000.bin"), 9_000, 2_000);
        write_npy(&npy.join("edufineweb_val_000000.npy"), 9_000, 2_000);
        let runs = tmp.path().join("runs");
        // HellaSwag on two fixture items at every evaluation.
        let hellaswag = format!(
        "[eval]\nhellaswag = \"{}/tests/fixtures/hellaswag/hellaswag_val_sample.jsonl\"\nhellaswag_items = 2",
        env!("CARGO_MANIFEST_DIR")
    );
        let a = json_of(&expect_success(run_config(
            &shard_config_with(&bin, "llmc", 10, "", &hellaswag),
            &runs,
            &[],
        )));
        let b = json_of(&expect_success(run_config(
            &shard_config(&npy, "npy", 10, ""),
            &runs,
            &[],
        )));
        for key in ["final_train_loss", "final_val_loss"] {
            assert_eq!(
                metric(&a, key).to_bits(),
                metric(&b, key).to_bits(),
                "{key}: .bin and .npy runs differ"
            );
        }
        let m = &a["summary"]["metrics"];
        assert_eq!(m["data_order"], "sequential");
        assert_eq!(m["final_hellaswag_items"], 2);
        let acc = m["final_hellaswag_acc_norm"].as_f64().unwrap();
        assert!([0.0, 0.5, 1.0].contains(&acc), "{acc}");
        let first = &metrics_of(&run_dir_of(&a))[0];
        assert_eq!(first["step"], 0);
        assert!(first["hellaswag_acc"].is_number(), "{first}");
        assert_eq!(m["train_batches_per_epoch"], 4);
        let steps: Vec<(u64, u64)> = metrics_of(&run_dir_of(&a))
            .iter()
            .filter(|r| r["step"].as_u64() > Some(0))
            .map(|r| (r["epoch"].as_u64().unwrap(), r["shard"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            steps,
            [
                (0, 0),
                (0, 0),
                (0, 1),
                (0, 1),
                (1, 0),
                (1, 0),
                (1, 1),
                (1, 1),
                (2, 0),
                (2, 0)
            ]
        );

        // Interrupted after 6 steps (checkpoint at 4 and 6), then resumed.
        let stopped = run_config(
            &shard_config_with(&bin, "llmc", 10, "", &hellaswag),
            &runs,
            &["--stop-after", "6"],
        );
        let dir = stopped_after(&stopped, 6);
        let resumed = resume("gpt2", &dir);
        assert_resumed_identically(
            &a,
            &resumed,
            &dir,
            &["final_train_loss", "final_val_loss"],
            10,
        );

        // config_hash identifies the shards by content (issue #39): the same
        // files in another folder plan the same hash as run `a`.
        let elsewhere = tmp.path().join("cluster/scratch/fineweb");
        std::fs::create_dir_all(&elsewhere).unwrap();
        for entry in std::fs::read_dir(&bin).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "bin") {
                std::fs::copy(entry.path(), elsewhere.join(entry.file_name())).unwrap();
            }
        }
        let planned = json_of(&expect_success(run_config(
            &shard_config_with(&elsewhere, "llmc", 10, "", &hellaswag),
            &runs,
            &["--dry-run"],
        )));
        let hash_of_a = manifest_of(&a)["config_hash"].clone();
        assert_eq!(planned["runs"][0]["config_hash"], hash_of_a, "{planned}");
        // A run recorded before issue #39 (the hash of config.toml as written,
        // data path included) still resumes.
        let manifest_path = dir.join("manifest.json");
        let mut manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
        let config = std::fs::read(dir.join("config.toml")).unwrap();
        let by_path = format!(
            "sha256:{}",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&config))
        );
        assert_ne!(manifest["config_hash"], by_path.as_str());
        manifest["config_hash"] = by_path.into();
        std::fs::write(&manifest_path, manifest.to_string()).unwrap();
        let out = run(&["run", "--resume", dir.to_str().unwrap(), "--dry-run"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        // Shuffled: another order of the same batches, the same epoch marks.
        let shuffled = json_of(&expect_success(run_config(
            &shard_config(&bin, "llmc", 10, "order = \"shuffled\""),
            &runs,
            &[],
        )));
        assert_eq!(shuffled["summary"]["metrics"]["data_order"], "shuffled");
        assert_ne!(
            metric(&a, "final_train_loss").to_bits(),
            metric(&shuffled, "final_train_loss").to_bits()
        );

        // `envgen eval` on the finished run: val loss over the .bin and the
        // .npy val shard (the same tokens: the same loss), HellaSwag on the
        // fixture, every field in one JSON document.
        let eval = |val: &Path, sample: &[&str]| {
            let (run, val) = (run_dir_of(&a), val.to_str().unwrap().to_string());
            let mut args = vec!["eval", "gpt2", "--checkpoint", run.to_str().unwrap()];
            args.extend(["--val", &val]);
            args.extend(sample);
            args.push("--json");
            json_of(&run_ok(&args))
        };
        let hellaswag = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hellaswag/hellaswag_val_sample.jsonl"
        );
        let spread = ["--val-windows", "4", "--hellaswag", hellaswag];
        let (on_bin, on_npy) = (eval(&bin, &spread), eval(&npy, &spread));
        let loss = on_bin["val_loss"].as_f64().unwrap();
        assert!(loss > 0.0 && loss < 12.0, "{on_bin}");
        assert_eq!(on_bin["val_loss"], on_npy["val_loss"]);
        assert_eq!(on_bin["hellaswag_items"], 5);
        assert_eq!(on_bin["val_windows"], 4);
        assert!(
            on_bin["val_sample"]
                .as_str()
                .unwrap()
                .contains("spread evenly"),
            "{on_bin}"
        );

        // By default, the reference's sample: windows tiling the val split
        // from its first token, as build-nanogpt's val loader reads them.
        // The same number from torch, reading the shard its own way.
        let tokens = BUILD_NANOGPT_SAMPLE.tokens().to_string();
        let first = eval(&npy, &["--val-tokens", &tokens]);
        assert_eq!(first["val_tokens"], BUILD_NANOGPT_SAMPLE.tokens());
        assert!(
            first["val_sample"]
                .as_str()
                .unwrap()
                .starts_with("the first 1536 tokens"),
            "{first}"
        );
        let torch = BUILD_NANOGPT_SAMPLE.val_loss(
            &run_dir_of(&a),
            &npy.join("edufineweb_val_000000.npy"),
            tmp.path(),
        );
        let ours = first["val_loss"].as_f64().unwrap();
        assert!(
            (ours - torch).abs() < 1e-4,
            "envgen {ours} vs torch {torch} on build-nanogpt's sample"
        );
        assert!((ours - on_bin["val_loss"].as_f64().unwrap()).abs() > 1e-6);
        // Asked for more than the split holds: all of it, and said so.
        let whole = eval(&npy, &[]);
        // 2,000 tokens hold (2,000 − 1) / 64 = 31 windows of 64 targets.
        assert_eq!(whole["val_windows"], 31, "{whole}");

        // `envgen sample` needs no training data: delete it, sample anyway.
        std::fs::remove_dir_all(&bin).unwrap();
        let text = run_ok(&[
            "sample",
            run_dir_of(&a).to_str().unwrap(),
            "--prompt",
            "Hello",
            "--tokens",
            "8",
        ]);
        assert!(String::from_utf8_lossy(&text.stdout).starts_with("Hello"));
    }
);

heavy_test!(
    truncated_and_corrupt_shards_exit_2_naming_file_and_offset,
    |tmp| {
        let dir = tmp.path().join("data");
        std::fs::create_dir_all(&dir).unwrap();
        write_llmc(&dir.join("fw_train_000001.bin"), 0, 3_000);
        write_llmc(&dir.join("fw_val_000000.bin"), 0, 2_000);
        // Cut the train shard short by 3 bytes.
        let shard = dir.join("fw_train_000001.bin");
        let len = std::fs::metadata(&shard).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&shard)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let config = shard_config(&dir, "llmc", 2, "");
        let runs = tmp.path().join("runs");
        // The dry run makes the real run's header checks, and the real run
        // refuses before making a run directory (issue #39).
        for extra in [&["--dry-run"][..], &[]] {
            let out = run_config(&config, &runs, extra);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
            assert!(
                err.contains("fw_train_000001.bin")
                    && err.contains(&format!("truncated at byte offset {}", len - 3)),
                "{err}"
            );
        }
        assert!(crate::common::run_dirs(&runs).is_empty());
        // A folder of build-nanogpt .npy shards read as llm.c's: the fix names
        // the source that reads them; an empty folder is refused by the dry
        // run as by the run, and neither leaves a run directory.
        let npy = tmp.path().join("npy");
        std::fs::create_dir_all(&npy).unwrap();
        let npy_config = shard_config(&npy, "llmc", 2, "");
        for extra in [&["--dry-run"][..], &[]] {
            let out = run_config(&npy_config, &runs, extra);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
            assert!(err.contains("no train shards match"), "{err}");
        }
        write_npy(&npy.join("edufineweb_train_000001.npy"), 0, 100);
        let out = run_config(&npy_config, &runs, &["--dry-run"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--set data.source=npy"), "{err}");
        assert!(crate::common::run_dirs(&runs).is_empty());
        // A shard too small for one global batch names the batch size.
        write_llmc(&shard, 0, 500);
        let out = run_config(&config, &runs, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("1025 tokens") && err.contains("fw_train_000001.bin"),
            "{err}"
        );
    }
);

/// build-nanogpt's validation, shrunk to the test's shards: `steps`
/// batches of `rows` × `block` tokens on each of `ranks` ranks.
struct ValLoader {
    rows: usize,
    block: usize,
    ranks: usize,
    steps: usize,
}

/// 3 steps × 2 ranks × 4 rows × 64 tokens = 1,536 tokens of the 2,000.
const BUILD_NANOGPT_SAMPLE: ValLoader = ValLoader {
    rows: 4,
    block: 64,
    ranks: 2,
    steps: 3,
};

impl ValLoader {
    fn tokens(&self) -> usize {
        self.steps * self.ranks * self.rows * self.block
    }

    /// The validation loss torch computes for the run's weights the way
    /// build-nanogpt's training loop does: each rank starts `rank` batches
    /// in and strides over the others, a batch is `rows × block + 1`
    /// tokens (inputs, and the same shifted by one as targets), each rank
    /// averages its steps' mean losses and the ranks' averages are averaged
    /// (its all_reduce AVG). The model is transformers' GPT-2 with the
    /// run's own model.safetensors and vocabulary (50,304, padding rows
    /// included, as build-nanogpt's model has).
    fn val_loss(&self, run: &Path, shard: &Path, scratch: &Path) -> f64 {
        let model = scratch.join("val-loader-model");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::copy(
            run.join("model.safetensors"),
            model.join("model.safetensors"),
        )
        .unwrap();
        let config = serde_json::json!({
            "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64,
            "vocab_size": 50304, "tie_word_embeddings": true,
            "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
        });
        std::fs::write(model.join("config.json"), config.to_string()).unwrap();
        let script = r#"
import json, sys
import numpy as np, torch
from transformers import GPT2LMHeadModel
directory, shard = sys.argv[1], sys.argv[2]
rows, block, ranks, steps = (int(v) for v in sys.argv[3:7])
model = GPT2LMHeadModel.from_pretrained(directory).eval()
tokens = torch.from_numpy(np.load(shard).astype(np.int64))
per_rank = []
for rank in range(ranks):
    position, losses = rows * block * rank, []
    for _ in range(steps):
        chunk = tokens[position : position + rows * block + 1]
        x, y = chunk[:-1].view(rows, block), chunk[1:].view(rows, block)
        position += rows * block * ranks
        with torch.no_grad():
            logits = model(x).logits.float()
        losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).item())
    per_rank.append(sum(losses) / steps)
print(json.dumps({"val_loss": sum(per_rank) / ranks}))
"#;
        let args = [self.rows, self.block, self.ranks, self.steps].map(|v| v.to_string());
        let mut argv = vec![model.to_str().unwrap(), shard.to_str().unwrap()];
        argv.extend(args.iter().map(String::as_str));
        crate::common::reference::python_json(script, &argv)["val_loss"]
            .as_f64()
            .unwrap()
    }
}
