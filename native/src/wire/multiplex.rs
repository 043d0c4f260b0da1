//! The framing of the Multiplex stream: `MultiplexRequest` read by hand down to each call's id,
//! deadline and request bytes (the request itself is decoded with prost by the caller, which also
//! keeps the call's own bytes to run it later on another thread), and `MultiplexResult` entries
//! written into a `MultiplexResponse` (a response message by prost, an error by hand).
//!
//! Hand-written for the framing only: reading the outer layer by hand is what lets a call be
//! deferred as a byte range of the message without copying or re-encoding it. The tests in
//! `wire::tests` hold both directions to the generated types.

use prost::Message;

use super::codec::{
    put_bytes, put_key, put_message, put_uint, put_varint, varint_len, Reader, LEN, VARINT,
};
use crate::error::Result;

/// `MultiplexRequest` fields.
mod request {
    pub(super) const CALLS: u64 = 1;
    pub(super) const CANCEL: u64 = 2;
    /// `MultiplexCall` fields.
    pub(super) const CALL_ID: u64 = 1;
    pub(super) const CALL_TIMEOUT_US: u64 = 2;
    pub(super) const CALL_TOKENIZE: u64 = 3;
    pub(super) const CALL_DETOKENIZE: u64 = 4;
    pub(super) const CALL_RENDER: u64 = 5;
}

/// `MultiplexResponse` fields.
mod response {
    pub(super) const RESULTS: u64 = 1;
    /// `MultiplexResult` fields.
    pub(super) const RESULT_ID: u64 = 1;
    pub(super) const RESULT_ERROR: u64 = 5;
    /// `Status` fields.
    pub(super) const STATUS_CODE: u64 = 1;
    pub(super) const STATUS_MESSAGE: u64 = 2;
}

const WHAT: &str = "MultiplexRequest";

/// Which request a call carries (the field number of its `oneof`, and of the response's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// `tokenize` (a `TokenizeRequest`; answered with a `TokenizeResponse`).
    Tokenize,
    /// `detokenize`.
    Detokenize,
    /// `render`.
    Render,
}

impl CallKind {
    /// Every kind, in field order.
    pub const ALL: [CallKind; 3] = [CallKind::Tokenize, CallKind::Detokenize, CallKind::Render];

    /// The field number in `MultiplexResult` of this kind's response (also its number in
    /// `MultiplexCall` minus one).
    pub fn result_field(self) -> u64 {
        match self {
            CallKind::Tokenize => 2,
            CallKind::Detokenize => 3,
            CallKind::Render => 4,
        }
    }

    /// The oneof field's name, as errors name it.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Tokenize => "tokenize",
            CallKind::Detokenize => "detokenize",
            CallKind::Render => "render",
        }
    }
}

/// One `MultiplexCall`, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallView<'a> {
    /// The client's id.
    pub id: u64,
    /// Microseconds the call may take from when its message was read; 0 = no deadline.
    pub timeout_us: u64,
    /// What it carries and the request message's bytes; None when no request is set.
    pub request: Option<(CallKind, &'a [u8])>,
    /// The whole `MultiplexCall` (to run it later, elsewhere).
    pub raw: &'a [u8],
}

/// A decoded `MultiplexRequest`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MultiplexMessage<'a> {
    /// The calls, in order.
    pub calls: Vec<CallView<'a>>,
    /// The `cancel` fields, read by [`MultiplexMessage::cancel_ids`]: a message of millions of
    /// ids keeps none of them here (60M of them made 500 MB before anything looked at them).
    cancel: Vec<CancelField<'a>>,
}

/// One `cancel` field of a `MultiplexRequest`: a packed run of ids (checked when decoded), or one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelField<'a> {
    Packed(&'a [u8]),
    One(u64),
}

