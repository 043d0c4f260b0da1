//! The text parsers read: decoded text in which marker tokens are single sentinel characters,
//! held in a buffer that remembers where each byte sits in the request's output stream.
//!
//! A marker that the vocabulary has as one token (`<think>` in Qwen3, `<|channel|>` in gpt-oss) is
//! matched by id: the session replaces the token by a sentinel, a Unicode noncharacter
//! (U+FDD0 + marker index), so no generated text can spell it. A marker the vocabulary lacks is
//! matched by its text. Parsers search for both the same way, as patterns.

use std::borrow::Cow;

use crate::parse::json::is_sentinel;

/// Replaces every noncharacter U+FDD0..U+FDEF in `text[from..]` (characters the model wrote: the
/// session pushes sentinels only after this ran) by U+FFFD, which has the same UTF-8 length, and
/// records `(stream offset, character)` so content and reasoning can show the original: model text
/// can never forge a marker.
pub(crate) fn escape_literals(
    text: &mut String,
    from: usize,
    base: u64,
    literals: &mut Vec<(u64, char)>,
) {
    // U+FDD0..U+FDEF are EF B7 90..AF in UTF-8.
    if !text.as_bytes()[from..]
        .windows(2)
        .any(|w| w == [0xEF, 0xB7])
    {
        return;
    }
    let found: Vec<(usize, char)> = text[from..]
        .char_indices()
        .filter(|(_, c)| is_sentinel(*c))
        .map(|(i, c)| (from + i, c))
        .collect();
    for (at, c) in found {
        text.replace_range(at..at + c.len_utf8(), "\u{FFFD}");
        literals.push((base + at as u64, c));
    }
}

/// `text` (at stream offset `base`) with the characters [`escape_literals`] replaced in it put
/// back (`literals`: those it recorded for this text): what the model wrote, for stop strings,
/// which match the decoded text as vLLM's do. The byte offsets are `text`'s.
pub(crate) fn restore_literals<'a>(
    text: &'a str,
    base: u64,
    literals: &[(u64, char)],
) -> Cow<'a, str> {
    if literals.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for &(offset, c) in literals {
        let at = (offset - base) as usize;
        // Same UTF-8 length as the U+FFFD it replaces, so no later offset moves.
        out.replace_range(at..at + c.len_utf8(), c.encode_utf8(&mut [0; 4]));
    }
    Cow::Owned(out)
}

/// A buffer of parser input: text plus the stream offset of each contiguous segment.
///
/// Parsers consume it from the front, often a few bytes at a time; the consumed bytes stay in place
/// until they are at least half of the buffer and a page long, so consuming `n` bytes costs `O(n)`
/// amortized instead of moving what is left each time.
#[derive(Debug, Default, Clone)]
pub(crate) struct SegBuf {
    /// Consumed bytes (`..start`), then the buffer's text.
    text: String,
    start: usize,
    /// `(index into text, stream offset)` at which each contiguous segment starts (the first one
    /// may start before `start`).
    segs: Vec<(usize, u64)>,
}

/// Consumed bytes a [`SegBuf`] keeps before moving its text down.
const COMPACT_FROM: usize = 4096;

impl SegBuf {
    pub(crate) fn as_str(&self) -> &str {
        &self.text[self.start..]
    }

