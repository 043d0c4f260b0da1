//! The Multiplex stream (`sidecar.v1.Preprocessor/Multiplex`): many Tokenize, Detokenize and
//! Render requests per client message, each with its own id and deadline, answered with one
//! `MultiplexResult` each.
//!
//! [`Multiplexer::run`] takes a raw `MultiplexRequest` and runs every small request in it (cost
//! at most the server's inline bound) in this one call, writing their results as raw
//! `MultiplexResponse` bytes; large requests come back as [`Deferred`] byte ranges of the message
//! for the server to run one by one on its worker pool ([`Multiplexer::run_one`]), so one long
//! request never holds up the small ones. A request that fails (unknown model, bad field, an id
//! outside the vocabulary, a passed deadline, a stream limit, even a bug) gets its own error
//! result; the stream goes on. Requests are run exactly as the unary RPCs run them
//! ([`execute`]).
//!
//! The results of one call are cut into chunks that are each a valid `MultiplexResponse` of at
//! most the server's message limit; a single result above the limit is replaced by a
//! RESOURCE_EXHAUSTED error naming `--max-message-mb`.

mod execute;
mod hashing;
mod unary;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use serde::Deserialize;

use crate::cancel::Cancel;
use crate::error::{grpc_code, quoted, Error, Result};
use crate::render::Renderer;
use crate::tokenizer::{CacheStats, Tokenizer};
use crate::wire::{self, pb, CallKind, CallView};
use execute::{Request, Response};
pub use unary::{UnaryOptions, UnaryOutcome};

/// A hosted model, as the Multiplex stream reaches it.
pub struct Model {
    /// The name requests address it by.
    pub name: String,
    /// Its fingerprint, sent in every response.
    pub fingerprint: String,
    /// Its tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// Its chat templates bound to the tokenizer.
    pub renderer: Arc<Renderer>,
}

/// Server settings the stream follows (JSON from the server; unknown fields refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Whether Render requests may carry Jinja source (`--allow-request-templates`).
    pub allow_request_templates: bool,
    /// Requests costing more than this (bytes of input) are deferred to the worker pool.
    pub inline_bytes: usize,
    /// Unanswered requests one stream may have (`--multiplex-max-inflight`).
    pub max_inflight: usize,
    /// The largest message the server sends (`--max-message-mb`).
    pub max_message_bytes: usize,
    /// Characters in one Tokenize text (`--max-text-chars`).
    pub max_text_chars: usize,
    /// Longest run of one character class in a Tokenize text (`--max-word-chars`); 0 = none.
    /// Render's prompts are bounded by the renderer's own setting (the same flag).
    pub max_word_chars: usize,
    /// Token ids in one Detokenize request (`--max-token-ids`).
    pub max_token_ids: usize,
    /// Characters of one Render's `chat_template_kwargs_json` (`--max-kwargs-bytes`).
    pub max_kwargs_bytes: usize,
}

/// A large request of a message, to be run on its own ([`Multiplexer::run_one`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    /// The client's id.
    pub id: u64,
    /// What it asks for.
    pub kind: CallKind,
    /// Its deadline from when the message was read (µs); 0 = none.
    pub timeout_us: u64,
    /// Its cost (bytes of input).
    pub cost: usize,
    /// Where its `MultiplexCall` is in the message.
    pub start: usize,
    /// Length of its `MultiplexCall`.
    pub len: usize,
}

/// How many results of one kind ended with one status code (for the server's metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The request's kind; None when the call carried no request.
    pub kind: Option<CallKind>,
    /// gRPC status code (0 = OK).
    pub code: i32,
    /// Results.
    pub count: u32,
}

