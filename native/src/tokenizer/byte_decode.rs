//! Fast full-sequence decoding for byte-level BPE vocabularies.
//!
//! `tokenizers` decodes by building one `String` per token and running the decoder chain; for a
//! `ByteLevel` decoder that chain only maps each token's characters back to bytes (or keeps the
//! token's UTF-8 when a character is outside the byte alphabet, as added tokens can be), then
//! lossily decodes the concatenation. That mapping depends on the id alone, so it is computed once
//! per vocabulary here and decoding becomes a byte copy per token plus one UTF-8 check. Special
//! tokens are skipped by the same rule `tokenizers` uses: the token's text is a special added token.

use tokenizers::{DecoderWrapper, Model};

use super::tiktoken::byte_to_char_table;

/// Per-id decoded bytes and special flags, for tokenizers whose decoder is exactly `ByteLevel`.
pub(super) struct ByteDecodeTable {
    bytes: Vec<u8>,
    /// `starts[id]..starts[id + 1]` is the id's byte range in `bytes`.
    starts: Vec<u32>,
    special: Vec<bool>,
}

impl ByteDecodeTable {
    /// Builds the table when `hf`'s decoder is a plain `ByteLevel`, else `None`.
    pub(super) fn build(hf: &tokenizers::Tokenizer, vocab_size: usize) -> Option<Self> {
        if !matches!(hf.get_decoder(), Some(DecoderWrapper::ByteLevel(_))) {
            return None;
        }
        let mut char_to_byte = std::collections::HashMap::with_capacity(256);
        for (b, c) in byte_to_char_table().iter().enumerate() {
            char_to_byte.insert(*c, b as u8);
        }
        let added = hf.get_added_vocabulary();
        let mut table = ByteDecodeTable {
            bytes: Vec::with_capacity(vocab_size * 6),
            starts: Vec::with_capacity(vocab_size + 1),
            special: Vec::with_capacity(vocab_size),
        };
        for id in 0..vocab_size as u32 {
            table.starts.push(table.bytes.len() as u32);
            let token = added
                .simple_id_to_token(id)
                .or_else(|| hf.get_model().id_to_token(id));
            let Some(token) = token else {
                table.special.push(false);
                continue;
            };
            table.special.push(added.is_special_token(&token));
            let mapped: Option<Vec<u8>> = token
                .chars()
                .map(|c| char_to_byte.get(&c).copied())
                .collect();
            table
                .bytes
                .extend_from_slice(mapped.as_deref().unwrap_or(token.as_bytes()));
        }
        table.starts.push(table.bytes.len() as u32);
        Some(table)
    }

    /// Appends the bytes of known ids to `out` (a decode in parts; [`Self::finish`] makes the text).
    pub(super) fn decode_bytes_into(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
        out: &mut Vec<u8>,
    ) {
        for &id in ids {
            let id = id as usize;
            if skip_special_tokens && self.special[id] {
                continue;
            }
            out.extend_from_slice(
                &self.bytes[self.starts[id] as usize..self.starts[id + 1] as usize],
            );
        }
    }

    /// The text of decoded bytes (invalid UTF-8 replaced, as Hugging Face does).
    pub(super) fn finish(&self, out: Vec<u8>) -> String {
        match String::from_utf8(out) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}