    pub(crate) fn len(&self) -> usize {
        self.text.len() - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `s`, which starts at stream offset `offset`.
    pub(crate) fn push(&mut self, s: &str, offset: u64) {
        if s.is_empty() {
            return;
        }
        let contiguous = self
            .segs
            .last()
            .is_some_and(|&(i, o)| o + (self.text.len() - i) as u64 == offset);
        if !contiguous {
            self.segs.push((self.text.len(), offset));
        }
        self.text.push_str(s);
    }

    /// Moves everything into `other`.
    pub(crate) fn drain_into(&mut self, other: &mut SegBuf) {
        for k in 0..self.segs.len() {
            let (i, o) = self.segs[k];
            let end = self.segs.get(k + 1).map_or(self.text.len(), |s| s.0);
            // The first segment may begin in the consumed part.
            let from = i.max(self.start);
            other.push(&self.text[from..end], o + (from - i) as u64);
        }
        self.clear();
    }

    fn clear(&mut self) {
        self.text.clear();
        self.segs.clear();
        self.start = 0;
    }

    /// Removes the first `n` bytes, calling `f(text, start, end)` for each stream range they
    /// covered.
    pub(crate) fn take(&mut self, n: usize, mut f: impl FnMut(&str, u64, u64)) {
        if n == 0 {
            return;
        }
        let cut = self.start + n;
        let mut whole = 0; // segments entirely inside the consumed bytes
        for k in 0..self.segs.len() {
            let (i, o) = self.segs[k];
            if i >= cut {
                break;
            }
            let seg_end = self.segs.get(k + 1).map_or(self.text.len(), |s| s.0);
            let from = i.max(self.start);
            let end = seg_end.min(cut);
            f(
                &self.text[from..end],
                o + (from - i) as u64,
                o + (end - i) as u64,
            );
            if seg_end <= cut {
                whole = k + 1;
            }
        }
        self.segs.drain(..whole);
        self.start = cut;
        if self.start == self.text.len() {
            self.clear();
        } else if self.start >= COMPACT_FROM && self.start >= self.len() {
            self.compact();
        }
    }

    /// Drops the consumed bytes.
    fn compact(&mut self) {
        let start = self.start;
        if let Some(first) = self.segs.first_mut() {
            if first.0 < start {
                first.1 += (start - first.0) as u64;
                first.0 = start;
            }
        }
        for seg in &mut self.segs {
            seg.0 -= start;
        }
        self.text.drain(..start);
        self.start = 0;
    }
}

/// Where a search found something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Pattern `index` starts at byte `at`.
    Found { at: usize, index: usize },
    /// The text from `at` to the end is a proper prefix of a pattern: hold it back.
    Partial { at: usize },
    /// No pattern starts in the text.
    None,
}

/// Finds the earliest pattern occurrence (the longest on a tie), or else the earliest suffix that
/// could still become one. Any non-empty overlap counts, a lone `<` included.
pub(crate) fn scan(hay: &str, patterns: &[&str]) -> Scan {
    // Fast path: text without any pattern's first byte holds neither a pattern nor a prefix of one
    // (most decoded text, when patterns start with `<` or a sentinel).
    let bytes = hay.as_bytes();
    let mut firsts = [0u8; 8];
    let mut n_firsts = 0;
    for p in patterns.iter().filter_map(|p| p.as_bytes().first()) {
        if !firsts[..n_firsts].contains(p) {
            if n_firsts == firsts.len() {
                n_firsts = usize::MAX;
                break;
            }
            firsts[n_firsts] = *p;
            n_firsts += 1;
        }
    }
    let first_hit = if n_firsts == usize::MAX {
        Some(0)
    } else {
        bytes.iter().position(|b| firsts[..n_firsts].contains(b))
    };
    let Some(from_hit) = first_hit else {
        return Scan::None;
    };
    let mut best: Option<(usize, usize, usize)> = None;
    for (index, pat) in patterns.iter().enumerate() {
        if pat.is_empty() {
            continue;
        }
        // Once a pattern was found, a later one wins only by starting no later: it is looked for
        // only up to there, so a pattern found early does not cost a search of the whole text for
        // each other one (a parser consuming a long text a little at a time read it all each time).
        let mut until = best.map_or(hay.len(), |(at, _, _)| (at + pat.len()).min(hay.len()));
        while !hay.is_char_boundary(until) {
            until += 1;
        }
        let window = &hay[from_hit..until];
        let found = match pat.chars().next() {
            Some(c) if c.len_utf8() == pat.len() => window.find(c),
            _ => window.find(pat),
        };
        if let Some(at) = found.map(|a| a + from_hit) {
            let better = match best {
                None => true,
                Some((b_at, _, b_len)) => at < b_at || (at == b_at && pat.len() > b_len),
            };
            if better {
                best = Some((at, index, pat.len()));
            }
        }
    }
    if let Some((at, index, _)) = best {
        return Scan::Found { at, index };
    }
    let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
    let from = hay
        .len()
        .saturating_sub(longest.saturating_sub(1))
        .max(from_hit);
    for at in from..hay.len() {
        if !hay.is_char_boundary(at) {
            continue;
        }
        let tail = &hay[at..];
        if patterns
            .iter()
            .any(|p| p.len() > tail.len() && p.starts_with(tail))
        {
            return Scan::Partial { at };
        }
    }
    Scan::None
}

/// Bytes of leading ASCII whitespace.
pub(crate) fn leading_ws(s: &str) -> usize {
    s.len()
        - s.trim_start_matches(|c: char| c.is_ascii_whitespace())
            .len()
}

/// `s` without leading and trailing ASCII whitespace.
pub(crate) fn ascii_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii_whitespace())
}

/// Whether `s` is a proper prefix of `pattern` (a marker that may still arrive).
pub(crate) fn could_become(s: &str, pattern: &str) -> bool {
    s.len() < pattern.len() && pattern.starts_with(s)
}

