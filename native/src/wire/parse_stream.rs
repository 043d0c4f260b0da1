//! The ParseStream messages the native core reads and writes, so a decode step crosses the FFI as
//! one buffer each way with no per-request Python objects.
//!
//! Reads `ParseStreamRequest` (`step`, `cancel`; `open` is left to the server, which resolves the
//! model) and writes `ParseStreamResponse.deltas` entries. Hand-written because this runs once per
//! decode step for every running request: with prost's generated types the same work took about
//! twice as long to decode and four times as long to encode (owned strings per item, a length
//! pass per message). The tests in `wire::tests` hold both directions to the generated types on
//! every field, so a field number here cannot drift from `protos/`.

use super::codec::{put_bytes, put_key, put_message, put_uint, Reader, LEN, VARINT};
use crate::error::{Error, Result};

/// `ParseStreamRequest` fields.
mod request {
    pub(super) const OPEN: u64 = 1;
    pub(super) const STEP: u64 = 2;
    pub(super) const CANCEL: u64 = 3;
    /// `Step.items`.
    pub(super) const STEP_ITEMS: u64 = 1;
    /// `StepTokens` fields.
    pub(super) const ITEM_REQUEST_ID: u64 = 1;
    pub(super) const ITEM_TOKEN_IDS: u64 = 2;
    pub(super) const ITEM_FINISHED: u64 = 3;
    /// `CancelRequest.request_id`.
    pub(super) const CANCEL_REQUEST_ID: u64 = 1;
}

/// `ParseStreamResponse` fields.
mod response {
    pub(super) const DELTAS: u64 = 1;
    /// `RequestDelta` fields.
    pub(super) const REQUEST_ID: u64 = 1;
    pub(super) const CONTENT: u64 = 2;
    pub(super) const REASONING: u64 = 3;
    pub(super) const TOOL_CALLS: u64 = 4;
    pub(super) const REASONING_TOKENS: u64 = 5;
    pub(super) const COMPLETION_TOKENS: u64 = 6;
    pub(super) const FINISHED: u64 = 7;
    pub(super) const FINISH_REASON: u64 = 8;
    pub(super) const MATCHED_STOP: u64 = 9;
    pub(super) const ERROR: u64 = 10;
    pub(super) const FINGERPRINT: u64 = 11;
    /// `ToolCallDelta` fields.
    pub(super) const CALL_INDEX: u64 = 1;
    pub(super) const CALL_ID: u64 = 2;
    pub(super) const CALL_NAME: u64 = 3;
    pub(super) const CALL_ARGUMENTS: u64 = 4;
    /// `Status` fields.
    pub(super) const STATUS_CODE: u64 = 1;
    pub(super) const STATUS_MESSAGE: u64 = 2;
}

const WHAT: &str = "ParseStreamRequest";

/// A decoded client message.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    /// An `open`: the server resolves its model.
    Open,
    /// A decode step.
    Step(Vec<StepTokens<'a>>),
    /// A cancel of the request with this id.
    Cancel(&'a str),
    /// None of the three is set.
    Empty,
}

/// One request's tokens in a step (`StepTokens`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StepTokens<'a> {
    /// The request.
    pub request_id: &'a str,
    /// Its new token ids.
    pub token_ids: Vec<u32>,
    /// The engine finished it.
    pub finished: bool,
    /// The first id that is not a token id (a varint above 2^32-1, which protobuf would silently
    /// truncate to 32 bits): its position among the item's ids and its value. The mux refuses the
    /// request; the ids after it are not kept.
    pub out_of_range: Option<(usize, u64)>,
}

/// Decodes a `ParseStreamRequest`; malformed bytes are `InvalidArgument`. As in protobuf, the
/// last of `open`, `step`, `cancel` wins and unknown fields are skipped.
pub fn decode_request(buf: &[u8]) -> Result<ClientMessage<'_>> {
    let mut r = Reader::new(buf, WHAT);
    let mut message = ClientMessage::Empty;
    while !r.done() {
        match r.key()? {
            (request::OPEN, LEN) => {
                r.bytes()?;
                message = ClientMessage::Open;
            }
            (request::STEP, LEN) => message = ClientMessage::Step(decode_step(r.bytes()?)?),
            (request::CANCEL, LEN) => message = ClientMessage::Cancel(decode_cancel(r.bytes()?)?),
            (field, wire) => r.skip(field, wire)?,
        }
    }
    Ok(message)
}

fn decode_step(buf: &[u8]) -> Result<Vec<StepTokens<'_>>> {
    let mut r = Reader::new(buf, WHAT);
    let mut items = Vec::new();
    while !r.done() {
        match r.key()? {
            (request::STEP_ITEMS, LEN) => items.push(decode_step_tokens(r.bytes()?)?),
            (field, wire) => r.skip(field, wire)?,
        }
    }
    Ok(items)
}

