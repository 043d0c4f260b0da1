//! Cutting one long text into pieces that encode to exactly the ids of the whole text, so a long
//! encode can stop between pieces (cancellation, deadline) and no single uninterruptible call to an
//! encoder runs for long.
//!
//! A cut is placed at a single ASCII space between two printable ASCII characters (`x| y`, the cut
//! before the space), touching no occurrence of any added token. It is exact for the pipelines
//! [`Chunker::for_tokenizer`] accepts, and only those:
//! - Added tokens are matched first and split the text into pieces processed independently. No
//!   occurrence of any added token (searched with overlaps, so whatever the real scan picks is
//!   covered) touches the three bytes around the cut, so the cut lies inside one piece and no
//!   `lstrip`/`rstrip`/`single_word` token looks at the space.
//! - The normalizer is absent or NFC: the space is a starter that composes with nothing, so NFC of
//!   the two halves concatenated is NFC of the whole.
//! - The pre-tokenizer is one of the known regex splits (the GPT-2, cl100k/Llama 3, Qwen2, o200k,
//!   Tekken and DeepSeek V3 patterns), optionally followed by a byte-level mapping. In each of those
//!   patterns a space can only be matched by the optional first element of an alternative or
//!   inside an all-whitespace alternative, never after a non-space character in the same match. So
//!   the match holding `x` ends at the cut, the next one starts at the space, and every decision the
//!   regex makes before the cut reads a non-matching character at the cut whether it sees the
//!   space or the end of the text; the patterns have no look-behind, so matching the second half
//!   from its start gives the same matches as resuming there.
//! - The model sees words, and no word crosses the cut.
//!
//! Or the tokenizer is a SentencePiece conversion that turns every space into `▁`: Metaspace
//! (Mistral v3, Llama 2 conversions; it also prepends one `▁` to a section that does not start with
//! it: the first section, or every one, or none, by its scheme), or a normalizer that replaces
//! spaces with `▁` (Gemma 3), after prepending one to every section (Phi-3, Llama 2), and nothing
//! that splits the result.
//! - The second piece starts with the space, so it gets no `▁` prepended, as its part of the whole
//!   text got none; the first piece is the start of the whole text (but see Phi-3 below).
//! - Metaspace with `split: true` makes every `▁` start a word, so the cut falls between words.
//! - Otherwise the whole text is one word, and the cut after a character `c` splits it exactly when
//!   the BPE model cannot merge across it: no vocabulary piece holds `c` followed by `▁` (a symbol
//!   spanning the cut holds both), the `▁` itself is a piece (an unknown-token run cannot fuse
//!   across the cut), and the model has no word prefix or suffix (which mark a word's first and
//!   last symbols). The merges on each side are then the same merges, in the same order of rank,
//!   as in the whole word. Mistral v3's vocabulary has no such piece; Gemma 3's has one (`>▁</`),
//!   so its texts are not cut after `>`.
//! - Where the normalizer prepends `▁` to every section (Phi-3), the piece after a cut is encoded
//!   without its space instead, and the `▁` prepended to it stands for that space (same ids; the
//!   offsets of its first token are moved onto the space).
//!
//! Anything else (a Unigram model under one word, an unknown pattern) gets no cuts and is encoded
//! whole. At load, the cuts are also checked against whole-text encoding on a probe corpus
//! ([`super::Tokenizer::probe_chunking`]); any difference turns chunking off for that model.

use aho_corasick::AhoCorasick;
use serde_json::Value;

