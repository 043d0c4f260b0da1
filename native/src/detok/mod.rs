//! Incremental detokenization: one [`Detokenizer`] per request turns token ids, as they are
//! generated, into text that is final: never a partial UTF-8 sequence, never a U+FFFD that a later
//! token would turn into a character.
//!
//! The invariant the tests hold it to, on every tokenizer in `../shared/models`: for a context `C`
//! (the prompt ids it was primed with) and output ids `O`, the concatenation of everything emitted
//! for `O`, flushed at the end, equals `decode(C + O)` with the text of `decode(C)` removed from its
//! start — Hugging Face `tokenizers` `decode`, same `skip_special_tokens`.
//!
//! Each fed token also gets an [`Anchor`]: the offset where its first byte landed in the output,
//! or, for a token that produced no bytes (a skipped special token, a space a `Strip` decoder
//! removed), the offset where it fell. Parsers use anchors to attribute tokens to content,
//! reasoning or tool calls (first-byte ownership).
//!
//! Two places hold text back, each only as long as it must:
//! - byte-level BPE: an incomplete UTF-8 sequence (at most 3 bytes) until the byte that completes
//!   or breaks it;
//! - SentencePiece byte fallback: a whole run of `<0xNN>` pieces until the run ends, because
//!   `tokenizers` turns *every* piece of a run into U+FFFD when any part of the run is invalid, so
//!   even a complete character inside a run is not final until the run is.

mod stop;
mod table;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use crate::tokenizer::PieceKind;
pub use crate::tokenizer::PieceTable;
pub use stop::{StopFilter, StopMatch};
pub use table::DecodeTable;

const REPLACEMENT: &str = "\u{FFFD}";

/// Where a token's text landed, as an offset into the stream of emitted text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The token's first byte is at this offset.
    Visible(u64),
    /// The token produced no bytes; it fell at this offset.
    ZeroWidth(u64),
}

impl Anchor {
    /// The offset.
    pub fn offset(self) -> u64 {
        match self {
            Anchor::Visible(o) | Anchor::ZeroWidth(o) => o,
        }
    }
}

/// Where emitted text goes: `text[i]` is at stream offset `base + i`; resolved anchors are pushed
/// as `(token sequence number, anchor)`.
#[derive(Debug, Default)]
pub struct TextSink {
    /// Emitted text.
    pub text: String,
    /// Stream offset of `text[0]`.
    pub base: u64,
    /// Anchors resolved during the calls that wrote to this sink.
    pub anchors: Vec<(u64, Anchor)>,
}

impl TextSink {
    /// A sink whose text starts at stream offset `base`.
    pub fn at(base: u64) -> Self {
        TextSink {
            text: String::new(),
            base,
            anchors: Vec::new(),
        }
    }

    fn here(&self) -> u64 {
        self.base + self.text.len() as u64
    }
}

/// A token waiting for its bytes to be emitted: sequence number and position in the pending bytes;
/// `zero_width` for a token that contributed none.
#[derive(Debug, Clone, Copy)]
struct PendingToken {
    seq: u64,
    at: usize,
    zero_width: bool,
}

/// One request's incremental decoder (see the module docs).
pub struct Detokenizer {
    table: Arc<DecodeTable>,
    skip_special: bool,
    /// Byte-level: an incomplete UTF-8 tail. SentencePiece: the current byte-fallback run.
    pending: Vec<u8>,
    pending_tokens: Vec<PendingToken>,
    /// SentencePiece: leading spaces the `Strip` decoder may still remove.
    strip_left: usize,
    generic: GenericWindow,
}

impl Detokenizer {
    /// A decoder at the start of a text.
    pub fn new(table: Arc<DecodeTable>, skip_special: bool) -> Self {
        let strip_left = match &*table {
            DecodeTable::SentencePiece { strip_leading, .. } => *strip_leading,
            _ => 0,
        };
        Detokenizer {
            table,
            skip_special,
            pending: Vec::new(),
            pending_tokens: Vec::new(),
            strip_left,
            generic: GenericWindow::default(),
        }
    }

    /// Feeds the context (prompt) ids: they set the decoder's state but emit nothing, and any
    /// partial character they leave is completed by the output.
    pub fn prime(&mut self, ids: &[u32]) {
        let mut scratch = TextSink::default();
        for &id in ids {
            self.push(id, u64::MAX, &mut scratch);
        }
        match &*Arc::clone(&self.table) {
            DecodeTable::Generic { hf, .. } => self.generic.settle(hf, self.skip_special),
            // A finished character in a byte-fallback run is already part of the prompt's text;
            // an unfinished one stays pending so the output can complete it.
            DecodeTable::SentencePiece { .. } if std::str::from_utf8(&self.pending).is_ok() => {
                self.end_byte_run(&mut scratch);
            }
            _ => {}
        }
        self.pending_tokens.clear();
    }

