//! envgen's embedded training corpus: English-like sentences sampled from a
//! seeded stochastic grammar whose entropy rate is known exactly.
//!
//! The grammar is a *unifilar* Markov source: in each state it picks one
//! "choice" (a word-group, a word of it, and an ending such as `" "` or
//! `".\n"`), emits `word + ending`, and the choice alone decides the next
//! state. Within a state the emitted strings are prefix-free (words are
//! letters only, every ending starts with a non-letter, endings of a group are
//! prefix-free among themselves, and words of a state are distinct), so the
//! byte stream decodes back to exactly one choice sequence. The byte stream
//! therefore carries exactly the entropy of the choices, and by the
//! renewal-reward theorem its entropy rate per byte is
//! `Σ π_s H_s / Σ π_s L_s`, where `π` is the stationary distribution of the
//! state chain, `H_s` the entropy of a choice in state `s` and `L_s` its
//! expected length in bytes. `π` comes from solving a 15×15 linear system, so
//! the rate is exact up to floating-point rounding.
//!
//! The word lists are envgen's own (common English words and made-up names);
//! the sampler is ChaCha8 with a value-stable uniform draw, so a seed gives the
//! same bytes on every machine.

use rand::RngCore;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Default size of the generated corpus: 1 MiB, train and val together.
pub const DEFAULT_CORPUS_BYTES: usize = 1 << 20;

/// The grammar's states; the discriminant is the index into `Grammar::states`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Beginning of a sentence: capitalised determiner or a name.
    Start,
    SubjSg,
    SubjPl,
    SubjSgNoun,
    SubjPlNoun,
    VerbSg,
    VerbPl,
    Object,
    ObjSg,
    ObjPl,
    ObjSgNoun,
    ObjPlNoun,
    Prep,
    PrepNoun,
    Adverb,
}

const STATE_COUNT: usize = State::Adverb as usize + 1;

const NOUNS: &[&str] = &[
    "cat", "dog", "bird", "horse", "farmer", "baker", "river", "hill", "garden", "window", "door",
    "table", "lamp", "candle", "book", "letter", "song", "ship", "boat", "road", "bridge", "tower",
    "king", "queen", "friend", "stranger", "sailor", "miller", "apple", "stone", "cloud", "star",
    "flower", "forest", "lake", "village", "market", "coat", "hat", "key", "cup", "plate", "bell",
    "drum", "tree", "goat", "cow", "pig", "owl", "frog", "crow", "seed", "field", "wall", "gate",
    "boot", "ring", "map", "clock", "wagon", "kettle", "lantern", "rabbit", "bear", "snake",
];
const ADJECTIVES: &[&str] = &[
    "old", "young", "small", "big", "red", "green", "quiet", "loud", "happy", "tired", "clever",
    "brave", "silly", "gentle", "golden", "silver", "dark", "bright", "cold", "warm", "tall",
    "short", "strange", "little", "lazy", "busy", "proud", "kind", "wild", "sleepy", "hungry",
    "wooden", "heavy", "rusty", "lucky", "grey",
];
const TRANSITIVE: &[&str] = &[
    "see", "find", "follow", "help", "love", "hold", "keep", "paint", "build", "open", "want",
    "need", "like", "hate", "feed", "call", "remember", "visit", "greet", "chase", "bring", "take",
    "make", "meet", "hear", "count", "mend", "sell", "lift", "pull", "clean", "break", "guard",
    "draw", "read",
];
const INTRANSITIVE: &[&str] = &[
    "sleep", "sing", "dance", "laugh", "wait", "run", "walk", "swim", "jump", "shout", "smile",
    "rest", "listen", "dream", "travel", "wander", "speak", "cough", "sit", "fall", "hide", "grow",
    "shine", "float",
];
const ADVERBS: &[&str] = &[
    "slowly", "quickly", "today", "again", "softly", "loudly", "alone", "outside", "often",
    "early", "late", "together", "quietly", "happily", "well", "here", "there", "now", "badly",
    "gladly",
];
const PREPOSITIONS: &[&str] = &[
    "with", "near", "under", "behind", "beside", "above", "below", "past", "around", "inside",
    "without", "beyond",
];
/// Made-up names, always capitalised.
const NAMES: &[&str] = &[
    "Ada", "Bram", "Cora", "Dune", "Elko", "Fenn", "Gilda", "Hollis", "Ivo", "Juno", "Kit", "Lark",
    "Mora", "Nils", "Oda", "Pim", "Quill", "Rook", "Sela", "Tam", "Ulla", "Vex", "Wren", "Yara",
    "Zeb",
];
const DET_SG: &[&str] = &[
    "the", "a", "this", "that", "every", "one", "my", "your", "her", "his", "each",
];
const DET_PL: &[&str] = &[
    "some", "these", "those", "many", "two", "three", "few", "all", "our", "their",
];

