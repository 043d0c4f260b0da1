//! The unary Tokenize, Detokenize and Render RPCs on the same table: the server hands the raw
//! request body to [`Multiplexer::run_unary`] and sends back the response wire bytes it returns,
//! so no request or response is parsed or built in Python and the whole call (decoding included)
//! runs with the GIL released. A request runs exactly as on the Multiplex stream ([`execute`]).
//!
//! [`execute`]: super::execute

use prost::Message;

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::tokenizer::CacheStats;
use crate::wire::{pb, CallKind};

use super::execute::{inline_budget, Request, Response, ITEM_COST};
use super::Multiplexer;

/// How one unary call runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnaryOptions<'a> {
    /// Its deadline and the caller's cancellation flag.
    pub cancel: Cancel<'a>,
    /// When non-zero, a request whose cost is above this is not run: its cost comes back in
    /// [`UnaryOutcome::deferred_cost`] (the server runs it again on its worker pool).
    pub inline_bytes: usize,
}

/// The outcome of one unary call.
#[derive(Debug, Default)]
pub struct UnaryOutcome {
    /// The response message's wire bytes (empty when the call failed or was deferred).
    pub response: Vec<u8>,
    /// Non-zero when the request was not run, or stopped, because its cost is above the
    /// inline bound.
    pub deferred_cost: usize,
    /// The body did not decode as the RPC's request message.
    pub malformed: bool,
    /// The request's `model` (for the server's log line).
    pub model: String,
    /// How the multi-turn cache served a Render.
    pub cache: CacheStats,
}

impl Request {
    /// The offload cost the unary servicers give a request: its bytes on the wire plus
    /// `ITEM_COST` per text (Tokenize); a Render carrying its own template under
    /// `--allow-request-templates` runs code whose cost its size does not bound.
    fn unary_cost(&self, body_len: usize, allow_request_templates: bool) -> usize {
        match self {
            Request::Tokenize(r) => body_len + ITEM_COST * r.texts.len(),
            Request::Detokenize(r) => body_len + ITEM_COST * r.sequences.len(),
            Request::Render(r) if allow_request_templates && r.chat_template.is_some() => {
                usize::MAX
            }
            Request::Render(_) => body_len,
        }
    }
}

impl Multiplexer {
    /// Runs one unary request of `kind` from its raw body. The outcome is filled as far as the
    /// call got; a failure (a malformed body included) is the `Err` beside it.
    pub fn run_unary(
        &self,
        kind: CallKind,
        body: &[u8],
        opts: &UnaryOptions<'_>,
    ) -> (UnaryOutcome, Result<()>) {
        let mut outcome = UnaryOutcome::default();
        let request = match decode(kind, body) {
            Ok(request) => request,
            Err(e) => {
                outcome.malformed = true;
                return (outcome, Err(e));
            }
        };
        outcome.model = request.model().to_string();
        let inline = (opts.inline_bytes > 0).then_some(opts.inline_bytes);
        if inline.is_some() {
            let cost = request.unary_cost(body.len(), self.settings.allow_request_templates);
            let cost = self.encode_priced(&request, cost);
            if cost > opts.inline_bytes {
                outcome.deferred_cost = cost;
                return (outcome, Ok(()));
            }
        }
        let budget = inline.map(inline_budget);
        let result = match self.execute(request, opts.cancel, budget) {
            Ok(Response::Deferred(cost)) => {
                outcome.deferred_cost = cost.max(1);
                return (outcome, Ok(()));
            }
            Ok(Response::Tokenize(r)) => Ok(r.encode_to_vec()),
            Ok(Response::Detokenize(r)) => Ok(r.encode_to_vec()),
            Ok(Response::Render(r, cache)) => {
                outcome.cache = cache;
                Ok(r.encode_to_vec())
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(bytes) => {
                outcome.response = bytes;
                (outcome, Ok(()))
            }
            Err(e) => (outcome, Err(e)),
        }
    }
}

/// The request message of a raw body; one that does not decode is INVALID_ARGUMENT naming the
/// message type (the unary servicers' message).
fn decode(kind: CallKind, body: &[u8]) -> Result<Request> {
    let invalid = |name: &str, e: prost::DecodeError| {
        Error::invalid_argument(format!(
            "{name}: the request body is not a valid {name} ({e})"
        ))
    };
    match kind {
        CallKind::Tokenize => pb::TokenizeRequest::decode(body)
            .map(Request::Tokenize)
            .map_err(|e| invalid("TokenizeRequest", e)),
        CallKind::Detokenize => pb::DetokenizeRequest::decode(body)
            .map(Request::Detokenize)
            .map_err(|e| invalid("DetokenizeRequest", e)),
        CallKind::Render => pb::RenderRequest::decode(body)
            .map(Request::Render)
            .map_err(|e| invalid("RenderRequest", e)),
    }
}
