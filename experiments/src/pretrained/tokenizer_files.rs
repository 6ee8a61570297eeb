//! The tokenizer files envgen writes beside weights it exports, so that
//! `transformers`' `AutoTokenizer.from_pretrained(DIR)` (and envgen's own
//! [`super::HfTokenizer`]) encode text with the ids the model was trained
//! on (issue #42: an export without them gave transformers an empty
//! tokenizer, "hello world" → `[]`).
//!
//! GPT-2's BPE is rebuilt from the `r50k_base` ranks envgen compiles in
//! (tiktoken-rs): a tiktoken rank file lists tokens, not merges, so each
//! multi-byte token's merge is recovered as the two pieces byte-pair
//! merging splits it into when only lower ranks may merge (the way
//! transformers' tiktoken converter recovers them). Char-level runs get a
//! merge-less BPE over their characters.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

use crate::data::{self, TokenizerKind};
use crate::fsutil::write_atomic;

/// GPT-2's `<|endoftext|>`: its bos, eos and unk token (transformers'
/// `GPT2Tokenizer` defaults; llm.c's `dev/eval/export_hf.py` sets bos and
/// eos to it too).
pub const GPT2_EOT_TEXT: &str = "<|endoftext|>";

/// GPT-2's byte → printable character map (what `ByteLevel` pre-tokenizes
/// to): printable Latin-1 bytes stand for themselves, the others take the
/// characters from U+0100 on, in byte order.
pub fn byte_level_alphabet() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut extra = 0;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap_or('?')
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap_or('?')
            }
        })
        .collect()
}

/// Byte tokens 0..=255, then this end-of-text token.
pub const BYTE_EOS: &str = "<|endoftext|>";

/// A byte-level BPE without merges: one token per byte (ids = byte
/// values) plus [`BYTE_EOS`], written as `tokenizer.json` in `dir`.
pub fn write_byte_tokenizer(dir: &Path) -> anyhow::Result<()> {
    let chars = byte_level_alphabet();
    // An array: `vocab_and_merges` takes what converts into its own map type.
    let vocab: [(String, u32); 256] = std::array::from_fn(|i| (chars[i].to_string(), i as u32));
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, vec![])
        .build()
        .map_err(|e| anyhow::anyhow!("building the byte tokenizer: {e}"))?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer
        .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
        .with_decoder(Some(ByteDecoder::default()));
    tokenizer.add_special_tokens(&[AddedToken::from(BYTE_EOS, true)]);
    let path = dir.join(super::tokenizer::FILE);
    tokenizer
        .save(&path, false)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}

/// The merge that makes each token of two bytes or more, in rank order:
/// the token's bytes merged as byte-pair encoding does, with only ranks
/// below the token's own allowed, end in exactly two pieces.
/// `tokens[rank]` is the token of that rank.
pub fn merges_of_ranks(tokens: &[Vec<u8>]) -> anyhow::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let rank: HashMap<&[u8], usize> = tokens
        .iter()
        .enumerate()
        .map(|(r, t)| (t.as_slice(), r))
        .collect();
    let mut merges = Vec::new();
    for (own, token) in tokens.iter().enumerate() {
        if token.len() < 2 {
            continue;
        }
        // Piece i is token[bounds[i]..bounds[i + 1]].
        let mut bounds: Vec<usize> = (0..=token.len()).collect();
        loop {
            let best = (0..bounds.len() - 2)
                .filter_map(|i| {
                    let joined = &token[bounds[i]..bounds[i + 2]];
                    rank.get(joined).filter(|&&r| r < own).map(|&r| (r, i))
                })
                .min();
            let Some((_, i)) = best else { break };
            bounds.remove(i + 1);
        }
        if bounds.len() != 3 {
            anyhow::bail!(
                "token {own} ({:?}) is not the merge of two lower-ranked tokens",
                String::from_utf8_lossy(token)
            );
        }
        merges.push((token[..bounds[1]].to_vec(), token[bounds[1]..].to_vec()));
    }
    Ok(merges)
}

/// GPT-2's BPE in the forms the files want.
pub struct Gpt2Bpe {
    pub tokenizer: tokenizers::Tokenizer,
    /// (token in the byte-level alphabet, id), by id.
    pub vocab: Vec<(String, u32)>,
    /// The merges, highest priority first.
    pub merges: Vec<(String, String)>,
}