/// Pre-tokenizer regexes for which the cut rule is proven (see the module docs).
const KNOWN_SPLIT_PATTERNS: &[&str] = &[
    // Qwen2 / Qwen3.
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // cl100k / Llama 3.
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // o200k / gpt-oss.
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // Tekken / Mistral Nemo.
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // DeepSeek V3: digits, then CJK runs, then words.
    r"\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];

/// Where long texts of one tokenizer may be cut (see the module docs).
pub(crate) struct Chunker {
    /// Every added token's content, searched with overlaps; None when there are none.
    added: Option<AhoCorasick>,
    longest_added: usize,
    /// ASCII characters no cut may follow (a vocabulary piece joins them to the `▁` after them).
    no_cut_after: NoCutAfter,
    /// Whether the piece after a cut starts after the space (see the module docs: the normalizer
    /// prepends `▁` to it).
    pub(crate) drops_cut_space: bool,
    /// Why the tokenizer gets no cuts; None when it does.
    pub(crate) unsupported: Option<String>,
}

/// By ASCII code: whether a cut may not follow that character.
type NoCutAfter = [bool; 128];

/// SentencePiece's space mark.
const MARK: char = '\u{2581}';

impl Chunker {
    /// The chunker of a tokenizer, from its `tokenizer.json` and added tokens.
    pub(crate) fn for_tokenizer(json: &Value, added_tokens: &[String]) -> Self {
        let drops_cut_space = prepends_mark_then_replaces_spaces(&json["normalizer"]);
        let (no_cut_after, unsupported) = match pipeline_cuts(json) {
            Ok(no_cut_after) => (no_cut_after, None),
            Err(why) => ([true; 128], Some(why)),
        };
        let added = (!added_tokens.is_empty())
            .then(|| AhoCorasick::new(added_tokens).ok())
            .flatten();
        let longest_added = added_tokens.iter().map(String::len).max().unwrap_or(0);
        Chunker {
            added,
            longest_added,
            no_cut_after,
            drops_cut_space,
            unsupported,
        }
    }

    /// A chunker that never cuts.
    pub(crate) fn disabled(why: impl Into<String>) -> Self {
        Chunker {
            added: None,
            longest_added: 0,
            no_cut_after: [true; 128],
            drops_cut_space: false,
            unsupported: Some(why.into()),
        }
    }

    /// Byte offsets (increasing, inside `text`) where `text` may be cut so that no piece is much
    /// longer than `target` bytes where the text allows it; empty when the text is short or the
    /// tokenizer gets no cuts.
    pub(crate) fn cuts(&self, text: &str, target: usize) -> Vec<usize> {
        if self.unsupported.is_some() || text.len() <= target {
            return Vec::new();
        }
        let bytes = text.as_bytes();
        let mut cuts = Vec::with_capacity(text.len() / target + 1);
        let mut from = target;
        while from + 1 < bytes.len() {
            let Some(found) = memchr::memchr(b' ', &bytes[from..]) else {
                break;
            };
            let p = from + found;
            if p + 1 < bytes.len() && self.may_cut(bytes, p) {
                cuts.push(p);
                from = p + target;
            } else {
                from = p + 1;
            }
        }
        cuts
    }

    /// `text` in the pieces its cuts make (one piece when there are none). A piece after a cut
    /// starts at the space, or after it where the normalizer prepends one (see the module docs).
    pub(crate) fn pieces<'t>(&self, text: &'t str, target: usize) -> Vec<&'t str> {
        let skip = usize::from(self.drops_cut_space);
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in self.cuts(text, target) {
            pieces.push(&text[start..cut]);
            start = cut + skip;
        }
        pieces.push(&text[start..]);
        pieces
    }

    /// Whether the cut before the space at `p` is exact (see the module docs).
    fn may_cut(&self, bytes: &[u8], p: usize) -> bool {
        let graphic = |b: u8| (0x21..=0x7e).contains(&b);
        if p == 0 || !graphic(bytes[p - 1]) || !graphic(bytes[p + 1]) {
            return false;
        }
        if self.no_cut_after[usize::from(bytes[p - 1])] {
            return false;
        }
        let Some(added) = &self.added else {
            return true;
        };
        // Any occurrence overlapping bytes p-1..=p+1 lies inside this window.
        let start = (p - 1).saturating_sub(self.longest_added);
        let end = (p + 2 + self.longest_added).min(bytes.len());
        let window = &bytes[start..end];
        !added
            .find_overlapping_iter(window)
            .any(|m| start + m.start() <= p + 1 && start + m.end() > p - 1)
    }
}

/// The ASCII characters no cut may follow in this tokenizer's pipeline, or why it gets no cuts.
fn pipeline_cuts(json: &Value) -> Result<NoCutAfter, String> {
    let (normalizer, pre_tokenizer, model) =
        (&json["normalizer"], &json["pre_tokenizer"], &json["model"]);
    let one_word_normalizer =
        replaces_spaces_with_mark(normalizer) || prepends_mark_then_replaces_spaces(normalizer);
    if one_word_normalizer && (pre_tokenizer.is_null() || splits_at_spaces(pre_tokenizer)) {
        // No space is left for the split to find: the whole text is one word.
        return one_word_cuts(model);
    }
    supported_normalizer(normalizer)?;
    if pre_tokenizer["type"] == "Metaspace" {
        if pre_tokenizer["replacement"].as_str() != Some("\u{2581}") {
            return Err("pre-tokenizer: Metaspace with a replacement other than \u{2581}".into());
        }
        if pre_tokenizer["split"] != false {
            return Ok([false; 128]);
        }
        return one_word_cuts(model);
    }
    supported_pre_tokenizer(pre_tokenizer).map(|()| [false; 128])
}