    /// Whether `id` is a vocabulary id.
    pub fn is_known(&self, id: u32) -> bool {
        self.table.is_known(id)
    }

    /// Bytes held back, waiting for later tokens.
    pub fn held_bytes(&self) -> usize {
        self.pending.len() + self.generic.held_bytes()
    }

    /// Feeds one output token (`seq` numbers tokens for anchors). An id the vocabulary does not
    /// define (a padded output row) contributes nothing.
    pub fn push(&mut self, id: u32, seq: u64, out: &mut TextSink) {
        let table = Arc::clone(&self.table);
        match &*table {
            // `decode` drops such an id before its decoder runs, like a skipped special token: it
            // does not end a byte-fallback run or take the start of the text from a `Strip`
            // decoder. (The window decoder's `decode` drops it by itself.)
            DecodeTable::ByteLevel(_) | DecodeTable::SentencePiece { .. }
                if !table.is_known(id) =>
            {
                self.zero_width(seq, out)
            }
            DecodeTable::ByteLevel(t) => self.push_byte_level(t, id, seq, out),
            DecodeTable::SentencePiece { pieces, .. } => {
                self.push_sentencepiece(pieces, id, seq, out)
            }
            DecodeTable::Generic { hf, .. } => {
                self.generic.push(hf, self.skip_special, id, seq, out)
            }
        }
    }

    /// Ends the current text run: everything pending is emitted as the end of a decode would
    /// emit it. Used at the end of the stream and before a marker token that parsers take out of
    /// the text.
    pub fn flush(&mut self, out: &mut TextSink) {
        let table = Arc::clone(&self.table);
        match &*table {
            DecodeTable::ByteLevel(_) => self.drain_utf8(out, true),
            DecodeTable::SentencePiece { .. } => self.end_byte_run(out),
            DecodeTable::Generic { hf, .. } => self.generic.flush(hf, self.skip_special, out),
        }
    }

    /// Whether a marker token `id` would be part of `decode`'s text (so a `Strip` decoder no
    /// longer sees the start of the text after it).
    pub fn note_visible_marker(&mut self, id: u32) {
        if !(self.skip_special && self.table.is_special(id)) {
            self.strip_left = 0;
        }
    }

    fn skipped(&self, t: &PieceTable, id: u32) -> bool {
        self.skip_special && t.is_special(id)
    }

    fn zero_width(&mut self, seq: u64, out: &mut TextSink) {
        if self.pending.is_empty() {
            if seq != u64::MAX {
                out.anchors.push((seq, Anchor::ZeroWidth(out.here())));
            }
        } else {
            self.pending_tokens.push(PendingToken {
                seq,
                at: self.pending.len(),
                zero_width: true,
            });
        }
    }

    fn push_byte_level(&mut self, t: &PieceTable, id: u32, seq: u64, out: &mut TextSink) {
        let bytes = t.bytes(id);
        if self.skipped(t, id) || bytes.is_empty() {
            return self.zero_width(seq, out);
        }
        if self.pending.is_empty() {
            // Fast path: a token that is whole characters by itself.
            if let Ok(s) = std::str::from_utf8(bytes) {
                if seq != u64::MAX {
                    out.anchors.push((seq, Anchor::Visible(out.here())));
                }
                out.text.push_str(s);
                return;
            }
        }
        self.pending_tokens.push(PendingToken {
            seq,
            at: self.pending.len(),
            zero_width: false,
        });
        self.pending.extend_from_slice(bytes);
        self.drain_utf8(out, false);
    }

    /// Emits the final part of `pending` as `from_utf8_lossy` would: valid characters, and one
    /// U+FFFD per maximal invalid sequence; an incomplete tail stays unless `at_end`.
    fn drain_utf8(&mut self, out: &mut TextSink, at_end: bool) {
        // (pending start, pending end, output offset, replaced)
        let mut spans: Vec<(usize, usize, u64, bool)> = Vec::new();
        let mut pos = 0;
        while pos < self.pending.len() {
            match std::str::from_utf8(&self.pending[pos..]) {
                Ok(s) => {
                    spans.push((pos, self.pending.len(), out.here(), false));
                    out.text.push_str(s);
                    pos = self.pending.len();
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    if valid > 0 {
                        spans.push((pos, pos + valid, out.here(), false));
                        // SAFETY-free: `valid_up_to` bytes are valid UTF-8 by definition.
                        out.text.push_str(
                            std::str::from_utf8(&self.pending[pos..pos + valid])
                                .expect("valid prefix"),
                        );
                        pos += valid;
                    }
                    let bad = match e.error_len() {
                        Some(n) => n,
                        None if at_end => self.pending.len() - pos,
                        None => break,
                    };
                    spans.push((pos, pos + bad, out.here(), true));
                    out.text.push_str(REPLACEMENT);
                    pos += bad;
                }
            }
        }
        self.resolve_pending(pos, &spans, out);
    }