/// Where a marker takes the checkpoint's token suffix: Hunyuan checkpoints spell their structural
/// tokens with a per-checkpoint suffix (`<tool_calls:6124c78e>`), so a row writes the marker as
/// `<tool_calls{sfx}>` and the request's markers are spelled with the model's suffix
/// ([`crate::parse::ParseModel::token_suffix`], empty when it has none).
pub(crate) const SUFFIX_SLOT: &str = "{sfx}";

/// A marker a parser looks for.
#[derive(Debug, Clone)]
pub(crate) struct Marker {
    /// Its text as the row writes it (what parsers ask for).
    pub(crate) text: &'static str,
    /// Its text in this model: `text` with the token suffix in its [`SUFFIX_SLOT`].
    pub(crate) spelled: String,
    /// Its token id when the vocabulary has it as one added token.
    pub(crate) id: Option<u32>,
    /// What `decode` shows for it (empty for a special token when special tokens are skipped).
    pub(crate) visible: String,
}

/// The markers of a request's parsers, and their patterns.
#[derive(Debug, Clone, Default)]
pub(crate) struct Markers {
    list: Vec<Marker>,
    /// Token id -> sentinel; a handful of entries, so a linear scan beats hashing.
    by_id: Vec<(u32, char)>,
    /// What a marker's [`SUFFIX_SLOT`] stands for in this model.
    suffix: String,
}

/// Sentinels are U+FDD0..U+FDEF: at most 32 token markers per request.
const MAX_TOKEN_MARKERS: usize = 32;

impl Markers {
    /// No markers yet; markers written with a [`SUFFIX_SLOT`] will be spelled with `suffix`.
    pub(crate) fn with_suffix(suffix: &str) -> Self {
        Markers {
            suffix: suffix.to_string(),
            ..Markers::default()
        }
    }

    /// Registers `text`; `lookup` gives the id and visible text of an added token with exactly
    /// this content (its spelling in this model).
    pub(crate) fn add(
        &mut self,
        text: &'static str,
        lookup: impl Fn(&str) -> Option<(u32, String)>,
    ) {
        if self.list.iter().any(|m| m.text == text) {
            return;
        }
        let spelled = text.replace(SUFFIX_SLOT, &self.suffix);
        // Two rows' markers with one spelling (`<tool_call{sfx}>` without a suffix and
        // `<tool_call>`) are one token: one sentinel.
        let same = self.list.iter().find(|m| m.spelled == spelled);
        let found = match same {
            Some(m) => m.id.map(|id| (id, m.visible.clone())),
            None if self.by_id.len() < MAX_TOKEN_MARKERS => lookup(&spelled),
            None => None,
        };
        let (id, visible) = match found {
            Some((id, visible)) => (Some(id), visible),
            None => (None, spelled.clone()),
        };
        if let Some(id) = id.filter(|&id| self.sentinel_for(id).is_none()) {
            let sentinel =
                char::from_u32(0xFDD0 + self.by_id.len() as u32).expect("noncharacter range");
            self.by_id.push((id, sentinel));
        }
        self.list.push(Marker {
            text,
            spelled,
            id,
            visible,
        });
    }

    /// The sentinel that stands for token `id`, when it is a marker.
    pub(crate) fn sentinel_for(&self, id: u32) -> Option<char> {
        self.by_id.iter().find(|(i, _)| *i == id).map(|(_, c)| *c)
    }

    /// The pattern to search for: the sentinel of a token marker, else the marker's text with
    /// every token marker inside it replaced by its sentinel (`<|open|>think<|sep|>` when the
    /// request also looks for `<|sep|>` as a token reads as the decoded stream shows it).
    pub(crate) fn pattern(&self, text: &str) -> String {
        let found = self.list.iter().find(|m| m.text == text);
        if let Some(Marker { id: Some(id), .. }) = found {
            return self.sentinel_for(*id).expect("registered").to_string();
        }
        let mut pattern = match found {
            Some(m) => m.spelled.clone(),
            None => text.replace(SUFFIX_SLOT, &self.suffix),
        };
        for m in &self.list {
            if let (Some(id), true) = (m.id, m.spelled.len() < pattern.len()) {
                if pattern.contains(&m.spelled) {
                    let sentinel = self.sentinel_for(id).expect("registered").to_string();
                    pattern = pattern.replace(&m.spelled, &sentinel);
                }
            }
        }
        pattern
    }

