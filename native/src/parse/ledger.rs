//! Token attribution by first-byte ownership: a token belongs to the channel of the stream range
//! holding its first byte; a token that produced no bytes belongs to the range just before where it
//! fell (the first one at the very start). A range counts as reasoning when its text is reasoning,
//! or by a stage's own rule (Harmony, see [`crate::parse::out::Out::reasoning_count`]); marker
//! tokens land in framing, which counts nowhere.

use std::collections::VecDeque;

use crate::detok::Anchor;
use crate::parse::out::Span;

/// Pending tokens and decided ranges of one request.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The anchors of the tokens waiting for their range, in offset order, packed (`pack`): a
    /// wait of tens of thousands of tokens holds one each, charged to the request's held-back
    /// limit, and the `(sequence number, Anchor)` pairs the sink hands over took 24 bytes where
    /// 8 say the same (the sequence number is not needed to attribute a token).
    pending: VecDeque<u64>,
    /// Decided ranges `(start, end, counts as reasoning)`, sorted by start (they mostly arrive in
    /// order).
    spans: VecDeque<(u64, u64, bool)>,
    reasoning: u32,
}

impl Ledger {
    /// Tokens attributed to reasoning so far.
    pub(crate) fn reasoning_tokens(&self) -> u32 {
        self.reasoning
    }

    /// Bytes of bookkeeping the tokens waiting for their range hold (an anchor each, and the
    /// decided ranges kept for them): a token waits until the text it starts is decided, and a
    /// token that produced no text (a skipped special token) for the text before it, with no bound
    /// of their own, so they count toward the request's held-back limit.
    pub(crate) fn held(&self) -> usize {
        self.pending.len() * std::mem::size_of::<u64>()
            + self.spans.len() * std::mem::size_of::<(u64, u64, bool)>()
    }

    /// Tokens waiting for their range.
    pub(crate) fn pending_tokens(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn add_anchors(&mut self, anchors: &mut Vec<(u64, Anchor)>) {
        if !anchors
            .windows(2)
            .all(|w| w[0].1.offset() <= w[1].1.offset())
        {
            anchors.sort_by_key(|(_, a)| a.offset());
        }
        self.pending.extend(anchors.drain(..).map(|(_, a)| pack(a)));
    }

    pub(crate) fn add_spans(&mut self, spans: &[Span]) {
        for &(start, end, _, counts) in spans {
            if end > start {
                let at = self.spans.partition_point(|s| s.0 < start);
                self.spans.insert(at, (start, end, counts));
            }
        }
    }

    /// Attributes every pending token whose range is decided; with `all`, the rest too (their
    /// text was dropped after a stop string).
    pub(crate) fn resolve(&mut self, all: bool) {
        while let Some(&packed) = self.pending.front() {
            let counts = match unpack(packed) {
                Anchor::Visible(o) => self.containing(o),
                Anchor::ZeroWidth(0) => self.containing(0),
                Anchor::ZeroWidth(o) => {
                    self.containing(o - 1)
                        .or_else(|| if all { self.containing(o) } else { None })
                }
            };
            match counts {
                Some(c) => self.reasoning += u32::from(c),
                None if all => {}
                None => break,
            }
            self.pending.pop_front();
            // Ranges wholly before the next token can no longer hold one.
            let floor = self
                .pending
                .front()
                .map_or(u64::MAX, |&p| unpack(p).offset().saturating_sub(1));
            // The last range stays: a token that produces nothing next still falls after it.
            while let Some(&(_, end, _)) = self.spans.front() {
                if end <= floor && self.spans.len() > 1 {
                    self.spans.pop_front();
                } else {
                    break;
                }
            }
        }
    }

    /// Whether the range holding `offset` counts as reasoning; `None` when none is decided.
    fn containing(&self, offset: u64) -> Option<bool> {
        let after = self.spans.partition_point(|s| s.0 <= offset);
        let &(_, end, counts) = self.spans.get(after.checked_sub(1)?)?;
        (offset < end).then_some(counts)
    }
}

/// An anchor in 8 bytes: its offset (a stream offset, far below 2^63) shifted left, the low bit set
/// when the token produced no bytes.
fn pack(anchor: Anchor) -> u64 {
    match anchor {
        Anchor::Visible(o) => o << 1,
        Anchor::ZeroWidth(o) => (o << 1) | 1,
    }
}

fn unpack(packed: u64) -> Anchor {
    if packed & 1 == 0 {
        Anchor::Visible(packed >> 1)
    } else {
        Anchor::ZeroWidth(packed >> 1)
    }
}
