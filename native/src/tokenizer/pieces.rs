//! Per-vocabulary decode tables: what each token id contributes to the decoded text.
//!
//! Hugging Face `decode` maps ids to token strings and runs the tokenizer's decoder chain over the
//! whole list, building one `String` per token on the way (about 1 us per id for a SentencePiece
//! chain). For the two decoder families real models use, that chain is a per-token mapping
//! followed by a byte-to-text step, so it is computed once per id here; a whole-sequence decode
//! ([`Pieces::decode`]) becomes a copy per token, and the incremental detokenizer (`detok`)
//! replays the same table one id at a time.
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
//! Any other decoder has no table ([`Pieces::build`] answers `None`) and decodes through
//! `tokenizers` itself. Special tokens are skipped by the rule `tokenizers` uses: the token's
//! string is the content of a special added token (so a model piece spelled like one is dropped
//! too), and a skipped token is dropped before the decoder runs (it does not end a byte run).

use std::collections::HashSet;
use std::sync::Arc;

use crate::cancel::Cancel;
use crate::error::Result;

use super::tiktoken::byte_to_char_table;
use super::AddedToken;

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

/// The precomputed pieces of a vocabulary (opaque; cheap to clone, the data is shared).
#[derive(Clone)]
pub struct PieceTable(Arc<PieceData>);

struct PieceData {
    /// `offsets[id]..offsets[id + 1]` is the id's slice of `arena`.
    offsets: Vec<u32>,
    arena: Vec<u8>,
    kinds: Vec<PieceKind>,
    /// Special tokens, dropped by `skip_special_tokens`.
    special: Vec<bool>,
}

impl PieceTable {
    pub(crate) fn kind(&self, id: u32) -> PieceKind {
        self.0
            .kinds
            .get(id as usize)
            .copied()
            .unwrap_or(PieceKind::Unknown)
    }

    pub(crate) fn bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        &self.0.arena[self.0.offsets[i] as usize..self.0.offsets[i + 1] as usize]
    }

    pub(crate) fn is_special(&self, id: u32) -> bool {
        self.0.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Vocabulary size (one past the largest id).
    pub(crate) fn len(&self) -> usize {
        self.0.kinds.len()
    }

    fn skipped(&self, id: u32, skip_special_tokens: bool) -> bool {
        skip_special_tokens && self.is_special(id)
    }
}

/// A vocabulary's decode table, by decoder family (see the module docs).
#[derive(Clone)]
pub enum Pieces {
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
}

/// Ids of a decode between two checks of its cancellation.
const DECODE_CHECK_IDS: usize = 1 << 16;

impl Pieces {
    /// The table of `hf`'s decoder when it is one of the two families, else `None`. `known[id]`
    /// says which ids have a vocabulary entry; `added` are the added tokens.
    pub(crate) fn build(
        hf: &tokenizers::Tokenizer,
        known: &[bool],
        added: &[AddedToken],
    ) -> Option<Pieces> {
        let decoder = serde_json::to_value(hf.get_decoder()?).ok()?;
        let family = Family::of(&decoder)?;
        let special = special_flags(hf, known.len(), added);
        match family {
            Family::ByteLevel => Some(Pieces::ByteLevel(byte_level_table(hf, known, special))),
            Family::SentencePiece { strip_leading } => Some(Pieces::SentencePiece {
                pieces: sentencepiece_table(hf, known, special),
                strip_leading,
            }),
        }
    }

    /// Decodes known ids as Hugging Face `decode` does, checking `cancel` every few ten thousand
    /// ids. (Unknown ids decode to nothing; callers check ids first.)
    pub(crate) fn decode(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
        cancel: &Cancel<'_>,
    ) -> Result<String> {
        match self {
            Pieces::ByteLevel(t) => {
                let mut bytes = Vec::with_capacity(ids.len() * 4);
                for part in ids.chunks(DECODE_CHECK_IDS) {
                    cancel.check()?;
                    for &id in part {
                        if !t.skipped(id, skip_special_tokens) {
                            bytes.extend_from_slice(t.bytes(id));
                        }
                    }
                }
                Ok(match String::from_utf8(bytes) {
                    Ok(text) => text,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                })
            }
            Pieces::SentencePiece {
                pieces: t,
                strip_leading,
            } => {
                let mut out = SentencePieceText::default();
                for part in ids.chunks(DECODE_CHECK_IDS) {
                    cancel.check()?;
                    for &id in part {
                        if t.skipped(id, skip_special_tokens) {
                            continue;
                        }
                        match t.kind(id) {
                            PieceKind::Byte => out.push_byte(t.bytes(id)[0]),
                            PieceKind::Text => out.push_text(t.bytes(id)),
                            PieceKind::Unknown => {}
                        }
                    }
                }
                Ok(out.finish(*strip_leading))
            }
        }
    }
}

