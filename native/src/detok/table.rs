//! How a model's ids turn into text for the incremental detokenizer: the tokenizer's own decode
//! table ([`Pieces`], shared, not copied) when its decoder has one, else the `tokenizers` decoder
//! re-run over a small window of ids (the `DecodeStream` technique); exact but slower.

use crate::error::Result;
use crate::tokenizer::{PieceKind, PieceTable, Pieces, Tokenizer};

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
        match tok.decode_pieces() {
            Some(Pieces::ByteLevel(t)) if !force_generic => Ok(DecodeTable::ByteLevel(t.clone())),
            Some(Pieces::SentencePiece {
                pieces,
                strip_leading,
            }) if !force_generic => Ok(DecodeTable::SentencePiece {
                pieces: pieces.clone(),
                strip_leading: *strip_leading,
            }),
            _ => Ok(DecodeTable::Generic {
                hf: Box::new(tok.hf().clone()),
                vocab_size: tok.vocab_size(),
                special: tok.special_flags(),
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
            DecodeTable::ByteLevel(t) | DecodeTable::SentencePiece { pieces: t, .. } => t.len(),
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
