//! The requests of one ParseStream: request id -> [`Session`], fed from raw `ParseStreamRequest`
//! bytes, answering with raw `ParseStreamResponse` bytes (the generated types of [`crate::wire`]).
//!
//! A bad item (unknown or finished request id, an id outside the vocabulary, too much held-back
//! text, even a bug) fails only its request: it gets a `RequestDelta` with `error` set and the rest
//! of the step goes on.

use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::parse::model::ParseModel;
use crate::parse::out::CallDelta;
use crate::parse::session::{Delta, Session, SessionConfig};
use crate::wire::{self, ClientMessage, DeltaFields, ToolCallFields};

/// Limits of one stream (JSON `{"max_requests": n, "remember_finished": n, "max_step_ids": n}`; a
/// missing field keeps its default).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MuxLimits {
    /// Open requests at once; one more is `RESOURCE_EXHAUSTED`.
    pub max_requests: usize,
    /// Finished request ids remembered, so a late step says "already finished", not "unknown".
    pub remember_finished: usize,
    /// Token ids of one request in one step; more fails that request with `RESOURCE_EXHAUSTED`
    /// (the server sets it from `--max-token-ids`).
    pub max_step_ids: usize,
    /// Bytes of a step's answer: a request whose delta would take it past this (with room kept
    /// for an error answer to every request of the step) fails with `RESOURCE_EXHAUSTED` (the
    /// server sets it from `--max-message-mb`: gRPC refuses a larger answer by ending the stream,
    /// every request on it with it).
    pub max_delta_bytes: usize,
    /// Bytes of undecided output all the stream's requests may hold back together; a step that
    /// takes a request past what the others leave fails it with `RESOURCE_EXHAUSTED` (the server
    /// sets it from `--parse-max-stream-held-mb`; each request's own bound, `--parse-max-held-kb`,
    /// times `--parse-max-requests` is gigabytes).
    pub max_stream_held_bytes: usize,
}

impl Default for MuxLimits {
    fn default() -> Self {
        MuxLimits {
            max_requests: 4096,
            remember_finished: 4096,
            max_step_ids: 16 << 20,
            max_delta_bytes: 64 << 20,
            max_stream_held_bytes: 256 << 20,
        }
    }
}

/// Bytes an error answer for one request may take besides its id and fingerprint (the message,
/// at most about 250 bytes, and the framing; a request id in a message is cut to 80 characters).
const ERROR_BYTES: usize = 512;

/// What `open` needs besides the session configuration.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The engine's request id.
    pub request_id: String,
    /// The model's fingerprint, sent on the request's first delta.
    pub fingerprint: String,
}

struct Entry {
    session: Session,
    fingerprint: String,
    sent_first: bool,
}

/// What kind of client message [`Mux::handle`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// A step or a cancel, answered in the output buffer.
    Done,
    /// An `open`: the server must resolve its model and call [`Mux::open`].
    Open,
    /// A step costing more than the budget [`Mux::handle_within`] was given, in bytes read (see
    /// there): nothing was done; the server hands the message to a worker thread.
    Deferred(usize),
}

/// One stream's requests (see the module docs). Used by one thread at a time.
pub struct Mux {
    entries: HashMap<String, Entry>,
    finished: HashSet<String>,
    finished_order: VecDeque<String>,
    traces: HashMap<String, Value>,
    limits: MuxLimits,
    /// Bytes held back by all open requests (the sum of their `held_bytes`, kept with every step).
    held_total: usize,
    /// Reused for every request-step.
    scratch: Delta,
}

impl Mux {
    /// An empty stream.
    pub fn new(limits: MuxLimits) -> Self {
        Mux {
            entries: HashMap::new(),
            finished: HashSet::new(),
            finished_order: VecDeque::new(),
            traces: HashMap::new(),
            limits,
            held_total: 0,
            scratch: Delta::default(),
        }
    }