/// How a word list is turned into emitted words.
#[derive(Clone, Copy)]
enum Form {
    Plain,
    Capitalised,
    /// Regular plural noun or third-person-singular verb.
    PlusS,
}

/// One ending of a group: the text after the word and the state it leads to.
struct EndingSpec {
    text: &'static str,
    weight: f64,
    next: State,
}

/// One word-group of a state: a word list, a form, and the endings that may follow.
struct GroupSpec {
    weight: f64,
    words: &'static [&'static str],
    form: Form,
    endings: &'static [EndingSpec],
}

const fn end(text: &'static str, weight: f64, next: State) -> EndingSpec {
    EndingSpec { text, weight, next }
}

const fn group(
    weight: f64,
    words: &'static [&'static str],
    form: Form,
    endings: &'static [EndingSpec],
) -> GroupSpec {
    GroupSpec {
        weight,
        words,
        form,
        endings,
    }
}

const TO_SUBJ_SG: &[EndingSpec] = &[end(" ", 1.0, State::SubjSg)];
const TO_SUBJ_PL: &[EndingSpec] = &[end(" ", 1.0, State::SubjPl)];
const TO_SUBJ_SG_NOUN: &[EndingSpec] = &[end(" ", 1.0, State::SubjSgNoun)];
const TO_SUBJ_PL_NOUN: &[EndingSpec] = &[end(" ", 1.0, State::SubjPlNoun)];
const TO_VERB_SG: &[EndingSpec] = &[end(" ", 1.0, State::VerbSg)];
const TO_VERB_PL: &[EndingSpec] = &[end(" ", 1.0, State::VerbPl)];
const TO_OBJECT: &[EndingSpec] = &[end(" ", 1.0, State::Object)];
const TO_OBJ_SG: &[EndingSpec] = &[end(" ", 1.0, State::ObjSg)];
const TO_OBJ_PL: &[EndingSpec] = &[end(" ", 1.0, State::ObjPl)];
const TO_OBJ_SG_NOUN: &[EndingSpec] = &[end(" ", 1.0, State::ObjSgNoun)];
const TO_OBJ_PL_NOUN: &[EndingSpec] = &[end(" ", 1.0, State::ObjPlNoun)];
/// The sentence ends here.
const FINAL: &[EndingSpec] = &[
    end(". ", 0.6, State::Start),
    end(".\n", 0.3, State::Start),
    end("! ", 0.1, State::Start),
];
/// After an object: end the sentence or add a prepositional phrase.
const AFTER_OBJECT: &[EndingSpec] = &[
    end(". ", 0.45, State::Start),
    end(".\n", 0.25, State::Start),
    end("! ", 0.05, State::Start),
    end(" ", 0.25, State::Prep),
];
/// After an intransitive verb: end the sentence or add an adverb.
const AFTER_INTRANSITIVE: &[EndingSpec] = &[
    end(". ", 0.4, State::Start),
    end(".\n", 0.2, State::Start),
    end("! ", 0.05, State::Start),
    end(" ", 0.35, State::Adverb),
];

