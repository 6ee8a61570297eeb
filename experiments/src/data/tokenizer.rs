//! Tokenizers: byte-level, char-level (vocabulary from the text, as nanoGPT's
//! `shakespeare_char`), and GPT-2 BPE (`r50k_base`, through `tiktoken-rs`,
//! whose vocabulary is compiled in, so it works offline).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::UserError;

/// GPT-2's vocabulary size (`r50k_base`).
pub const GPT2_VOCAB_SIZE: usize = 50257;
/// GPT-2's `<|endoftext|>` token.
pub const GPT2_EOT: u32 = 50256;

/// Which tokenizer a config asks for (`tokenizer = "byte" | "char" | "gpt2"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenizerKind {
    #[default]
    Byte,
    Char,
    Gpt2,
}

impl TokenizerKind {
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Byte => "byte",
            TokenizerKind::Char => "char",
            TokenizerKind::Gpt2 => "gpt2",
        }
    }
}

#[derive(Clone)]
enum Inner {
    Byte,
    /// Sorted characters; a token id is the index into this list.
    Char {
        chars: Arc<Vec<char>>,
        index: Arc<HashMap<char, u32>>,
    },
    Gpt2(&'static tiktoken_rs::CoreBPE),
}

/// A tokenizer: `encode` text to ids and `decode` ids to text.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Inner,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tokenizer({}, vocab {})",
            self.kind().name(),
            self.vocab_size()
        )
    }
}

