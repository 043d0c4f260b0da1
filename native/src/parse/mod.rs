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
mod reasoning;
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

    /// Called once after the prompt primed the stage; `thinking_flag` is the request's
    /// `enable_thinking` / `thinking` template flag when given.
    fn primed(&mut self, _thinking_flag: Option<bool>) {}

    /// Bytes held inside the stage beyond its input buffer.
    fn held(&self) -> usize {
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

/// The tool parsers this build knows.
pub const TOOL_PARSERS: &[&str] = &[
    "hermes",
    "qwen3_coder",
    "qwen3_xml",
    "llama3_json",
    "llama4_json",
    "mistral",
    "deepseek_v3",
    "deepseek_v31",
    "deepseek_v32",
    "minimax_m2",
    "glm45",
    "glm47",
    "kimi_k2",
    "openai",
    "pythonic",
];

/// The reasoning parsers this build knows.
pub const REASONING_PARSERS: &[&str] = &[
    "deepseek_r1",
    "qwen3",
    "glm45",
    "kimi_k2",
    "minimax_m2",
    "mistral",
    "deepseek_v3",
    "openai",
];
