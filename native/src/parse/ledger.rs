//! Token attribution by first-byte ownership: a token belongs to the channel of the stream range
//! holding its first byte; a token that produced no bytes belongs to the range just before where it
//! fell (the first one at the very start). Marker tokens land in framing, which counts nowhere.

use std::collections::{BTreeMap, VecDeque};

use crate::detok::Anchor;
use crate::parse::out::Channel;

/// Pending tokens and decided ranges of one request.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pending: VecDeque<(u64, Anchor)>,
    /// start -> (end, channel)
    spans: BTreeMap<u64, (u64, Channel)>,
    reasoning: u32,
}

impl Ledger {
    /// Tokens attributed to reasoning so far.
    pub(crate) fn reasoning_tokens(&self) -> u32 {
        self.reasoning
    }

    pub(crate) fn add_anchors(&mut self, anchors: &mut Vec<(u64, Anchor)>) {
        anchors.sort_by_key(|(_, a)| a.offset());
        self.pending.extend(anchors.drain(..));
    }

    pub(crate) fn add_spans(&mut self, spans: &[(u64, u64, Channel)]) {
        for &(start, end, channel) in spans {
            if end > start {
                self.spans.insert(start, (end, channel));
            }
        }
    }

    /// Attributes every pending token whose range is decided; with `all`, the rest too (their
    /// text was dropped after a stop string).
    pub(crate) fn resolve(&mut self, all: bool) {
        while let Some(&(_, anchor)) = self.pending.front() {
            let channel = match anchor {
                Anchor::Visible(o) => self.containing(o),
                Anchor::ZeroWidth(0) => self.containing(0),
                Anchor::ZeroWidth(o) => self.containing(o - 1).or_else(|| if all { self.containing(o) } else { None }),
            };
            match channel {
                Some(c) => {
                    if c == Channel::Reasoning {
                        self.reasoning += 1;
                    }
                }
                None if all => {}
                None => break,
            }
            self.pending.pop_front();
            // Ranges wholly before the next token can no longer hold one.
            let floor = self.pending.front().map_or(u64::MAX, |(_, a)| a.offset().saturating_sub(1));
            // The last range stays: a token that produces nothing next still falls after it.
            while let Some((&start, &(end, _))) = self.spans.first_key_value() {
                if end <= floor && self.spans.len() > 1 {
                    self.spans.remove(&start);
                } else {
                    break;
                }
            }
        }
    }

    fn containing(&self, offset: u64) -> Option<Channel> {
        let (_, &(end, channel)) = self.spans.range(..=offset).next_back()?;
        (offset < end).then_some(channel)
    }
}