/// The grammar, state by state (indexed by `State as usize`).
const SPEC: [&[GroupSpec]; STATE_COUNT] = [
    // Start
    &[
        group(0.45, DET_SG, Form::Capitalised, TO_SUBJ_SG),
        group(0.3, DET_PL, Form::Capitalised, TO_SUBJ_PL),
        group(0.25, NAMES, Form::Plain, TO_VERB_SG),
    ],
    // SubjSg
    &[
        group(0.35, ADJECTIVES, Form::Plain, TO_SUBJ_SG_NOUN),
        group(0.65, NOUNS, Form::Plain, TO_VERB_SG),
    ],
    // SubjPl
    &[
        group(0.35, ADJECTIVES, Form::Plain, TO_SUBJ_PL_NOUN),
        group(0.65, NOUNS, Form::PlusS, TO_VERB_PL),
    ],
    // SubjSgNoun
    &[group(1.0, NOUNS, Form::Plain, TO_VERB_SG)],
    // SubjPlNoun
    &[group(1.0, NOUNS, Form::PlusS, TO_VERB_PL)],
    // VerbSg: agreement with a singular subject.
    &[
        group(0.65, TRANSITIVE, Form::PlusS, TO_OBJECT),
        group(0.35, INTRANSITIVE, Form::PlusS, AFTER_INTRANSITIVE),
    ],
    // VerbPl
    &[
        group(0.65, TRANSITIVE, Form::Plain, TO_OBJECT),
        group(0.35, INTRANSITIVE, Form::Plain, AFTER_INTRANSITIVE),
    ],
    // Object
    &[
        group(0.45, DET_SG, Form::Plain, TO_OBJ_SG),
        group(0.3, DET_PL, Form::Plain, TO_OBJ_PL),
        group(0.25, NAMES, Form::Plain, AFTER_OBJECT),
    ],
    // ObjSg
    &[
        group(0.35, ADJECTIVES, Form::Plain, TO_OBJ_SG_NOUN),
        group(0.65, NOUNS, Form::Plain, AFTER_OBJECT),
    ],
    // ObjPl
    &[
        group(0.35, ADJECTIVES, Form::Plain, TO_OBJ_PL_NOUN),
        group(0.65, NOUNS, Form::PlusS, AFTER_OBJECT),
    ],
    // ObjSgNoun
    &[group(1.0, NOUNS, Form::Plain, AFTER_OBJECT)],
    // ObjPlNoun
    &[group(1.0, NOUNS, Form::PlusS, AFTER_OBJECT)],
    // Prep: "with the dog"
    &[group(
        1.0,
        PREPOSITIONS,
        Form::Plain,
        &[end(" the ", 1.0, State::PrepNoun)],
    )],
    // PrepNoun
    &[group(1.0, NOUNS, Form::Plain, FINAL)],
    // Adverb
    &[group(1.0, ADVERBS, Form::Plain, FINAL)],
];

/// Zipf-like word weights: the r-th word (0-based) has weight `1/(r+2)^0.7`,
/// so some words are frequent (learnable) and the tail keeps the entropy up.
fn zipf_weight(rank: usize) -> f64 {
    1.0 / ((rank + 2) as f64).powf(0.7)
}

/// A distribution over items, with cumulative probabilities for sampling.
#[derive(Debug, Clone)]
struct Categorical<T> {
    items: Vec<T>,
    probs: Vec<f64>,
    cumulative: Vec<f64>,
}

impl<T> Categorical<T> {
    fn new(items: Vec<T>, weights: Vec<f64>) -> Self {
        let total: f64 = weights.iter().sum();
        let probs: Vec<f64> = weights.iter().map(|w| w / total).collect();
        let mut running = 0.0;
        let cumulative = probs
            .iter()
            .map(|p| {
                running += p;
                running
            })
            .collect();
        Self {
            items,
            probs,
            cumulative,
        }
    }

