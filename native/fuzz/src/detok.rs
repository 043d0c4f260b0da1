//! Target `detok`: incremental detokenization against Hugging Face `decode`.
//!
//! Layout: `model flags prompt_len`, then the ids: with flags bit 4 the rest is text encoded by the
//! model's tokenizer, else little-endian u32 values reduced into the vocabulary (unknown ids are
//! dropped: feeding them is the caller's error, checked before the decoder runs).
//! - `model` picks a folder of [`crate::models::PARSE_MODELS`]; flags bit 1 forces the generic
//!   decoder (the path for vocabularies that are neither byte-level nor SentencePiece).
//! - flags bit 0 keeps special tokens; the first `prompt_len % 33` ids prime the decoder.
//!
//! Checks the decoder's contract (native/src/detok/mod.rs): what it emits for the output ids `O`
//! after priming with `C`, flushed at the end, is `decode(C + O)` with `decode(C)` removed from
//! its start (when that is a clean split); every output token gets exactly one anchor, inside the text and in order.

use sidecar_native::detok::{Detokenizer, TextSink};

use crate::input::{text, Input};
use crate::models::{self, PARSE_MODELS};

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (model_byte, flags, prompt_len) = (input.byte(), input.byte(), input.byte());
    let name = PARSE_MODELS[model_byte as usize % PARSE_MODELS.len()];
    let Some(model) = models::model(name) else {
        return;
    };
    let body = input.rest();
    let ids: Vec<u32> = if flags & 0x10 != 0 {
        models::encode(&model.tok, &text(body))
    } else {
        let vocab = model.tok.vocab_size().max(1) as u64;
        body.chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                (u64::from(u32::from_le_bytes(b)) % vocab) as u32
            })
            .filter(|&id| model.tok.is_known_id(id))
            .collect()
    };
    let skip = flags & 1 == 0;
    let split = (prompt_len as usize % 33).min(ids.len());
    let (context, output) = ids.split_at(split);

    let table = if flags & 2 != 0 {
        &model.generic_table
    } else {
        &model.table
    };
    let mut detok = Detokenizer::new(table.clone(), skip);
    detok.prime(context);
    let mut sink = TextSink::default();
    for (seq, &id) in output.iter().enumerate() {
        detok.push(id, seq as u64, &mut sink);
    }
    detok.flush(&mut sink);

    let whole = model.tok.decode(&ids, skip).expect("known ids decode");
    let before = model.tok.decode(context, skip).expect("known ids decode");
    // As in tests/parse/test_detok.py: a context that ends mid-character has no clean split.
    if let Some(expected) = whole.strip_prefix(before.as_str()) {
        if !before.ends_with('\u{FFFD}') {
            assert_eq!(
                sink.text, expected,
                "{name}: incremental text differs from decode"
            );
        }
    }

    let mut anchors = sink.anchors.clone();
    anchors.sort_by_key(|(seq, _)| *seq);
    let seqs: Vec<u64> = anchors.iter().map(|(s, _)| *s).collect();
    assert!(
        seqs.iter().copied().eq(0..output.len() as u64),
        "anchors {seqs:?}"
    );
    let mut last = 0;
    for (seq, a) in &anchors {
        assert!(
            a.offset() <= sink.text.len() as u64,
            "anchor {seq} past the text"
        );
        assert!(a.offset() >= last, "anchor {seq} goes back");
        last = a.offset();
    }
}
