//! Decoder tests on real vocabularies (skipped visibly when ../shared/models is absent, failing
//! under CI=true: see `crate::test_support`); the exhaustive comparison against Hugging Face runs
//! in tests/parse/test_detok.py.

use std::sync::Arc;

use super::{Anchor, DecodeTable, Detokenizer, TextSink};
use crate::test_support::{encode, shared_model};
use crate::tokenizer::Tokenizer;

fn run(tok: &Tokenizer, ids: &[u32], skip: bool) -> (String, Vec<(u64, Anchor)>) {
    let table = Arc::new(DecodeTable::build(tok, false).expect("table"));
    let mut d = Detokenizer::new(table, skip);
    let mut sink = TextSink::default();
    for (seq, &id) in ids.iter().enumerate() {
        d.push(id, seq as u64, &mut sink);
    }
    d.flush(&mut sink);
    (sink.text, sink.anchors)
}

#[test]
fn byte_level_holds_partial_characters() {
    let Some(tok) = shared_model("qwen3") else {
        return;
    };
    let text = "漢字 🤔 ok";
    let ids = encode(&tok, text);
    let table = Arc::new(DecodeTable::build(&tok, false).expect("table"));
    assert_eq!(table.family(), "byte_level");
    let mut d = Detokenizer::new(table, true);
    let mut out = String::new();
    for (seq, &id) in ids.iter().enumerate() {
        let mut sink = TextSink::default();
        d.push(id, seq as u64, &mut sink);
        assert!(
            !sink.text.contains('\u{FFFD}'),
            "a replacement character was emitted early"
        );
        out.push_str(&sink.text);
    }
    assert_eq!(out, text);
}

#[test]
fn every_token_gets_one_anchor() {
    let Some(tok) = shared_model("qwen3") else {
        return;
    };
    let ids = encode(&tok, "a漢<|im_end|>b");
    let (text, anchors) = run(&tok, &ids, true);
    assert_eq!(text, "a漢b");
    let mut seqs: Vec<u64> = anchors.iter().map(|(s, _)| *s).collect();
    seqs.sort();
    assert_eq!(seqs, (0..ids.len() as u64).collect::<Vec<_>>());
    assert!(
        anchors
            .iter()
            .any(|(_, a)| matches!(a, Anchor::ZeroWidth(_))),
        "the skipped special token"
    );
}

#[test]
fn sentencepiece_runs_resolve_as_a_whole() {
    let Some(tok) = shared_model("mistral-v3-spm") else {
        return;
    };
    let byte = |b: u8| {
        tok.token_to_id(&format!("<0x{b:02X}>"))
            .expect("byte piece")
    };
    // A complete character followed by an invalid byte: `decode` turns the whole run into U+FFFDs,
    // so the character must not have been emitted early.
    let ids = [byte(0xE4), byte(0xB8), byte(0xAD), byte(0xFF)];
    let (text, _) = run(&tok, &ids, true);
    assert_eq!(text, tok.decode(&ids, true).expect("decode"));
    assert_eq!(text, "\u{FFFD}".repeat(4));
    let (text, _) = run(&tok, &ids[..3], true);
    assert_eq!(text, "中");
}

#[test]
fn generic_window_keeps_visible_context_behind_skipped_tokens() {
    // Found by the detok fuzz target: primed with text then more than the window's 4 ids of
    // skipped special tokens, the generic decoder's window held only those, and a Strip decoder
    // dropped the next token's leading space ("werd" instead of " werd").
    let Some(tok) = shared_model("mistral-v3-spm") else {
        return;
    };
    let unk = tok.token_to_id("<unk>").expect("<unk>");
    let word = tok.token_to_id("▁werd").expect("▁werd");
    let tre = tok.token_to_id("▁Tre").expect("▁Tre");
    let mut context = vec![tre];
    context.extend([unk; 13]);
    let table = Arc::new(DecodeTable::build(&tok, true).expect("generic table"));
    let mut d = Detokenizer::new(table, true);
    d.prime(&context);
    let mut sink = TextSink::default();
    d.push(word, 0, &mut sink);
    d.flush(&mut sink);
    let mut all = context.clone();
    all.push(word);
    let whole = tok.decode(&all, true).expect("decode");
    let before = tok.decode(&context, true).expect("decode");
    assert_eq!(sink.text, whole[before.len()..]);
    assert_eq!(sink.text, " werd");
}

#[test]
fn generic_window_never_starts_inside_a_byte_fallback_character() {
    // Found by the detok fuzz target: after "②" (three byte tokens), the generic decoder's window
    // of 4 ids began on its last two bytes; `ByteFallback` decodes a run of byte tokens as one,
    // so the orphan continuation bytes joined "③"'s run and all of it came out as U+FFFD.
    let Some(tok) = shared_model("mistral-v3-spm") else {
        return;
    };
    let context = encode(&tok, "x ①");
    let output = encode(&tok, "②③ ٠١\u{fdd0}٢٣ ०१२");
    let table = Arc::new(DecodeTable::build(&tok, true).expect("generic table"));
    let mut d = Detokenizer::new(table, true);
    d.prime(&context);
    let mut sink = TextSink::default();
    for (seq, &id) in output.iter().enumerate() {
        d.push(id, seq as u64, &mut sink);
    }
    d.flush(&mut sink);
    let all: Vec<u32> = context.iter().chain(&output).copied().collect();
    let whole = tok.decode(&all, true).expect("decode");
    let before = tok.decode(&context, true).expect("decode");
    assert_eq!(sink.text, whole[before.len()..]);
    assert!(!sink.text.contains('\u{FFFD}'), "{}", sink.text);
}