    /// Index drawn with a uniform `u` in [0, 1); rounding at the top end
    /// falls back to the last item.
    fn index_for(&self, u: f64) -> usize {
        self.cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.items.len() - 1)
    }

    fn entropy(&self) -> f64 {
        self.probs
            .iter()
            .filter(|&&p| p > 0.0)
            .map(|&p| -p * p.ln())
            .sum()
    }
}

#[derive(Debug, Clone)]
struct Ending {
    text: String,
    next: usize,
}

#[derive(Debug, Clone)]
struct Group {
    words: Categorical<String>,
    endings: Categorical<Ending>,
}

/// The compiled grammar: for each state a distribution over word-groups.
#[derive(Debug, Clone)]
pub struct Grammar {
    states: Vec<Categorical<Group>>,
}

fn apply_form(word: &str, form: Form) -> String {
    match form {
        Form::Plain => word.to_string(),
        Form::PlusS => format!("{word}s"),
        Form::Capitalised => {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        }
    }
}

impl Grammar {
    /// envgen's default grammar.
    pub fn default_grammar() -> Self {
        let states = SPEC
            .iter()
            .map(|groups| {
                let compiled = groups
                    .iter()
                    .map(|g| {
                        let words = g.words.iter().map(|w| apply_form(w, g.form)).collect();
                        let weights = (0..g.words.len()).map(zipf_weight).collect();
                        let endings = g
                            .endings
                            .iter()
                            .map(|e| Ending {
                                text: e.text.to_string(),
                                next: e.next as usize,
                            })
                            .collect();
                        let ending_weights = g.endings.iter().map(|e| e.weight).collect();
                        Group {
                            words: Categorical::new(words, weights),
                            endings: Categorical::new(endings, ending_weights),
                        }
                    })
                    .collect();
                let weights = groups.iter().map(|g| g.weight).collect();
                Categorical::new(compiled, weights)
            })
            .collect();
        Self { states }
    }

    /// Every choice of a state as (emitted text, probability, next state).
    fn choices(&self, state: usize) -> Vec<(String, f64, usize)> {
        let groups = &self.states[state];
        let mut out = Vec::new();
        for (group, p_group) in groups.items.iter().zip(&groups.probs) {
            for (word, p_word) in group.words.items.iter().zip(&group.words.probs) {
                for (ending, p_end) in group.endings.items.iter().zip(&group.endings.probs) {
                    out.push((
                        format!("{word}{}", ending.text),
                        p_group * p_word * p_end,
                        ending.next,
                    ));
                }
            }
        }
        out
    }

    /// The stationary distribution of the state chain, solving `π P = π`,
    /// `Σ π = 1` by Gaussian elimination with partial pivoting.
    fn stationary(&self) -> Vec<f64> {
        let n = self.states.len();
        // Rows are equations: (Pᵀ - I) π = 0, with the last one replaced by Σ π = 1.
        let mut a = vec![vec![0.0; n + 1]; n];
        for from in 0..n {
            for (_, p, to) in self.choices(from) {
                a[to][from] += p;
            }
            a[from][from] -= 1.0;
        }
        a[n - 1] = vec![1.0; n + 1];
        for col in 0..n {
            let pivot = (col..n)
                .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
                .unwrap_or(col);
            a.swap(col, pivot);
            let lead = a[col][col];
            for row in 0..n {
                if row != col && a[row][col] != 0.0 {
                    let factor = a[row][col] / lead;
                    for k in col..=n {
                        a[row][k] -= factor * a[col][k];
                    }
                }
            }
        }
        (0..n).map(|i| a[i][n] / a[i][i]).collect()
    }