    /// Open requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no request is open.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Opens a request.
    pub fn open(
        &mut self,
        model: Arc<ParseModel>,
        opts: &OpenOptions,
        cfg: &SessionConfig,
        prompt: &[u32],
    ) -> Result<()> {
        if opts.request_id.is_empty() {
            return Err(Error::invalid_argument(
                "open.request_id: must not be empty",
            ));
        }
        if opts.request_id.len() > MAX_REQUEST_ID_BYTES {
            return Err(Error::invalid_argument(format!(
                "open.request_id: {} bytes, more than {MAX_REQUEST_ID_BYTES}",
                opts.request_id.len()
            )));
        }
        if self.entries.contains_key(&opts.request_id) {
            // The refusal is answered as an error delta for this id, which says the request is
            // finished and freed: the open one ends with it, or it would go on under an id its
            // client was told is done.
            self.retire(&opts.request_id);
            return Err(Error::invalid_argument(format!(
                "open.request_id: {} is already open on this stream; that request is ended too \
                 (an id may be opened again once its request finished)",
                shown(&opts.request_id)
            )));
        }
        if self.entries.len() >= self.limits.max_requests {
            return Err(Error::resource_exhausted(format!(
                "open: this stream already has {} open requests, the limit (--parse-max-requests); \
                 finish or cancel some",
                self.entries.len()
            )));
        }
        let session = Session::new(model, cfg, prompt)?;
        self.held_total += session.held_bytes();
        self.forget_finished(&opts.request_id);
        self.entries.insert(
            opts.request_id.clone(),
            Entry {
                session,
                fingerprint: opts.fingerprint.clone(),
                sent_first: false,
            },
        );
        Ok(())
    }