    /// Anchors the pending tokens whose bytes (up to `consumed`) were emitted, and drops those
    /// bytes.
    fn resolve_pending(
        &mut self,
        consumed: usize,
        spans: &[(usize, usize, u64, bool)],
        out: &mut TextSink,
    ) {
        if consumed == 0 {
            return;
        }
        let end_offset = out.here();
        let locate = |at: usize| -> u64 {
            for &(start, end, offset, replaced) in spans {
                if at >= start && at < end {
                    return if replaced {
                        offset
                    } else {
                        offset + (at - start) as u64
                    };
                }
            }
            end_offset
        };
        let mut kept = Vec::new();
        for tok in self.pending_tokens.drain(..) {
            let done = if tok.zero_width {
                tok.at <= consumed
            } else {
                tok.at < consumed
            };
            if !done {
                kept.push(PendingToken {
                    at: tok.at - consumed,
                    ..tok
                });
            } else if tok.seq != u64::MAX {
                let offset = locate(tok.at);
                let anchor = if tok.zero_width {
                    Anchor::ZeroWidth(offset)
                } else {
                    Anchor::Visible(offset)
                };
                out.anchors.push((tok.seq, anchor));
            }
        }
        self.pending_tokens = kept;
        self.pending.drain(..consumed);
    }

    fn push_sentencepiece(&mut self, t: &PieceTable, id: u32, seq: u64, out: &mut TextSink) {
        if self.skipped(t, id) {
            // `decode` drops skipped tokens before the decoder runs, so they do not end a run.
            return self.zero_width(seq, out);
        }
        match t.kind(id) {
            PieceKind::Byte => {
                self.pending_tokens.push(PendingToken {
                    seq,
                    at: self.pending.len(),
                    zero_width: false,
                });
                self.pending.push(t.bytes(id)[0]);
            }
            _ => {
                self.end_byte_run(out);
                let bytes = t.bytes(id);
                let text = std::str::from_utf8(bytes).expect("SentencePiece pieces are text");
                let start = out.here();
                let stripped = self.emit_stripped(text, out);
                if seq != u64::MAX {
                    let anchor = if stripped < text.len() {
                        Anchor::Visible(start)
                    } else {
                        Anchor::ZeroWidth(start)
                    };
                    out.anchors.push((seq, anchor));
                }
            }
        }
    }

    /// Emits `text` after the `Strip` decoder's leading-space removal; returns how many bytes
    /// were removed.
    fn emit_stripped(&mut self, text: &str, out: &mut TextSink) -> usize {
        if self.strip_left == 0 || text.is_empty() {
            out.text.push_str(text);
            return 0;
        }
        let spaces = text
            .bytes()
            .take(self.strip_left)
            .take_while(|&b| b == b' ')
            .count();
        if spaces < text.len() {
            self.strip_left = 0;
        } else {
            self.strip_left -= spaces;
        }
        out.text.push_str(&text[spaces..]);
        spaces
    }

    /// Resolves the pending byte-fallback run: its text when valid UTF-8, else one U+FFFD per
    /// byte piece.
    fn end_byte_run(&mut self, out: &mut TextSink) {
        if self.pending.is_empty() {
            return self.flush_zero_width(out);
        }
        let run = std::mem::take(&mut self.pending);
        let tokens = std::mem::take(&mut self.pending_tokens);
        let start = out.here();
        match String::from_utf8(run) {
            Ok(text) => {
                let stripped = self.emit_stripped(&text, out);
                for tok in tokens.into_iter().filter(|t| t.seq != u64::MAX) {
                    let anchor = if tok.zero_width || tok.at < stripped {
                        Anchor::ZeroWidth(start + tok.at.saturating_sub(stripped) as u64)
                    } else {
                        Anchor::Visible(start + (tok.at - stripped) as u64)
                    };
                    out.anchors.push((tok.seq, anchor));
                }
            }
            Err(e) => {
                let count = e.into_bytes().len();
                self.strip_left = 0;
                for _ in 0..count {
                    out.text.push_str(REPLACEMENT);
                }
                for tok in tokens.into_iter().filter(|t| t.seq != u64::MAX) {
                    let offset = start + (REPLACEMENT.len() * tok.at) as u64;
                    let anchor = if tok.zero_width {
                        Anchor::ZeroWidth(offset)
                    } else {
                        Anchor::Visible(offset)
                    };
                    out.anchors.push((tok.seq, anchor));
                }
            }
        }
    }

