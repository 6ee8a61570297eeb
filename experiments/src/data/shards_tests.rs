use super::*;
use proptest::prelude::*;

/// Write an llm.c shard the way `write_datafile` lays it out.
pub(crate) fn llmc_bytes(
    magic: i32,
    version: i32,
    count: i32,
    tokens: &[u32],
    width: usize,
) -> Vec<u8> {
    let mut header = [0i32; 256];
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    let mut bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
    for &t in tokens {
        if width == 2 {
            bytes.extend_from_slice(&(t as u16).to_le_bytes());
        } else {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
    }
    bytes
}

/// A `.npy` file as `np.save` writes a 1-D array (format 1.0: the header
/// padded with spaces to a multiple of 64 bytes, ending in a newline).
pub(crate) fn npy_bytes(descr: &str, shape: &str, tokens: &[u16]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    bytes
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn all(shard: &MappedShard) -> Vec<u32> {
    shard.tokens(0..shard.len())
}

fn error_of(result: anyhow::Result<MappedShard>) -> String {
    let err = result.expect_err("corrupt file must be rejected");
    assert_eq!(crate::error::exit_code_of(&err), 2);
    err.to_string()
}

#[test]
fn reads_gpt2_and_llama3_shards_with_sha256() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = [15496u32, 995, 50256, 0, 1];
    let bytes = llmc_bytes(LLMC_MAGIC_GPT2, 1, 5, &tokens, 2);
    let path = write(dir.path(), "x_train_000001.bin", &bytes);
    let shard = MappedShard::open(&path, ShardFormat::Llmc).unwrap();
    assert_eq!(all(&shard), tokens);
    assert_eq!(shard.tokens(1..3), [995, 50256]);
    assert_eq!(shard.file.tokens, 5);
    assert_eq!(shard.max_id, 50256);
    assert_eq!(shard.file.sha256, hex::encode(Sha256::digest(&bytes)));

    // Version 2 keeps the uint16 layout.
    let path = write(
        dir.path(),
        "v2.bin",
        &llmc_bytes(LLMC_MAGIC_GPT2, 2, 2, &[7, 9], 2),
    );
    assert_eq!(
        all(&MappedShard::open(&path, ShardFormat::Llmc).unwrap()),
        [7, 9]
    );

    let big = [128_000u32, 7, 128_255];
    let path = write(
        dir.path(),
        "llama.bin",
        &llmc_bytes(LLMC_MAGIC_LLAMA3, 7, 3, &big, 4),
    );
    let shard = MappedShard::open(&path, ShardFormat::Llmc).unwrap();
    assert_eq!(all(&shard), big);
    assert_eq!(shard.max_id, 128_255);
}

#[test]
fn scans_a_shard_larger_than_one_read() {
    let dir = tempfile::tempdir().unwrap();
    // An odd token count over 1 MiB puts a token across a read boundary;
    // the largest id sits right on it.
    let mut tokens: Vec<u32> = (0..(CHUNK_BYTES as u32 / 2 + 12_345))
        .map(|i| i % 50_000)
        .collect();
    let across = (CHUNK_BYTES - LLMC_HEADER_BYTES) / 2;
    tokens[across] = 50_256;
    let path = write(
        dir.path(),
        "big.bin",
        &llmc_bytes(LLMC_MAGIC_GPT2, 1, tokens.len() as i32, &tokens, 2),
    );
    let shard = MappedShard::open(&path, ShardFormat::Llmc).unwrap();
    assert_eq!(all(&shard), tokens);
    assert_eq!(shard.max_id, 50_256);
}

#[test]
fn rejects_corrupt_llmc_shards_naming_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let good = llmc_bytes(LLMC_MAGIC_GPT2, 1, 3, &[1, 2, 3], 2);
    let open = |p: &Path| MappedShard::open(p, ShardFormat::Llmc);

    let p = write(
        dir.path(),
        "magic.bin",
        &llmc_bytes(12345, 1, 3, &[1, 2, 3], 2),
    );
    let e = error_of(open(&p));
    assert!(
        e.contains("magic.bin") && e.contains("bad magic number 12345") && e.contains("20240520"),
        "{e}"
    );

    let p = write(
        dir.path(),
        "version.bin",
        &llmc_bytes(LLMC_MAGIC_GPT2, 3, 3, &[1, 2, 3], 2),
    );
    let e = error_of(open(&p));
    assert!(
        e.contains("version.bin")
            && e.contains("version 3")
            && e.contains("expected version 1 or 2"),
        "{e}"
    );

    let p = write(dir.path(), "trunc.bin", &good[..good.len() - 1]);
    let e = error_of(open(&p));
    assert!(
        e.contains("trunc.bin")
            && e.contains("truncated at byte offset 1029")
            && e.contains("1030"),
        "{e}"
    );

    let mut long = good.clone();
    long.extend_from_slice(&[0, 0]);
    let p = write(dir.path(), "long.bin", &long);
    let e = error_of(open(&p));
    assert!(
        e.contains("long.bin") && e.contains("trailing bytes from byte offset 1030"),
        "{e}"
    );

    let p = write(dir.path(), "header.bin", &good[..100]);
    let e = error_of(open(&p));
    assert!(
        e.contains("header.bin") && e.contains("1024-byte header") && e.contains("offset 100"),
        "{e}"
    );

    let p = write(
        dir.path(),
        "neg.bin",
        &llmc_bytes(LLMC_MAGIC_GPT2, 1, -4, &[], 2),
    );
    let e = error_of(open(&p));
    assert!(e.contains("neg.bin") && e.contains("negative"), "{e}");

    let p = write(dir.path(), "numpy.bin", &npy_bytes("<u2", "(2,)", &[1, 2]));
    let e = error_of(open(&p));
    assert!(e.contains("source = \"npy\""), "{e}");

    let e = error_of(open(&dir.path().join("missing.bin")));
    assert!(e.contains("missing.bin"), "{e}");
}