impl MultiplexMessage<'_> {
    /// The ids to cancel, in the message's order.
    pub fn cancel_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.cancel.iter().flat_map(|field| {
            let (packed, one) = match *field {
                CancelField::Packed(bytes) => (Some(Reader::new(bytes, WHAT)), None),
                CancelField::One(id) => (None, Some(id)),
            };
            let mut packed = packed;
            // Checked when decoded: every varint of a packed run reads.
            let run = std::iter::from_fn(move || {
                let r = packed.as_mut()?;
                (!r.done()).then(|| r.varint().ok()).flatten()
            });
            one.into_iter().chain(run)
        })
    }
}

/// Decodes the framing of a `MultiplexRequest` down to each call's id, deadline and request
/// bytes; malformed framing is `InvalidArgument` (the stream's status: no id in it can be
/// trusted). A request message that does not decode is its own call's error, found later. As in protobuf, unknown fields are skipped, the
/// last request field of a call wins, and `cancel` may be packed or not.
pub fn decode_multiplex(buf: &[u8]) -> Result<MultiplexMessage<'_>> {
    let mut r = Reader::new(buf, WHAT);
    let mut message = MultiplexMessage::default();
    while !r.done() {
        match r.key()? {
            (request::CALLS, LEN) => message.calls.push(decode_call(r.bytes()?)?),
            (request::CANCEL, LEN) => {
                let bytes = r.bytes()?;
                let mut packed = Reader::new(bytes, WHAT);
                while !packed.done() {
                    packed.varint()?;
                }
                message.cancel.push(CancelField::Packed(bytes));
            }
            (request::CANCEL, VARINT) => message.cancel.push(CancelField::One(r.varint()?)),
            (field, wire) => r.skip(field, wire)?,
        }
    }
    Ok(message)
}

/// Decodes one `MultiplexCall` (its request stays as bytes).
pub fn decode_call(raw: &[u8]) -> Result<CallView<'_>> {
    let mut r = Reader::new(raw, WHAT);
    let mut call = CallView {
        id: 0,
        timeout_us: 0,
        request: None,
        raw,
    };
    while !r.done() {
        match r.key()? {
            (request::CALL_ID, VARINT) => call.id = r.varint()?,
            (request::CALL_TIMEOUT_US, VARINT) => call.timeout_us = r.varint()?,
            (request::CALL_TOKENIZE, LEN) => {
                call.request = Some((CallKind::Tokenize, r.bytes()?));
            }
            (request::CALL_DETOKENIZE, LEN) => {
                call.request = Some((CallKind::Detokenize, r.bytes()?));
            }
            (request::CALL_RENDER, LEN) => call.request = Some((CallKind::Render, r.bytes()?)),
            (field, wire) => r.skip(field, wire)?,
        }
    }
    Ok(call)
}

/// Appends a `MultiplexResponse.results` entry answering `id` with `response` (the response
/// message of `kind`).
pub fn put_result<M: Message>(out: &mut Vec<u8>, id: u64, kind: CallKind, response: &M) {
    // Sized first, so a long response (a prompt's ids) is written once and never moved.
    let inner = response.encoded_len();
    let id_len = if id == 0 { 0 } else { 1 + varint_len(id) };
    let body = id_len + 1 + varint_len(inner as u64) + inner;
    put_key(out, response::RESULTS, LEN);
    put_varint(out, body as u64);
    put_uint(out, response::RESULT_ID, id);
    put_key(out, kind.result_field(), LEN);
    put_varint(out, inner as u64);
    out.reserve(inner);
    response.encode_raw(out);
}

/// Appends a `MultiplexResponse.results` entry failing `id` with gRPC status `code` and `message`.
pub fn put_result_error(out: &mut Vec<u8>, id: u64, code: i32, message: &str) {
    put_message(out, response::RESULTS, |body| {
        put_uint(body, response::RESULT_ID, id);
        put_message(body, response::RESULT_ERROR, |s| {
            if code != 0 {
                // int32 is written as a sign-extended varint.
                put_key(s, response::STATUS_CODE, VARINT);
                put_varint(s, i64::from(code) as u64);
            }
            put_bytes(s, response::STATUS_MESSAGE, message.as_bytes());
        });
    });
}