/// Phi-3's (Llama 2's) normalizer: `▁` prepended, then spaces turned into `▁`.
fn prepends_mark_then_replaces_spaces(n: &Value) -> bool {
    let items = n["normalizers"].as_array().map(Vec::as_slice);
    n["type"] == "Sequence"
        && matches!(items, Some([prepend, replace])
            if prepend["type"] == "Prepend" && prepend["prepend"] == "\u{2581}" && replaces_spaces_with_mark(replace))
}

fn replaces_spaces_with_mark(n: &Value) -> bool {
    n["type"] == "Replace" && n["pattern"]["String"] == " " && n["content"] == "\u{2581}"
}

fn splits_at_spaces(p: &Value) -> bool {
    p["type"] == "Split" && p["pattern"]["String"] == " " && p["invert"] != true
}

/// Where a text that the BPE model sees as one word may be cut (see the module docs).
fn one_word_cuts(model: &Value) -> Result<NoCutAfter, String> {
    let absent = |field: &str| model[field].is_null() || model[field] == "";
    if model["type"] != "BPE" || !absent("dropout") {
        return Err("the whole text is one word and the model is not a plain BPE".into());
    }
    if !absent("continuing_subword_prefix") || !absent("end_of_word_suffix") {
        return Err("the whole text is one word and the BPE marks word boundaries".into());
    }
    let Some(vocab) = model["vocab"].as_object() else {
        return Err("the whole text is one word and there is no vocabulary to check".into());
    };
    if !vocab.contains_key("\u{2581}") {
        return Err("the whole text is one word and \u{2581} is not a piece".into());
    }
    let mut no_cut_after = [false; 128];
    for piece in vocab.keys() {
        let mut previous = MARK;
        for c in piece.chars() {
            if c == MARK && previous != MARK && previous.is_ascii() {
                no_cut_after[previous as usize] = true;
            }
            previous = c;
        }
    }
    Ok(no_cut_after)
}

fn supported_normalizer(n: &Value) -> Result<(), String> {
    match n["type"].as_str() {
        _ if n.is_null() => Ok(()),
        Some("NFC") => Ok(()),
        Some("Sequence") => n["normalizers"].as_array().map_or(
            Err("normalizer: a sequence without items".into()),
            |items| items.iter().try_for_each(supported_normalizer),
        ),
        other => Err(format!("normalizer {other:?} may change text across a cut")),
    }
}

