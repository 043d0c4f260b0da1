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

fn opts() -> EncodeOptions<'static> {
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
        .decode_batch(
            &[vec![2u32], vec![3, 100]],
            true,
            &crate::cancel::Cancel::default(),
        )
        .unwrap_err();
    assert!(
        err.message().starts_with("sequences[1]: token_ids[1]"),
        "{err}"
    );
}

#[test]
fn ids_below_the_output_size_decode_to_nothing_and_past_it_are_refused() {
    // The toy vocabulary defines ids 0..9; its model has 16 output rows (a padded embedding).
    let t = toy().with_options(&TokenizerOptions { output_size: 16 });
    assert_eq!(t.output_size(), 16);
    for skip in [true, false] {
        assert_eq!(
            t.decode(&[9, 2, 15, 4, 12], skip).unwrap(),
            t.decode(&[2, 4], skip).unwrap()
        );
    }
    let err = t.decode(&[2, 16], true).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        err.message(),
        "token_ids[1]: id 16 is not in the vocabulary (size 9) nor below the model's output size (16)"
    );
    // Without an output size, every id past the vocabulary is refused, as before.
    assert_eq!(
        toy().decode(&[9], true).unwrap_err().message(),
        "token_ids[0]: id 9 is not in the vocabulary (size 9)"
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
        cancel: crate::cancel::Cancel::with_deadline(past),
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
            let (got, stats) = t
                .encode_with_cache(text, add, &cache, &Default::default(), None)
                .unwrap();
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
        let (got, _) = t
            .encode_with_cache(&text, false, &cache, &Default::default(), None)
            .unwrap();
        assert_eq!(got, t.encode(&text, &opts()).unwrap().ids);
    }
    assert!(cache.bytes() <= 16 * 1024, "{}", cache.bytes());
}

/// A long mixed text: prose, code, digits, CJK, emoji, combining marks, whitespace runs and the
/// model's own added tokens, in an order drawn from `seed` (several pieces of `CHUNK_BYTES`).
fn long_mixed_text(t: &Tokenizer, seed: u64) -> String {
    let mut parts: Vec<String> = [
        "The quick brown fox jumps over the lazy dog. ",
        "It's what they'd say, isn't it? ",
        "fn main() { let x = vec![1, 2, 3]; println!(\"{x:?}\"); } ",
        "12345 6789 0.5e-3 ",
        "你好 世界 こんにちは カタカナ ",
        "emoji 🎉🎉 ok ",
        "cafe\u{301} e\u{301}te\u{301} ",
        "tabs\tand  double  spaces   here ",
        "new\nline\n\nparagraph ",
        "a-b_c/d.e:f;g ",
        "  leading and trailing  ",
        "x 'll 's 've ",
        "URL: https://example.com/a?b=c&d=e ",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for added in t.added_tokens().iter().take(8) {
        parts.push(format!("{} ", added.content));
        parts.push(format!("x{}y ", added.content));
    }
    let mut state = seed;
    let mut text = String::new();
    while text.len() < 3 * super::CHUNK_BYTES + 1000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&parts[(state >> 33) as usize % parts.len()]);
    }
    text
}

/// The shared models whose long texts are cut (see [`super::chunks`]).
const CUT_MODELS: [&str; 10] = [
    "qwen3",
    "qwen2.5",
    "llama3",
    "deepseek-v3",
    "gpt-oss",
    "mistral-nemo",
    "gpt2",
    "mistral-v3-spm",
    "gemma3",
    "phi3",
];

#[test]
fn every_cut_allowed_beside_unusual_characters_keeps_the_ids() {
    let Some(dir) = crate::test_support::shared_models() else {
        return;
    };
    // Beside the spaces where cuts fall: SentencePiece's own space mark, runs of spaces,
    // characters that fall back to bytes, combining marks, the model's added tokens.
    let fragments = [
        "x \u{2581}y ",
        "\u{2581} \u{2581}",
        "a  b",
        "c   d ",
        " e",
        "f \t g",
        "h\u{a0}i j",
        "\u{1f389} k",
        "l \u{1f389}",
        "m\u{301} n",
        "\u{4f60} \u{597d}",
        "o\n p",
        "q \u{2581}\u{2581}r",
        "12 345",
        "s' t",
        "\u{2581}",
        "The quick brown fox ",
        "it's ",
        "<p> </p> ",
        "div> </div ",
        "x> y",
    ];
    for name in CUT_MODELS {
        let t = Tokenizer::from_dir(&dir.join(name)).expect("loads");
        assert_eq!(t.chunking_rejection(), None, "{name}");
        let mut pool: Vec<String> = fragments.iter().map(|f| f.to_string()).collect();
        for added in t.added_tokens().iter().take(6) {
            pool.push(format!("{} ", added.content));
            pool.push(format!(" {}", added.content));
        }
        let texts: Vec<String> = (0..4u64)
            .map(|seed| {
                let mut state = seed;
                let mut text = String::new();
                while text.len() < 4000 {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    text.push_str(&pool[(state >> 33) as usize % pool.len()]);
                }
                text
            })
            .collect();
        // Every cut the chunker allows (a piece size of one byte), not only those of long texts.
        assert_eq!(
            super::fast::cuts_keep_ids(&t, &t.chunker, &texts),
            Ok(()),
            "{name}"
        );
    }
}

