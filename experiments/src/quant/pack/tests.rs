use proptest::prelude::*;

use super::*;
use crate::error::ErrorKind;
use crate::quant::schemes::quantize;

fn sample_tensors() -> Vec<NamedTensor> {
    let weights: Vec<f32> = (0..6 * 70)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
        .collect();
    [
        ("h.0.attn.c_attn", Scheme::Int8PerChannel),
        ("h.0.mlp.c_fc", Scheme::Int4Symmetric { group: 32 }),
        // 70 columns: a ragged last group and an odd number of nibbles per row.
        ("h.0.mlp.c_proj", Scheme::Int4Asymmetric { group: 64 }),
    ]
    .into_iter()
    .map(|(name, scheme)| NamedTensor {
        name: name.to_string(),
        tensor: quantize(&weights, 6, 70, scheme).unwrap(),
        transposed: name.ends_with("c_fc"),
    })
    .chain(std::iter::once(NamedTensor {
        name: "odd".to_string(),
        tensor: quantize(&weights[..15], 3, 5, Scheme::Int4Symmetric { group: 2 }).unwrap(),
        transposed: false,
    }))
    .chain(std::iter::once(NamedTensor {
        name: "ln_f.bias".to_string(),
        tensor: quantize(&weights[..7], 1, 7, Scheme::Float32).unwrap(),
        transposed: false,
    }))
    .collect()
}

fn message(err: &anyhow::Error) -> String {
    assert_eq!(
        err.downcast_ref::<UserError>().map(|u| u.kind),
        Some(ErrorKind::Usage),
        "{err:#}"
    );
    format!("{err:#}")
}

/// Recompute the checksum after editing the table or payload of `bytes`,
/// to reach the checks that run after it.
fn reseal(bytes: &mut [u8]) {
    let digest = Sha256::digest(&bytes[HEADER_LEN..]);
    bytes[32..64].copy_from_slice(&digest);
}

#[test]
fn round_trip_through_a_file_is_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weights.envq");
    let tensors = sample_tensors();
    write_packed(&path, &tensors).unwrap();
    let back = read_packed(&path).unwrap();
    assert_eq!(back, tensors);
    for (a, b) in back.iter().zip(&tensors) {
        let bits = |t: &QuantizedTensor| {
            t.scales
                .iter()
                .chain(&t.offsets)
                .map(|h| h.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&a.tensor), bits(&b.tensor));
        assert_eq!(a.tensor.codes, b.tensor.codes);
    }
    // Writing again gives the same bytes, and no temporary file is left over.
    let first = std::fs::read(&path).unwrap();
    write_packed(&path, &tensors).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), first);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    assert_eq!(
        decode_packed(&encode_packed(&[]).unwrap(), "empty").unwrap(),
        vec![]
    );
}

#[test]
fn header_layout_is_as_documented() {
    let bytes = encode_packed(&sample_tensors()).unwrap();
    assert_eq!(&bytes[..8], b"ENVQUANT");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    assert_eq!(u32::from_le_bytes(bytes[12..16].try_into().unwrap()), 5);
    let table_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let payload_len = u64::from_le_bytes(bytes[24..32].try_into().unwrap()) as usize;
    assert_eq!(HEADER_LEN + table_len + payload_len, bytes.len());
    // First entry: name, int8 code 1, group = cols = 70, rows 6, cols 70,
    // scales at payload offset 0 (6 fp16 = 12 bytes), no offsets, codes at 12.
    let entry = &bytes[HEADER_LEN..];
    let name = b"h.0.attn.c_attn";
    assert_eq!(
        u16::from_le_bytes([entry[0], entry[1]]) as usize,
        name.len()
    );
    let mut rest = Cursor::new(&entry[2 + name.len()..]);
    assert_eq!(
        (rest.u8(), rest.u8(), rest.u32()),
        (Some(1), Some(0), Some(70))
    );
    assert_eq!((rest.u64(), rest.u64()), (Some(6), Some(70)));
    assert_eq!(
        (rest.u64(), rest.u64(), rest.u64()),
        (Some(0), Some(12), Some(12))
    );
    // The payload starts with the first scale, little-endian fp16.
    let payload = &bytes[HEADER_LEN + table_len..];
    let tensors = sample_tensors();
    assert_eq!(&payload[..2], &tensors[0].tensor.scales[0].to_le_bytes());
}

