//! tiktoken rank files, converted to an equivalent `tokenizer.json`.
//!
//! A tiktoken file lists `base64(token bytes) rank` per line; encoding splits text with the
//! encoding's regex, then merges byte pairs, always taking the pair whose merged bytes have the
//! lowest rank. A byte-level BPE whose merge list is every `(left, right)` split of every token,
//! ordered by the merged token's rank, makes the same choices, so we convert once at load and reuse
//! the `tokenizers` (and `fastokens`) machinery. This is the construction transformers uses for
//! tiktoken models; the gpt-oss `tokenizer.json` was produced that way, which is what the tests
//! compare against.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// o200k_base / o200k_harmony (GPT-4o, gpt-oss).
const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+",
);

/// cl100k_base (GPT-3.5/4), in the non-possessive spelling Hugging Face conversions use.
const CL100K_PATTERN: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+",
);

/// The pre-tokenization regex for a tiktoken file, chosen by its name (the regex is not in the file).
fn pattern_for(file_name: &str) -> Result<&'static str> {
    if file_name.contains("o200k") {
        Ok(O200K_PATTERN)
    } else if file_name.contains("cl100k") {
        Ok(CL100K_PATTERN)
    } else {
        Err(Error::failed_precondition(format!(
            "tiktoken file {file_name}: unknown encoding; supported are o200k_* and cl100k_* \
             (the file name decides the split regex). Ship a tokenizer.json instead"
        )))
    }
}

/// GPT-2's reversible byte-to-character table used by byte-level BPE vocabularies.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + extra).expect("256..=323 are valid chars");
            extra += 1;
            c
        };
    }
    table
}

fn bytes_to_token(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// Parses `base64 rank` lines.
fn parse_ranks(text: &str) -> Result<Vec<(Vec<u8>, u32)>> {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut ranks = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = || {
            Error::failed_precondition(format!(
                "tiktoken line {}: expected `base64 rank`",
                lineno + 1
            ))
        };
        let (token, rank) = line.split_once(' ').ok_or_else(bad)?;
        let bytes = engine.decode(token).map_err(|_| bad())?;
        let rank: u32 = rank.trim().parse().map_err(|_| bad())?;
        ranks.push((bytes, rank));
    }
    if ranks.is_empty() {
        return Err(Error::failed_precondition("tiktoken file has no ranks"));
    }
    Ok(ranks)
}

/// Special tokens from `tokenizer_config.json`'s `added_tokens_decoder`, as tokenizer.json entries.
fn added_tokens(config: &Value) -> Result<Vec<Value>> {
    let Some(decoder) = config
        .get("added_tokens_decoder")
        .and_then(Value::as_object)
    else {
        return Ok(Vec::new());
    };
    let mut tokens = Vec::with_capacity(decoder.len());
    for (id, entry) in decoder {
        let id: u32 = id.parse().map_err(|_| {
            Error::failed_precondition(format!(
                "tokenizer_config.json added_tokens_decoder: bad id {id:?}"
            ))
        })?;
        let flag =
            |name: &str, default: bool| entry.get(name).and_then(Value::as_bool).unwrap_or(default);
        let content = entry
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::failed_precondition(format!(
                    "tokenizer_config.json added_tokens_decoder[{id}] has no content"
                ))
            })?;
        tokens.push(json!({
            "id": id,
            "content": content,
            "single_word": flag("single_word", false),
            "lstrip": flag("lstrip", false),
            "rstrip": flag("rstrip", false),
            "normalized": flag("normalized", false),
            "special": flag("special", true),
        }));
    }
    tokens.sort_by_key(|t| t["id"].as_u64());
    Ok(tokens)
}

/// A merge candidate: (merged rank, left rank, right rank, left bytes, right bytes). Sorting by the
/// three ranks gives the order in which a rank-greedy tiktoken encoder would apply the merges.
type Merge<'a> = (u32, u32, u32, &'a [u8], &'a [u8]);

/// Converts a tiktoken rank file into `tokenizer.json` text.
pub(crate) fn tokenizer_json(ranks_text: &str, file_name: &str, config: &Value) -> Result<String> {
    let pattern = pattern_for(file_name)?;
    let ranks = parse_ranks(ranks_text)?;
    let table = byte_to_char_table();
    let rank_of: HashMap<&[u8], u32> = ranks.iter().map(|(b, r)| (b.as_slice(), *r)).collect();

    let mut vocab = Map::with_capacity(ranks.len());
    let mut merges: Vec<Merge<'_>> = Vec::new();
    for (bytes, rank) in &ranks {
        vocab.insert(bytes_to_token(bytes, &table), Value::from(*rank));
        for split in 1..bytes.len() {
            let (left, right) = bytes.split_at(split);
            if let (Some(&l), Some(&r)) = (rank_of.get(left), rank_of.get(right)) {
                merges.push((*rank, l, r, left, right));
            }
        }
    }
    merges.sort_unstable_by_key(|m| (m.0, m.1, m.2));
    let merges: Vec<Value> = merges
        .iter()
        .map(|m| json!([bytes_to_token(m.3, &table), bytes_to_token(m.4, &table)]))
        .collect();

    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens(config)?,
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]
        },
        "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            // tiktoken looks a whole piece up before merging; so does BPE with ignore_merges.
            "ignore_merges": true,
            "vocab": Value::Object(vocab),
            "merges": merges,
        }
    });
    serde_json::to_string(&tokenizer)
        .map_err(|e| Error::internal(format!("serializing tokenizer.json: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_a_bijection_onto_gpt2_chars() {
        let table = byte_to_char_table();
        let mut seen: Vec<char> = table.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 256);
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(table[b'a' as usize], 'a');
    }

    #[test]
    fn unknown_encoding_name_is_refused() {
        let err = tokenizer_json("YQ== 0\n", "mystery.tiktoken", &json!({})).unwrap_err();
        assert!(err.message().contains("unknown encoding"), "{err}");
    }

    #[test]
    fn merges_follow_merged_rank() {
        // a=0 b=1 c=2 ab=3 bc=4 abc=5: "abc" can come from ab+c or a+bc.
        let ranks = "YQ== 0\nYg== 1\nYw== 2\nYWI= 3\nYmM= 4\nYWJj 5\n";
        let json: Value = serde_json::from_str(
            &tokenizer_json(ranks, "o200k_base.tiktoken", &json!({})).unwrap(),
        )
        .unwrap();
        let merges = json["model"]["merges"].as_array().unwrap();
        let pairs: Vec<(String, String)> = merges
            .iter()
            .map(|m| {
                (
                    m[0].as_str().unwrap().to_owned(),
                    m[1].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected = [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")];
        assert_eq!(pairs, expected.map(|(l, r)| (l.to_owned(), r.to_owned())));
    }

    #[test]
    fn bad_line_names_its_number() {
        let err =
            tokenizer_json("YQ== 0\nnot-a-line\n", "o200k_base.tiktoken", &json!({})).unwrap_err();
        assert!(err.message().contains("line 2"), "{err}");
    }
}