/// GPT-2's BPE (`r50k_base`) as a `tokenizers` tokenizer: byte-level
/// pre-tokenizer without a prefix space, no bos added, `<|endoftext|>`
/// special at 50256. Also its vocabulary and merges, in the byte-level
/// alphabet (for vocab.json and merges.txt).
pub fn gpt2_bpe() -> anyhow::Result<Gpt2Bpe> {
    let bpe = tiktoken_rs::r50k_base_singleton();
    let tokens = (0..data::tokenizer::GPT2_EOT)
        .map(|id| bpe.decode_bytes(&[id]))
        .collect::<Result<Vec<Vec<u8>>, _>>()
        .map_err(|e| anyhow::anyhow!("reading GPT-2's ranks: {e}"))?;
    let alphabet = byte_level_alphabet();
    let spell = |bytes: &[u8]| -> String { bytes.iter().map(|&b| alphabet[b as usize]).collect() };
    let mut vocab: Vec<(String, u32)> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (spell(t), id as u32))
        .collect();
    vocab.push((GPT2_EOT_TEXT.into(), data::tokenizer::GPT2_EOT));
    let merges: Vec<(String, String)> = merges_of_ranks(&tokens)?
        .iter()
        .map(|(a, b)| (spell(a), spell(b)))
        .collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab.iter().cloned().collect::<Vocab>(), merges.clone())
        .build()
        .map_err(|e| anyhow::anyhow!("building GPT-2's BPE: {e}"))?;
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer
        .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
        .with_post_processor(Some(ByteLevel::default().trim_offsets(false)))
        .with_decoder(Some(ByteDecoder::default()));
    tokenizer.add_special_tokens(&[AddedToken::from(GPT2_EOT_TEXT, true)]);
    Ok(Gpt2Bpe {
        tokenizer,
        vocab,
        merges,
    })
}

/// A char-level vocabulary as a merge-less BPE: the text is one word,
/// split into its characters, each looked up; decoding joins them back.
fn char_level(tokenizer: &data::Tokenizer) -> anyhow::Result<tokenizers::Tokenizer> {
    let vocab: Vocab = (0..tokenizer.vocab_size() as u32)
        .map(|id| (tokenizer.decode(&[id]), id))
        .collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab, vec![])
        .build()
        .map_err(|e| anyhow::anyhow!("building the char-level tokenizer: {e}"))?;
    let mut out = tokenizers::Tokenizer::new(model);
    out.with_decoder(Some(tokenizers::decoders::fuse::Fuse::new()));
    Ok(out)
}

fn save_tokenizer(tokenizer: &tokenizers::Tokenizer, dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(super::tokenizer::FILE);
    let text = tokenizer
        .to_string(true)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    write_atomic(&path, text.as_bytes())
}

fn write_json(dir: &Path, name: &str, doc: &Value) -> anyhow::Result<()> {
    write_atomic(
        &dir.join(name),
        serde_json::to_string_pretty(doc)?.as_bytes(),
    )
}

/// Write the files `AutoTokenizer.from_pretrained(dir)` reads for
/// `tokenizer` (`max_length`: the model's context): tokenizer.json and
/// tokenizer_config.json, and for GPT-2 also special_tokens_map.json,
/// vocab.json and merges.txt (transformers 4's slow `GPT2Tokenizer` reads
/// those two).
pub fn write(tokenizer: &data::Tokenizer, max_length: usize, dir: &Path) -> anyhow::Result<()> {
    let mut config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        // envgen decodes without transformers' space clean-up.
        "clean_up_tokenization_spaces": false,
    });
    match tokenizer.kind() {
        TokenizerKind::Gpt2 => {
            let Gpt2Bpe {
                tokenizer: bpe,
                vocab,
                merges,
            } = gpt2_bpe()?;
            save_tokenizer(&bpe, dir)?;
            let specials = json!({
                "bos_token": GPT2_EOT_TEXT,
                "eos_token": GPT2_EOT_TEXT,
                "unk_token": GPT2_EOT_TEXT,
            });
            for (key, value) in specials.as_object().into_iter().flatten() {
                config[key] = value.clone();
            }
            config["tokenizer_class"] = json!("GPT2Tokenizer");
            config["add_prefix_space"] = json!(false);
            config["add_bos_token"] = json!(false);
            write_json(dir, "special_tokens_map.json", &specials)?;
            let vocab: serde_json::Map<String, Value> =
                vocab.into_iter().map(|(t, id)| (t, json!(id))).collect();
            write_json(dir, "vocab.json", &Value::Object(vocab))?;
            let mut lines = String::from("#version: 0.2\n");
            for (a, b) in merges {
                lines.push_str(&format!("{a} {b}\n"));
            }
            write_atomic(&dir.join("merges.txt"), lines.as_bytes())?;
        }
        TokenizerKind::Byte => write_byte_tokenizer(dir)?,
        TokenizerKind::Char => save_tokenizer(&char_level(tokenizer)?, dir)?,
    }
    write_json(dir, "tokenizer_config.json", &config)
}

