//! Per-model decode tables: what each token id contributes to the decoded text.
//!
//! Hugging Face `decode` maps ids to token strings and runs the tokenizer's decoder chain over the
//! whole list. For the two decoder families real models use, that chain is a per-token mapping
//! followed by a byte-to-text step, so it can be precomputed per id and replayed incrementally:
//!
//! - **Byte-level BPE** (`ByteLevel`: GPT-2, Llama 3, Qwen, DeepSeek, gpt-oss, Tekken): each token
//!   string maps to raw bytes through the GPT-2 byte/char table (a token with a character outside
//!   the table contributes its own UTF-8 bytes), and the concatenation is decoded with
//!   `String::from_utf8_lossy`.
//! - **SentencePiece with byte fallback** (`Sequence[Replace("▁"→" "), ByteFallback, Fuse,
//!   Strip(" ", n, 0)?]`: Llama 2, Mistral v3, Phi-3, Gemma): each token is text with `▁` replaced,
//!   except `<0xNN>` pieces, which are raw bytes; a run of byte pieces becomes its UTF-8 text when
//!   the whole run is valid and one U+FFFD per piece otherwise; `Strip` removes leading spaces of
//!   the whole decoded text.
//!
//! Any other decoder is served by [`DecodeTable::Generic`], which re-runs the real decoder over a
//! small window of ids (the `DecodeStream` technique); exact but slower.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// What an id is to the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceKind {
    /// Not in the vocabulary.
    Unknown,
    /// Bytes (byte-level) or text (SentencePiece) appended to the output.
    Text,
    /// A SentencePiece `<0xNN>` byte-fallback piece.
    Byte,
}

/// The precomputed pieces of a byte-level or SentencePiece vocabulary (opaque).
pub struct PieceTable {
    /// `offsets[id]..offsets[id + 1]` is the id's slice of `arena`.
    offsets: Vec<u32>,
    arena: Vec<u8>,
    kinds: Vec<PieceKind>,
    /// Special tokens, dropped by `skip_special_tokens`.
    special: Vec<bool>,
}

impl PieceTable {
    pub(crate) fn kind(&self, id: u32) -> PieceKind {
        self.kinds
            .get(id as usize)
            .copied()
            .unwrap_or(PieceKind::Unknown)
    }

    pub(crate) fn bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        &self.arena[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    pub(crate) fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }
}

/// How a model's ids turn into text (see the module docs).
pub enum DecodeTable {
    /// Byte-level BPE.
    ByteLevel(PieceTable),
    /// SentencePiece-style text pieces with byte fallback; `strip_leading` spaces are removed from
    /// the start of the whole text.
    SentencePiece {
        /// The pieces.
        pieces: PieceTable,
        /// How many leading spaces the `Strip` decoder removes (0 without one).
        strip_leading: usize,
    },
    /// Any other decoder: the `tokenizers` decoder itself, re-run over a window of ids.
    Generic {
        /// A private copy of the tokenizer (decoding needs `&self` only).
        hf: Box<tokenizers::Tokenizer>,
        /// Vocabulary size (one past the largest id).
        vocab_size: usize,
        /// Special tokens, dropped by `skip_special_tokens`.
        special: Vec<bool>,
    },
}

impl DecodeTable {
    /// Builds the table for `tok`; `force_generic` selects the window decoder even where a table
    /// would do (tests use it to check the generic path on real vocabularies).
    pub fn build(tok: &Tokenizer, force_generic: bool) -> Result<DecodeTable> {
        let hf = tok.hf();
        let special = special_flags(tok);
        let decoder = match hf.get_decoder() {
            Some(d) => serde_json::to_value(d)
                .map_err(|e| Error::internal(format!("decoder json: {e}")))?,
            None => serde_json::Value::Null,
        };
        let family = if force_generic {
            None
        } else {
            Family::of(&decoder)
        };
        match family {
            Some(Family::ByteLevel) => Ok(DecodeTable::ByteLevel(byte_level_table(tok, special))),
            Some(Family::SentencePiece { strip_leading }) => Ok(DecodeTable::SentencePiece {
                pieces: sentencepiece_table(tok, special),
                strip_leading,
            }),
            None => Ok(DecodeTable::Generic {
                hf: Box::new(hf.clone()),
                vocab_size: tok.vocab_size(),
                special,
            }),
        }
    }

    /// Whether `id` is a special token (dropped by `skip_special_tokens`).
    pub fn is_special(&self, id: u32) -> bool {
        match self {
            DecodeTable::ByteLevel(t) | DecodeTable::SentencePiece { pieces: t, .. } => {
                t.is_special(id)
            }
            DecodeTable::Generic { special, .. } => {
                special.get(id as usize).copied().unwrap_or(false)
            }
        }
    }

    /// Whether `id` has a vocabulary entry.
    pub fn is_known(&self, id: u32) -> bool {
        match self {
            DecodeTable::ByteLevel(t) | DecodeTable::SentencePiece { pieces: t, .. } => {
                t.kind(id) != PieceKind::Unknown
            }
            DecodeTable::Generic { hf, vocab_size, .. } => {
                (id as usize) < *vocab_size && hf.id_to_token(id).is_some()
            }
        }
    }

    /// Vocabulary size (one past the largest id).
    pub fn vocab_size(&self) -> usize {
        match self {
            DecodeTable::ByteLevel(t) | DecodeTable::SentencePiece { pieces: t, .. } => {
                t.kinds.len()
            }
            DecodeTable::Generic { vocab_size, .. } => *vocab_size,
        }
    }