/// A SentencePiece decode in progress: text so far, with the current run of byte pieces at its
/// end from `run_start` on.
#[derive(Default)]
struct SentencePieceText {
    bytes: Vec<u8>,
    run_start: Option<usize>,
}

impl SentencePieceText {
    fn push_byte(&mut self, byte: u8) {
        self.run_start.get_or_insert(self.bytes.len());
        self.bytes.push(byte);
    }

    fn push_text(&mut self, text: &[u8]) {
        self.end_run();
        self.bytes.extend_from_slice(text);
    }

    /// The `ByteFallback` decoder's rule: a valid run is its text, an invalid one a U+FFFD per
    /// byte piece.
    fn end_run(&mut self) {
        if let Some(start) = self.run_start.take() {
            if std::str::from_utf8(&self.bytes[start..]).is_err() {
                let pieces = self.bytes.len() - start;
                self.bytes.truncate(start);
                for _ in 0..pieces {
                    self.bytes.extend_from_slice("\u{FFFD}".as_bytes());
                }
            }
        }
    }

    fn finish(mut self, strip_leading: usize) -> String {
        self.end_run();
        let stripped = self
            .bytes
            .iter()
            .take(strip_leading)
            .take_while(|&&b| b == b' ')
            .count();
        self.bytes.drain(..stripped);
        // Every piece is text and every byte run was checked, so this never replaces anything.
        match String::from_utf8(self.bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
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
                // Stripping trailing characters would need the end of the stream; the
                // incremental detokenizer could not replay it, so such a chain has no table.
                (content == " " && stop == 0).then_some(Family::SentencePiece {
                    strip_leading: start as usize,
                })
            }
            _ => None,
        }
    }
}

/// Which ids `decode(skip_special_tokens=true)` drops: those whose token string is the content of
/// a special added token (`tokenizers` compares strings).
pub(super) fn special_flags(
    hf: &tokenizers::Tokenizer,
    size: usize,
    added: &[AddedToken],
) -> Vec<bool> {
    let specials: HashSet<&str> = added
        .iter()
        .filter(|t| t.special)
        .map(|t| t.content.as_str())
        .collect();
    (0..size as u32)
        .map(|id| {
            hf.id_to_token(id)
                .is_some_and(|s| specials.contains(s.as_str()))
        })
        .collect()
}

fn byte_level_table(hf: &tokenizers::Tokenizer, known: &[bool], special: Vec<bool>) -> PieceTable {
    let map: std::collections::HashMap<char, u8> = byte_to_char_table()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect();
    build_table(hf, known, special, |token, arena| {
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

fn sentencepiece_table(
    hf: &tokenizers::Tokenizer,
    known: &[bool],
    special: Vec<bool>,
) -> PieceTable {
    build_table(hf, known, special, |token, arena| {
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
    hf: &tokenizers::Tokenizer,
    known: &[bool],
    special: Vec<bool>,
    mut piece: impl FnMut(&str, &mut Vec<u8>) -> PieceKind,
) -> PieceTable {
    let size = known.len();
    let mut offsets = Vec::with_capacity(size + 1);
    let mut kinds = Vec::with_capacity(size);
    let mut arena = Vec::with_capacity(size * 6);
    offsets.push(0u32);
    for id in 0..size as u32 {
        let kind = match hf.id_to_token(id) {
            Some(token) if known[id as usize] => piece(&token, &mut arena),
            _ => PieceKind::Unknown,
        };
        kinds.push(kind);
        offsets.push(arena.len() as u32);
    }
    PieceTable(Arc::new(PieceData {
        offsets,
        arena,
        kinds,
        special,
    }))
}