#[test]
fn long_texts_cut_into_pieces_encode_exactly_as_whole_ones() {
    let Some(dir) = crate::test_support::shared_models() else {
        return;
    };
    for name in CUT_MODELS {
        let t = Tokenizer::from_dir(&dir.join(name)).expect("loads");
        assert_eq!(t.chunking_rejection(), None, "{name}");
        for seed in 0..2 {
            let text = long_mixed_text(&t, seed);
            let whole = t
                .hf()
                .encode_char_offsets(text.as_str(), false)
                .expect("encodes");
            let ids = t.encode(&text, &opts()).expect("encodes").ids;
            assert_eq!(ids, whole.get_ids(), "{name} seed {seed}: ids (fast path)");
            let with_offsets = EncodeOptions {
                return_offsets: true,
                return_tokens: true,
                ..opts()
            };
            let got = t.encode(&text, &with_offsets).expect("encodes");
            assert_eq!(
                got.ids,
                whole.get_ids(),
                "{name} seed {seed}: ids (offsets path)"
            );
            let offsets: Vec<u32> = whole
                .get_offsets()
                .iter()
                .flat_map(|&(s, e)| [s as u32, e as u32])
                .collect();
            assert_eq!(got.offsets, offsets, "{name} seed {seed}: offsets");
            assert_eq!(got.tokens, whole.get_tokens(), "{name} seed {seed}: tokens");
            let special = t
                .hf()
                .encode_char_offsets(text.as_str(), true)
                .expect("encodes");
            let add = EncodeOptions {
                add_special_tokens: true,
                return_offsets: true,
                ..opts()
            };
            let got = t.encode(&text, &add).expect("encodes");
            assert_eq!(
                got.ids,
                special.get_ids(),
                "{name} seed {seed}: with special tokens"
            );
        }
    }
}

#[test]
fn a_cancelled_encode_stops_between_pieces() {
    let Some(t) = crate::test_support::shared_model("qwen3") else {
        return;
    };
    let text = long_mixed_text(&t, 7);
    let flag = std::sync::atomic::AtomicU32::new(1);
    let o = EncodeOptions {
        cancel: crate::cancel::Cancel::new(None, Some(&flag)),
        ..opts()
    };
    let err = t.encode(&text, &o).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    let err = t.encode_batch(&[text.as_str()], &o).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Cancelled,
        "not blamed on one text: {}",
        err.message()
    );
}

#[test]
fn a_long_single_word_is_refused_before_any_encoding() {
    let t = toy();
    let word = "a".repeat(1_000_001);
    let o = EncodeOptions {
        max_word_chars: Some(100_000),
        ..opts()
    };
    let err = t.encode_batch(&["ok", word.as_str()], &o).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
    assert!(
        err.message()
            .starts_with("texts[1]: a run of more than 100000 letters"),
        "{}",
        err.message()
    );
}

#[test]
fn a_parallel_batch_names_its_first_failing_text_as_a_sequential_one_does() {
    // Large enough to be spread over threads; texts 3, 5 and 6 are over the word limit. rayon's
    // own `collect` into a `Result` keeps whichever error a thread met first.
    let t = toy();
    let bad = "b".repeat(100_001);
    let good = "ab ".repeat(20_000);
    let texts: Vec<&str> = (0..8)
        .map(|i| {
            if [3, 5, 6].contains(&i) {
                bad.as_str()
            } else {
                good.as_str()
            }
        })
        .collect();
    let o = EncodeOptions {
        max_word_chars: Some(100_000),
        ..opts()
    };
    for _ in 0..20 {
        let err = t.encode_batch(&texts, &o).unwrap_err();
        assert!(err.message().starts_with("texts[3]: "), "{}", err.message());
    }
    let ok: Vec<&str> = vec![good.as_str(); 4];
    assert_eq!(t.encode_batch(&ok, &o).unwrap().len(), 4);
}