#[test]
fn each_kind_of_damage_is_a_clear_usage_error() {
    let good = encode_packed(&sample_tensors()).unwrap();
    let decode = |bytes: &[u8]| message(&decode_packed(bytes, "w.envq").unwrap_err());

    let mut wrong_magic = good.clone();
    wrong_magic[0] = b'X';
    assert!(decode(&wrong_magic).contains("w.envq: wrong magic"));
    assert!(decode(b"PK\x03\x04").contains("wrong magic"));
    assert!(decode(&[]).contains("wrong magic"));

    assert!(decode(&good[..40]).contains("truncated: 40 bytes"));
    assert!(decode(&good[..good.len() - 1]).contains("truncated: the header promises"));
    let mut longer = good.clone();
    longer.push(0);
    assert!(decode(&longer).contains("do not match the file's"));

    let mut wrong_version = good.clone();
    wrong_version[8] = 2;
    let text = decode(&wrong_version);
    assert!(
        text.contains("format version 2; this envgen reads version 1"),
        "{text}"
    );

    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    assert!(decode(&flipped).contains("checksum mismatch"));

    // Unknown scheme code in the first entry (re-sealed so the parser sees it).
    let scheme_at = HEADER_LEN + 2 + "h.0.attn.c_attn".len();
    let mut unknown = good.clone();
    unknown[scheme_at] = 9;
    reseal(&mut unknown);
    assert!(decode(&unknown).contains("tensor #0: 'h.0.attn.c_attn': unknown scheme code 9"));

    // Codes offset pointing past the payload.
    let mut out_of_range = good.clone();
    let codes_offset_at = scheme_at + 2 + 4 + 16 + 16;
    out_of_range[codes_offset_at..codes_offset_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    reseal(&mut out_of_range);
    assert!(decode(&out_of_range).contains("codes at payload offset"));

    // A count larger than the table holds.
    let mut more = good.clone();
    more[12] = 6;
    reseal(&mut more);
    assert!(decode(&more).contains("tensor #5: the tensor table ends inside this entry"));

    // A layout byte other than 0 (as is) or 1 (transposed).
    let mut bad_layout = good.clone();
    bad_layout[scheme_at + 1] = 7;
    reseal(&mut bad_layout);
    assert!(decode(&bad_layout).contains("layout byte is 7"));

    // Every message carries the fix.
    let err = decode_packed(&flipped, "w.envq").unwrap_err();
    assert!(err.downcast_ref::<UserError>().unwrap().fix.is_some());
}

#[test]
fn file_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.envq");
    assert!(message(&read_packed(&missing).unwrap_err()).contains("nope.envq"));
    let junk = dir.path().join("junk.envq");
    std::fs::write(&junk, b"hello").unwrap();
    let text = message(&read_packed(&junk).unwrap_err());
    assert!(text.contains("junk.envq: wrong magic"), "{text}");
    let no_dir = dir.path().join("missing-dir").join("w.envq");
    assert!(
        message(&write_packed(&no_dir, &sample_tensors()).unwrap_err()).contains("cannot write")
    );
}

#[test]
fn writer_refuses_inconsistent_or_duplicate_tensors() {
    let mut tensors = sample_tensors();
    tensors[1].name = tensors[0].name.clone();
    assert!(format!("{:#}", encode_packed(&tensors).unwrap_err()).contains("appears twice"));
    let mut tensors = sample_tensors();
    tensors[2].tensor.codes.pop();
    assert!(format!("{:#}", encode_packed(&tensors).unwrap_err()).contains("codes"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn reader_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_packed(&bytes, "fuzz");
    }

    /// Past the checksum: a valid header over an arbitrary table and payload.
    #[test]
    fn reader_never_panics_on_sealed_arbitrary_tables(
        count in 0u32..6,
        table in proptest::collection::vec(any::<u8>(), 0..256),
        payload in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let bytes = assemble(count, &table, &payload);
        let _ = decode_packed(&bytes, "fuzz");
    }

    /// Single-byte edits of a real file, re-sealed: errors or a valid read.
    #[test]
    fn reader_never_panics_on_edited_files(at in 0usize..4096, value in any::<u8>()) {
        let mut bytes = encode_packed(&sample_tensors()).unwrap();
        let at = HEADER_LEN + at % (bytes.len() - HEADER_LEN);
        bytes[at] = value;
        reseal(&mut bytes);
        if let Ok(tensors) = decode_packed(&bytes, "fuzz") {
            for t in tensors {
                prop_assert!(t.tensor.inconsistency().is_none());
            }
        }
    }
}