    /// Appends `s` (which starts at stream offset `start`) with sentinels replaced by what
    /// `decode` shows for their tokens, and the characters [`escape_literals`] replaced restored.
    pub(crate) fn render_at(
        &self,
        s: &str,
        start: u64,
        literals: &[(u64, char)],
        out: &mut String,
    ) {
        let end = start + s.len() as u64;
        let first = literals.partition_point(|(o, _)| *o < start);
        let inside = literals[first..].iter().take_while(|(o, _)| *o < end);
        let mut from = 0;
        for &(offset, c) in inside {
            let at = (offset - start) as usize;
            self.render(&s[from..at], out);
            out.push(c);
            from = at + c.len_utf8();
        }
        self.render(&s[from..], out);
    }

    /// Appends `s` with sentinels replaced by what `decode` shows for their tokens.
    pub(crate) fn render(&self, s: &str, out: &mut String) {
        if self.by_id.is_empty() || !s.chars().any(is_sentinel) {
            out.push_str(s);
            return;
        }
        for c in s.chars() {
            if is_sentinel(c) {
                if let Some(m) = self.marker_of(c) {
                    out.push_str(&m.visible);
                    continue;
                }
            }
            out.push(c);
        }
    }

    fn marker_of(&self, sentinel: char) -> Option<&Marker> {
        let id = self.by_id.iter().find(|(_, c)| *c == sentinel)?.0;
        self.list.iter().find(|m| m.id == Some(id))
    }

    /// `(sentinel, visible text)` pairs, for traces.
    pub(crate) fn sentinels(&self) -> Vec<(char, String)> {
        self.list
            .iter()
            .filter_map(|m| {
                m.id.and_then(|id| self.sentinel_for(id))
                    .map(|c| (c, m.visible.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_earliest_and_holds_partials() {
        assert_eq!(
            scan("ab<tool_call>", &["<tool_call>"]),
            Scan::Found { at: 2, index: 0 }
        );
        assert_eq!(scan("ab<too", &["<tool_call>"]), Scan::Partial { at: 2 });
        assert_eq!(
            scan("ab<", &["<tool_call>", "</think>"]),
            Scan::Partial { at: 2 }
        );
        assert_eq!(scan("a < b", &["<tool_call>"]), Scan::None);
        assert_eq!(
            scan("x</a></ab>", &["</ab>", "</a>"]),
            Scan::Found { at: 1, index: 1 }
        );
    }

    /// Random pushes (contiguous or after a gap) and takes, past the size at which consumed bytes
    /// are dropped, against a byte-by-byte model: the text left and the stream range of every
    /// byte taken.
    #[test]
    fn segbuf_matches_a_byte_model_through_compactions() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut buf = SegBuf::default();
        let mut model: std::collections::VecDeque<(u8, u64)> = Default::default();
        let mut offset = 0u64;
        for round in 0..20_000 {
            if next(3) > 0 {
                let len = next(40) as usize + 1;
                offset += if next(4) == 0 { next(9) + 1 } else { 0 };
                let text: String = (0..len)
                    .map(|i| (b'a' + ((round + i) % 26) as u8) as char)
                    .collect();
                buf.push(&text, offset);
                model.extend(text.bytes().zip(offset..));
                offset += len as u64;
            } else {
                // Now and then most of the buffer, so the consumed bytes outgrow what is left.
                let n = match next(40) {
                    0 => model.len().saturating_sub(next(100) as usize),
                    _ => (next(60) as usize).min(model.len()),
                };
                let mut taken = Vec::new();
                buf.take(n, |text, start, end| {
                    assert_eq!(text.len() as u64, end - start);
                    taken.extend(text.bytes().zip(start..end));
                });
                let expect: Vec<(u8, u64)> = model.drain(..n).collect();
                assert_eq!(taken, expect, "round {round}");
            }
            let left: Vec<u8> = model.iter().map(|&(b, _)| b).collect();
            assert_eq!(buf.as_str().as_bytes(), left.as_slice(), "round {round}");
        }
        let mut out = SegBuf::default();
        buf.drain_into(&mut out);
        let mut taken = Vec::new();
        out.take(out.len(), |text, start, end| {
            taken.extend(text.bytes().zip(start..end))
        });
        assert_eq!(taken, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn segbuf_tracks_offsets_across_gaps() {
        let mut b = SegBuf::default();
        b.push("abc", 0);
        b.push("de", 3);
        b.push("fg", 10);
        let mut ranges = Vec::new();
        b.take(4, |_, s, e| ranges.push((s, e)));
        assert_eq!(ranges, vec![(0, 4)]);
        assert_eq!(b.as_str(), "efg");
        ranges.clear();
        b.take(2, |_, s, e| ranges.push((s, e)));
        assert_eq!(ranges, vec![(4, 5), (10, 11)]);
        assert_eq!(b.as_str(), "g");
    }
}