fn decode_step_tokens(buf: &[u8]) -> Result<StepTokens<'_>> {
    let mut r = Reader::new(buf, WHAT);
    let mut item = StepTokens::default();
    while !r.done() {
        match r.key()? {
            (request::ITEM_REQUEST_ID, LEN) => item.request_id = r.str("step.items.request_id")?,
            (request::ITEM_TOKEN_IDS, LEN) => {
                let mut packed = Reader::new(r.bytes()?, WHAT);
                while !packed.done() {
                    item.push_id(packed.varint()?);
                }
            }
            // A sender may write repeated scalars unpacked; protobuf parsers accept both.
            (request::ITEM_TOKEN_IDS, VARINT) => item.push_id(r.varint()?),
            (request::ITEM_FINISHED, VARINT) => item.finished = r.varint()? != 0,
            (field, wire) => r.skip(field, wire)?,
        }
    }
    Ok(item)
}

impl StepTokens<'_> {
    /// Keeps a decoded id, or records the first one that does not fit in 32 bits.
    fn push_id(&mut self, id: u64) {
        if self.out_of_range.is_some() {
            return;
        }
        match u32::try_from(id) {
            Ok(id) => self.token_ids.push(id),
            Err(_) => self.out_of_range = Some((self.token_ids.len(), id)),
        }
    }
}

fn decode_cancel(buf: &[u8]) -> Result<&str> {
    let mut r = Reader::new(buf, WHAT);
    let mut id = "";
    while !r.done() {
        match r.key()? {
            (request::CANCEL_REQUEST_ID, LEN) => id = r.str("cancel.request_id")?,
            (field, wire) => r.skip(field, wire)?,
        }
    }
    Ok(id)
}

/// A tool-call fragment as `ToolCallDelta` carries it.
pub trait ToolCallFields {
    /// Position of the call in the message.
    fn index(&self) -> u32;
    /// The call id (first fragment only).
    fn id(&self) -> &str;
    /// The function name (first fragment only).
    fn name(&self) -> &str;
    /// The next piece of the JSON arguments.
    fn arguments(&self) -> &str;
}

/// What one request produced in a step, as `RequestDelta` carries it (borrowed from the parser's
/// own delta, so nothing is copied before it is written).
pub struct DeltaFields<'a, C> {
    /// New visible text.
    pub content: &'a str,
    /// New reasoning text.
    pub reasoning: &'a str,
    /// New tool-call fragments.
    pub tool_calls: &'a [C],
    /// Tokens attributed to reasoning so far.
    pub reasoning_tokens: u32,
    /// Output tokens seen so far.
    pub completion_tokens: u32,
    /// The request is done.
    pub finished: bool,
    /// `"stop"`, `"tool_calls"` or empty.
    pub finish_reason: &'a str,
    /// The stop string that matched, or empty.
    pub matched_stop: &'a str,
}

/// Appends one `ParseStreamResponse.deltas` entry for request `request_id` to `out` (a sequence
/// of such entries is a `ParseStreamResponse`). `fingerprint` is empty except on a request's
/// first delta.
pub fn put_delta<C: ToolCallFields>(
    out: &mut Vec<u8>,
    request_id: &str,
    delta: &DeltaFields<'_, C>,
    fingerprint: &str,
) {
    put_message(out, response::DELTAS, |body| {
        put_bytes(body, response::REQUEST_ID, request_id.as_bytes());
        put_bytes(body, response::CONTENT, delta.content.as_bytes());
        put_bytes(body, response::REASONING, delta.reasoning.as_bytes());
        for call in delta.tool_calls {
            put_message(body, response::TOOL_CALLS, |c| {
                put_uint(c, response::CALL_INDEX, u64::from(call.index()));
                put_bytes(c, response::CALL_ID, call.id().as_bytes());
                put_bytes(c, response::CALL_NAME, call.name().as_bytes());
                put_bytes(c, response::CALL_ARGUMENTS, call.arguments().as_bytes());
            });
        }
        put_uint(
            body,
            response::REASONING_TOKENS,
            u64::from(delta.reasoning_tokens),
        );
        put_uint(
            body,
            response::COMPLETION_TOKENS,
            u64::from(delta.completion_tokens),
        );
        put_uint(body, response::FINISHED, u64::from(delta.finished));
        put_bytes(
            body,
            response::FINISH_REASON,
            delta.finish_reason.as_bytes(),
        );
        put_bytes(body, response::MATCHED_STOP, delta.matched_stop.as_bytes());
        put_bytes(body, response::FINGERPRINT, fingerprint.as_bytes());
    });
}

/// Appends a `ParseStreamResponse.deltas` entry that fails request `request_id` with `error`
/// (finished, with `error` set to the kind's gRPC code and the message).
pub fn put_error(out: &mut Vec<u8>, request_id: &str, error: &Error, fingerprint: &str) {
    put_message(out, response::DELTAS, |body| {
        put_bytes(body, response::REQUEST_ID, request_id.as_bytes());
        put_uint(body, response::FINISHED, 1);
        put_message(body, response::ERROR, |s| {
            let code = error.kind().grpc_code();
            if code != 0 {
                // int32 is written as a sign-extended varint.
                put_key(s, response::STATUS_CODE, VARINT);
                super::codec::put_varint(s, i64::from(code) as u64);
            }
            put_bytes(s, response::STATUS_MESSAGE, error.message().as_bytes());
        });
        put_bytes(body, response::FINGERPRINT, fingerprint.as_bytes());
    });
}