/// What one call of [`Multiplexer::run`] or [`Multiplexer::run_one`] produced.
#[derive(Debug, Default)]
pub struct Batch {
    /// Results, as `MultiplexResponse` bytes: `chunk_ends[i]` ends the i-th message.
    pub out: Vec<u8>,
    /// End offsets of the messages in `out`, each a valid `MultiplexResponse` within the limit.
    pub chunk_ends: Vec<usize>,
    /// Large requests for the worker pool.
    pub deferred: Vec<Deferred>,
    /// Ids the client cancelled.
    pub cancel: Vec<u64>,
    /// Results by kind and code.
    pub tally: Vec<Tally>,
    /// How the multi-turn cache served the batch's renders.
    pub cache: CacheStats,
    /// End of each result in `out` (internal: for cutting chunks).
    result_ends: Vec<usize>,
}

/// Per-call facts from the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// Time since the message was read (it may have waited for a worker).
    pub elapsed: Duration,
    /// Ids of this stream's requests still waiting for their result.
    pub pending: &'a [u64],
    /// When set, every request is answered with this status (code, message) instead of being
    /// run (the server is draining).
    pub refuse: Option<(i32, &'a str)>,
    /// The message's cancel flag (see `crate::cancel`), set when the client has gone: the run
    /// stops between requests, and a request running stops at its next check.
    pub flag: Option<&'a AtomicU32>,
}

/// The models and settings a Multiplex stream runs requests with; immutable, shared by every
/// stream of the server (rebuilt when models are reloaded).
pub struct Multiplexer {
    models: Vec<Model>,
    /// Hosted names, sorted and joined, for the unknown-model error.
    hosted: String,
    settings: Settings,
}

