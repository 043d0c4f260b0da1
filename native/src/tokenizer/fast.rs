//! Choosing the fast encoder: `fastokens`, used only where it provably gives `tokenizers`' ids.
//!
//! `fastokens` supports most, not all, of the `tokenizer.json` pipeline. Rather than trusting a
//! list of supported components, each model is probed at load: the fast encoder must load the file
//! and agree with `tokenizers` on a corpus covering scripts, whitespace runs, digits, emoji,
//! combining marks and every class of added token, and the model's special-token wrapping must be
//! a fixed prefix and suffix. Any difference and the model keeps the `tokenizers` encoder; the
//! differential tests then check the chosen encoder over far larger corpora.

use super::Tokenizer;

/// Hand-picked strings that exercise the pre-tokenizers and normalizers (see probe.json).
const PROBE_JSON: &str = include_str!("probe.json");

/// How many added tokens the probe embeds (from each end of the id range); enough to cover every
/// class (BOS/EOS, chat markers, reserved) without making load slow on 6k-token vocabularies.
const ADDED_TOKENS_PER_END: usize = 48;

/// Loads `fastokens` from the same JSON, or says why it cannot be used.
pub(super) fn load(json: &str) -> Result<fastokens::Tokenizer, String> {
    if std::env::var_os("SIDECAR_DISABLE_FASTOKENS").is_some() {
        return Err("disabled by SIDECAR_DISABLE_FASTOKENS".into());
    }
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("json: {e}"))?;
    fastokens::Tokenizer::from_json(value)
        .map_err(|e| format!("fastokens cannot load this tokenizer: {e}"))
}

/// Checks that `fast` gives `reference`'s ids on the probe corpus, or says where it differs.
pub(super) fn verify(fast: &fastokens::Tokenizer, reference: &Tokenizer) -> Result<(), String> {
    for text in probe_corpus(reference) {
        let expected = reference
            .hf
            .encode(text.as_str(), false)
            .map_err(|e| format!("tokenizers failed on the probe: {e}"))?;
        let got = fast
            .encode_with_special_tokens(&text, false)
            .map_err(|e| format!("fastokens failed on the probe: {e}"))?;
        if got != expected.get_ids() {
            return Err(format!("fastokens differs from tokenizers on {text:?}"));
        }
        let with_special = reference
            .hf
            .encode(text.as_str(), true)
            .map_err(|e| format!("tokenizers failed on the probe: {e}"))?;
        let wrapped: Vec<u32> = reference
            .special_prefix
            .iter()
            .chain(expected.get_ids())
            .chain(&reference.special_suffix)
            .copied()
            .collect();
        if wrapped != with_special.get_ids() {
            return Err("special tokens are not a fixed prefix and suffix".into());
        }
    }
    Ok(())
}

fn probe_corpus(reference: &Tokenizer) -> Vec<String> {
    let mut corpus: Vec<String> = serde_json::from_str(PROBE_JSON).expect("probe.json is valid");
    let added = &reference.added_tokens;
    let ends = if added.len() > 2 * ADDED_TOKENS_PER_END {
        added[..ADDED_TOKENS_PER_END]
            .iter()
            .chain(&added[added.len() - ADDED_TOKENS_PER_END..])
            .collect()
    } else {
        added.iter().collect::<Vec<_>>()
    };
    for token in ends {
        let t = &token.content;
        corpus.push(format!("a{t}b {t} {t}{t}\n{t}\n x"));
    }
    corpus.push(corpus.concat());
    corpus
}

/// Checks that cutting the probe corpus wherever `chunker` allows gives the ids of encoding it
/// whole (with `tokenizers`, the reference), or says where it differs.
pub(super) fn probe_chunking(
    reference: &Tokenizer,
    chunker: &super::Chunker,
) -> Result<(), String> {
    let mut corpus = probe_corpus(reference);
    corpus.push(corpus.join(" "));
    cuts_keep_ids(reference, chunker, &corpus)
}

/// Checks that cutting each text wherever `chunker` allows gives the ids of encoding it whole
/// (with `tokenizers`, the reference), or says where it differs.
pub(super) fn cuts_keep_ids(
    reference: &Tokenizer,
    chunker: &super::Chunker,
    corpus: &[String],
) -> Result<(), String> {
    let encode = |text: &str| {
        reference
            .hf
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("tokenizers failed on the probe: {e}"))
    };
    for text in corpus {
        let whole = encode(text)?;
        let mut pieces = Vec::new();
        for piece in chunker.pieces(text, 1) {
            pieces.extend(encode(piece)?);
        }
        if pieces != whole {
            return Err(format!("cutting changes the ids of {text:?}"));
        }
    }
    Ok(())
}
