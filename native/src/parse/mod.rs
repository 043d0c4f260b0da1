//! Output parsing per decode step: incremental detokenization, stop strings, the reasoning split
//! and tool-call extraction, for one request at a time ([`Session`]), many requests per stream
//! ([`Mux`]).
//!
//! The pipeline of a step: ids -> [`crate::detok::Detokenizer`] (marker tokens become sentinels)
//! -> [`crate::detok::StopFilter`] -> reasoning split (stage 1) -> tool parser on the visible
//! text only (stage 2). Every byte of the decoded stream is routed to exactly one channel
//! (content, reasoning, tool, framing), and each token is attributed to the channel that holds its
//! first byte; `reasoning_tokens` counts the tokens attributed to reasoning.

#[cfg(feature = "testing")]
pub mod bench;
mod json;
mod ledger;
mod model;
mod mux;
mod out;
mod pacing;
mod reasoning;
pub mod registry;
mod rtpl;
mod schema;
mod session;
mod text;
mod tools;

#[cfg(test)]
mod tests;

pub use model::{ParseModel, ParseModelOptions};
pub use mux::{Handled, Mux, MuxLimits, OpenOptions};
pub use out::{CallDelta, Channel};
pub use session::{Delta, Session, SessionConfig};

use out::Out;
use text::SegBuf;

/// One stage of the pipeline: reads its input buffer as far as it can decide, routes what it read
/// and leaves the undecided rest in the buffer.
pub(crate) trait Stage: Send {
    /// Reads `input`; `end` means no more input will come (flush everything).
    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, end: bool);

    /// Called once before the first output with the prompt's tail (the decoded text after its last
    /// special token that is not a marker, at most `PRIME_PARSER_IDS` ids) and the request's
    /// `chat_template_kwargs`. The default reads the tail as output into `scratch` (thrown away),
    /// so the stage ends in the state the prompt left it in.
    fn prime(
        &mut self,
        prompt_tail: &mut SegBuf,
        scratch: &mut Out,
        _kwargs: &serde_json::Map<String, serde_json::Value>,
    ) {
        self.feed(prompt_tail, scratch, false);
    }

    /// Whether [`Stage::prime`] reads the whole prompt window rather than the text after its last
    /// special token (a response template's start anchor may hold special tokens).
    fn primes_whole_prompt(&self) -> bool {
        false
    }

    /// Bytes held inside the stage beyond its input buffer.
    fn held(&self) -> usize {
        0
    }

    /// Has the next feed read every wait of the readers nested in this stage, paced or not (the
    /// session's check of the held-back limit: unread text must not fail a request).
    fn read_nested_waits(&mut self) {}

    /// Bytes handed to stages nested in this one (tests bound the reading of waits with it).
    #[cfg(test)]
    fn nested_handed(&self) -> u64 {
        0
    }
}

/// A stage that passes everything on unchanged (no reasoning split / no tool parser).
pub(crate) struct Passthrough(pub(crate) Channel);

impl Stage for Passthrough {
    fn feed(&mut self, input: &mut SegBuf, out: &mut Out, _end: bool) {
        out.route_all(input, self.0);
    }
}

/// Every name of the implemented tool-call parsers (canonical names and aliases, table order).
pub fn tool_parsers() -> Vec<&'static str> {
    registry::implemented_names(registry::Kind::Tool)
}

/// Every name of the implemented reasoning parsers (canonical names and aliases, table order).
pub fn reasoning_parsers() -> Vec<&'static str> {
    registry::implemented_names(registry::Kind::Reasoning)
}
