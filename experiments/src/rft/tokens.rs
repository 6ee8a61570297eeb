//! Text to tokens and back for the RFT GPT (`gpt2::Gpt2`): bytes for the
//! byte-level GPT trained from scratch, or a GPT-2 checkpoint's own
//! tokenizer (`model.init = "hf:DIR"`, `super::family::gpt2`). Both train with
//! the same task (`super::train`) and sample with the same sampler
//! (`super::eval::GptSampler`); only this choice differs.

use super::completion::Tokenized;
use super::task::END_OF_COMPLETION;
use crate::data::Tokenizer;
use crate::pretrained::HfTokenizer;

/// `text` (the prompt followed by the completion) in bytes, the completion
/// starting after `prompt`'s bytes.
pub(crate) fn tokenize(prompt: &str, text: &str) -> Tokenized {
    let tokenizer = Tokenizer::byte();
    Tokenized {
        tokens: tokenizer.encode(text),
        completion_start: tokenizer.encode(prompt).len(),
    }
}

#[derive(Debug, Clone)]
pub enum RftTokenizer {
    /// One token per byte (ids 0..=255): the from-scratch GPT.
    Bytes,
    /// A GPT-2 checkpoint's tokenizer.
    Hf {
        tokenizer: HfTokenizer,
        /// The checkpoint's end-of-sequence ids (config.json `eos_token_id`):
        /// a completion ends there too.
        eos: Vec<u32>,
        /// The model's context (n_positions): longer examples are cut.
        context: usize,
    },
}

impl RftTokenizer {
    /// A training example: `text` is the prompt followed by the completion.
    /// With a checkpoint's tokenizer the prompt is tokenized as at
    /// generation time (with the special tokens its post-processor adds)
    /// and the completion apart from it, without: otherwise a BPE merge
    /// across the boundary would give the model prompt tokens it is never
    /// prompted with.
    pub(crate) fn tokenize(&self, prompt: &str, text: &str) -> anyhow::Result<Tokenized> {
        match self {
            RftTokenizer::Bytes => Ok(tokenize(prompt, text)),
            RftTokenizer::Hf {
                tokenizer, context, ..
            } => {
                let completion = text.strip_prefix(prompt).unwrap_or(text);
                let mut tokens = tokenizer.encode(prompt)?;
                let completion_start = tokens.len();
                tokens.extend(tokenizer.encode_plain(completion)?);
                // The run checks the worked answers fit before it starts; a
                // sampled answer re-tokenized after normalizing may still
                // come out a token longer, and positions past the context
                // have no embedding. Training on its first `context`
                // tokens loses at most the end marker.
                tokens.truncate(*context);
                Ok(Tokenized {
                    tokens,
                    completion_start,
                })
            }
        }
    }

    /// The tokens a prompt is continued from.
    pub fn encode_prompt(&self, prompt: &str) -> anyhow::Result<Vec<u32>> {
        match self {
            RftTokenizer::Bytes => Ok(Tokenizer::byte().encode(prompt)),
            RftTokenizer::Hf { tokenizer, .. } => tokenizer.encode(prompt),
        }
    }

    /// The text of generated tokens (special tokens left out).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            RftTokenizer::Bytes => Tokenizer::byte().decode(ids),
            RftTokenizer::Hf { tokenizer, .. } => tokenizer.decode(ids),
        }
    }

    /// Whether a completion ends after `token`: its text holds the end
    /// marker (a BPE may merge the newline with what precedes or follows
    /// it), or it is an end-of-sequence token.
    pub fn ends_completion(&self, token: u32) -> bool {
        match self {
            RftTokenizer::Bytes => token < 256 && END_OF_COMPLETION.as_bytes() == [token as u8],
            RftTokenizer::Hf { tokenizer, eos, .. } => {
                eos.contains(&token) || tokenizer.decode(&[token]).contains(END_OF_COMPLETION)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A byte-level BPE trained to merge a run of newlines into one token,
    /// as GPT-2's has "\n\n": a completion may end inside such a token.
    pub(crate) fn merging_tokenizer(dir: &std::path::Path) -> HfTokenizer {
        use tokenizers::decoders::byte_level::ByteLevel as ByteDecoder;
        use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
        use tokenizers::models::TrainerWrapper;
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        use tokenizers::AddedToken;

        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .vocab_size(300)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(vec![AddedToken::from("<|endoftext|>", true)])
            .build()
            .into();
        let mut tok = tokenizers::Tokenizer::new(BPE::default());
        tok.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
            .with_decoder(Some(ByteDecoder::default()));
        // Each text ends in a run of newlines, which GPT-2's pre-tokenizer
        // keeps in one piece for the merges to join.
        let corpus = vec!["2 kilograms?\nA: <answer>2000</answer>\n\n"; 50];
        tok.train(&mut trainer, corpus.into_iter()).unwrap();
        tok.save(dir.join("tokenizer.json"), false).unwrap();
        HfTokenizer::load(dir, false).unwrap()
    }

    #[test]
    fn a_checkpoint_tokenizer_splits_prompt_and_completion_and_finds_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = merging_tokenizer(dir.path());
        let eos = tokenizer.token_id("<|endoftext|>").unwrap();
        let tokens = RftTokenizer::Hf {
            tokenizer: tokenizer.clone(),
            eos: vec![eos],
            context: 64,
        };
        let prompt = "How many grams are in 2 kilograms?\nA: ";
        let text = format!("{prompt}1 kilogram = 1000 grams. <answer>2000</answer>\n");
        let example = tokens.tokenize(prompt, &text).unwrap();
        let prompt_ids = tokens.encode_prompt(prompt).unwrap();
        assert_eq!(example.completion_start, prompt_ids.len());
        assert_eq!(&example.tokens[..prompt_ids.len()], &prompt_ids[..]);
        assert_eq!(tokens.decode(&example.tokens), text);

        // Every token whose text holds a newline ends a completion (the
        // trained merges make several), and so does the eos; no other does.
        let merged = tokenizer.token_id("\u{10a}\u{10a}");
        assert!(merged.is_some(), "the BPE merged the double newline");
        let enders: Vec<u32> = (0..300).filter(|&t| tokens.ends_completion(t)).collect();
        assert!(enders.len() >= 3, "{enders:?}");
        for t in 0..300 {
            assert_eq!(
                tokens.ends_completion(t),
                t == eos || tokenizer.decode(&[t]).contains('\n'),
                "token {t}"
            );
        }
        // Examples longer than the context are cut to it.
        let short = RftTokenizer::Hf {
            tokenizer,
            eos: vec![eos],
            context: 5,
        };
        assert_eq!(short.tokenize(prompt, &text).unwrap().tokens.len(), 5);

        // Bytes: the newline byte and nothing else.
        let bytes = RftTokenizer::Bytes;
        assert!(bytes.ends_completion(u32::from(b'\n')));
        assert!(!bytes.ends_completion(u32::from(b'\n') + 256));
        assert!(!bytes.ends_completion(u32::from(b'A')));
        assert_eq!(bytes.decode(&bytes.encode_prompt(prompt).unwrap()), prompt);
    }
}