#[test]
fn reads_build_nanogpt_npy_shards_from_the_parsed_header() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = [50256u16, 464, 2068, 7586];
    let p = write(
        dir.path(),
        "edufineweb_train_000001.npy",
        &npy_bytes("<u2", "(4,)", &tokens),
    );
    let shard = MappedShard::open(&p, ShardFormat::Npy).unwrap();
    assert_eq!(all(&shard), [50256, 464, 2068, 7586]);
    assert_eq!(
        shard.tokens(2..10),
        [2068, 7586],
        "a window is clipped at the end"
    );
    assert_eq!(shard.max_id, 50256);

    // Format 2.0 (4-byte header length), written by np.save for huge headers.
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    let header = "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }\n";
    v2.extend_from_slice(&(header.len() as u32).to_le_bytes());
    v2.extend_from_slice(header.as_bytes());
    v2.extend_from_slice(&[5, 0, 6, 0]);
    let p = write(dir.path(), "v2.npy", &v2);
    assert_eq!(
        all(&MappedShard::open(&p, ShardFormat::Npy).unwrap()),
        [5, 6]
    );

    let open = |p: &Path| MappedShard::open(p, ShardFormat::Npy);
    let p = write(
        dir.path(),
        "f32.npy",
        &npy_bytes("<f4", "(2,)", &[1, 2, 3, 4]),
    );
    let e = error_of(open(&p));
    assert!(
        e.contains("f32.npy") && e.contains("<f4") && e.contains("<u2"),
        "{e}"
    );

    let p = write(
        dir.path(),
        "matrix.npy",
        &npy_bytes("<u2", "(2, 2)", &[1, 2, 3, 4]),
    );
    let e = error_of(open(&p));
    assert!(e.contains("matrix.npy") && e.contains("(2, 2)"), "{e}");

    let full = npy_bytes("<u2", "(4,)", &tokens);
    let p = write(dir.path(), "cut.npy", &full[..full.len() - 3]);
    let e = error_of(open(&p));
    let offset = full.len() - 3;
    assert!(
        e.contains("cut.npy") && e.contains(&format!("truncated at byte offset {offset}")),
        "{e}"
    );

    let p = write(
        dir.path(),
        "shard.bin",
        &llmc_bytes(LLMC_MAGIC_GPT2, 1, 1, &[1], 2),
    );
    let e = error_of(open(&p));
    assert!(
        e.contains("shard.bin") && e.contains("source = \"llmc\""),
        "{e}"
    );
}