/// The token ids `generation_config.json` names: bos and eos are the
/// tokenizer's end of text where it has one (GPT-2), nothing else (no
/// sampling settings: envgen's runs define none).
pub fn generation_config(tokenizer: &data::Tokenizer) -> Option<Value> {
    tokenizer
        .eot()
        .map(|eot| json!({ "bos_token_id": eot, "eos_token_id": eot }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pretrained::HfTokenizer;

    /// Toy ranks: a, b, c, then ab, bc, abc: "abc" is made from ab + c,
    /// since ab's rank is lower than bc's and merges first (not a + bc),
    /// and a token no lower pair builds is an error naming it.
    #[test]
    fn merges_follow_the_lowest_rank_pair() {
        let tokens: Vec<Vec<u8>> = ["a", "b", "c", "ab", "bc", "abc"]
            .iter()
            .map(|t| t.as_bytes().to_vec())
            .collect();
        let merges = merges_of_ranks(&tokens).unwrap();
        let text: Vec<(String, String)> = merges
            .iter()
            .map(|(a, b)| {
                (
                    String::from_utf8(a.clone()).unwrap(),
                    String::from_utf8(b.clone()).unwrap(),
                )
            })
            .collect();
        let want = [("a", "b"), ("b", "c"), ("ab", "c")];
        assert_eq!(
            text,
            want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
        );
        let orphan: Vec<Vec<u8>> = ["a", "b", "c", "abc"]
            .iter()
            .map(|t| t.as_bytes().to_vec())
            .collect();
        let e = merges_of_ranks(&orphan).unwrap_err();
        assert!(e.to_string().contains("\"abc\""), "{e}");
    }

    /// The written GPT-2 tokenizer.json encodes and decodes as envgen's
    /// tiktoken BPE does, on text with contractions, digits, spaces,
    /// newlines, punctuation and non-ASCII characters.
    #[test]
    fn the_gpt2_tokenizer_json_encodes_as_tiktoken() {
        let dir = tempfile::tempdir().unwrap();
        let tiktoken = data::Tokenizer::gpt2();
        write(&tiktoken, 1024, dir.path()).unwrap();
        let written = HfTokenizer::load(dir.path(), false).unwrap();
        let text = "hello world. Hello, I'm a language model; it's 2026 —\n\n  déjà vu \
                    ナイフ 1234567 don't   they'll\tend";
        let ids = written.encode(text).unwrap();
        assert_eq!(ids, tiktoken.encode(text));
        assert_eq!(
            written.encode("hello world").unwrap(),
            tiktoken.encode("hello world")
        );
        assert_eq!(written.decode(&ids), text);
        assert_eq!(written.token_id(GPT2_EOT_TEXT), Some(50256));
        let config: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("tokenizer_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(config["eos_token"], GPT2_EOT_TEXT);
        assert_eq!(config["model_max_length"], 1024);
        let merges = std::fs::read_to_string(dir.path().join("merges.txt")).unwrap();
        // 50,000 merges (tokens 256…50255) after the version line.
        assert_eq!(merges.lines().count(), 1 + 50_000);
    }

    /// A char-level vocabulary round-trips through its tokenizer.json.
    #[test]
    fn the_char_tokenizer_json_keeps_the_run_ids() {
        let dir = tempfile::tempdir().unwrap();
        let tok = data::Tokenizer::char_level("hello world\nthe end é");
        write(&tok, 64, dir.path()).unwrap();
        let written = HfTokenizer::load(dir.path(), false).unwrap();
        let text = "the world\nhé";
        let ids = written.encode(text).unwrap();
        assert_eq!(ids, tok.encode(text));
        assert_eq!(written.decode(&ids), text);
        assert!(generation_config(&tok).is_none());
        assert_eq!(
            generation_config(&data::Tokenizer::gpt2()).unwrap()["eos_token_id"],
            50256
        );
    }
}