    /// The exact entropy rate of the byte stream this grammar emits.
    pub fn entropy_rate(&self) -> EntropyRate {
        let pi = self.stationary();
        let mut nats_per_step = 0.0;
        let mut bytes_per_step = 0.0;
        for (state, groups) in self.states.iter().enumerate() {
            let mut entropy = groups.entropy();
            let mut length = 0.0;
            for (group, p_group) in groups.items.iter().zip(&groups.probs) {
                entropy += p_group * (group.words.entropy() + group.endings.entropy());
                let word_len: f64 = group
                    .words
                    .items
                    .iter()
                    .zip(&group.words.probs)
                    .map(|(w, p)| p * w.len() as f64)
                    .sum();
                let ending_len: f64 = group
                    .endings
                    .items
                    .iter()
                    .zip(&group.endings.probs)
                    .map(|(e, p)| p * e.text.len() as f64)
                    .sum();
                length += p_group * (word_len + ending_len);
            }
            nats_per_step += pi[state] * entropy;
            bytes_per_step += pi[state] * length;
        }
        let nats_per_byte = nats_per_step / bytes_per_step;
        EntropyRate {
            nats_per_byte,
            bits_per_byte: nats_per_byte / std::f64::consts::LN_2,
            nats_per_step,
            bytes_per_step,
        }
    }

    /// Sample at least `n_bytes` bytes (then cut to exactly `n_bytes`) from
    /// the start state, with the grammar's total log-probability of the
    /// choices made.
    pub fn generate(&self, seed: u64, n_bytes: usize) -> GeneratedCorpus {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut text = String::with_capacity(n_bytes + 32);
        let mut neg_log_prob = 0.0;
        let mut steps = 0usize;
        let mut state = State::Start as usize;
        while text.len() < n_bytes {
            let groups = &self.states[state];
            let g = groups.index_for(uniform(&mut rng));
            let group = &groups.items[g];
            let w = group.words.index_for(uniform(&mut rng));
            let e = group.endings.index_for(uniform(&mut rng));
            let ending = &group.endings.items[e];
            text.push_str(&group.words.items[w]);
            text.push_str(&ending.text);
            neg_log_prob -= (groups.probs[g] * group.words.probs[w] * group.endings.probs[e]).ln();
            steps += 1;
            state = ending.next;
        }
        let emitted_bytes = text.len();
        // Every emitted byte is ASCII, so any cut is a char boundary.
        text.truncate(n_bytes);
        GeneratedCorpus {
            text,
            neg_log_prob_nats: neg_log_prob,
            emitted_bytes,
            steps,
        }
    }

    /// Parse `text` back into the grammar's choices (from the start state) and
    /// return its negative log-probability, or `None` if some prefix matches no
    /// choice. Because each state's emissions are prefix-free, at most one
    /// choice matches at every point: this is the unique decoding.
    pub fn neg_log_prob_of(&self, text: &str) -> Option<f64> {
        let table: Vec<Vec<(String, f64, usize)>> =
            (0..self.states.len()).map(|s| self.choices(s)).collect();
        let mut rest = text;
        let mut state = State::Start as usize;
        let mut total = 0.0;
        while !rest.is_empty() {
            let (emitted, p, next) = table[state]
                .iter()
                .find(|(emitted, _, _)| rest.starts_with(emitted.as_str()))?;
            total -= p.ln();
            rest = &rest[emitted.len()..];
            state = *next;
        }
        Some(total)
    }

    /// Whether every state's emissions are distinct and prefix-free (the
    /// condition that makes the entropy computation exact).
    pub fn is_prefix_free(&self) -> bool {
        (0..self.states.len()).all(|s| {
            let mut emitted: Vec<String> = self.choices(s).into_iter().map(|c| c.0).collect();
            emitted.sort();
            // In sorted order a prefix sorts right before its extensions.
            emitted
                .windows(2)
                .all(|pair| !pair[1].starts_with(&pair[0]))
        })
    }
}

