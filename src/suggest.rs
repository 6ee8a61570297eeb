//! Did-you-mean: the few known names closest to a mistyped one, by edit
//! distance, for the fix of a usage error. One helper for every name a
//! user types (GPUs, images, experiments), so they all suggest alike.

/// Up to `MAX_SUGGESTIONS` of `known` closest to `typed` (case-insensitive
/// Damerau–Levenshtein), best first, ties in `known`'s order. A name is
/// close when its distance is at most a third of the longer name (at least
/// 1), or when one contains the other; none when nothing is close, so a
/// wild guess gets no noise.
pub fn closest<'a, I>(typed: &str, known: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let typed_lower = typed.trim().to_lowercase();
    if typed_lower.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, usize, &'a str)> = Vec::new();
    for (order, name) in known.into_iter().enumerate() {
        let lower = name.to_lowercase();
        if scored
            .iter()
            .any(|(_, _, seen)| seen.eq_ignore_ascii_case(name))
        {
            continue;
        }
        let distance = strsim::damerau_levenshtein(&typed_lower, &lower);
        let longest = typed_lower.chars().count().max(lower.chars().count());
        // A part of a name (`hrm` of `hrm-sudoku`), or a name inside what
        // was typed (`rtx4090ti` holds `rtx4090`); one or two letters are
        // inside too many names to mean anything.
        let contains = (typed_lower.chars().count() >= 2 && lower.contains(&typed_lower))
            || (lower.chars().count() >= 3 && typed_lower.contains(&lower));
        if distance <= (longest / 3).max(1) || contains {
            scored.push((distance, order, name));
        }
    }
    scored.sort_by_key(|&(distance, order, _)| (distance, order));
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, _, name)| name)
        .collect()
}

/// How many names a did-you-mean offers: enough to cover a family (A30,
/// A100, A10), few enough to read.
pub const MAX_SUGGESTIONS: usize = 3;

/// "did you mean A30, A100?" for a fix, or `None` when nothing is close.
pub fn did_you_mean<'a, I>(typed: &str, known: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    let close = closest(typed, known);
    (!close.is_empty()).then(|| format!("did you mean {}?", close.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_gets_the_closest_names_best_first() {
        let gpus = ["H100", "A100", "A30", "A10", "L4", "RTX 4090", "V100", "T4"];
        assert_eq!(closest("A31", gpus), ["A30"]);
        let rtx = ["RTX 3090", "RTX 4080", "RTX 4090", "RTX 4070", "RTX 2080"];
        let close = closest("RTX 409", rtx);
        assert_eq!(close.first(), Some(&"RTX 4090"), "{close:?}");
        assert_eq!(close.len(), MAX_SUGGESTIONS, "{close:?}");
        assert_eq!(
            closest("gtp2", ["gpt2", "hrm-sudoku", "rft", "quantize"]),
            ["gpt2"]
        );
        assert_eq!(closest("GPT2", ["gpt2", "rft"]), ["gpt2"]);
    }

    #[test]
    fn a_wild_guess_gets_no_suggestion() {
        assert!(closest("zzzzzz", ["gpt2", "hrm-sudoku", "rft", "quantize"]).is_empty());
        assert_eq!(did_you_mean("", ["gpt2"]), None);
        assert_eq!(
            did_you_mean("hrm", ["gpt2", "hrm-sudoku"]).as_deref(),
            Some("did you mean hrm-sudoku?")
        );
    }

    #[test]
    fn an_image_tag_typo_finds_the_catalog_reference() {
        let images = [
            "nvcr.io/nvidia/pytorch:25.01-py3",
            "nvcr.io/nvidia/pytorch:25.06-py3",
            "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        ];
        assert_eq!(
            closest("nvcr.io/nvidia/pytorch:25.06", images).first(),
            Some(&"nvcr.io/nvidia/pytorch:25.06-py3")
        );
    }
}
