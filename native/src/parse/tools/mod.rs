//! Tool-call parsers: each reads the visible text (reasoning already split off) and turns calls
//! into OpenAI-style deltas, keeping all other text as content. Each module exports its `MARKERS`
//! and a `build` function; the registry (`parse/registry`) names them.
//!
//! What every parser keeps to: a call starts (its first delta, with index, id and name) only once
//! it is known to be a call; once started it is never retracted. Its arguments are JSON text of an
//! object, sent as they are read. A call whose end the model wrote is complete
//! ([`Out::end_call`]); one cut off by the end of the output or broken by malformed text stays
//! incomplete: its arguments are exactly what was read, never closed with characters the model did
//! not write.

pub(crate) mod deepseek;
pub(crate) mod gemma;
mod gemma_args;
pub(crate) mod glm;
pub(crate) mod hermes;
pub(crate) mod inkling;
pub(crate) mod invoke;
mod json_block;
mod json_call;
pub(crate) mod json_formats;
pub(crate) mod kimi;
pub(crate) mod kimi_k3;
pub(crate) mod llama3_json;
pub(crate) mod minimax_m3;
pub(crate) mod mistral;
pub(crate) mod muse;
pub(crate) mod plamo3;
pub(crate) mod pythonic;
mod pythonic_value;
pub(crate) mod qwen3_coder;
mod xml_args;

use crate::parse::json::{JsonRelay, Relay};
use crate::parse::out::{Channel, Out};
use crate::parse::text::SegBuf;

/// Streams call `index`'s arguments, a JSON object at the start of `input`, through `relay` (made
/// with [`JsonRelay::object`]): `false` while the object goes on; `true` once it ended: complete
/// (the call is complete), broken, or cut off by the end of the output (the call stays incomplete).
pub(crate) fn stream_json_args(
    relay: &mut JsonRelay,
    index: u32,
    input: &mut SegBuf,
    out: &mut Out,
    end: bool,
) -> bool {
    let mut text = String::new();
    let result = relay.feed(input.as_str(), &mut text);
    let consumed = match result {
        Relay::More => input.len(),
        Relay::Done(n) | Relay::Error(n) => n,
    };
    out.route(input, consumed, Channel::Tool);
    out.call_args(index, &text);
    match result {
        Relay::Done(_) => {
            out.end_call(index);
            true
        }
        Relay::Error(_) => true,
        Relay::More => end,
    }
}