impl PartialEq for Tokenizer {
    fn eq(&self, other: &Self) -> bool {
        match (&self.inner, &other.inner) {
            (Inner::Byte, Inner::Byte) | (Inner::Gpt2(_), Inner::Gpt2(_)) => true,
            (Inner::Char { chars: a, .. }, Inner::Char { chars: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl Tokenizer {
    /// Byte-level: every UTF-8 byte is a token (vocabulary 256).
    pub fn byte() -> Self {
        Self { inner: Inner::Byte }
    }

    /// Char-level: the vocabulary is the sorted set of characters of `text`
    /// (nanoGPT builds it from the whole file, train and val, the same way).
    pub fn char_level(text: &str) -> Self {
        let set: BTreeSet<char> = text.chars().collect();
        let chars: Vec<char> = set.into_iter().collect();
        let index = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        Self {
            inner: Inner::Char {
                chars: Arc::new(chars),
                index: Arc::new(index),
            },
        }
    }

    /// GPT-2 BPE (`r50k_base`, vocabulary 50257, `<|endoftext|>` = 50256).
    pub fn gpt2() -> Self {
        Self {
            inner: Inner::Gpt2(tiktoken_rs::r50k_base_singleton()),
        }
    }

    pub fn kind(&self) -> TokenizerKind {
        match self.inner {
            Inner::Byte => TokenizerKind::Byte,
            Inner::Char { .. } => TokenizerKind::Char,
            Inner::Gpt2(_) => TokenizerKind::Gpt2,
        }
    }

    pub fn vocab_size(&self) -> usize {
        match &self.inner {
            Inner::Byte => 256,
            Inner::Char { chars, .. } => chars.len(),
            Inner::Gpt2(_) => GPT2_VOCAB_SIZE,
        }
    }

    /// The end-of-text token, where the tokenizer has one (GPT-2).
    pub fn eot(&self) -> Option<u32> {
        match self.inner {
            Inner::Gpt2(_) => Some(GPT2_EOT),
            _ => None,
        }
    }

    /// Encode text. Special-token text such as `<|endoftext|>` is encoded as
    /// ordinary text (as nanoGPT's `encode_ordinary`). Characters outside a
    /// char-level vocabulary are skipped; use [`Tokenizer::try_encode`] to
    /// get an error for them instead.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match &self.inner {
            Inner::Byte => text.bytes().map(u32::from).collect(),
            Inner::Char { index, .. } => text
                .chars()
                .filter_map(|c| index.get(&c).copied())
                .collect(),
            Inner::Gpt2(bpe) => bpe.encode_ordinary(text),
        }
    }

    /// Encode text; a character outside a char-level vocabulary is an error.
    pub fn try_encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        if let Inner::Char { index, .. } = &self.inner {
            return text
                .chars()
                .map(|c| {
                    index.get(&c).copied().ok_or_else(|| {
                        UserError::usage(format!(
                            "character {c:?} is not in the char-level vocabulary ({} characters, built from the training text)",
                            index.len()
                        ))
                        .with_fix("use only characters that occur in the training text, or tokenizer = \"byte\"")
                        .into()
                    })
                })
                .collect();
        }
        Ok(self.encode(text))
    }

    /// Decode ids to text. Unknown ids and invalid UTF-8 become U+FFFD; use
    /// [`Tokenizer::try_decode`] to get an error for them instead.
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.inner {
            Inner::Byte => {
                let bytes: Vec<u8> = ids
                    .iter()
                    .map(|&id| u8::try_from(id).unwrap_or(b'?'))
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Inner::Char { chars, .. } => ids
                .iter()
                .map(|&id| chars.get(id as usize).copied().unwrap_or('\u{FFFD}'))
                .collect(),
            Inner::Gpt2(bpe) => {
                let bytes: Vec<u8> = ids
                    .iter()
                    .flat_map(|&id| {
                        bpe.decode_bytes(&[id])
                            .unwrap_or_else(|_| "\u{FFFD}".into())
                    })
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    }

    /// Decode ids to text; an id outside the vocabulary, or bytes that are not
    /// UTF-8, are an error naming the id or offset.
    pub fn try_decode(&self, ids: &[u32]) -> anyhow::Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size()) {
            return Err(UserError::usage(format!(
                "token id {bad} is outside the {} vocabulary (size {})",
                self.kind().name(),
                self.vocab_size()
            ))
            .with_fix("decode with the tokenizer the ids were made with")
            .into());
        }
        let bytes: Vec<u8> = match &self.inner {
            Inner::Byte => ids.iter().map(|&id| id as u8).collect(),
            Inner::Char { chars, .. } => {
                return Ok(ids.iter().map(|&id| chars[id as usize]).collect());
            }
            Inner::Gpt2(bpe) => bpe.decode_bytes(ids).map_err(|e| {
                UserError::usage(format!("GPT-2 cannot decode the ids: {e}"))
                    .with_fix("decode with the tokenizer the ids were made with")
            })?,
        };
        String::from_utf8(bytes).map_err(|e| {
            UserError::usage(format!(
                "the decoded bytes are not UTF-8 (at byte {})",
                e.utf8_error().valid_up_to()
            ))
            .with_fix("decode whole sequences, not a cut through a multi-byte character")
            .into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_round_trip_including_multibyte_text() {
        let tok = Tokenizer::byte();
        let text = "Grüße, world!\n";
        let ids = tok.encode(text);
        assert_eq!(ids.len(), text.len());
        assert_eq!(ids[0], u32::from(b'G'));
        assert_eq!(tok.try_decode(&ids).unwrap(), text);
        assert_eq!(tok.decode(&ids), text);
        assert!(tok.try_decode(&[256]).is_err());
        assert_eq!(tok.vocab_size(), 256);
    }

    #[test]
    fn char_vocab_is_sorted_and_round_trips() {
        let tok = Tokenizer::char_level("hello world\n");
        // Sorted: '\n', ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'.
        assert_eq!(tok.vocab_size(), 9);
        assert_eq!(tok.encode("\n hello"), vec![0, 1, 4, 3, 5, 5, 6]);
        let ids = tok.try_encode("world hello").unwrap();
        assert_eq!(tok.try_decode(&ids).unwrap(), "world hello");
        let err = tok.try_encode("help").unwrap_err().to_string();
        assert!(err.contains("'p'"), "{err}");
        let err = tok.try_decode(&[9]).unwrap_err().to_string();
        assert!(err.contains("token id 9"), "{err}");
    }

    #[test]
    fn gpt2_encodes_hello_world_to_the_known_ids() {
        let tok = Tokenizer::gpt2();
        assert_eq!(tok.encode("Hello world"), vec![15496, 995]);
        assert_eq!(tok.vocab_size(), 50257);
        assert_eq!(tok.eot(), Some(50256));
        let text = "The quick brown fox, <|endoftext|> and more.";
        let ids = tok.encode(text);
        assert!(
            !ids.contains(&50256),
            "special text is encoded as ordinary text"
        );
        assert_eq!(tok.try_decode(&ids).unwrap(), text);
        assert_eq!(tok.try_decode(&[50256]).unwrap(), "<|endoftext|>");
        assert!(tok.try_decode(&[50257]).is_err());
    }

    #[test]
    fn tokenizer_kind_parses_kebab_case() {
        #[derive(Deserialize)]
        struct Wrap {
            t: TokenizerKind,
        }
        let w: Wrap = toml::from_str("t = \"gpt2\"").unwrap();
        assert_eq!(w.t, TokenizerKind::Gpt2);
        assert!(toml::from_str::<Wrap>("t = \"bpe\"").is_err());
    }
}
