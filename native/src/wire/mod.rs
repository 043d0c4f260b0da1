//! The protobuf contract (`protos/sidecar/v1/*.proto`) in the native core: the Rust types prost
//! generates from it at build time ([`pb`]), and the encoders and decoders of the messages the
//! core reads and writes on hot paths ([`decode_request`], [`put_delta`], [`put_error`],
//! [`render_response`], [`split_open`], [`split_score`], [`score_response`], and the Multiplex stream's framing:
//! [`decode_multiplex`], [`put_result`], [`put_result_error`]).
//!
//! The hot-path codecs are written by hand for speed (each module says what it measured); the
//! tests in this module check every message and every field they read or write against the
//! generated types, so a field number cannot drift from the contract without a test failing.
//! This module depends on nothing of the crate but [`crate::error`] (and, for the vector reader of
//! a Score request's ids, the AVX-512 helpers of `crate::simd`).

mod codec;
mod multiplex;
mod open;
mod parse_stream;
mod render;
mod score;
mod score_response;

#[cfg(test)]
mod score_response_tests;
#[cfg(test)]
mod score_tests;
#[cfg(test)]
mod tests;

pub use multiplex::{
    decode_call, decode_multiplex, put_result, put_result_error, CallKind, CallView,
    MultiplexMessage,
};
pub use open::split_open;
pub use parse_stream::{
    decode_request, put_delta, put_error, ClientMessage, DeltaFields, StepTokens, ToolCallFields,
};
pub use render::render_response;
pub use score::{split_score, IdBuffer, SplitScore};
pub use score_response::{score_response, ScoreFields, WorkerRow};

/// The generated messages of package `sidecar.v1` (services are not generated: the server is
/// Python).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/sidecar.v1.rs"));
}