    /// What handling a step may cost, in bytes read: the message's length, plus the text held
    /// back by each request it names. Any step may release all a request holds: the engine
    /// finishing it, a stop string its tokens complete, a closer that decides what a parser waits
    /// on, or a forced read near the held-back limit (600 requests holding 400 KB each, released
    /// by a 7.7 KB step of stop-string tokens, took 0.8 s).
    fn step_cost(&self, message_len: usize, items: &[wire::StepTokens<'_>]) -> usize {
        let held: usize = items
            .iter()
            .filter_map(|item| Some(self.entries.get(item.request_id)?.session.held_bytes()))
            .fold(0, usize::saturating_add);
        message_len.saturating_add(held)
    }

    /// Handles a raw `ParseStreamRequest`; a step's answer is appended to `out` as
    /// `ParseStreamResponse` bytes. A malformed message is `InvalidArgument`.
    pub fn handle(&mut self, message: &[u8], out: &mut Vec<u8>) -> Result<Handled> {
        self.handle_within(message, out, &Cancel::default(), usize::MAX)
    }

    /// [`Mux::handle`] that stops when `cancel` says so (between requests of a step, and within
    /// a long request's ids), failing the whole call: its client has gone; and that does nothing
    /// but answer [`Handled::Deferred`] with its cost when a step costs more than `budget` bytes
    /// read (the server runs a message inline on its event loop only when it is cheap: one
    /// decoding both prices and handles it).
    pub fn handle_within(
        &mut self,
        message: &[u8],
        out: &mut Vec<u8>,
        cancel: &Cancel<'_>,
        budget: usize,
    ) -> Result<Handled> {
        match wire::decode_request(message)? {
            ClientMessage::Open => Ok(Handled::Open),
            ClientMessage::Cancel(id) => {
                self.cancel(id);
                Ok(Handled::Done)
            }
            ClientMessage::Step(items) => {
                if budget < usize::MAX {
                    let cost = self.step_cost(message.len(), &items);
                    if cost > budget {
                        return Ok(Handled::Deferred(cost));
                    }
                }
                // Each request of a step is answered once; a step naming more than a stream may
                // have open is not an engine's (and its error answers alone could outgrow the
                // message limit).
                if items.len() > self.limits.max_requests {
                    return Err(Error::resource_exhausted(format!(
                        "step.items: {} items, more than the {} requests a stream may have open \
                         (--parse-max-requests)",
                        items.len(),
                        self.limits.max_requests
                    )));
                }
                // Every item not answered yet may still need an error answer: room is kept for
                // those, and each item's share is given back once it is answered.
                let reserve = |mux: &Self, id: &str| {
                    let fingerprint = mux.entries.get(id).map_or(0, |e| e.fingerprint.len());
                    id.len() + fingerprint + ERROR_BYTES
                };
                let mut reserved: usize = items.iter().map(|i| reserve(self, i.request_id)).sum();
                // Past that, errors alone could make an answer gRPC refuses (ending the stream
                // anyway, with no message saying why): only a small --max-message-mb gets here.
                if reserved > self.limits.max_delta_bytes {
                    return Err(Error::resource_exhausted(format!(
                        "step.items: error answers to its {} items could take {reserved} bytes, more \
                         than an answer may (--max-message-mb); send fewer requests per step \
                         (--parse-max-requests bounds them) or raise --max-message-mb",
                        items.len()
                    )));
                }
                let start = out.len();
                for item in items {
                    cancel.check()?;
                    reserved -= reserve(self, item.request_id);
                    if let Some(refused) = self.refused_ids(&item) {
                        self.fail(item.request_id, refused, out);
                        continue;
                    }
                    let used = out.len() - start + reserved;
                    let room = self.limits.max_delta_bytes.saturating_sub(used);
                    let (id, ids) = (item.request_id, &item.token_ids);
                    self.step_one(id, ids, item.finished, out, room, cancel)?;
                }
                Ok(Handled::Done)
            }
            ClientMessage::Empty => Err(Error::invalid_argument(
                "ParseStreamRequest: none of open, step, cancel is set",
            )),
        }
    }

    /// Feeds one request's tokens and appends its delta (if any) to `out`, if it fits in the `room`
    /// the step's answer has left for deltas (else the request fails); `Err` only when the call was
    /// cancelled.
    fn step_one(
        &mut self,
        request_id: &str,
        ids: &[u32],
        finished: bool,
        out: &mut Vec<u8>,
        room: usize,
        cancel: &Cancel<'_>,
    ) -> Result<()> {
        let Some(entry) = self.entries.get_mut(request_id) else {
            self.step_unknown(request_id, out);
            return Ok(());
        };
        let before = entry.session.held_bytes();
        let others = self.held_total - before;
        let held_room = self.limits.max_stream_held_bytes.saturating_sub(others);
        entry.session.set_stream_room(held_room);
        let delta = &mut self.scratch;
        let result = catch_unwind(AssertUnwindSafe(|| {
            entry
                .session
                .feed_cancellable(ids, finished, delta, cancel, room)
        }))
        .unwrap_or_else(|_| Err(Error::internal("panic in the native parser")));
        self.held_total = self.held_total - before + entry.session.held_bytes();
        if let Err(e) = &result {
            if e.kind() == crate::error::ErrorKind::Cancelled || cancel.is_cancelled() {
                return Err(e.clone());
            }
        }
        let fingerprint = if entry.sent_first {
            ""
        } else {
            entry.fingerprint.as_str()
        };
        match result {
            Ok(()) => {
                let delta = &self.scratch;
                let has_news = delta.finished
                    || !delta.content.is_empty()
                    || !delta.reasoning.is_empty()
                    || !delta.calls.is_empty();
                if has_news {
                    let at = out.len();
                    wire::put_delta(out, request_id, &fields(delta), fingerprint);
                    let size = out.len() - at;
                    let limit = self.limits.max_delta_bytes;
                    let refused = if size > limit {
                        Some(format!(
                            "step.items: the request's answer to this step is {size} bytes, over the \
                             server's message limit of {limit} bytes (--max-message-mb); send fewer ids per step"
                        ))
                    } else if size > room {
                        Some(format!(
                            "step.items: the request's answer to this step is {size} bytes, and the answers \
                             before it in this step leave {room} bytes of the server's message limit of \
                             {limit} bytes (--max-message-mb); send fewer requests or ids per step"
                        ))
                    } else {
                        None
                    };
                    if let Some(message) = refused {
                        out.truncate(at);
                        let error = Error::resource_exhausted(message);
                        wire::put_error(out, request_id, &error, fingerprint);
                        self.retire(request_id);
                        return Ok(());
                    }
                    entry.sent_first = true;
                }
                if delta.finished {
                    self.retire(request_id);
                }
            }
            Err(e) => {
                let error = e.context("step.items");
                wire::put_error(out, request_id, &error, fingerprint);
                self.retire(request_id);
            }
        }
        Ok(())
    }

    /// Why a step item's ids are refused before any work: an id that is not a token id (the wire
    /// held more than 32 bits), or more ids than one step may carry.
    fn refused_ids(&self, item: &wire::StepTokens<'_>) -> Option<Error> {
        if let Some((at, id)) = item.out_of_range {
            return Some(Error::invalid_argument(format!(
                "step.items.token_ids[{at}]: {id} is not a token id (token ids are below 2^32)"
            )));
        }
        let n = item.token_ids.len();
        (n > self.limits.max_step_ids).then(|| {
            Error::resource_exhausted(format!(
                "step.items.token_ids: {n} token ids in one step is more than the server's limit of {} per \
                 request (--max-token-ids)",
                self.limits.max_step_ids
            ))
        })
    }

    /// Fails an open request with `error` (its last answer) and retires it; for a request that is
    /// not open, answers as a step for it would.
    fn fail(&mut self, request_id: &str, error: Error, out: &mut Vec<u8>) {
        let Some(entry) = self.entries.get(request_id) else {
            // Unknown or finished: the usual answer for a step to such a request.
            return self.step_unknown(request_id, out);
        };
        let fingerprint = if entry.sent_first {
            ""
        } else {
            entry.fingerprint.as_str()
        };
        wire::put_error(out, request_id, &error, fingerprint);
        self.retire(request_id);
    }

    /// The answer to a step for a request that is not open.
    fn step_unknown(&self, request_id: &str, out: &mut Vec<u8>) {
        let error = if self.finished.contains(request_id) {
            Error::failed_precondition(format!(
                "step.items.request_id: request {} already finished",
                shown(request_id)
            ))
        } else {
            Error::not_found(format!(
                "step.items.request_id: no open request {} on this stream",
                shown(request_id)
            ))
        };
        wire::put_error(out, request_id, &error, "");
    }

    /// Drops a request; unknown ids are ignored.
    pub fn cancel(&mut self, request_id: &str) {
        if let Some(entry) = self.entries.remove(request_id) {
            self.held_total -= entry.session.held_bytes();
            self.remember_finished(request_id);
        }
    }

    /// Bytes of undecided output all open requests hold back.
    pub fn held_bytes(&self) -> usize {
        self.held_total
    }

    /// The trace of a request opened with `trace`, while open or after it finished.
    pub fn trace(&self, request_id: &str) -> Option<Value> {
        match self.entries.get(request_id) {
            Some(e) => e.session.trace_json(),
            None => self.traces.get(request_id).cloned(),
        }
    }

    fn retire(&mut self, request_id: &str) {
        if let Some(entry) = self.entries.remove(request_id) {
            self.held_total -= entry.session.held_bytes();
            if let Some(trace) = entry.session.trace_json() {
                self.traces.insert(request_id.to_string(), trace);
            }
        }
        self.remember_finished(request_id);
    }

    fn remember_finished(&mut self, request_id: &str) {
        if self.limits.remember_finished == 0 {
            return;
        }
        if self.finished.insert(request_id.to_string()) {
            self.finished_order.push_back(request_id.to_string());
        }
        while self.finished_order.len() > self.limits.remember_finished {
            if let Some(old) = self.finished_order.pop_front() {
                self.finished.remove(&old);
            }
        }
    }

    fn forget_finished(&mut self, request_id: &str) {
        if self.finished.remove(request_id) {
            self.finished_order.retain(|id| id != request_id);
        }
    }
}

/// A step's delta as `RequestDelta` fields (borrowed).
fn fields(delta: &Delta) -> DeltaFields<'_, CallDelta> {
    DeltaFields {
        content: &delta.content,
        reasoning: &delta.reasoning,
        tool_calls: &delta.calls,
        reasoning_tokens: delta.reasoning_tokens,
        completion_tokens: delta.completion_tokens,
        finished: delta.finished,
        finish_reason: delta.finish_reason,
        matched_stop: delta.matched_stop.as_deref().unwrap_or_default(),
    }
}

impl ToolCallFields for CallDelta {
    fn index(&self) -> u32 {
        self.index
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn arguments(&self) -> &str {
        &self.arguments
    }
}

/// Longest request id a stream accepts: an id is kept (twice) for every request the stream has
/// finished recently, and is echoed in every answer and log line about its request.
const MAX_REQUEST_ID_BYTES: usize = 1024;

/// A request id as error messages show it: quoted, escaped, and cut to a readable length (an id
/// of control characters would otherwise grow several times over in its escapes).
fn shown(request_id: &str) -> String {
    let quoted = format!("{request_id:?}");
    match quoted.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...({} bytes)", &quoted[..cut], request_id.len()),
        None => quoted,
    }
}