impl Multiplexer {
    /// A multiplexer over `models` (in registration order).
    pub fn new(models: Vec<Model>, settings: Settings) -> Self {
        let mut names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        let hosted = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        };
        Multiplexer {
            models,
            hosted,
            settings,
        }
    }

    /// The model named `name`; NOT_FOUND naming the hosted ones otherwise (the unary message).
    fn model(&self, name: &str) -> Result<&Model> {
        self.models.iter().find(|m| m.name == name).ok_or_else(|| {
            Error::not_found(format!(
                "model: unknown model {}; this server hosts: {}",
                quoted(name, py_repr),
                self.hosted
            ))
        })
    }

    /// Runs the small requests of a raw `MultiplexRequest` and defers the large ones (see the
    /// module docs). Malformed framing is `InvalidArgument` (the stream's status).
    pub fn run(&self, message: &[u8], opts: &RunOptions<'_>) -> Result<Batch> {
        let started = Instant::now();
        let decoded = wire::decode_multiplex(message)?;
        // Every call is answered, a refused one with an error of about 170 bytes: a message of
        // millions of empty 2-byte calls made hundreds of times its size in answers, held in
        // memory whether or not the client reads. No message needs more calls than may wait.
        let calls = decoded.calls.len();
        if calls > self.settings.max_inflight {
            return Err(Error::resource_exhausted(format!(
                "calls: {calls} calls in one message, more than a stream may have waiting \
                 (--multiplex-max-inflight {}); send fewer per message",
                self.settings.max_inflight
            )));
        }
        let mut batch = Batch::default();
        let mut seen: HashSet<u64> = opts.pending.iter().copied().collect();
        for (i, call) in decoded.calls.iter().enumerate() {
            crate::cancel::Cancel::new(None, opts.flag).check()?;
            if let Some((code, why)) = opts.refuse {
                batch.put_error(call.id, call.kind(), code, why);
                continue;
            }
            if opts.pending.len() + i >= self.settings.max_inflight {
                let why = format!(
                    "multiplex: {} requests of this stream wait for their results and {i} came \
                     before this one in its message (--multiplex-max-inflight {}); wait for some \
                     or open another stream",
                    opts.pending.len(),
                    self.settings.max_inflight
                );
                batch.put_error(call.id, call.kind(), grpc_code::RESOURCE_EXHAUSTED, &why);
                continue;
            }
            if !seen.insert(call.id) {
                let why = format!(
                    "id: request {} is already waiting for its result on this stream",
                    call.id
                );
                batch.put_error(call.id, call.kind(), grpc_code::INVALID_ARGUMENT, &why);
                continue;
            }
            let elapsed = opts.elapsed + started.elapsed();
            self.start(call, message, elapsed, opts.flag, &mut batch);
        }
        // Only ids that wait for a result can be cancelled (the stream's pending ones and this
        // message's deferred ones), each once: the server walks this list on its event loop.
        let mut waiting: HashSet<u64> = opts.pending.iter().copied().collect();
        waiting.extend(batch.deferred.iter().map(|d| d.id));
        batch.cancel = decoded
            .cancel_ids()
            .filter(|id| waiting.remove(id))
            .collect();
        batch.cut_chunks(self.settings.max_message_bytes);
        Ok(batch)
    }

    /// Runs one `MultiplexCall` that [`run`](Self::run) deferred, whatever its cost; `elapsed` is
    /// the time since its message was read. `flag` is the call's cancel flag (see `crate::cancel`):
    /// the server sets it when the client cancels this request, and the work stops at its next check.
    pub fn run_one(
        &self,
        call: &[u8],
        elapsed: Duration,
        flag: Option<&AtomicU32>,
    ) -> Result<Batch> {
        let call = wire::decode_call(call)?;
        let mut batch = Batch::default();
        match self.decode(&call) {
            Ok(request) => {
                let stopped = self.finish(&call, request, elapsed, flag, None, &mut batch);
                debug_assert!(stopped.is_none(), "only an inline run stops for its cost");
            }
            Err(e) => batch.put_failure(call.id, call.kind(), &e),
        }
        batch.cut_chunks(self.settings.max_message_bytes);
        Ok(batch)
    }

    /// Decodes a call and runs it now, or defers it when it costs more than the inline bound.
    fn start(
        &self,
        call: &CallView<'_>,
        message: &[u8],
        elapsed: Duration,
        flag: Option<&AtomicU32>,
        batch: &mut Batch,
    ) {
        let request = match self.decode(call) {
            Ok(request) => request,
            Err(e) => return batch.put_failure(call.id, call.kind(), &e),
        };
        let defer = |batch: &mut Batch, cost: usize| {
            if let Some(kind) = call.kind() {
                batch.deferred.push(Deferred {
                    id: call.id,
                    kind,
                    timeout_us: call.timeout_us,
                    cost,
                    start: call.raw.as_ptr() as usize - message.as_ptr() as usize,
                    len: call.raw.len(),
                });
            }
        };
        let inline = self.settings.inline_bytes;
        let cost = self.call_cost(&request);
        if cost > inline {
            return defer(batch, cost);
        }
        // Small and bounded: run now (off the loop when the whole message was large, where the
        // message's flag stops it once its client has gone), unless its real cost shows past
        // the bound (a template's output, the ids to hash): then it runs on a worker too.
        let budget = Some(execute::inline_budget(inline));
        if let Some(cost) = self.finish(call, request, elapsed, flag, budget, batch) {
            defer(batch, cost);
        }
    }

    fn decode(&self, call: &CallView<'_>) -> Result<Request> {
        let invalid = |kind: CallKind, type_name: &str, e: prost::DecodeError| {
            Error::invalid_argument(format!("{}: not a valid {type_name} ({e})", kind.name()))
        };
        match call.request {
            None => Err(Error::invalid_argument(
                "request: none of tokenize, detokenize, render is set",
            )),
            Some((kind @ CallKind::Tokenize, body)) => pb::TokenizeRequest::decode(body)
                .map(Request::Tokenize)
                .map_err(|e| invalid(kind, "TokenizeRequest", e)),
            Some((kind @ CallKind::Detokenize, body)) => pb::DetokenizeRequest::decode(body)
                .map(Request::Detokenize)
                .map_err(|e| invalid(kind, "DetokenizeRequest", e)),
            Some((kind @ CallKind::Render, body)) => pb::RenderRequest::decode(body)
                .map(Request::Render)
                .map_err(|e| invalid(kind, "RenderRequest", e)),
        }
    }

    /// Runs a decoded call within its deadline and writes its result; with an `inline` budget,
    /// returns instead what the call costs when it stopped past that budget (nothing written).
    fn finish(
        &self,
        call: &CallView<'_>,
        request: Request,
        elapsed: Duration,
        flag: Option<&AtomicU32>,
        inline: Option<usize>,
        batch: &mut Batch,
    ) -> Option<usize> {
        let deadline = match call.timeout_us {
            0 => None,
            us => match Duration::from_micros(us).checked_sub(elapsed) {
                Some(left) if !left.is_zero() => Some(Instant::now() + left),
                _ => {
                    let e = Error::deadline_exceeded(
                        "the request's deadline passed before work started",
                    );
                    batch.put_failure(call.id, call.kind(), &e);
                    return None;
                }
            },
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            self.execute(request, Cancel::new(deadline, flag), inline)
        }))
        .unwrap_or_else(|_| Err(Error::internal("panic in the native core")));
        let limit = self.settings.max_message_bytes;
        match outcome {
            Ok(Response::Tokenize(r)) => batch.put_response(call.id, CallKind::Tokenize, &r, limit),
            Ok(Response::Detokenize(r)) => {
                batch.put_response(call.id, CallKind::Detokenize, &r, limit);
            }
            Ok(Response::Render(r, cache)) => {
                batch.cache.hit_segments += cache.hit_segments;
                batch.cache.miss_segments += cache.miss_segments;
                batch.cache.hit_bytes += cache.hit_bytes;
                batch.cache.miss_bytes += cache.miss_bytes;
                batch.put_response(call.id, CallKind::Render, &r, limit);
            }
            Ok(Response::Deferred(cost)) => return Some(cost.max(1)),
            Err(e) => batch.put_failure(call.id, call.kind(), &e),
        }
        None
    }
}