/// A uniform draw in [0, 1) from the top 53 bits of one 64-bit output, written
/// out so the value does not depend on `rand`'s float conversion.
fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The entropy rate of the grammar's byte stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EntropyRate {
    pub nats_per_byte: f64,
    pub bits_per_byte: f64,
    /// Stationary mean entropy of one choice (word plus ending).
    pub nats_per_step: f64,
    /// Stationary mean length of one choice in bytes.
    pub bytes_per_step: f64,
}

/// A sample of the grammar.
#[derive(Debug, Clone)]
pub struct GeneratedCorpus {
    /// Exactly the requested number of bytes, ASCII.
    pub text: String,
    /// `-ln P(choices)` for all choices made (including the part cut off).
    pub neg_log_prob_nats: f64,
    /// Bytes emitted before the final cut.
    pub emitted_bytes: usize,
    pub steps: usize,
}

/// The default corpus for a seed and size.
pub fn generate(seed: u64, n_bytes: usize) -> GeneratedCorpus {
    Grammar::default_grammar().generate(seed, n_bytes)
}

/// The entropy rate of the default corpus.
pub fn entropy_rate() -> EntropyRate {
    Grammar::default_grammar().entropy_rate()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_and_different_seed_different_bytes() {
        let a = generate(7, 20_000);
        let b = generate(7, 20_000);
        let c = generate(8, 20_000);
        assert_eq!(a.text.len(), 20_000);
        assert_eq!(a.text, b.text);
        assert_ne!(a.text, c.text);
    }

    #[test]
    fn seed_zero_starts_with_a_fixed_text() {
        // Pins the byte stream across machines and dependency updates: if
        // this changes, every recorded loss on the generated corpus changes.
        let sample = generate(0, 48).text;
        let regenerated = Grammar::default_grammar().generate(0, 48).text;
        assert_eq!(sample, regenerated);
        assert_eq!(sample, PINNED_SEED0_PREFIX);
    }

    const PINNED_SEED0_PREFIX: &str = "Many kind boots mend those horses. Our songs shi";

    #[test]
    fn emissions_are_prefix_free_so_decoding_is_unique() {
        assert!(Grammar::default_grammar().is_prefix_free());
    }

    #[test]
    fn stationary_distribution_is_a_fixed_point() {
        let grammar = Grammar::default_grammar();
        let pi = grammar.stationary();
        assert!((pi.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mut next = vec![0.0; pi.len()];
        for (from, p_from) in pi.iter().enumerate() {
            assert!(*p_from > 0.0, "state {from} unreachable");
            for (_, p, to) in grammar.choices(from) {
                next[to] += p_from * p;
            }
        }
        for (a, b) in pi.iter().zip(&next) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }

    #[test]
    fn empirical_log_prob_per_byte_matches_the_computed_entropy_rate() {
        let rate = entropy_rate();
        let sample = generate(3, 400_000);
        let empirical = sample.neg_log_prob_nats / sample.emitted_bytes as f64;
        let relative = (empirical - rate.nats_per_byte).abs() / rate.nats_per_byte;
        assert!(
            relative < 0.01,
            "empirical {empirical} vs computed {} nats/byte",
            rate.nats_per_byte
        );
        // The design target: clearly below a small model's reach, clearly above zero.
        assert!(
            rate.nats_per_byte > 0.6 && rate.nats_per_byte < 1.8,
            "{rate:?}"
        );
    }

    #[test]
    fn parsing_the_sample_recovers_its_log_prob() {
        let grammar = Grammar::default_grammar();
        let sample = grammar.generate(11, 5_000);
        // Parse the untruncated emission: regenerate exactly `emitted_bytes`.
        let full = grammar.generate(11, sample.emitted_bytes);
        assert_eq!(full.emitted_bytes, sample.emitted_bytes);
        let parsed = grammar
            .neg_log_prob_of(&full.text)
            .expect("a sample of the grammar parses");
        assert!((parsed - sample.neg_log_prob_nats).abs() < 1e-6 * parsed);
        assert!(grammar.neg_log_prob_of("The zzz").is_none());
    }
}