fn supported_pre_tokenizer(p: &Value) -> Result<(), String> {
    match p["type"].as_str() {
        Some("Split") => {
            let pattern = p["pattern"]["Regex"].as_str().unwrap_or_default();
            let isolated = p["behavior"] == "Isolated" && p["invert"] != true;
            if isolated && KNOWN_SPLIT_PATTERNS.contains(&pattern) {
                Ok(())
            } else {
                Err("pre-tokenizer: a split pattern the cut rule is not proven for".into())
            }
        }
        // With its own regex it splits with the GPT-2 pattern; without, it only maps bytes.
        Some("ByteLevel") => Ok(()),
        Some("Sequence") => {
            let items = p["pretokenizers"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let splits = items.iter().filter(|i| i["type"] != "ByteLevel").count();
            let gpt2_regex = items
                .iter()
                .any(|i| i["type"] == "ByteLevel" && i["use_regex"] != false);
            if items.is_empty() || (splits == 0 && !gpt2_regex) {
                return Err("pre-tokenizer: nothing splits words".into());
            }
            items.iter().try_for_each(supported_pre_tokenizer)
        }
        other if p.is_null() || other.is_none() => {
            Err("no pre-tokenizer: the whole text is one word".into())
        }
        other => Err(format!(
            "pre-tokenizer {other:?} is not one the cut rule is proven for"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen_like() -> Chunker {
        let json: Value = serde_json::json!({
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": KNOWN_SPLIT_PATTERNS[0]}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
        });
        Chunker::for_tokenizer(&json, &["<|im_start|>".to_string(), "<x y>".to_string()])
    }

    #[test]
    fn cuts_fall_before_a_space_between_printable_characters() {
        let text = "aaaa bbbb  cccc dddd\neeee ffff";
        let cuts = qwen_like().cuts(text, 3);
        for &c in &cuts {
            assert_eq!(&text[c..c + 1], " ");
            assert_ne!(&text[c - 1..c], " ");
            assert_ne!(&text[c + 1..c + 2], " ");
        }
        assert_eq!(cuts, vec![4, 15, 25]);
    }

    #[test]
    fn no_cut_touches_an_added_token() {
        let text = "word <|im_start|> next <x y>z";
        assert!(qwen_like()
            .cuts(text, 1)
            .iter()
            .all(|&c| c != 4 && c != 17 && c != 25));
    }

    /// A one-word SentencePiece pipeline: Metaspace (with `split`), or, with `split` None, a
    /// normalizer that replaces spaces and a split at spaces that finds none (Gemma 3's).
    fn sentencepiece(split: Option<bool>, vocab: &[&str], model: Value) -> Chunker {
        let mut model = model;
        model["vocab"] = vocab
            .iter()
            .enumerate()
            .map(|(i, piece)| (piece.to_string(), Value::from(i)))
            .collect();
        let json = match split {
            Some(split) => serde_json::json!({"normalizer": null, "model": model, "pre_tokenizer":
                {"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": split}}),
            None => serde_json::json!({"model": model,
                "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"},
                "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}}),
        };
        Chunker::for_tokenizer(&json, &[])
    }

    #[test]
    fn one_word_texts_are_cut_only_where_no_piece_joins_a_character_to_the_mark() {
        let bpe = || serde_json::json!({"type": "BPE", "dropout": null, "continuing_subword_prefix": null});
        let text = "ab cd ".repeat(100);
        let fine = ["\u{2581}", "\u{2581}\u{2581}", "\u{2581}ab", "ab", "a", "b"];
        let joins = ["\u{2581}", "ab", "b\u{2581}c", "\u{4f60}\u{2581}"];
        for split in [Some(false), None] {
            let chunker = sentencepiece(split, &fine, bpe());
            assert_eq!(chunker.unsupported, None);
            let cuts = chunker.cuts(&text, 1);
            assert!(cuts.iter().any(|&c| &text[c - 1..c] == "b"), "{cuts:?}");
            // `b` then the mark is a piece: a cut after `b` could split it, a cut after `d` not.
            let chunker = sentencepiece(split, &joins, bpe());
            assert_eq!(chunker.unsupported, None);
            let cuts = chunker.cuts(&text, 1);
            assert!(
                !cuts.is_empty() && cuts.iter().all(|&c| &text[c - 1..c] == "d"),
                "{cuts:?}"
            );
            // No cut can be proven where the model is not a plain BPE with the mark as a piece.
            assert!(sentencepiece(split, &["ab"], bpe()).unsupported.is_some());
            let unigram = serde_json::json!({"type": "Unigram"});
            assert!(sentencepiece(split, &fine, unigram).unsupported.is_some());
            let prefixed = serde_json::json!({"type": "BPE", "continuing_subword_prefix": "##"});
            assert!(sentencepiece(split, &fine, prefixed).unsupported.is_some());
        }
        // With split, every mark starts a word: a cut after `b` too, whatever the vocabulary.
        let cuts = sentencepiece(Some(true), &joins, bpe()).cuts(&text, 1);
        assert!(cuts.iter().any(|&c| &text[c - 1..c] == "b"), "{cuts:?}");
    }

    #[test]
    fn pipelines_without_a_proof_get_no_cuts() {
        let metaspace = serde_json::json!({"normalizer": null, "model": {"type": "Unigram"},
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false}});
        assert!(Chunker::for_tokenizer(&metaspace, &[])
            .unsupported
            .is_some());
        let prepend = serde_json::json!({"normalizer": {"type": "Prepend", "prepend": "\u{2581}"}, "pre_tokenizer": null});
        assert!(Chunker::for_tokenizer(&prepend, &[]).unsupported.is_some());
        let unknown = serde_json::json!({"normalizer": null, "pre_tokenizer":
            {"type": "Split", "pattern": {"Regex": "\\w+ \\w+"}, "behavior": "Isolated", "invert": false}});
        assert!(Chunker::for_tokenizer(&unknown, &[]).unsupported.is_some());
        assert!(Chunker::for_tokenizer(&metaspace, &[])
            .cuts(&"ab cd ".repeat(100), 4)
            .is_empty());
    }
}