impl CallView<'_> {
    fn kind(&self) -> Option<CallKind> {
        self.request.map(|(kind, _)| kind)
    }
}

impl Batch {
    fn put_response<M: Message>(&mut self, id: u64, kind: CallKind, response: &M, limit: usize) {
        let at = self.out.len();
        wire::put_result(&mut self.out, id, kind, response);
        let size = self.out.len() - at;
        if size > limit {
            self.out.truncate(at);
            let why = format!(
                "{}: the response is {size} bytes, over the server's message limit of {limit} bytes \
                 (--max-message-mb); ask for less (fewer texts, no offsets or token strings)",
                kind.name()
            );
            return self.put_error(id, Some(kind), grpc_code::RESOURCE_EXHAUSTED, &why);
        }
        self.result_ends.push(self.out.len());
        self.count(Some(kind), 0);
    }

    fn put_failure(&mut self, id: u64, kind: Option<CallKind>, error: &Error) {
        self.put_error(id, kind, error.kind().grpc_code(), error.message());
    }

    fn put_error(&mut self, id: u64, kind: Option<CallKind>, code: i32, message: &str) {
        wire::put_result_error(&mut self.out, id, code, message);
        self.result_ends.push(self.out.len());
        self.count(kind, code);
    }

    fn count(&mut self, kind: Option<CallKind>, code: i32) {
        match self
            .tally
            .iter_mut()
            .find(|t| t.kind == kind && t.code == code)
        {
            Some(t) => t.count += 1,
            None => self.tally.push(Tally {
                kind,
                code,
                count: 1,
            }),
        }
    }

    /// Groups consecutive results into messages of at most `limit` bytes (a result is never
    /// larger: `put_response` replaced any such by an error).
    fn cut_chunks(&mut self, limit: usize) {
        let mut chunk_start = 0;
        let mut previous_end = 0;
        for &end in &self.result_ends {
            if end - chunk_start > limit {
                self.chunk_ends.push(previous_end);
                chunk_start = previous_end;
            }
            previous_end = end;
        }
        if previous_end > chunk_start {
            self.chunk_ends.push(previous_end);
        }
    }
}

/// `text` quoted as Python's `repr` quotes a string (the unary path's messages are written by
/// Python): single quotes unless the text has one and no double quote, control characters
/// escaped.
pub(crate) fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..=0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}