    fn flush_zero_width(&mut self, out: &mut TextSink) {
        for tok in self.pending_tokens.drain(..) {
            if tok.seq != u64::MAX {
                out.anchors
                    .push((tok.seq, Anchor::ZeroWidth(out.base + out.text.len() as u64)));
            }
        }
    }
}

/// The generic decoder: `decode` re-run over the ids since the last emitted text plus a few ids of
/// context (as `tokenizers`' `DecodeStream`), emitting the difference once it is final.
#[derive(Default)]
struct GenericWindow {
    ids: Vec<u32>,
    /// `decode(ids[..read])`, already emitted.
    prefix: String,
    read: usize,
    waiting: Vec<u64>,
}

/// Ids of context kept before the undecided ones: decoders that treat the first token of a text
/// specially (leading-space removal) must not see a new token as the first.
const GENERIC_CONTEXT_IDS: usize = 4;
/// How far back the window may reach for a token with visible text.
const GENERIC_MAX_CONTEXT_IDS: usize = 64;

impl GenericWindow {
    fn held_bytes(&self) -> usize {
        4 * (self.ids.len() - self.read)
    }

    fn push(
        &mut self,
        hf: &tokenizers::Tokenizer,
        skip: bool,
        id: u32,
        seq: u64,
        out: &mut TextSink,
    ) {
        self.ids.push(id);
        if seq != u64::MAX {
            self.waiting.push(seq);
        }
        let text = decode(hf, &self.ids, skip);
        if text.len() > self.prefix.len()
            && !text.ends_with(REPLACEMENT)
            && text.starts_with(self.prefix.as_str())
        {
            self.emit(hf, skip, text, out);
        }
    }

    fn flush(&mut self, hf: &tokenizers::Tokenizer, skip: bool, out: &mut TextSink) {
        let text = decode(hf, &self.ids, skip);
        if text.len() > self.prefix.len() && text.starts_with(self.prefix.as_str()) {
            self.emit(hf, skip, text, out);
        }
        let here = out.here();
        for seq in self.waiting.drain(..) {
            out.anchors.push((seq, Anchor::ZeroWidth(here)));
        }
    }

    fn emit(&mut self, hf: &tokenizers::Tokenizer, skip: bool, text: String, out: &mut TextSink) {
        let start = out.here();
        out.text.push_str(&text[self.prefix.len()..]);
        for seq in self.waiting.drain(..) {
            out.anchors.push((seq, Anchor::Visible(start)));
        }
        self.read = self.ids.len();
        self.prefix = text;
        self.settle(hf, skip);
    }

    /// Forgets emitted ids beyond the context window. The window reaches back (up to
    /// [`GENERIC_MAX_CONTEXT_IDS`]) to a token with visible text: a window of skipped special
    /// tokens alone (a context ending in `<unk>` or image tokens) would make the next token the
    /// start of the text, and a `Strip` decoder would drop its leading space. It also reaches
    /// back out of a character cut by its start: `ByteFallback` decodes a run of byte tokens as
    /// one, so a window starting on a continuation byte would turn the next character's bytes,
    /// joined to that run, into replacement characters too.
    fn settle(&mut self, hf: &tokenizers::Tokenizer, skip: bool) {
        self.read = self.ids.len();
        if self.ids.len() > GENERIC_CONTEXT_IDS {
            let mut start = self.ids.len() - GENERIC_CONTEXT_IDS;
            while start > 0 && self.ids.len() - start < GENERIC_MAX_CONTEXT_IDS && {
                let window = decode(hf, &self.ids[start..], skip);
                window.is_empty() || window.starts_with(REPLACEMENT)
            } {
                start -= 1;
            }
            self.ids.drain(..start);
            self.read = self.ids.len();
            self.prefix = decode(hf, &self.ids, skip);
        } else {
            self.prefix = decode(hf, &self.ids, skip);
        }
    }
}

fn decode(hf: &tokenizers::Tokenizer, ids: &[u32], skip: bool) -> String {
    hf.decode(ids, skip).unwrap_or_default()
}