#[test]
fn nanogpt_reader_reads_uint16_and_rejects_odd_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let open = |p: &Path| MappedShard::open(p, ShardFormat::Raw);
    let p = write(dir.path(), "train.bin", &[1, 0, 0xff, 0xff, 2, 1]);
    assert_eq!(all(&open(&p).unwrap()), vec![1, 65535, 258]);
    let p = write(dir.path(), "odd.bin", &[1, 0, 3]);
    let e = error_of(open(&p));
    assert!(
        e.contains("odd.bin")
            && e.contains("even")
            && e.contains("3 bytes")
            && e.contains("byte offset 2"),
        "{e}"
    );
    let p = write(dir.path(), "empty.bin", &[]);
    let e = error_of(open(&p));
    assert!(e.contains("empty.bin"), "{e}");
}

#[test]
fn directory_and_glob_select_sorted_shards() {
    let dir = tempfile::tempdir().unwrap();
    let one = llmc_bytes(LLMC_MAGIC_GPT2, 1, 2, &[1, 2], 2);
    let two = llmc_bytes(LLMC_MAGIC_GPT2, 1, 1, &[3], 2);
    write(dir.path(), "fw_train_000002.bin", &two);
    write(dir.path(), "fw_train_000001.bin", &one);
    write(dir.path(), "fw_val_000000.bin", &two);
    write(
        dir.path(),
        "fw_train_000003.npy",
        &npy_bytes("<u2", "(1,)", &[4]),
    );
    let train = shard_files(dir.path(), Split::Train, "bin").unwrap();
    let names: Vec<_> = train
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["fw_train_000001.bin", "fw_train_000002.bin"]);
    let shards = open_all(&train, ShardFormat::Llmc).unwrap();
    assert_eq!(
        shards.iter().map(all).collect::<Vec<_>>(),
        [vec![1, 2], vec![3]]
    );
    assert_eq!(shard_files(dir.path(), Split::Val, "bin").unwrap().len(), 1);
    assert_eq!(
        shard_files(dir.path(), Split::Train, "npy").unwrap().len(),
        1
    );
    let glob = dir.path().join("fw_*_00000[01].bin");
    assert_eq!(shard_files(&glob, Split::Train, "bin").unwrap().len(), 2);
    let e = shard_files(&dir.path().join("nothing_*.bin"), Split::Train, "bin")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nothing_*.bin"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn readers_never_panic_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        header in proptest::option::of((prop_oneof![Just(LLMC_MAGIC_GPT2), Just(LLMC_MAGIC_LLAMA3), any::<i32>()], 0i32..9, -3i32..600)),
        npy in proptest::option::of((prop_oneof![Just("<u2"), Just("<u4")], 0usize..600)),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut content = match (header, npy) {
            // Plausible headers reach the size and decode paths.
            (_, Some((descr, n))) => npy_bytes(descr, &format!("({n},)"), &[]),
            (Some((magic, version, count)), None) => llmc_bytes(magic, version, count, &[], 2),
            (None, None) => Vec::new(),
        };
        content.extend_from_slice(&bytes);
        let path = write(dir.path(), "any.bin", &content);
        for format in [ShardFormat::Llmc, ShardFormat::Npy, ShardFormat::Raw] {
            if let Ok(shard) = MappedShard::open(&path, format) {
                prop_assert_eq!(shard.file.tokens, all(&shard).len());
            }
        }
    }
}
