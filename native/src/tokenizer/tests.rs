//! Unit tests on a small hand-written byte-level BPE; the real models are covered by the Python
//! differential tests against Hugging Face `tokenizers`.

use super::*;
use serde_json::json;

/// A byte-level BPE over "a", "b", "ab", space and a few specials, wrapped as `<s> $A </s>`.
pub(crate) fn toy_json() -> String {
    let mut vocab = serde_json::Map::new();
    for (i, t) in ["a", "b", "ab", "Ġ", "Ġab", "c", "<s>", "</s>", "<pad>"]
        .iter()
        .enumerate()
    {
        vocab.insert((*t).into(), json!(i));
    }
    json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 6, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 7, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 8, "content": "<pad>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [6], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [7], "tokens": ["</s>"]}
            }
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": [["a", "b"], ["Ġ", "ab"]]}
    })
    .to_string()
}

fn toy() -> Tokenizer {
    Tokenizer::from_json_text(&toy_json(), TokenizerFormat::TokenizerJson).unwrap()
}

fn opts() -> EncodeOptions {
    EncodeOptions::default()
}

#[test]
fn finds_the_special_prefix_and_suffix() {
    let t = toy();
    assert_eq!(t.special_prefix, vec![6]);
    assert_eq!(t.special_suffix, vec![7]);
    assert_eq!(t.num_special_tokens_to_add(), 2);
}

#[test]
fn encodes_with_and_without_special_tokens() {
    let t = toy();
    assert_eq!(t.encode("ab ab", &opts()).unwrap().ids, vec![2, 4]);
    let with = EncodeOptions {
        add_special_tokens: true,
        ..opts()
    };
    assert_eq!(t.encode("ab ab", &with).unwrap().ids, vec![6, 2, 4, 7]);
}

#[test]
fn truncation_keeps_room_for_special_tokens() {
    let t = toy();
    let o = EncodeOptions {
        add_special_tokens: true,
        max_length: Some(3),
        ..opts()
    };
    let e = t.encode("ab ab", &o).unwrap();
    assert_eq!(e.ids, vec![6, 2, 7]);
    assert!(e.truncated);
    let left = EncodeOptions {
        truncation_side: TruncationSide::Left,
        ..o
    };
    assert_eq!(t.encode("ab ab", &left).unwrap().ids, vec![6, 4, 7]);
    let fits = EncodeOptions {
        max_length: Some(4),
        ..left
    };
    assert!(!t.encode("ab ab", &fits).unwrap().truncated);
}

#[test]
fn max_length_below_special_count_is_invalid() {
    let t = toy();
    let o = EncodeOptions {
        add_special_tokens: true,
        max_length: Some(1),
        ..opts()
    };
    let err = t.encode("ab", &o).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().starts_with("max_length"));
}

#[test]
fn offsets_and_tokens_come_from_the_reference_path() {
    let t = toy();
    let o = EncodeOptions {
        return_offsets: true,
        return_tokens: true,
        add_special_tokens: true,
        ..opts()
    };
    let e = t.encode("ab ab", &o).unwrap();
    assert_eq!(e.tokens, vec!["<s>", "ab", "Ġab", "</s>"]);
    assert_eq!(e.offsets, vec![0, 0, 0, 2, 2, 5, 0, 0]);
}

#[test]
fn unknown_ids_are_named_by_position() {
    let t = toy();
    let err = t.decode(&[2, 99], true).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("token_ids[1]"), "{err}");
    let err = t
        .decode_batch(&[vec![2u32], vec![3, 100]], true, None)
        .unwrap_err();
    assert!(
        err.message().starts_with("sequences[1]: token_ids[1]"),
        "{err}"
    );
}

#[test]
fn decode_skips_special_tokens_on_request() {
    let t = toy();
    assert_eq!(t.decode(&[6, 2, 4, 7], true).unwrap(), "ab ab");
    assert_eq!(t.decode(&[6, 2, 4, 7], false).unwrap(), "<s>ab ab</s>");
}

#[test]
fn batch_errors_name_the_text() {
    let t = toy();
    let past = Some(std::time::Instant::now() - std::time::Duration::from_millis(1));
    let o = EncodeOptions {
        deadline: past,
        ..opts()
    };
    let err = t.encode_batch(&["ab"], &o).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
}

#[test]
fn empty_text_and_empty_batch() {
    let t = toy();
    assert!(t.encode("", &opts()).unwrap().ids.is_empty());
    assert!(t.encode_batch::<&str>(&[], &opts()).unwrap().is_empty());
}

#[test]
fn segment_cache_gives_the_same_ids_and_hits_on_repeats() {
    let t = toy();
    let cache = SegmentCache::new(1 << 20);
    let texts = [
        "ab ab<s>ab</s> b<pad>a",
        "<s>ab ab</s><s>ab ab</s><s>b",
        "ab ab<s>ab</s> b<pad>a<s>c",
    ];
    for (i, text) in texts.iter().enumerate() {
        for add in [false, true] {
            let want = t
                .encode(
                    text,
                    &EncodeOptions {
                        add_special_tokens: add,
                        ..opts()
                    },
                )
                .unwrap()
                .ids;
            let (got, stats) = t.encode_with_cache(text, add, &cache, None).unwrap();
            assert_eq!(got, want, "{text:?} add_special_tokens={add}");
            if i == 2 && !add {
                // The first text's segments are all reused; only "<s>c" is new.
                assert_eq!(stats.miss_segments, 1, "{stats:?}");
            }
        }
    }
    assert!(cache.bytes() > 0);
}

#[test]
fn segment_cache_stays_within_its_budget() {
    let t = toy();
    let cache = SegmentCache::new(16 * 1024);
    for i in 0..2000 {
        let text = format!("<s>{}</s>", "ab ".repeat(i % 50 + 1));
        let (got, _) = t.encode_with_cache(&text, false, &cache, None).unwrap();
        assert_eq!(got, t.encode(&text, &opts()).unwrap().ids);
    }
    assert!(cache.bytes() <= 16 * 1024, "{}", cache.bytes());
}
