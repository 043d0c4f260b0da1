//! When a stage is fed again while it waits on undecided text.
//!
//! A stage that cannot decide yet (whitespace after a tool-call marker that a `{` may follow, a
//! name not yet closed, reasoning's trailing whitespace) leaves the text in its input and reads it
//! again from the start at its next feed. Fed once per decode step, a wait of `n` bytes then costs
//! `n²/2` bytes of reading: a model (or a client) writing a megabyte of whitespace after
//! `<tool_call>` made each step cost milliseconds, on the server's event loop.
//!
//! The pacer bounds that for every stage at once. A stage is not fed while its input has not grown
//! since it last left text waiting (it would decide the same). Past [`PACED_FROM`] bytes waiting, it
//! is fed again only once the input grew by a sixteenth: the reading then totals at most about
//! seventeen times the text, and a decision about a long undecided region comes at most a
//! sixteenth of its length late. The end of the output (or a matched stop string) always feeds, and
//! so does a step whose held-back text passes the request's limit (the session checks the limit
//! again after it: text a stage has not read yet must not fail a request it would not fail
//! unpaced).
//!
//! Exact by construction: every stage's result is the same however its input is split into feeds
//! (the chunking tests hold each format to that), and pacing only joins feeds.

use crate::parse::text::SegBuf;

/// Bytes left waiting in a stage's input below which it is fed at every step with new text. Reading
/// a wait again costs up to a few nanoseconds a byte (a run of `<` before DeepSeek's fullwidth
/// markers: 8 us a step at 4 KiB), so this bounds a step's cost; and a decision about a wait this
/// long comes at most 64 bytes late, only when the output goes on after it.
pub(crate) const PACED_FROM: usize = 1024;

/// The pacing of one stage.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    /// Bytes the stage left in its input at its last feed (0: it read everything).
    waiting: usize,
    /// Bytes of input the stage has been handed, over every feed (what its reading is bounded by).
    #[cfg(test)]
    handed: u64,
}

impl Pacer {
    /// Whether to feed the stage now, `input` being its input and `end` the end of the output;
    /// `force`: in any case.
    pub(crate) fn due(&self, input: &SegBuf, end: bool, force: bool) -> bool {
        if end || force || self.waiting == 0 {
            return true;
        }
        let grown = input.len().saturating_sub(self.waiting);
        grown > 0 && (self.waiting < PACED_FROM || grown >= self.waiting / 16)
    }

    /// Feeds the stage through `feed` when it is due.
    pub(crate) fn feed(
        &mut self,
        input: &mut SegBuf,
        end: bool,
        force: bool,
        feed: impl FnOnce(&mut SegBuf),
    ) {
        if !self.due(input, end, force) {
            return;
        }
        #[cfg(test)]
        {
            self.handed += input.len() as u64;
        }
        feed(input);
        self.waiting = input.len();
    }

    /// Starts pacing a fresh input (the stage's earlier wait is over).
    pub(crate) fn restart(&mut self) {
        self.waiting = 0;
    }

    /// Bytes handed to the stage so far.
    #[cfg(test)]
    pub(crate) fn handed(&self) -> u64 {
        self.handed
    }
}