    /// `"byte_level"`, `"sentencepiece"` or `"generic"`.
    pub fn family(&self) -> &'static str {
        match self {
            DecodeTable::ByteLevel(_) => "byte_level",
            DecodeTable::SentencePiece { .. } => "sentencepiece",
            DecodeTable::Generic { .. } => "generic",
        }
    }
}

enum Family {
    ByteLevel,
    SentencePiece { strip_leading: usize },
}

impl Family {
    /// Recognises the decoder chains the tables replay exactly; anything else is `None`.
    fn of(decoder: &serde_json::Value) -> Option<Family> {
        let kind = decoder.get("type")?.as_str()?;
        if kind == "ByteLevel" {
            return Some(Family::ByteLevel);
        }
        if kind != "Sequence" {
            return None;
        }
        let steps = decoder.get("decoders")?.as_array()?;
        let types: Vec<&str> = steps
            .iter()
            .filter_map(|s| s.get("type")?.as_str())
            .collect();
        let replace_ok = steps.first().is_some_and(|s| {
            s.get("type").and_then(|t| t.as_str()) == Some("Replace")
                && s.pointer("/pattern/String").and_then(|p| p.as_str()) == Some("\u{2581}")
                && s.get("content").and_then(|c| c.as_str()) == Some(" ")
        });
        if !replace_ok {
            return None;
        }
        match types.as_slice() {
            ["Replace", "ByteFallback", "Fuse"] => Some(Family::SentencePiece { strip_leading: 0 }),
            ["Replace", "ByteFallback", "Fuse", "Strip"] => {
                let strip = &steps[3];
                let content = strip.get("content")?.as_str()?;
                let stop = strip.get("stop")?.as_u64()?;
                let start = strip.get("start")?.as_u64()?;
                // Stripping trailing characters would need the end of the stream; not streamable.
                (content == " " && stop == 0).then_some(Family::SentencePiece {
                    strip_leading: start as usize,
                })
            }
            _ => None,
        }
    }
}

/// Which ids `decode(skip_special_tokens=true)` drops: those whose token string is the content of
/// a special added token (`tokenizers` compares strings, so a model piece spelled like a special
/// token is dropped too).
fn special_flags(tok: &Tokenizer) -> Vec<bool> {
    let specials: HashSet<&str> = tok
        .added_tokens()
        .iter()
        .filter(|t| t.special)
        .map(|t| t.content.as_str())
        .collect();
    (0..tok.vocab_size() as u32)
        .map(|id| {
            tok.hf()
                .id_to_token(id)
                .is_some_and(|s| specials.contains(s.as_str()))
        })
        .collect()
}

/// GPT-2's reversible byte <-> printable-char table, inverted: char -> byte.
fn char_to_byte() -> std::collections::HashMap<char, u8> {
    let mut direct: Vec<u8> = (b'!'..=b'~')
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars: Vec<u32> = direct.iter().map(|&b| b as u32).collect();
    let mut n = 0;
    for b in 0..=255u8 {
        if !direct.contains(&b) {
            direct.push(b);
            chars.push(256 + n);
            n += 1;
        }
    }
    direct
        .into_iter()
        .zip(chars)
        .map(|(b, c)| (char::from_u32(c).expect("below 512"), b))
        .collect()
}

fn byte_level_table(tok: &Tokenizer, special: Vec<bool>) -> PieceTable {
    let map = char_to_byte();
    build_table(tok, special, |token, arena| {
        let start = arena.len();
        for c in token.chars() {
            match map.get(&c) {
                Some(&b) => arena.push(b),
                None => {
                    // As the `tokenizers` decoder does: a token with any character outside the
                    // table contributes its UTF-8 bytes unchanged.
                    arena.truncate(start);
                    arena.extend_from_slice(token.as_bytes());
                    break;
                }
            }
        }
        PieceKind::Text
    })
}

fn sentencepiece_table(tok: &Tokenizer, special: Vec<bool>) -> PieceTable {
    build_table(tok, special, |token, arena| {
        let text = token.replace('\u{2581}', " ");
        // The ByteFallback decoder's own test: six bytes, `<0x`, two hex digits, `>`.
        if text.len() == 6 && text.starts_with("<0x") && text.ends_with('>') {
            if let Ok(b) = u8::from_str_radix(&text[3..5], 16) {
                arena.push(b);
                return PieceKind::Byte;
            }
        }
        arena.extend_from_slice(text.as_bytes());
        PieceKind::Text
    })
}

fn build_table(
    tok: &Tokenizer,
    special: Vec<bool>,
    mut piece: impl FnMut(&str, &mut Vec<u8>) -> PieceKind,
) -> PieceTable {
    let size = tok.vocab_size();
    let mut offsets = Vec::with_capacity(size + 1);
    let mut kinds = Vec::with_capacity(size);
    let mut arena = Vec::with_capacity(size * 6);
    offsets.push(0u32);
    for id in 0..size as u32 {
        let kind = match tok.hf().id_to_token(id) {
            Some(token) if tok.is_known_id(id) => piece(&token, &mut arena),
            _ => PieceKind::Unknown,
        };
        kinds.push(kind);
        offsets.push(arena.len() as u32);
    }
    PieceTable {
        offsets,
        arena,
        kinds,
        special,
    }
}
